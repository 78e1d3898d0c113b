package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// writeProbe runs each primitive in use once through prim, on keys under a
// random prefix of its own (under the first --key, so that the user's key
// patterns allow them: "orders:1" gives "orders:1:coordtorture-probe:…:"),
// and deletes every key under that prefix on every primary afterwards (and
// checks none is left).
func (p *run) writeProbe(ctx context.Context) {
	prefix := "coordtorture:preflight:probe:" + randomHex() + ":"
	if p.keysGiven {
		prefix = p.o.Keys[0] + ":coordtorture-probe:" + randomHex() + ":"
	}
	c := prim.New(p.client).WithPrefix(prefix)
	ttl := 5 * time.Second
	probe := func(name string, f func(ctx context.Context) (string, error)) {
		if !p.uses(name) {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 4*p.o.Timeout)
		defer cancel()
		what, err := f(cctx)
		switch {
		case err == nil:
			p.add(Check{Name: "write-probe/" + name, Status: OK, Reason: what})
		case errors.Is(err, errSkipped):
			p.add(Check{Name: "write-probe/" + name, Status: Warn, Reason: "not run: " + what})
		default:
			p.add(Check{Name: "write-probe/" + name, Status: Fail, Reason: what + ": " + err.Error(),
				Fix: "see the capability, primitive and acl lines above"})
		}
	}
	probe(FencedLock, func(ctx context.Context) (string, error) {
		l, err := c.TryAcquireFencedLock(ctx, "{p}:lease", "{p}:fence", ttl)
		if err != nil {
			return "acquire", err
		}
		defer l.Close()
		if ok, err := l.Renew(ctx, ttl); err != nil || !ok {
			return "renew", errOr(err, "not renewed")
		}
		if _, err := l.Release(ctx); err != nil {
			return "release", err
		}
		return fmt.Sprintf("acquired (token %d), renewed and released", l.FencingToken()), nil
	})
	probe(Waiting, func(ctx context.Context) (string, error) {
		l, err := c.TryAcquireFencedLock(ctx, "{p}:wlease", "{p}:wfence", ttl)
		if err != nil {
			return "acquire", err
		}
		var wg sync.WaitGroup
		var werr error
		var waited time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			w, err := c.AcquireFencedLock(ctx, "{p}:wlease", "{p}:wfence", ttl)
			waited = time.Since(t0)
			if err != nil {
				werr = err
				return
			}
			_, werr = w.Release(ctx)
		}()
		time.Sleep(200 * time.Millisecond)
		if _, err := l.Release(ctx); err != nil {
			return "release", err
		}
		wg.Wait()
		if werr != nil {
			return "waiting acquisition", werr
		}
		return fmt.Sprintf("a waiter acquired after the release (waited %v, the lease was %v)", waited.Round(10*time.Millisecond), ttl), nil
	})
	probe(HashLease, func(ctx context.Context) (string, error) {
		if p.caps.hfe == absent {
			return "no hash-field expiry", errSkipped
		}
		l, err := c.TryAcquireLease(ctx, "{p}:hlease", "f", ttl)
		if err != nil {
			return "acquire", err
		}
		defer l.Close()
		if _, err := l.Release(ctx); err != nil {
			return "release", err
		}
		return "acquired and released", nil
	})
	probe(RWLease, func(ctx context.Context) (string, error) {
		r, err := c.TryAcquireReadLock(ctx, "{p}:rw", ttl)
		if err != nil {
			return "read lock", err
		}
		defer r.Close()
		if _, err := r.Release(ctx); err != nil {
			return "release", err
		}
		w, err := c.TryAcquireWriteLock(ctx, "{p}:rw", ttl)
		if err != nil {
			return "write lock", err
		}
		defer w.Close()
		if _, err := w.Release(ctx); err != nil {
			return "release", err
		}
		return "read and write leases acquired and released", nil
	})
	probe(Semaphore, func(ctx context.Context) (string, error) {
		pm, err := c.Semaphore("{p}:sem", 2).TryAcquire(ctx, ttl)
		if err != nil {
			return "acquire", err
		}
		defer pm.Close()
		if _, err := pm.Release(ctx); err != nil {
			return "release", err
		}
		return "a permit acquired and released", nil
	})
	probe(Latch, func(ctx context.Context) (string, error) {
		l, err := c.CreateCountdownLatch(ctx, "{p}:latch", 1)
		if err != nil {
			return "create", err
		}
		if n, err := l.CountDown(ctx); err != nil || n != 0 {
			return "count down", errOr(err, fmt.Sprintf("remaining %d", n))
		}
		if ok, err := l.Wait(ctx); err != nil || !ok {
			return "wait", errOr(err, "not completed")
		}
		return "created, counted down and waited", nil
	})
	probe(RateLimiters, func(ctx context.Context) (string, error) {
		fw, err := c.RateLimiters().FixedWindow("{p}:fixed", 10, time.Second)
		if err != nil {
			return "fixed window", err
		}
		defer fw.Close()
		sw, err := c.RateLimiters().SlidingWindow("{p}:sliding", 10, time.Second, 10)
		if err != nil {
			return "sliding window", err
		}
		defer sw.Close()
		tb, err := c.RateLimiters().TokenBucket("{p}:bucket", 10, 10, time.Second)
		if err != nil {
			return "token bucket", err
		}
		defer tb.Close()
		for name, l := range map[string]*prim.Limiter{"fixed window": fw, "sliding window": sw, "token bucket": tb} {
			d, err := l.Allow(ctx, 1)
			if err != nil || !d.Allowed {
				return name, errOr(err, "denied")
			}
		}
		return "fixed window, sliding window and token bucket each allowed one", nil
	})
	// Redlock is not probed: a group needs three or more independent
	// deployments (run preflight on each); its commands (SET NX PX and the
	// release script) are the fenced lock's.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = c.WaitCleanups(cctx)
	_ = c.Close()
	left, err := p.sweep(cctx, prefix)
	switch {
	case err != nil:
		p.add(Check{Name: "write-probe/cleanup", Status: Warn, Reason: "could not delete the probe keys: " + err.Error(),
			Fix: "delete the keys matching " + prefix + "* by hand"})
	case left > 0:
		p.add(Check{Name: "write-probe/cleanup", Status: Warn, Reason: fmt.Sprintf("%d probe key(s) left", left), Fix: "delete the keys matching " + prefix + "* by hand"})
	default:
		p.add(Check{Name: "write-probe/cleanup", Status: OK, Reason: "every probe key deleted"})
	}
}

var errSkipped = errors.New("skipped")

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// globEscape escapes the characters SCAN's MATCH reads as a pattern, so
// that a prefix under a --key of the user's matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sweep deletes the keys under prefix on every primary and returns how many
// are left.
func (p *run) sweep(ctx context.Context, prefix string) (int, error) {
	left := 0
	for pass := 0; pass < 2; pass++ {
		left = 0
		for _, n := range p.nodes {
			iter := n.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
			for iter.Next(ctx) {
				left++
				if pass == 0 {
					if err := n.Del(ctx, iter.Val()).Err(); err != nil {
						return 0, err
					}
				}
			}
			if err := iter.Err(); err != nil {
				return 0, err
			}
		}
	}
	return left, nil
}
