package servertest_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/internal/knobs"
	"github.com/coordtorture/coordtorture/testbed"
)

// Tests of the invalidation watchers: tracking state lost on the shared
// tracking connection, a user without channel permission, one wake-up per
// key per invalidation, idle watchers closing their connections.

// trackingConns are the ids of the server's connections in tracking mode.
func trackingConns(ctx context.Context, a *redis.Client) []string {
	var ids []string
	for _, line := range strings.Split(a.ClientList(ctx).Val(), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		for _, kv := range f {
			if flags, ok := strings.CutPrefix(kv, "flags="); ok && strings.Contains(flags, "t") {
				ids = append(ids, strings.TrimPrefix(f[0], "id="))
			}
		}
	}
	return ids
}

// A tracking read that fails on the shared tracking connection loses what the
// server tracked on it for every waiter of the node, not only for the one that
// read: all of them must re-check. Here waiter A sleeps tracked on a lock whose
// holder has 30s left; the tracking connection dies; waiter B's tracking read
// is the first to find out. When A's holder releases, A must acquire promptly,
// not at the holder's deadline. The watcher's own keep-alive check (which also
// wakes everyone when the connection is dead) is pushed out of the way, so only
// B's failed read can wake A.
func TestWaitingTrackingReadFailureWakesAll(t *testing.T) {
	defer knobs.SetKeepAliveEvery(time.Minute)()
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		la, fa := e.k("{ta}:lease"), e.k("{ta}:fence")
		lb, fb := e.k("{tb}:lease"), e.k("{tb}:fence")
		holderA, err := co.TryAcquireFencedLock(ctx, la, fa, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := co.TryAcquireFencedLock(ctx, lb, fb, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		gotA := waitFor(ctx, co, la, fa)
		// A is asleep once its tracking read has made the server track la.
		deadline := time.Now().Add(10 * time.Second)
		for len(trackingConns(ctx, e.admin)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the waiter never started tracking")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		for _, id := range trackingConns(ctx, e.admin) {
			e.admin.Do(ctx, "CLIENT", "KILL", "ID", id)
		}
		// B's contended attempt is followed by a tracking read on the dead
		// connection (before the watcher's next keep-alive would notice).
		bctx, cancelB := context.WithCancel(ctx)
		defer cancelB()
		go func() { _, _ = co.AcquireFencedLock(bctx, lb, fb, 10*time.Second) }()
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if r, err := holderA.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release: %v %v", r, err)
		}
		select {
		case err := <-gotA:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("A acquired %v after the release", time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatal("A slept on after the tracking connection was lost: it was not woken to re-check")
		}
	})
}

// rejectedSubscribes is the server's count of SUBSCRIBE calls it refused.
func rejectedSubscribes(ctx context.Context, a *redis.Client) int64 {
	return rejectedCalls(ctx, a, "subscribe")
}

// rejectedCalls is the server's count of calls of cmd (as INFO commandstats
// names it: "subscribe", "client|tracking") it refused.
func rejectedCalls(ctx context.Context, a *redis.Client, cmd string) int64 {
	for _, line := range strings.Split(a.Info(ctx, "commandstats").Val(), "\n") {
		if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		_, rest, ok := strings.Cut(line, "rejected_calls=")
		if !ok {
			return 0
		}
		v, _ := strconv.ParseInt(strings.SplitN(strings.TrimSpace(rest), ",", 2)[0], 10, 64)
		return v
	}
	return 0
}

// logCount counts log records at or above a level whose message contains a
// substring.
type logCount struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }
func (l *logCount) count(level slog.Level, sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level >= level && strings.Contains(r.Message, sub) {
			n++
		}
	}
	return n
}

// find returns the records at level exactly whose message contains sub, each
// as its message followed by its attributes (" key=value").
func (l *logCount) find(level slog.Level, sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Level != level || !strings.Contains(r.Message, sub) {
			continue
		}
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
		out = append(out, msg)
	}
	return out
}

// degraded is the sum of the prim.waiting.degraded metric for reason, as the
// reader collects it.
func degraded(t *testing.T, ctx context.Context, reader *sdkmetric.ManualReader, reason string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "prim.waiting.degraded" {
				for _, dp := range s.DataPoints {
					if v, ok := dp.Attributes.Value("reason"); ok && v.AsString() == reason {
						n += dp.Value
					}
				}
			}
		}
	}
	return n
}

// An ACL user without channel permission (Redis 7's default for new users)
// cannot subscribe to invalidations. The watcher backs off on the refusal
// instead of resending SUBSCRIBE many times a second, says so once at Warn and
// in a metric, and waiters still acquire by re-checking on a timer.
func TestWaitingSubscribeRefused(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		user := "nochan-" + e.peer
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.Do(context.Background(), "ACL", "DELUSER", user) })
		c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) {
			o.Username, o.Password = user, "pw"
		}))
		logs := &logCount{}
		reader := sdkmetric.NewManualReader()
		co := prim.New(c, prim.WithLogger(slog.New(logs)),
			prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		defer co.Close()
		lease, fence := e.k("{r}:lease"), e.k("{r}:fence")
		holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		before := rejectedSubscribes(ctx, e.admin)
		got := waitFor(ctx, co, lease, fence)
		const window = 4 * time.Second
		time.Sleep(window)
		refused := rejectedSubscribes(ctx, e.admin) - before
		start := time.Now()
		if r, err := holder.Release(ctx); r != prim.Released || err != nil {
			t.Fatalf("release: %v %v", r, err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("the waiter acquired %v after the release", el)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not acquire without invalidations")
		}
		t.Logf("%d SUBSCRIBE refused in %v", refused, window)
		// Backing off from 50ms and doubling: at most 7 tries in 4s; the
		// landed watcher sent about 19 a second.
		if refused < 1 || refused > 10 {
			t.Fatalf("%d SUBSCRIBE refused in %v; want a backed-off handful (at least the first)", refused, window)
		}
		if n := logs.count(slog.LevelWarn, "invalidation subscription refused"); n != 1 {
			t.Fatalf("%d Warn records about the refused subscription, want exactly 1", n)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		var degraded int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "prim.waiting.degraded" {
					for _, dp := range s.DataPoints {
						degraded += dp.Value
					}
				}
			}
		}
		if degraded != 1 {
			t.Fatalf("prim.waiting.degraded = %d, want 1", degraded)
		}
	})
}

// handOffCost measures the server commands one hand-off costs with n waiters
// queued on one lock in one Coordinator: from the holder's release until the
// next holder has its lock and the others are asleep again.
func handOffCost(t *testing.T, e *env, co *prim.Coordinator, lease, fence string, n int) int64 {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	holder, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	won := make(chan *prim.FencedLock, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := co.AcquireFencedLock(wctx, lease, fence, 30*time.Second); err == nil {
				won <- l
			}
		}()
	}
	defer wg.Wait()
	time.Sleep(time.Second) // every waiter has tried once and is asleep
	before := serverCalls(ctx, e.admin)
	if r, err := holder.Release(ctx); r != prim.Released || err != nil {
		t.Fatalf("release: %v %v", r, err)
	}
	var next *prim.FencedLock
	select {
	case next = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter acquired after the release")
	}
	time.Sleep(300 * time.Millisecond) // the others are asleep again
	cost := serverCalls(ctx, e.admin) - before
	select {
	case l := <-won:
		t.Fatalf("two waiters acquired one release: %d and %d", next.FencingToken(), l.FencingToken())
	default:
	}
	cancel()
	wg.Wait()
	next.Release(ctx)
	return cost
}

// One hand-off among many local waiters wakes one of them: the commands it
// costs do not grow with the number of waiters.
func TestWaitingOneWakeUpPerHandOff(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		// The server counts the commands scripts run too (about five per
		// acquisition), so compare: with one waiter, a hand-off is the
		// release, the waiter's script and a keep-alive or two; with 32, the
		// next waiter's tracking read is all that may come on top. (The landed
		// watcher woke all 32: 124 commands more.) The first hand-off loads
		// the scripts and is not counted.
		handOffCost(t, e, co, e.k("{h0}:lease"), e.k("{h0}:fence"), 1)
		one := handOffCost(t, e, co, e.k("{h1}:lease"), e.k("{h1}:fence"), 1)
		many := handOffCost(t, e, co, e.k("{h32}:lease"), e.k("{h32}:fence"), 32)
		t.Logf("commands the server ran for one hand-off: %d with 1 waiter, %d with 32", one, many)
		if many > one+5 {
			t.Fatalf("one hand-off cost %d commands with 32 local waiters, %d with one: it grows with the waiters", many, one)
		}
	})
}

// Waiters queued on different fields of one hash key are woken each for their
// own field: a queue per lease, not per hash key.
func TestWaitingQueuesPerField(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		hk := e.k("{qf}:leases")
		a, err := co.TryAcquireLease(ctx, hk, "a", 30*time.Second)
		if err != nil {
			if errors.Is(err, prim.ErrFeatureUnsupported) {
				t.Skip(err) // no hash-field expiry on this build
			}
			t.Fatal(err)
		}
		b, err := co.TryAcquireLease(ctx, hk, "b", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		gotA, gotB := make(chan error, 1), make(chan error, 1)
		wait := func(field string, got chan error) {
			l, err := co.AcquireLease(ctx, hk, field, 10*time.Second)
			if err == nil {
				l.Release(ctx)
			}
			got <- err
		}
		go wait("a", gotA)
		time.Sleep(200 * time.Millisecond)
		go wait("b", gotB)
		time.Sleep(300 * time.Millisecond)
		b.Release(ctx) // only b's field is free: its waiter must not queue behind a's
		select {
		case err := <-gotB:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("b's waiter waited behind a's though b was free")
		}
		a.Release(ctx)
		if err := <-gotA; err != nil {
			t.Fatal(err)
		}
	})
}

// namedConns counts the server's connections of a client name.
func namedConns(ctx context.Context, e *env, name string, flag func(line string) bool) int {
	n := 0
	for _, line := range strings.Split(e.admin.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, " name="+name+" ") && flag(line) {
			n++
		}
	}
	return n
}

// A watcher nobody waits on closes its connections after a while; waiting
// again starts a new one.
func TestWatchersCloseWhenIdle(t *testing.T) {
	defer knobs.SetWatcherIdle(500 * time.Millisecond)()
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		name := "idle-" + e.peer // the watchers' connections copy the client's options
		c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) { o.ClientName = name }))
		co := prim.New(c)
		defer co.Close()
		lease, fence := e.k("{i}:lease"), e.k("{i}:fence")
		watcherConns := func() int {
			return namedConns(ctx, e, name, func(line string) bool {
				return strings.Contains(line, " flags=t ") || strings.Contains(line, " sub=1 ")
			})
		}
		for round := 0; round < 2; round++ {
			if _, err := co.TryAcquireFencedLock(ctx, lease, fence, 400*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			l, err := co.AcquireFencedLock(ctx, lease, fence, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
			if n := watcherConns(); n != 2 {
				t.Fatalf("round %d: %d watcher connections right after a wait, want 2 (Pub/Sub and tracking)", round, n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for watcherConns() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: the idle watcher kept %d connections open", round, watcherConns())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
}
