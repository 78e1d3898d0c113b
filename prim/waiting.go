package prim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// AcquireFencedLock acquires the lock on leaseKey, waiting as long as ctx allows
// while another owner holds it. It does not poll: after a contended attempt it
// registers for the lease key's invalidations (CLIENT TRACKING) and then reads
// the key, and sleeps only if that read still finds it held; it retries the
// atomic acquisition after each invalidation, and also wakes once at the
// holder's PTTL deadline, because an expiring key sends no invalidation until
// the server actually removes it. Only the script grants ownership;
// invalidations are hints.
//
// Cancellation stops the wait. An acquisition the server may have accepted is
// never replayed: if ctx ends while the script is in flight, the error matches
// ErrUncertain and the lock is not returned, as for TryAcquireFencedLock.
// Input and counter errors are those of TryAcquireFencedLock. Closing the
// Coordinator ends the wait with ErrClosed.
func (c *Coordinator) AcquireFencedLock(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*FencedLock, error) {
	lk, ck, err := c.keyPair(leaseKey, counterKey)
	if err != nil {
		return nil, err
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	var lock *FencedLock
	err = c.waitUntil(ctx, lk, "", readPTTL(lk), func(ctx context.Context) (bool, time.Duration, error) {
		l, remaining, err := c.tryFenced(ctx, lk, ck, ttl)
		if errors.Is(err, ErrNotAcquired) {
			return false, remaining, nil
		}
		lock = l
		return err == nil, 0, err
	})
	return lock, err
}

// readPTTL reads the key's PTTL in milliseconds as the server sends it: -2 when
// the key does not exist, -1 when it has no expiry. (go-redis's PTTL helper
// turns -1 and -2 into nanosecond Durations, which would read as 0 ms.)
func readPTTL(key string) func(context.Context, *redis.Conn) (int64, error) {
	return func(ctx context.Context, cn *redis.Conn) (int64, error) {
		return cn.Do(ctx, "PTTL", key).Int64()
	}
}

// fallbackRecheck bounds a wait while the invalidation subscription is not in
// place (connecting, reconnecting): a wake-up could be missed, so the waiter
// re-checks this often until tracking is back.
const fallbackRecheck = 50 * time.Millisecond

// waitUntil is the waiting loop shared by every waiting acquisition: attempt;
// on contention queue up, track (read the key on the tracking connection) and
// sleep until an invalidation, the holder's deadline, or ctx's end; repeat.
// group names the lock within key (a hash lease's field; "" for a key that is
// the lock). read returns the key's (or field's) PTTL in ms, -1 without
// expiry, -2 when it does not exist.
//
// attempt reports done, or the time until the current holder's lease ends
// (negative: no expiry).
//
// The attempt goes first and alone, so a wake-up that finds the lock free costs
// one round trip and one command. Only a contended attempt is followed by the
// tracking read, and the waiter is registered before that read, so no wake-up
// can be lost: if the read finds the key gone, the holder left after the
// attempt (no invalidation will come for that) and the waiter retries at once;
// if it finds the key present, the server tracks it from that read on, and any
// later change or removal sends an invalidation that finds the waiter
// registered. The read's PTTL, taken at the instant tracking starts, sets the
// expiry deadline.
//
// Waiters of one lock in one Coordinator queue up (see waiter): only the head
// attempts, tracks and wakes; the others sleep until it leaves. The head that
// acquires hands its place on with the key known held, so its successor only
// tracks. A hand-off among any number of local waiters costs the winner's
// script and one tracking read; across processes, one script per process.
func (c *Coordinator) waitUntil(ctx context.Context, key, group string, read func(context.Context, *redis.Conn) (int64, error),
	attempt func(context.Context) (bool, time.Duration, error)) error {
	closed := c.ws.closedc
	var (
		w  *watcher // the watcher held (watcherFor), nil if none
		wt *waiter  // this wait's place in w's queue, nil until contended
	)
	leave := func(acquired bool) {
		if wt != nil {
			w.unregister(wt, acquired)
			wt = nil
		}
		if w != nil {
			c.releaseWatcher(w)
			w = nil
		}
	}
	defer leave(false)
	fail := func(err error) error { return fmt.Errorf("prim: waiting for %q: %w", key, err) }
	for {
		select {
		case <-closed:
			return fail(ErrClosed)
		default:
		}
		nw, werr := c.watcherFor(ctx, key)
		if errors.Is(werr, ErrClosed) {
			// Closed between the check above and here: still nothing sent.
			return fail(ErrClosed)
		}
		if nw != nil && nw == w {
			c.releaseWatcher(nw) // already held
		} else {
			// First pass, or the key's node changed (Cluster failover): queue
			// up on the new node's watcher when contended.
			leave(false)
			w = nw
		}
		if werr != nil && ctx.Err() != nil {
			return fail(ctx.Err())
		}
		held := false
		if wt != nil {
			var head bool
			if head, held = w.turn(wt); !head {
				// Another waiter of this lock in this Coordinator is watching it.
				select {
				case <-wt.ch:
				case <-ctx.Done():
					return fail(ctx.Err())
				case <-closed:
					return fail(ErrClosed)
				}
				continue
			}
			select {
			case <-wt.ch: // an earlier wake-up: the attempt below covers it
			default:
			}
		}
		remaining := time.Duration(-1)
		if !held {
			done, rem, err := attempt(ctx)
			if done || err != nil {
				leave(done && err == nil)
				return err
			}
			remaining = rem
		}
		if w != nil && wt == nil {
			wt = w.register(key, group)
			if head, _ := w.turn(wt); !head {
				continue
			}
		}
		tracked := false
		if w != nil {
			rerr := w.refusal()
			if rerr == nil {
				rerr = w.waitReady(ctx, closed)
			}
			switch {
			case errors.Is(rerr, ErrClosed):
				return fail(ErrClosed)
			case rerr != nil:
				if ctx.Err() == nil && w.refusal() == nil {
					c.logger.DebugContext(ctx, "prim: invalidations unavailable; re-checking on a short timer", "key", key, "err", rerr)
				}
			default:
				v, terr := w.track(ctx, read)
				switch {
				case errors.Is(terr, ErrClosed):
					return fail(ErrClosed)
				case terr == nil && v < -1:
					// Gone by the time it was tracked: try again now.
					continue
				case terr == nil:
					tracked = true
					remaining = time.Duration(v) * time.Millisecond // -1: no expiry
				case !errors.Is(terr, errSubscribing) && !errors.Is(terr, errTrackingRefused) && ctx.Err() == nil:
					c.logger.DebugContext(ctx, "prim: tracking read failed; re-checking on a short timer", "key", key, "err", terr)
				}
			}
		} else if ctx.Err() == nil {
			c.logger.DebugContext(ctx, "prim: invalidations unavailable; re-checking on a short timer", "key", key, "err", werr)
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
		case <-closed:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
}
