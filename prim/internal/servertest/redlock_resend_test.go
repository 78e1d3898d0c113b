package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/redis/go-redis/v9"
)

// TestRedlockAcquisitionNeverResent: a Redlock acquisition sends its SET NX
// to a node once, however late that node answers. r3 is made slower than the
// node timeout (300ms) and three attempts are made, each taking the lease on
// r1 and r2 and releasing it; r3's server then counts one SET per attempt
// (INFO commandstats, read on the admin connection, which goes around the
// proxies), and none of the attempts' tokens stays there (the release waits
// for r3's SET, or its deadline, before it is sent). An attempt that r1 or
// r2 missed the node timeout for (a loaded machine: CI missed the default
// 100ms) is made again with a fresh key: it sent its one SET to r3 too, so
// the count is one SET per attempt made.
//
//   - slow: 900ms each way (three node timeouts). go-redis waits for the
//     reply (its ReadTimeout is 3s): it arrives late, and is never a reason
//     to resend.
//   - reply lost: r3 runs every command and its replies are dropped, so
//     go-redis's read times out after ReadTimeout (3s), the error its
//     MaxRetries (3) resends on: prim's SET must not be resent then (a
//     resend seconds after the attempt gave up and cleaned up plants a
//     token that stays for the ttl, 10s here).
//
// prim keeps go-redis from resending in two ways, each enough here: the SET
// is marked NoRetry, and its context ends at the node timeout, which
// go-redis's retry back-off checks before a resend. With both gone (the
// plain SET sent with context.Background()) "reply lost" fails: r3 ran 12
// SETs for the 3 attempts (MaxRetries 3) and kept their tokens. "slow"
// cannot fail that way (nothing makes go-redis resend); it holds the count
// and the clean-up of a node that answers late.
//
// The clients have go-redis's default options (rlEnv.clients checks it).
// Warm connections are pooled to r3 before the fault: a connection dialled
// through it spends the node timeout on its handshake, and its SET is then
// never written.
func TestRedlockAcquisitionNeverResent(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		for _, fault := range []string{"slow", "reply lost"} {
			t.Run(fault, func(t *testing.T) {
				ctx := ctxT(t, time.Minute)
				cs := e.clients(t, 3)
				g := group(t, cs, prim.WithNodeTimeout(300*time.Millisecond))
				pfx := e.k(strings.ReplaceAll(fault, " ", "-"))
				// Warm up: the release script cached on every node.
				if l, err := g.TryAcquire(ctx, pfx+":warm", time.Second); err != nil {
					t.Fatal(err)
				} else if ok, err := l.Release(ctx); !ok || err != nil {
					t.Fatal(ok, err)
				}
				warmPool(ctx, t, cs[2], 16)
				before := setCalls(ctx, t, e.admin(2))

				link := e.link(t, 2)
				var err error
				if fault == "slow" {
					err = link.Latency(3*g.NodeTimeout(), 0)
				} else {
					err = link.LoseReplies()
				}
				if err != nil {
					t.Fatal(err)
				}
				const leases, ttl = 3, 10 * time.Second
				var keys []string
				attempts := int64(0)
				for len(keys) < leases {
					k := attempts
					attempts++
					key := fmt.Sprintf("%s:%d", pfx, k)
					l, err := g.TryAcquire(ctx, key, ttl)
					var re *prim.RedlockError
					if errors.As(err, &re) && attempts < 10 &&
						(errors.Is(re.NodeErrors[0], prim.ErrNodeTimeout) || errors.Is(re.NodeErrors[1], prim.ErrNodeTimeout)) {
						t.Logf("attempt %d: a healthy node missed the node timeout: %v", k, err)
						continue
					}
					if err != nil {
						t.Fatalf("attempt %d: %v", k, err)
					}
					keys = append(keys, key)
					if l.AcquiredOn() != 2 {
						t.Fatalf("attempt %d acquired on %d nodes, want 2 (r3 is slower than the node timeout)", k, l.AcquiredOn())
					}
					if ok, err := l.Release(ctx); !ok || err != nil {
						t.Fatalf("attempt %d: release %v %v", k, ok, err)
					}
				}
				// Every node command of the attempts has returned (the reads
				// on r3 after their reply or go-redis's ReadTimeout), with
				// whatever resends go-redis would have made.
				start := time.Now()
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := g.WaitCleanups(wctx); err != nil {
					t.Fatal(err)
				}
				got := setCalls(ctx, t, e.admin(2)) - before
				t.Logf("r3 ran %d SETs for %d attempts; the clean-ups ended %v after the last attempt",
					got, attempts, time.Since(start).Round(time.Millisecond))
				if got != attempts {
					t.Errorf("r3 ran %d SETs for %d attempts: the acquisition was resent", got, attempts)
				}
				for k, key := range keys {
					if v := e.holders(ctx, key, 3); v[0] != "" || v[1] != "" || v[2] != "" {
						t.Errorf("lease %d (%s): tokens %q left on (r1, r2, r3) after its release", k, key, v)
					}
				}
			})
		}
	})
}

// warmPool leaves n idle connections in c's pool: n connections taken at
// once, each answering a PING, then given back.
func warmPool(ctx context.Context, t *testing.T, c redis.UniversalClient, n int) {
	t.Helper()
	rc := c.(*redis.Client)
	conns := make([]*redis.Conn, n)
	for k := range conns {
		conns[k] = rc.Conn()
		if err := conns[k].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	if idle := rc.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections after warming up, want %d", idle, n)
	}
}

// setCalls is the number of SET commands the server ran (INFO commandstats).
func setCalls(ctx context.Context, t *testing.T, admin *redis.Client) int64 {
	t.Helper()
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_set:calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		if err != nil {
			t.Fatalf("commandstats %q: %v", line, err)
		}
		return n
	}
	return 0
}
