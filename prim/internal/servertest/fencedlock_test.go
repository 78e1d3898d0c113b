package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestContention(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		lease, fence := e.k("{res}:lease"), e.k("{res}:fence")
		const workers, attempts = 16, 200
		var (
			holding  atomic.Int32
			mu       sync.Mutex
			order    []int64
			acquired atomic.Int64
			wg       sync.WaitGroup
			errs     = make(chan error, workers)
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < attempts; i++ {
					l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
					if errors.Is(err, prim.ErrNotAcquired) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					if !holding.CompareAndSwap(0, 1) {
						errs <- fmt.Errorf("token %d acquired while another holder held the lock", l.FencingToken())
						return
					}
					mu.Lock()
					order = append(order, l.FencingToken())
					mu.Unlock()
					acquired.Add(1)
					holding.Store(0)
					if r, err := l.Release(ctx); err != nil || r != prim.Released {
						errs <- fmt.Errorf("release: %v %v", r, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if acquired.Load() < workers {
			t.Fatalf("only %d acquisitions in %d attempts", acquired.Load(), workers*attempts)
		}
		for i := 1; i < len(order); i++ {
			if order[i] <= order[i-1] {
				t.Fatalf("token %d after %d: not strictly increasing in acquisition order", order[i], order[i-1])
			}
		}
		// Contended attempts consume no token: every token from 1 on was granted.
		if order[0] != 1 || order[len(order)-1] != int64(len(order)) {
			t.Fatalf("tokens %d..%d for %d acquisitions", order[0], order[len(order)-1], len(order))
		}
		t.Logf("%d acquisitions of %d attempts", len(order), workers*attempts)
	})
}

// snapshot is what a key looks like to the server: its DUMP and PTTL.
func snapshot(ctx context.Context, a *redis.Client, keys ...string) string {
	s := ""
	for _, k := range keys {
		d, err := a.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			d = "<none>"
		}
		p := a.PTTL(ctx, k).Val()
		if p > 0 {
			p = 1 // only whether it expires; the remaining time moves on
		}
		s += fmt.Sprintf("%s=%q/%v;", k, d, p)
	}
	return s
}

func TestTokenPrecision(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, _ := e.client(t)
		co := prim.New(c)
		lease, fence := e.k("{p}:lease"), e.k("{p}:fence")
		e.admin.Set(ctx, fence, "9007199254740993", 0) // 2^53 + 1
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.FencingToken(); got != 9007199254740994 {
			t.Fatalf("token %d, want exactly 2^53+2", got)
		}
		l.Release(ctx)
		// The script increments the decimal string itself: carries at every width.
		for _, v := range []int64{0, 8, 9, 19, 99, 109, 1999, 199999, 999999999999999999, 1<<62 - 1} {
			e.admin.Set(ctx, fence, strconv.FormatInt(v, 10), 0)
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
			if err != nil || l.FencingToken() != v+1 {
				t.Fatalf("counter %d → %v, %v; want %d", v, l, err, v+1)
			}
			if got := e.admin.Get(ctx, fence).Val(); got != strconv.FormatInt(v+1, 10) {
				t.Fatalf("counter %d stored as %q", v, got)
			}
			l.Release(ctx)
		}
		e.admin.Set(ctx, fence, strconv.FormatInt(math.MaxInt64-1, 10), 0)
		l, err = co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if err != nil || l.FencingToken() != math.MaxInt64 {
			t.Fatalf("MaxInt64-1 → %v, %v; want MaxInt64", l, err)
		}
		l.Release(ctx)
		e.admin.Set(ctx, fence, strconv.FormatInt(math.MaxInt64, 10), 0)
		before := snapshot(ctx, e.admin, lease, fence)
		_, err = co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if !errors.Is(err, prim.ErrCounterOverflow) || !errors.Is(err, prim.ErrCounterInvalid) {
			t.Fatalf("MaxInt64 counter: %v, want ErrCounterOverflow", err)
		}
		if e.admin.Exists(ctx, lease).Val() != 0 {
			t.Fatal("an overflowing counter left a lease behind")
		}
		if after := snapshot(ctx, e.admin, lease, fence); after != before {
			t.Fatalf("keys changed:\n%s\n%s", before, after)
		}
	})
}

func TestRejectedInputsWriteNothing(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, cnt := e.client(t)
		co := prim.New(c)
		lease, fence := e.k("{r}:lease"), e.k("{r}:fence")
		// Input errors: no command at all.
		for _, tc := range []struct {
			name         string
			lease, fence string
			ttl          time.Duration
			want         error
		}{
			{"same key", lease, lease, time.Second, prim.ErrSameKey},
			{"empty lease", "", fence, time.Second, prim.ErrEmptyKey},
			{"empty counter", lease, "", time.Second, prim.ErrEmptyKey},
			{"cross slot", e.k("a:lease"), e.k("b:fence"), time.Second, prim.ErrCrossSlot},
			{"zero ttl", lease, fence, 0, prim.ErrInvalidTTL},
			{"negative ttl", lease, fence, -time.Second, prim.ErrInvalidTTL},
			{"sub-millisecond ttl", lease, fence, 500 * time.Microsecond, prim.ErrInvalidTTL},
			{"fractional ms ttl", lease, fence, 1500 * time.Microsecond, prim.ErrInvalidTTL},
		} {
			before := cnt.get()
			_, err := co.TryAcquireFencedLock(ctx, tc.lease, tc.fence, tc.ttl)
			if !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
			if cnt.get() != before {
				t.Errorf("%s: %d commands sent for invalid input", tc.name, cnt.get()-before)
			}
		}
		// Counter errors: checked in the script, nothing written.
		for _, tc := range []struct {
			name  string
			setup func()
			want  error
		}{
			{"expiring", func() { e.admin.Set(ctx, fence, "5", time.Hour) }, prim.ErrCounterExpiring},
			{"negative", func() { e.admin.Set(ctx, fence, "-3", 0) }, prim.ErrCounterNegative},
			// INCR alone would accept these (-1 would become 0, MinInt64 and
			// -0 are in range or malformed, a long one out of range): the script
			// must refuse them as negative before incrementing.
			{"minus one", func() { e.admin.Set(ctx, fence, "-1", 0) }, prim.ErrCounterNegative},
			{"MinInt64", func() { e.admin.Set(ctx, fence, "-9223372036854775808", 0) }, prim.ErrCounterNegative},
			{"minus zero", func() { e.admin.Set(ctx, fence, "-0", 0) }, prim.ErrCounterNegative},
			{"long negative", func() { e.admin.Set(ctx, fence, "-99999999999999999999", 0) }, prim.ErrCounterNegative},
			{"not a number", func() { e.admin.Set(ctx, fence, "abc", 0) }, prim.ErrCounterMalformed},
			{"fraction", func() { e.admin.Set(ctx, fence, "1.5", 0) }, prim.ErrCounterMalformed},
			{"leading zero", func() { e.admin.Set(ctx, fence, "007", 0) }, prim.ErrCounterMalformed},
			{"empty", func() { e.admin.Set(ctx, fence, "", 0) }, prim.ErrCounterMalformed},
			{"too long", func() { e.admin.Set(ctx, fence, "99999999999999999999", 0) }, prim.ErrCounterOverflow},
			{"wrong type", func() { e.admin.HSet(ctx, fence, "f", "1") }, prim.ErrCounterMalformed},
		} {
			e.admin.Del(ctx, lease, fence)
			tc.setup()
			before := snapshot(ctx, e.admin, lease, fence)
			_, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
			if !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrCounterInvalid) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
			if after := snapshot(ctx, e.admin, lease, fence); after != before {
				t.Errorf("%s: keys changed:\n%s\n%s", tc.name, before, after)
			}
		}
		// A zero counter is fine and yields token 1.
		e.admin.Del(ctx, lease, fence)
		e.admin.Set(ctx, fence, "0", 0)
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if err != nil || l.FencingToken() != 1 {
			t.Fatalf("counter 0: %v %v", l, err)
		}
		l.Close()
	})
}

func TestCrossSlotOnCluster(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			topo := testbed.Cluster(t, b, 3, 0)
			c, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			cnt := &counter{}
			c.AddHook(cnt)
			co := prim.New(c)
			if _, err := co.TryAcquireFencedLock(ctx, "a:lease", "b:fence", time.Second); !errors.Is(err, prim.ErrCrossSlot) {
				t.Fatalf("got %v, want ErrCrossSlot", err)
			}
			if cnt.get() != 0 {
				t.Fatalf("%d commands reached the cluster", cnt.get())
			}
			for _, n := range topo.Nodes() {
				if n.Admin().DBSize(ctx).Val() != 0 {
					t.Fatalf("%s holds keys", n.Name)
				}
			}
			// The same pair with a shared hash tag works on the cluster.
			l, err := co.TryAcquireFencedLock(ctx, "{ab}:lease", "{ab}:fence", time.Second)
			if err != nil || l.FencingToken() != 1 {
				t.Fatalf("hash-tagged pair: %v, %v", l, err)
			}
			if ok, err := l.Renew(ctx, 5*time.Second); !ok || err != nil {
				t.Fatalf("renew on cluster: %v %v", ok, err)
			}
			if r, err := l.Release(ctx); r != prim.Released || err != nil {
				t.Fatalf("release on cluster: %v %v", r, err)
			}
		})
	}
}

func TestRenewVerifyRelease(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, cnt := e.client(t)
		co := prim.New(c)
		lease, fence := e.k("{l}:lease"), e.k("{l}:fence")

		l, err := co.TryAcquireFencedLock(ctx, lease, fence, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.Renew(ctx, 20*time.Second); !ok || err != nil {
			t.Fatalf("renew: %v %v", ok, err)
		}
		if p := e.admin.PTTL(ctx, lease).Val(); p < 15*time.Second {
			t.Fatalf("PTTL %v after renewing to 20s", p)
		}
		if l.RemainingEstimate() < 15*time.Second {
			t.Fatalf("estimate %v after renewing to 20s", l.RemainingEstimate())
		}
		if e.admin.Get(ctx, fence).Val() != strconv.FormatInt(l.FencingToken(), 10) {
			t.Fatal("renewal changed the counter")
		}
		if held, err := l.VerifyStillHeld(ctx); !held || err != nil {
			t.Fatalf("verify: %v %v", held, err)
		}
		if r, err := l.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release: %v %v", r, err)
		}
		n := cnt.get()
		if r, err := l.Release(ctx); r != prim.AlreadyReleased || err != nil {
			t.Fatalf("second release: %v %v", r, err)
		}
		if ok, _ := l.Renew(ctx, time.Second); ok {
			t.Fatal("renewed a released lock")
		}
		if cnt.get() != n {
			t.Fatal("a released handle sent commands")
		}

		// Expiry: renew returns false without a command.
		l, err = co.TryAcquireFencedLock(ctx, lease, fence, shortLease)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(shortLease + 100*time.Millisecond)
		n = cnt.get()
		if ok, err := l.Renew(ctx, time.Second); ok || err != nil {
			t.Fatalf("renew after expiry: %v %v", ok, err)
		}
		if cnt.get() != n {
			t.Fatalf("renew after the local estimate ran out sent %d commands", cnt.get()-n)
		}
		if r, err := l.Release(ctx); r != prim.AlreadyReleased || err != nil {
			t.Fatalf("release of an expired lease: %v %v", r, err)
		}

		// Another owner took over: NotOwned, its lease untouched, Close too.
		old, err := co.TryAcquireFencedLock(ctx, lease, fence, shortLease)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(shortLease + 100*time.Millisecond)
		cur, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cur.FencingToken() <= old.FencingToken() {
			t.Fatalf("new owner token %d ≤ old %d", cur.FencingToken(), old.FencingToken())
		}
		if held, _ := old.VerifyStillHeld(ctx); held {
			t.Fatal("expired owner verified as holder")
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); old.Close() }()
		}
		wg.Wait()
		if r, err := old.Release(ctx); r != prim.AlreadyReleased && r != prim.NotOwned || err != nil {
			t.Fatalf("old release after Close: %v %v", r, err)
		}
		if e.admin.Get(ctx, lease).Val() != cur.OwnerToken() {
			t.Fatal("the old owner's Close removed the new owner's lease")
		}
		old2, _ := co.TryAcquireFencedLock(ctx, e.k("{m}:lease"), e.k("{m}:fence"), shortLease)
		time.Sleep(shortLease + 100*time.Millisecond)
		cur2, _ := co.TryAcquireFencedLock(ctx, e.k("{m}:lease"), e.k("{m}:fence"), 10*time.Second)
		if r, err := old2.Release(ctx); r != prim.NotOwned || err != nil {
			t.Fatalf("release by a replaced owner: %v %v, want NotOwned", r, err)
		}
		if held, _ := cur2.VerifyStillHeld(ctx); !held {
			t.Fatal("NotOwned release removed the new owner's lease")
		}
		cur2.Close()
		if err := cur.Close(); err != nil {
			t.Fatal(err)
		}
		if err := cur.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		if e.admin.Exists(ctx, lease).Val() != 0 {
			t.Fatal("Close left the lease")
		}
	})
}

func TestPrefixes(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 30*time.Second)
		c, _ := e.client(t)
		app := prim.New(c).WithPrefix(e.ns + "app:")
		l, err := app.TryAcquireFencedLock(ctx, "{x}:lease", "{x}:fence", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The accessors return the keys as stored on the server: prefixed.
		if l.LeaseKey() != e.ns+"app:{x}:lease" || l.CounterKey() != e.ns+"app:{x}:fence" {
			t.Fatalf("lease key %q, counter key %q; want the prefixed keys", l.LeaseKey(), l.CounterKey())
		}
		for _, k := range []string{l.LeaseKey(), l.CounterKey()} {
			if e.admin.Exists(ctx, k).Val() != 1 {
				t.Fatalf("%s, returned by an accessor, is not on the server", k)
			}
		}
		if hasFieldExpiry(ctx, e.admin) {
			hl, err := app.TryAcquireLease(ctx, "leases", "job", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if hl.HashKey() != e.ns+"app:leases" || hl.Field() != "job" {
				t.Fatalf("hash key %q, field %q; want the prefixed hash key and the field as given", hl.HashKey(), hl.Field())
			}
			if !e.admin.HExists(ctx, hl.HashKey(), hl.Field()).Val() {
				t.Fatalf("%s/%s, returned by the accessors, is not on the server", hl.HashKey(), hl.Field())
			}
			hl.Close()
		}
		for _, k := range []string{e.ns + "app:{x}:lease", e.ns + "app:{x}:fence"} {
			if e.admin.Exists(ctx, k).Val() != 1 {
				t.Fatalf("%s missing", k)
			}
		}
		if e.admin.Exists(ctx, "{x}:lease", "{x}:fence").Val() != 0 {
			t.Fatal("the prefixed view wrote unprefixed keys")
		}
		l.Close()
		// A prefix with a hash tag decides placement: a pair that is cross-slot on
		// its own shares the prefix's slot.
		if _, err := prim.New(c).TryAcquireFencedLock(ctx, "a:lease", "b:fence", time.Second); !errors.Is(err, prim.ErrCrossSlot) {
			t.Fatalf("unprefixed cross-slot pair: %v", err)
		}
		tagged := prim.New(c).WithPrefix("{" + e.ns + "tenant}:")
		l, err = tagged.TryAcquireFencedLock(ctx, "a:lease", "b:fence", time.Second)
		if err != nil {
			t.Fatalf("hash-tag prefix: %v", err)
		}
		if prim.Slot(l.LeaseKey()) != prim.Slot("{"+e.ns+"tenant}") {
			t.Fatal("slot does not follow the prefix's hash tag")
		}
		l.Close()
	})
}

func TestSlot(t *testing.T) {
	// Reference values from CLUSTER KEYSLOT.
	for k, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443,
		"{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0} {
		if got := prim.Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
}

func TestMetricsAndFailoverClient(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			topo := testbed.Replicated(t, b, 1, 3)
			c, err := topo.Client() // a Sentinel failover client
			if err != nil {
				t.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			co := prim.New(c, prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			l, err := co.TryAcquireFencedLock(ctx, "{m}:lease", "{m}:fence", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := co.TryAcquireFencedLock(ctx, "{m}:lease", "{m}:fence", 5*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
				t.Fatalf("second acquisition: %v", err)
			}
			if ok, err := l.Renew(ctx, 5*time.Second); !ok || err != nil {
				t.Fatalf("renew through the failover client: %v %v", ok, err)
			}
			if r, err := l.Release(ctx); r != prim.Released || err != nil {
				t.Fatalf("release: %v %v", r, err)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if s, ok := m.Data.(metricdata.Sum[int64]); ok {
						for _, dp := range s.DataPoints {
							r, _ := dp.Attributes.Value("result")
							got[m.Name+"/"+r.AsString()] += dp.Value
						}
					}
				}
			}
			want := map[string]int64{"prim.lock.acquire/acquired": 1, "prim.lock.acquire/contended": 1,
				"prim.lock.renew/renewed": 1, "prim.lock.release/Released": 1}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// shortLease is a lease meant to expire during a test: long enough that its
// acquisition's reply comes back within it on a loaded machine (CI saw a 50ms
// lease's reply arrive after it: ErrUncertain, by design), short enough to
// wait out.
const shortLease = 400 * time.Millisecond
