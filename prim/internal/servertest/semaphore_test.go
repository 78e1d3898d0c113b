package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// livePermits counts the permit members of a semaphore key on the server
// (the reserved capacity member excluded).
func livePermits(ctx context.Context, admin *redis.Client, key string) (int, error) {
	ms, err := admin.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if strings.HasPrefix(m, "P:") {
			n++
		}
	}
	return n, nil
}

// 32 goroutines contend for a semaphore of capacity 4 for about a second:
// neither the holders counted locally nor the permits sampled on the server
// (ZRANGE, while they run) are ever above 4.
func TestSemaphoreNeverAboveCapacity(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		key := e.k("sem")
		sem := co.Semaphore(key, 4)
		var holding, maxHolding, acquired, contended atomic.Int64
		// A fresh client's first connections race inside go-redis (its
		// maintenance-notifications handshake fallback writes options shared
		// by dedicated connections): one acquisition first.
		warm, err := sem.TryAcquire(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		warm.Release(ctx)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ { // bounded; stop ends it sooner
					select {
					case <-stop:
						return
					default:
					}
					p, err := sem.TryAcquire(ctx, 5*time.Second)
					if errors.Is(err, prim.ErrNotAcquired) {
						contended.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					acquired.Add(1)
					n := holding.Add(1)
					for m := maxHolding.Load(); n > m && !maxHolding.CompareAndSwap(m, n); m = maxHolding.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					holding.Add(-1)
					if r, err := p.Release(ctx); err != nil || r != prim.Released {
						t.Errorf("release: %v %v", r, err)
						return
					}
				}
			}()
		}
		var samples, maxLive int
		// At least a second, and up to 5s until 50 acquisitions on a slow machine.
		start := time.Now()
		for d := time.Since(start); d < time.Second || (acquired.Load() < 50 && d < 5*time.Second); d = time.Since(start) {
			n, err := livePermits(ctx, e.admin, key)
			if err != nil {
				t.Fatal(err)
			}
			samples++
			maxLive = max(maxLive, n)
			if n > 4 {
				t.Errorf("sample %d: %d permits on the server, capacity 4", samples, n)
			}
			time.Sleep(time.Millisecond)
		}
		close(stop)
		wg.Wait()
		t.Logf("%d acquisitions, %d contended, %d samples, most permits seen on the server %d, most holders %d",
			acquired.Load(), contended.Load(), samples, maxLive, maxHolding.Load())
		if maxHolding.Load() > 4 {
			t.Fatalf("%d holders at once, capacity 4", maxHolding.Load())
		}
		if acquired.Load() < 8 || contended.Load() == 0 || maxLive == 0 {
			t.Fatalf("too little contention to show anything: %d acquired, %d contended, %d seen", acquired.Load(), contended.Load(), maxLive)
		}
		if n := e.admin.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("key left after every permit was released")
		}
	})
}

// A different capacity while permits are live is ErrCapacityMismatch, with
// nothing written; a lower capacity revokes nothing; once every permit is
// gone a new capacity is taken.
func TestSemaphoreCapacityMismatch(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		key := e.k("sem")
		var held []*prim.Permit
		for range 4 {
			p, err := co.Semaphore(key, 4).TryAcquire(ctx, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, p)
		}
		before := e.admin.ZRangeWithScores(ctx, key, 0, -1).Val()
		for _, capacity := range []int{2, 5} {
			_, err := co.Semaphore(key, capacity).TryAcquire(ctx, 10*time.Second)
			var me *prim.CapacityMismatchError
			if !errors.Is(err, prim.ErrCapacityMismatch) || !errors.As(err, &me) || me.Live != 4 || me.Requested != capacity {
				t.Fatalf("capacity %d: %v; want a capacity mismatch with 4", capacity, err)
			}
			if after := e.admin.ZRangeWithScores(ctx, key, 0, -1).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("capacity %d wrote: %v -> %v", capacity, before, after)
			}
		}
		if _, err := co.Semaphore(key, 4).TryAcquire(ctx, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
			t.Fatalf("fifth permit: %v", err)
		}
		for i, p := range held {
			if ok, err := p.VerifyStillHeld(ctx); !ok || err != nil {
				t.Fatalf("permit %d after the lower capacity: %v %v", i, ok, err)
			}
		}
		for _, p := range held {
			if r, err := p.Release(ctx); r != prim.Released || err != nil {
				t.Fatal(r, err)
			}
		}
		p, err := co.Semaphore(key, 2).TryAcquire(ctx, 10*time.Second)
		if err != nil {
			t.Fatalf("new capacity after every permit went: %v", err)
		}
		if _, err := co.Semaphore(key, 4).TryAcquire(ctx, 10*time.Second); !errors.Is(err, prim.ErrCapacityMismatch) {
			t.Fatalf("old capacity against the new: %v", err)
		}
		p.Release(ctx)
	})
}

// A permit without expiry outlives expiring ones and keeps the key without
// expiry; its release removes the key.
func TestSemaphoreNoExpiryPermitsSurvive(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		key := e.k("sem")
		sem := co.Semaphore(key, 3)
		forever, err := sem.TryAcquire(ctx, prim.NoExpiry)
		if err != nil {
			t.Fatal(err)
		}
		if forever.RemainingEstimate() != prim.NoExpiry {
			t.Fatalf("estimate %v, want NoExpiry", forever.RemainingEstimate())
		}
		short, err := sem.TryAcquire(ctx, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if ttl := e.admin.PTTL(ctx, key).Val(); ttl != -1 {
			t.Fatalf("key PTTL %v with a permit without expiry, want none", ttl)
		}
		time.Sleep(300 * time.Millisecond)
		if ok, err := short.VerifyStillHeld(ctx); ok || err != nil {
			t.Fatalf("expired permit verified: %v %v", ok, err)
		}
		if n, _ := livePermits(ctx, e.admin, key); n != 1 {
			t.Fatalf("%d permits after the short one expired, want 1 (pruned by the verification)", n)
		}
		if ok, err := forever.VerifyStillHeld(ctx); !ok || err != nil {
			t.Fatalf("permit without expiry: %v %v", ok, err)
		}
		// Renewing it to an expiry and back.
		if ok, err := forever.Renew(ctx, 5*time.Second); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ttl := e.admin.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 5*time.Second {
			t.Fatalf("key PTTL %v after renewing to 5s", ttl)
		}
		if ok, err := forever.Renew(ctx, prim.NoExpiry); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ttl := e.admin.PTTL(ctx, key).Val(); ttl != -1 {
			t.Fatalf("key PTTL %v after renewing to NoExpiry", ttl)
		}
		if r, err := forever.Release(ctx); r != prim.Released || err != nil {
			t.Fatal(r, err)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("key left after the last permit was released")
		}
	})
}

// A holder that crashes (its client closed without a release) keeps its
// expiring permit until the ttl; then the next acquisition prunes it.
func TestSemaphoreCrashedHolderRecovered(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		key := e.k("sem")
		crashed, _ := e.client(t)
		if _, err := prim.New(crashed).Semaphore(key, 1).TryAcquire(ctx, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		crashed.Close()
		c, _ := e.client(t)
		sem := prim.New(c).Semaphore(key, 1)
		start := time.Now()
		if _, err := sem.TryAcquire(ctx, time.Second); !errors.Is(err, prim.ErrNotAcquired) {
			t.Fatalf("while the crashed holder's permit is live: %v", err)
		}
		for {
			p, err := sem.TryAcquire(ctx, time.Second)
			if err == nil {
				if waited := time.Since(start); waited > 3*time.Second {
					t.Fatalf("recovered after %v, ttl 500ms", waited)
				}
				p.Release(ctx)
				return
			}
			if !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatal(err)
			}
			if time.Since(start) > 3*time.Second {
				t.Fatal("the crashed holder's permit was not recovered within 3s of a 500ms ttl")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// Every bad input is a typed error, with nothing sent and nothing written.
func TestSemaphoreBadInputs(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, ctr := e.client(t)
		co := prim.New(c)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		size := e.admin.DBSize(ctx).Val()
		sent := ctr.get()
		cases := []struct {
			name     string
			key      string
			capacity int
			ttl      time.Duration
			want     error
		}{
			{"empty key", "", 4, time.Second, prim.ErrEmptyKey},
			{"capacity 0", e.k("bad"), 0, time.Second, prim.ErrInvalidCapacity},
			{"capacity -1", e.k("bad"), -1, time.Second, prim.ErrInvalidCapacity},
			{"ttl 0", e.k("bad"), 4, 0, prim.ErrInvalidTTL},
			{"ttl 500µs", e.k("bad"), 4, 500 * time.Microsecond, prim.ErrInvalidTTL},
			{"ttl 1.5ms", e.k("bad"), 4, 1500 * time.Microsecond, prim.ErrInvalidTTL},
			{"ttl negative", e.k("bad"), 4, -time.Second, prim.ErrInvalidTTL},
		}
		for _, tc := range cases {
			_, err := co.Semaphore(tc.key, tc.capacity).TryAcquire(ctx, tc.ttl)
			if !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
			}
		}
		p, err := co.Semaphore(e.k("good"), 1).TryAcquire(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		before := ctr.get()
		if ok, err := p.Renew(ctx, 1500*time.Microsecond); ok || !errors.Is(err, prim.ErrInvalidTTL) {
			t.Errorf("renew 1.5ms: %v %v", ok, err)
		}
		if ctr.get() != before {
			t.Error("an invalid renewal sent a command")
		}
		p.Release(ctx)
		// CLIENT INFO + EVALSHA, then EVALSHA to release; one more for each
		// NOSCRIPT fallback on a fresh server.
		if n := ctr.get() - sent; n > 5 {
			t.Errorf("%d commands sent for the bad inputs and one acquire/release", n)
		}
		if got := e.admin.DBSize(ctx).Val(); got != size {
			t.Fatalf("DBSIZE %d -> %d", size, got)
		}
	})
}

// An acquisition whose reply is lost is uncertain, never returned; the script
// ran, and in the background its dedicated connection is fenced with CLIENT
// KILL and the permit (without expiry, so only the clean-up can remove it)
// released by its owner token. The client has go-redis's default options.
func TestSemaphoreUncertainAcquisitionFencedAndReleased(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		cut := &cutBefore{}
		c.AddHook(cut)
		kills := &killSeen{}
		c.AddHook(kills)
		reader := sdkmetric.NewManualReader()
		co := prim.New(c, prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))))
		key := e.k("sem")
		sem := co.Semaphore(key, 2)
		if p, err := sem.TryAcquire(ctx, time.Second); err != nil { // loads the scripts
			t.Fatal(err)
		} else {
			p.Release(ctx)
		}
		cut.arm(link.LoseReplies) // after the dedicated connection's CLIENT INFO
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		p, err := sem.TryAcquire(actx, prim.NoExpiry)
		cancel()
		if p != nil || !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("got %v, %v; want no permit and ErrUncertain", p, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for n, _ := livePermits(ctx, e.admin, key); n == 0; n, _ = livePermits(ctx, e.admin, key) {
			if time.Now().After(deadline) {
				t.Fatal("the acquisition never ran on the server")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		// The reply never comes (go-redis's 3s read timeout ends the wait),
		// then the fence and the release: within 15s.
		deadline = time.Now().Add(15 * time.Second)
		for e.admin.Exists(ctx, key).Val() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the uncertain permit was not fenced and released within 15s: %v", e.admin.ZRange(ctx, key, 0, -1).Val())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := counterSum(t, reader, "prim.cleanup.abandoned", nil); n != 0 {
			t.Fatalf("clean-up abandoned %d times", n)
		}
		if kills.n.Load() == 0 {
			t.Fatal("released without a CLIENT KILL fence")
		}
		if n := counterSum(t, reader, "prim.uncertain", map[string]string{"primitive": "semaphore", "result": "acquire"}); n != 1 {
			t.Fatalf("prim.uncertain semaphore/acquire = %d, want 1", n)
		}
	})
}

// killSeen counts CLIENT KILL commands (prim sends its fence in a pipeline).
type killSeen struct{ n atomic.Int64 }

func (k *killSeen) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (k *killSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (k *killSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && c.Name() == "client" && strings.EqualFold(fmt.Sprint(a[1]), "kill") {
				k.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// counterSum sums an int64 counter's data points whose attributes include
// want.
func counterSum(t *testing.T, reader *sdkmetric.ManualReader, name string, want map[string]string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
		points:
			for _, dp := range s.DataPoints {
				for k, v := range want {
					if got, _ := dp.Attributes.Value(attribute.Key(k)); got.AsString() != v {
						continue points
					}
				}
				n += dp.Value
			}
		}
	}
	return n
}

// aclUser makes a real ACL user with every permission but those in deny, and
// returns a client logged in as it.
func aclUser(t *testing.T, e *env, deny ...string) (redis.UniversalClient, string) {
	t.Helper()
	ctx := context.Background()
	user := "sem-" + strings.NewReplacer("/", "-", " ", "-", ":", "-").Replace(e.ns) + e.peer
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all"}
	for _, d := range deny {
		args = append(args, "-"+d)
	}
	if err := e.admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.Do(context.Background(), "ACL", "DELUSER", user) })
	c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) { o.Username, o.Password = user, "pw" }))
	return c, user
}

// With release made impossible (a real ACL user that may not run ZREM) and
// the clean-up window shortened to 1.5s: Close returns within about a second
// without an error, its background retries give up, and the abandoned
// counter (read with the OTel SDK's manual reader) says stage release, reason
// no-permission; Release itself reports the refusal and fails closed.
func TestSemaphoreAbandonedCleanupCounted(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := aclUser(t, e, "zrem")
		reader := sdkmetric.NewManualReader()
		co := prim.New(c, prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))), prim.WithCleanupWindow(1500*time.Millisecond))
		key := e.k("sem")
		t.Cleanup(func() { e.admin.Del(context.Background(), key) })
		sem := co.Semaphore(key, 2)

		p, err := sem.TryAcquire(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Release(ctx)
		if !errors.Is(err, prim.ErrUncertain) || !errors.Is(err, prim.ErrNoPermission) {
			t.Fatalf("release refused by ACL: %v; want ErrUncertain and ErrNoPermission", err)
		}
		if p.State() != prim.StateUncertain || p.RemainingEstimate() != 0 {
			t.Fatalf("after a refused release: %v, %v left", p.State(), p.RemainingEstimate())
		}

		q, err := sem.TryAcquire(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := q.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("Close took %v, want about a second at most", d)
		}
		// The background release retries for the window (1.5s): a wait
		// shorter than that ends with the clean-up still in progress.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = co.WaitCleanups(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitCleanups(200ms) during a 1.5s clean-up window: %v, want a deadline error", err)
		}
		long, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := co.WithPrefix("view:").WaitCleanups(long); err != nil {
			t.Fatalf("WaitCleanups (through a view) after 15s, window 1.5s: %v", err)
		}
		want := map[string]string{"primitive": "semaphore", "stage": "release", "reason": "no-permission"}
		if n := counterSum(t, reader, "prim.cleanup.abandoned", want); n != 1 {
			t.Fatalf("abandoned counter (release, no-permission) %d once the clean-ups are over, want 1 (all: %d)",
				n, counterSum(t, reader, "prim.cleanup.abandoned", nil))
		}
		if n, _ := livePermits(ctx, e.admin, key); n != 2 {
			t.Fatalf("%d permits on the server, want both left (release refused)", n)
		}
	})
}

// A renewal that fails (an error reply: ZADD refused mid-script) surrenders the
// permit, which is released by its owner token before Renew returns; later
// renewals answer false without I/O. An acquisition refused mid-script (after
// its ZADDs, at PEXPIREAT) leaves nothing behind: its owner-token release ran
// before the error was returned.
func TestSemaphoreErrorRepliesReleased(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, user := aclUser(t, e)
		co := prim.New(c, prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))))
		key := e.k("sem")
		sem := co.Semaphore(key, 2)

		p, err := sem.TryAcquire(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "-zadd").Err(); err != nil {
			t.Fatal(err)
		}
		ok, err := p.Renew(ctx, 30*time.Second)
		if ok || !errors.Is(err, prim.ErrNoPermission) {
			t.Fatalf("renewal refused mid-script: %v %v", ok, err)
		}
		if !p.Surrendered() || p.RemainingEstimate() != 0 {
			t.Fatalf("after a failed renewal: surrendered %v, estimate %v", p.Surrendered(), p.RemainingEstimate())
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatalf("the surrendered permit is still on the server: %v", e.admin.ZRange(ctx, key, 0, -1).Val())
		}
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "+zadd").Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := p.Renew(ctx, 30*time.Second); ok || err != nil {
			t.Fatalf("renewal after surrender: %v %v; want false, nil", ok, err)
		}

		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "-pexpireat").Err(); err != nil {
			t.Fatal(err)
		}
		q, err := sem.TryAcquire(ctx, 30*time.Second)
		if q != nil || !errors.Is(err, prim.ErrNoPermission) {
			t.Fatalf("acquisition refused mid-script: %v %v", q, err)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatalf("the refused acquisition left %v", e.admin.ZRange(ctx, key, 0, -1).Val())
		}
	})
}

// In a Cluster the semaphore is one key in one slot: permits, renewals,
// verification and release work through the cluster client (default options).
func TestSemaphoreCluster(t *testing.T) {
	forEachCluster(t, func(t *testing.T, ctx context.Context, c redis.UniversalClient) {
		co := prim.New(c)
		for _, key := range []string{"permits", "{other}:permits", "zzz"} {
			sem := co.Semaphore(key, 2)
			var held []*prim.Permit
			for range 2 {
				p, err := sem.TryAcquire(ctx, 10*time.Second)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				held = append(held, p)
			}
			if _, err := sem.TryAcquire(ctx, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("%s: third permit: %v", key, err)
			}
			if _, err := co.Semaphore(key, 3).TryAcquire(ctx, 10*time.Second); !errors.Is(err, prim.ErrCapacityMismatch) {
				t.Fatalf("%s: mismatch: %v", key, err)
			}
			for _, p := range held {
				if ok, err := p.Renew(ctx, prim.NoExpiry); !ok || err != nil {
					t.Fatalf("%s: renew: %v %v", key, ok, err)
				}
				if ok, err := p.VerifyStillHeld(ctx); !ok || err != nil {
					t.Fatalf("%s: verify: %v %v", key, ok, err)
				}
				if r, err := p.Release(ctx); r != prim.Released || err != nil {
					t.Fatalf("%s: release: %v %v", key, r, err)
				}
			}
			if n := c.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("%s left after every release", key)
			}
		}
	})
}

// BenchmarkSemaphorePair measures one acquire+release pair of a semaphore
// permit beside the plain SET NX PX baseline (with its compare-and-delete
// release), serially and from 32 goroutines: the semaphore's goroutines share
// one key of capacity 32, the baseline's have a key each. A semaphore
// acquisition is two round trips (CLIENT INFO on its dedicated connection, so
// an uncertain outcome can be fenced, then the script), its release one.
func BenchmarkSemaphorePair(b *testing.B) {
	topo, err := server(benchBuild())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	admin := topo.Nodes()[0].Admin()
	run := time.Now().UnixNano()
	impls := []struct {
		name string
		pair func(c redis.UniversalClient, key string) func() error
	}{
		{"semaphore", func(c redis.UniversalClient, key string) func() error {
			sem := prim.New(c).Semaphore(key, 32)
			return func() error {
				p, err := sem.TryAcquire(ctx, 10*time.Second)
				if err != nil {
					return err
				}
				_, err = p.Release(ctx)
				return err
			}
		}},
		{"setnx-px", func(c redis.UniversalClient, key string) func() error {
			keys := []string{key}
			return func() error {
				owner := randomOwner()
				ok, err := c.SetNX(ctx, key, owner, 10*time.Second).Result()
				if err != nil || !ok {
					return fmt.Errorf("setnx: %v %v", ok, err)
				}
				return casDelete.Run(ctx, c, keys, owner).Err()
			}
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name+"/serial", func(b *testing.B) {
			c := direct(b, topo, 1)
			pair := impl.pair(c, fmt.Sprintf("bench:sem:%s:serial:%d", impl.name, run))
			if err := pair(); err != nil {
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.ReportAllocs()
			for b.Loop() {
				if err := pair(); err != nil {
					b.Fatal(err)
				}
			}
			readServerCost(ctx, admin).sub(before).report(b)
		})
		b.Run(impl.name+"/parallel32", func(b *testing.B) {
			c := direct(b, topo, 32)
			var seq atomic.Int64
			key := func() string {
				if impl.name == "semaphore" {
					return fmt.Sprintf("bench:sem:%s:par:%d", impl.name, run)
				}
				return fmt.Sprintf("bench:sem:%s:par:%d:%d", impl.name, run, seq.Add(1))
			}
			if err := impl.pair(c, key())(); err != nil {
				b.Fatal(err)
			}
			before := readServerCost(ctx, admin)
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				pair := impl.pair(c, key())
				for pb.Next() {
					if err := pair(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			readServerCost(ctx, admin).sub(before).report(b)
		})
	}
}

// Cancellation: a cancelled verification or a renewal cancelled before it
// starts changes nothing; a cancelled release still sends one bounded
// owner-token release, which removes the permit, and returns the error.
func TestSemaphoreCancelledOperations(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		key := e.k("sem")
		p, err := co.Semaphore(key, 2).TryAcquire(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if ok, err := p.VerifyStillHeld(cancelled); ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled verification: %v %v", ok, err)
		}
		if ok, err := p.Renew(cancelled, 30*time.Second); ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled renewal: %v %v", ok, err)
		}
		if p.State() != prim.StateHeld || p.Surrendered() {
			t.Fatalf("after cancelled verification and renewal: %v, surrendered %v", p.State(), p.Surrendered())
		}
		if ok, err := p.VerifyStillHeld(ctx); !ok || err != nil {
			t.Fatalf("verification: %v %v", ok, err)
		}
		r, err := p.Release(cancelled)
		if !errors.Is(err, context.Canceled) || r != prim.Released {
			t.Fatalf("cancelled release: %v %v; want Released by the follow-up and the cancellation", r, err)
		}
		if p.State() != prim.StateReleased || e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatalf("after the cancelled release: %v, key exists %d", p.State(), e.admin.Exists(ctx, key).Val())
		}
		if r, err := p.Release(ctx); r != prim.AlreadyReleased || err != nil {
			t.Fatalf("second release: %v %v", r, err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Close over a black-holed link returns within about a second, without an
// error; its background retries release the permit once the link heals,
// and nothing is counted as abandoned.
func TestSemaphoreCloseBlackHoledRetriesInBackground(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		reader := sdkmetric.NewManualReader()
		co := prim.New(c, prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))))
		key := e.k("sem")
		p, err := co.Semaphore(key, 2).TryAcquire(ctx, prim.NoExpiry)
		if err != nil {
			t.Fatal(err)
		}
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if d := time.Since(start); d > 2500*time.Millisecond {
			t.Fatalf("Close over a black hole took %v, want about a second", d)
		}
		if p.State() == prim.StateHeld || p.RemainingEstimate() != 0 {
			t.Fatalf("after an unconfirmed Close: %v, %v left", p.State(), p.RemainingEstimate())
		}
		time.Sleep(500 * time.Millisecond)
		if n, _ := livePermits(ctx, e.admin, key); n != 1 {
			t.Fatalf("%d permits while the link is black-holed, want 1", n)
		}
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for e.admin.Exists(ctx, key).Val() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the background release did not remove the permit within 15s of the heal")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := counterSum(t, reader, "prim.cleanup.abandoned", nil); n != 0 {
			t.Fatalf("clean-up abandoned %d times", n)
		}
	})
}

// A fence that the server keeps refusing (a real ACL user without CLIENT
// KILL) gives up after the clean-up window (shortened to 1.5s), is counted as
// abandoned at stage fence, and sends no release: the uncertain permit
// (without expiry) stays, as a delayed acquisition could otherwise recreate
// it after the release.
func TestSemaphoreUnfencedAcquisitionSendsNoRelease(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := aclUser(t, e, "client|kill")
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Heal() })
		cut := &cutBefore{}
		c.AddHook(cut)
		reader := sdkmetric.NewManualReader()
		co := prim.New(c, prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			prim.WithLogger(slog.New(slog.NewTextHandler(tlog{t}, nil))), prim.WithCleanupWindow(1500*time.Millisecond))
		key := e.k("sem")
		t.Cleanup(func() { e.admin.Del(context.Background(), key) })
		sem := co.Semaphore(key, 2)
		if p, err := sem.TryAcquire(ctx, time.Second); err != nil { // loads the scripts
			t.Fatal(err)
		} else {
			p.Release(ctx)
		}
		cut.arm(link.LoseReplies)
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		p, err := sem.TryAcquire(actx, prim.NoExpiry)
		cancel()
		if p != nil || !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("got %v, %v; want no permit and ErrUncertain", p, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for n, _ := livePermits(ctx, e.admin, key); n == 0; n, _ = livePermits(ctx, e.admin, key) {
			if time.Now().After(deadline) {
				t.Fatal("the acquisition never ran on the server")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"primitive": "semaphore", "stage": "fence", "reason": "no-permission"}
		deadline = time.Now().Add(15 * time.Second)
		for counterSum(t, reader, "prim.cleanup.abandoned", want) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("abandoned counter %d after 15s (window 1.5s)", counterSum(t, reader, "prim.cleanup.abandoned", nil))
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		if n, _ := livePermits(ctx, e.admin, key); n != 1 {
			t.Fatalf("%d permits left; want the unfenced one kept (no release without a fence)", n)
		}
	})
}
