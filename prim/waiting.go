package prim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// AcquireFencedLock acquires the lock on leaseKey, waiting as long as ctx allows
// while another owner holds it. It does not poll: it registers for the lease
// key's invalidations (CLIENT TRACKING) before each check, retries the atomic
// acquisition after each invalidation, and also wakes once at the holder's PTTL
// deadline, because an expiring key sends no invalidation until the server
// actually removes it. Only the script grants ownership; invalidations are hints.
//
// Cancellation stops the wait. An acquisition the server may have accepted is
// never replayed: if ctx ends while the script is in flight, the error matches
// ErrUncertain and the lock is not returned, as for TryAcquireFencedLock.
// Input and counter errors are those of TryAcquireFencedLock.
func (c *Coordinator) AcquireFencedLock(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*FencedLock, error) {
	lk, ck, err := c.keyPair(leaseKey, counterKey)
	if err != nil {
		return nil, err
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	var lock *FencedLock
	err = c.waitUntil(ctx, lk, readPTTL(lk), func(ctx context.Context) (bool, time.Duration, error) {
		l, remaining, err := c.tryFenced(ctx, lk, ck, ttl)
		if errors.Is(err, ErrNotAcquired) {
			return false, remaining, nil
		}
		lock = l
		return err == nil, 0, err
	})
	return lock, err
}

func readPTTL(key string) func(context.Context, *redis.Conn) (int64, error) {
	return func(ctx context.Context, cn *redis.Conn) (int64, error) {
		d, err := cn.PTTL(ctx, key).Result()
		return int64(d / time.Millisecond), err
	}
}

// fallbackRecheck bounds a wait while the invalidation subscription is not in
// place (connecting, reconnecting): a wake-up could be missed, so the waiter
// re-checks this often until tracking is back.
const fallbackRecheck = 50 * time.Millisecond

// waitUntil is the waiting loop shared by every waiting acquisition: register,
// then track (read key on the tracking connection) and attempt, then sleep until
// an invalidation, the holder's deadline, or ctx's end. read returns the key's
// (or field's) PTTL, -2 when it does not exist.
//
// attempt reports done, or the time until the current holder's lease ends
// (negative: no expiry).
func (c *Coordinator) waitUntil(ctx context.Context, key string, read func(context.Context, *redis.Conn) (int64, error),
	attempt func(context.Context) (bool, time.Duration, error)) error {
	for {
		w, werr := c.watcherFor(ctx, key)
		if werr != nil && ctx.Err() != nil {
			return fmt.Errorf("prim: waiting for %q: %w", key, ctx.Err())
		}
		var wt *waiter
		// The tracking read and the acquisition attempt go out together, so a
		// wake-up costs one round trip, not two. Either order on the server is
		// safe: if the attempt saw the key held but the tracking read found it
		// gone, the holder left in between and no invalidation will come, so the
		// waiter retries at once; if the read found it present, the server tracks
		// it from then on and any later change wakes the waiter.
		type trackResult struct {
			v   int64
			err error
		}
		trackc := make(chan trackResult, 1)
		if w != nil {
			wt = w.register(key)
			go func() {
				v, err := w.track(ctx, read)
				trackc <- trackResult{v, err}
			}()
		} else {
			trackc <- trackResult{0, werr}
		}
		done, remaining, err := attempt(ctx)
		tr := <-trackc
		if done || err != nil {
			if wt != nil {
				w.unregister(key, wt)
			}
			return err
		}
		tracked := tr.err == nil
		if tr.err != nil && !errors.Is(tr.err, errSubscribing) {
			c.logger.DebugContext(ctx, "prim: tracking read failed; re-checking on a short timer", "key", key, "err", tr.err)
		}
		if tracked && tr.v < -1 {
			// Gone by the time it was tracked: try again now.
			w.unregister(key, wt)
			continue
		}
		wait := time.Duration(-1)
		if remaining >= 0 {
			wait = remaining + time.Millisecond
		}
		if !tracked && (wait < 0 || wait > fallbackRecheck) {
			wait = fallbackRecheck
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		var wake chan struct{}
		if wt != nil {
			wake = wt.ch
		}
		select {
		case <-wake:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if wt != nil {
			w.unregister(key, wt)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("prim: waiting for %q: %w", key, ctx.Err())
		}
	}
}
