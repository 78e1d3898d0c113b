package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coordtorture/coordtorture/testbed"
	"github.com/redis/go-redis/v9"

	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// ---- rate limiters: the decisions of the three algorithms ---------------------

// limiterKind makes one algorithm's limiter of limit permits per window (the
// bucket: limit tokens, refilled limit per window).
type limiterKind struct {
	name string
	make func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error)
}

var limiterKinds = []limiterKind{
	{"fixed", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.FixedWindow(key, limit, window)
	}},
	{"sliding", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.SlidingWindow(key, limit, window, 10)
	}},
	{"bucket", func(f *prim.RateLimiters, key string, limit int64, window time.Duration) (*prim.Limiter, error) {
		return f.TokenBucket(key, limit, limit, window)
	}},
}

// forEachLimiter runs f for each algorithm on every build.
func forEachLimiter(t *testing.T, f func(t *testing.T, e *env, k limiterKind)) {
	forEachBuild(t, func(t *testing.T, e *env) {
		for _, k := range limiterKinds {
			t.Run(k.name, func(t *testing.T) { f(t, e, k) })
		}
	})
}

func mustLimiter(t *testing.T, k limiterKind, f *prim.RateLimiters, key string, limit int64, window time.Duration) *prim.Limiter {
	t.Helper()
	l, err := k.make(f, key, limit, window)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The basic sequence: limit grants, then a refusal with a RetryAfter within
// the window, Remaining counting down; n == 0 reports without consuming. The
// key expires no sooner than Reset.
func TestRateLimitSequence(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		key := e.k(k.name + ":lim")
		l := mustLimiter(t, k, prim.New(c).RateLimiters(), key, 5, 10*time.Second)
		d, err := l.Allow(ctx, 0)
		if err != nil || !d.Allowed || d.Remaining != 5 || d.HasRetryAfter {
			t.Fatalf("n == 0 on a fresh key: %+v, %v", d, err)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("n == 0 created the key")
		}
		for i := int64(1); i <= 5; i++ {
			d, err := l.Allow(ctx, 1)
			if err != nil || !d.Allowed || d.Remaining != 5-i || d.Limit != 5 {
				t.Fatalf("grant %d: %+v, %v", i, d, err)
			}
			if d.Reset <= 0 || d.Reset > 11*time.Second { // sliding: up to a segment more
				t.Fatalf("grant %d: Reset %v", i, d.Reset)
			}
			// The state outlives the time it is needed for.
			if p := e.admin.PTTL(ctx, key).Val(); p < d.Reset-time.Second/2 {
				t.Fatalf("grant %d: the key expires in %v, before it is back to full (%v)", i, p, d.Reset)
			}
		}
		before := snapshot(ctx, e.admin, key)
		for _, n := range []int64{1, 0} {
			d, err = l.Allow(ctx, n)
			if err != nil || d.Allowed || d.Remaining != 0 || !d.HasRetryAfter || d.RetryAfter <= 0 || d.RetryAfter > 11*time.Second+time.Millisecond {
				t.Fatalf("n=%d past the limit: %+v, %v", n, d, err)
			}
		}
		if after := snapshot(ctx, e.admin, key); after != before {
			t.Fatalf("a refusal changed the state:\n%s\n%s", before, after)
		}
		if s := l.Stats(); s.Granted != 6 || s.Rejected != 2 || s.Available != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// rtLog counts a client's round trips (a command, or a pipeline) and keeps the
// arguments of every command; a new connection's handshake (HELLO, CLIENT
// SETINFO…) is not counted.
type rtLog struct {
	mu    sync.Mutex
	trips int
	cmds  [][]any
}

func (h *rtLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rtLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake[cmd.Name()] {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.trips++
		h.cmds = append(h.cmds, cmd.Args())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *rtLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.trips++
		for _, c := range cmds {
			h.cmds = append(h.cmds, c.Args())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true, "readonly": true}

// take returns the round trips and the command names since the last take.
func (h *rtLog) take() (trips int, names string, args [][]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ns []string
	for _, a := range h.cmds {
		ns = append(ns, strings.ToLower(fmt.Sprint(a[0])))
	}
	trips, args = h.trips, h.cmds
	h.trips, h.cmds = 0, nil
	return trips, strings.Join(ns, " "), args
}

func rtClient(t *testing.T, e *env, opts ...testbed.ClientOption) (redis.UniversalClient, *rtLog) {
	t.Helper()
	c, _ := e.client(t, opts...)
	h := &rtLog{}
	c.AddHook(h)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	h.take()
	return c, h
}

// n == 0 reports availability and consumes nothing: the key is unchanged.
func TestRateLimitZeroConsumesNothing(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		key := e.k(k.name + ":zero")
		l := mustLimiter(t, k, prim.New(c).RateLimiters(), key, 5, 10*time.Second)
		for range 2 {
			if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
				t.Fatalf("grant: %+v, %v", d, err)
			}
		}
		before := snapshot(ctx, e.admin, key)
		for range 5 {
			d, err := l.Allow(ctx, 0)
			if err != nil || !d.Allowed || d.Remaining != 3 || d.HasRetryAfter {
				t.Fatalf("n == 0 after two grants of five: %+v, %v", d, err)
			}
		}
		if after := snapshot(ctx, e.admin, key); after != before {
			t.Fatalf("n == 0 changed the state:\n%s\n%s", before, after)
		}
		if d, err := l.Allow(ctx, 3); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the three permits n == 0 reported: %+v, %v", d, err)
		}
	})
}

// A request over the limit is refused without RetryAfter and without an
// error; a negative one is a typed error; neither sends anything.
func TestRateLimitOverLimitAndNegative(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, log := rtClient(t, e)
		key := e.k(k.name + ":over")
		l := mustLimiter(t, k, prim.New(c).RateLimiters(), key, 5, 10*time.Second)
		for _, n := range []int64{6, 1 << 40} {
			d, err := l.Allow(ctx, n)
			if err != nil || d.Allowed || d.HasRetryAfter || d.RetryAfter != 0 || d.Remaining != 0 || d.Limit != 5 {
				t.Fatalf("n=%d over the limit 5: %+v, %v", n, d, err)
			}
		}
		for _, n := range []int64{-1, -1 << 40} {
			d, err := l.Allow(ctx, n)
			if !errors.Is(err, prim.ErrNegativePermits) || !errors.Is(err, prim.ErrInvalidArgument) || d.Allowed {
				t.Fatalf("n=%d: %+v, %v; want ErrNegativePermits", n, d, err)
			}
		}
		if trips, names, _ := log.take(); trips != 0 {
			t.Fatalf("sent %d round trips (%s); want none", trips, names)
		}
		if e.admin.Exists(ctx, key).Val() != 0 {
			t.Fatal("key written")
		}
		if s := l.Stats(); s.Rejected != 2 || s.Granted != 0 || s.Available != -1 {
			t.Fatalf("stats %+v; want 2 rejected, nothing known of the server", s)
		}
	})
}

// Every bad constructor argument is a typed error matching its own sentinel
// and ErrInvalidArgument, and the constructors send nothing.
func TestRateLimitConstructorErrors(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, log := rtClient(t, e)
		co := prim.New(c).WithPrefix(e.ns)
		f := co.RateLimiters()
		if co.RateLimiters() != f {
			t.Fatal("RateLimiters made a second factory")
		}
		ms := time.Millisecond
		cases := []struct {
			name string
			want error
			mk   func() (*prim.Limiter, error)
		}{
			{"fixed empty key", prim.ErrEmptyKey, func() (*prim.Limiter, error) { return f.FixedWindow("", 1, time.Second) }},
			{"fixed limit 0", prim.ErrInvalidLimit, func() (*prim.Limiter, error) { return f.FixedWindow("k", 0, time.Second) }},
			{"fixed limit -1", prim.ErrInvalidLimit, func() (*prim.Limiter, error) { return f.FixedWindow("k", -1, time.Second) }},
			{"fixed window 0", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.FixedWindow("k", 1, 0) }},
			{"fixed window -1s", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.FixedWindow("k", 1, -time.Second) }},
			{"fixed window 500µs", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.FixedWindow("k", 1, 500*time.Microsecond) }},
			{"fixed window 1.5ms", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.FixedWindow("k", 1, 1500*time.Microsecond) }},
			{"fixed queue -1", prim.ErrInvalidQueue, func() (*prim.Limiter, error) {
				return f.FixedWindow("k", 1, time.Second, prim.WithQueue(-1, prim.OldestFirst))
			}},
			{"fixed queue order 7", prim.ErrInvalidQueue, func() (*prim.Limiter, error) {
				return f.FixedWindow("k", 1, time.Second, prim.WithQueue(1, prim.QueueOrder(7)))
			}},
			{"sliding empty key", prim.ErrEmptyKey, func() (*prim.Limiter, error) { return f.SlidingWindow("", 1, time.Second, 10) }},
			{"sliding limit 0", prim.ErrInvalidLimit, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 0, time.Second, 10) }},
			{"sliding window 0", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, 0, 10) }},
			{"sliding window 2.5ms", prim.ErrInvalidWindow, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, 2500*time.Microsecond, 1) }},
			{"sliding segments 0", prim.ErrInvalidSegments, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, time.Second, 0) }},
			{"sliding segments -2", prim.ErrInvalidSegments, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, time.Second, -2) }},
			{"sliding segments 3 of 1s", prim.ErrInvalidSegments, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, time.Second, 3) }},
			{"sliding segments 11 of 10ms", prim.ErrInvalidSegments, func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, 10*ms, 11) }},
			{"sliding queue -5", prim.ErrInvalidQueue, func() (*prim.Limiter, error) {
				return f.SlidingWindow("k", 1, time.Second, 10, prim.WithQueue(-5, prim.NewestFirst))
			}},
			{"bucket empty key", prim.ErrEmptyKey, func() (*prim.Limiter, error) { return f.TokenBucket("", 1, 1, time.Second) }},
			{"bucket limit 0", prim.ErrInvalidLimit, func() (*prim.Limiter, error) { return f.TokenBucket("k", 0, 1, time.Second) }},
			{"bucket tokens 0", prim.ErrInvalidTokens, func() (*prim.Limiter, error) { return f.TokenBucket("k", 1, 0, time.Second) }},
			{"bucket tokens -1", prim.ErrInvalidTokens, func() (*prim.Limiter, error) { return f.TokenBucket("k", 1, -1, time.Second) }},
			{"bucket period 0", prim.ErrInvalidPeriod, func() (*prim.Limiter, error) { return f.TokenBucket("k", 1, 1, 0) }},
			{"bucket period 999µs", prim.ErrInvalidPeriod, func() (*prim.Limiter, error) { return f.TokenBucket("k", 1, 1, 999*time.Microsecond) }},
			{"bucket queue order -1", prim.ErrInvalidQueue, func() (*prim.Limiter, error) {
				return f.TokenBucket("k", 1, 1, time.Second, prim.WithQueue(0, prim.QueueOrder(-1)))
			}},
		}
		for _, tc := range cases {
			l, err := tc.mk()
			if l != nil || !errors.Is(err, tc.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v, %v; want %v matching ErrInvalidArgument", tc.name, l, err, tc.want)
			}
		}
		// The valid edges are accepted.
		for _, mk := range []func() (*prim.Limiter, error){
			func() (*prim.Limiter, error) { return f.FixedWindow("k", 1, ms) },
			func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, 10*ms, 10) },
			func() (*prim.Limiter, error) { return f.SlidingWindow("k", 1, time.Second, 1) },
			func() (*prim.Limiter, error) {
				return f.TokenBucket("k", 1, 1, ms, prim.WithQueue(0, prim.NewestFirst))
			},
		} {
			if _, err := mk(); err != nil {
				t.Errorf("a valid configuration refused: %v", err)
			}
		}
		if trips, names, _ := log.take(); trips != 0 {
			t.Fatalf("constructors sent %d round trips (%s); want none", trips, names)
		}
		if n := e.admin.Exists(ctx, e.k("k"), "k", e.k("")).Val(); n != 0 {
			t.Fatalf("%d keys written", n)
		}
	})
}

// A key holding another type is ErrWrongType, a malformed state
// ErrLimiterState; the value is left as it was, whatever n.
func TestRateLimitBadState(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		f := prim.New(c).RateLimiters()
		type state struct {
			name string
			set  func(key string) error
			want error
		}
		str := func(v string) func(string) error {
			return func(key string) error { return e.admin.Set(ctx, key, v, 0).Err() }
		}
		hash := func(kv ...any) func(string) error {
			return func(key string) error { return e.admin.HSet(ctx, key, kv...).Err() }
		}
		list := func(key string) error { return e.admin.RPush(ctx, key, "x").Err() }
		var states []state
		switch k.name {
		case "fixed":
			states = []state{
				{"list", list, prim.ErrWrongType},
				{"hash", hash("a", "1"), prim.ErrWrongType},
				{"text", str("abc"), prim.ErrLimiterState},
				{"fraction", str("1.5"), prim.ErrLimiterState},
				{"negative", str("-3"), prim.ErrLimiterState},
				{"leading zero", str("01"), prim.ErrLimiterState},
				{"space", str(" 1"), prim.ErrLimiterState},
				{"hex", str("0x1"), prim.ErrLimiterState},
				{"huge", str("123456789012345678901234"), prim.ErrLimiterState},
			}
		case "sliding":
			states = []state{
				{"list", list, prim.ErrWrongType},
				{"string", str("1"), prim.ErrWrongType},
				{"field not a time", hash("abc", "1"), prim.ErrLimiterState},
				{"count not a number", hash("9999999999999", "x"), prim.ErrLimiterState},
				{"count zero", hash("9999999999999", "0"), prim.ErrLimiterState},
				{"count negative", hash("9999999999999", "-1"), prim.ErrLimiterState},
			}
		case "bucket":
			states = []state{
				{"list", list, prim.ErrWrongType},
				{"string", str("1"), prim.ErrWrongType},
				{"garbage tokens", hash("tokens", "lots", "time", "1"), prim.ErrLimiterState},
				{"negative tokens", hash("tokens", "-1", "time", "1"), prim.ErrLimiterState},
				{"nan tokens", hash("tokens", "nan", "time", "1"), prim.ErrLimiterState},
				{"inf tokens", hash("tokens", "1e999", "time", "1"), prim.ErrLimiterState},
				{"garbage time", hash("tokens", "1", "time", "soon"), prim.ErrLimiterState},
				{"no time", hash("tokens", "1"), prim.ErrLimiterState},
				{"other fields", hash("a", "1", "b", "2"), prim.ErrLimiterState},
			}
		}
		for _, s := range states {
			key := e.k(k.name + ":bad:" + s.name)
			if err := s.set(key); err != nil {
				t.Fatal(err)
			}
			l := mustLimiter(t, k, f, key, 5, time.Minute)
			before := snapshot(ctx, e.admin, key)
			for _, n := range []int64{1, 0, 5} {
				d, err := l.Allow(ctx, n)
				if !errors.Is(err, s.want) || d.Allowed {
					t.Errorf("%s, n=%d: %+v, %v; want %v", s.name, n, d, err, s.want)
				}
			}
			if after := snapshot(ctx, e.admin, key); after != before {
				t.Errorf("%s: the state changed:\n%s\n%s", s.name, before, after)
			}
		}
	})
}

// The decisions use the server's clock only: every argument sent is the
// request or the configuration (no timestamp), and on a server whose clock is
// an hour off the client's, in either direction, the decisions are the same.
//
// The four grants and the refusal prove something only if the five calls
// reach the server within one token's refill (window/4, the token bucket's;
// the windows' limits last a whole window): later, a token has come back and
// the fifth call is rightly granted. The client's time from before the first
// call to after the fifth reply bounds the server's time between them (the
// offset is constant; the clocks run at one rate), so an attempt whose calls
// took longer checks only the arguments and is made again with a window four
// times as long: a token every 100ms on a quiet machine, up to one every
// 1.6s on a loaded one. Five local round trips slower than that are what a
// user would notice, and fail.
func TestRateLimitNoClientTime(t *testing.T) {
	const firstWindow, lastWindow = 400 * time.Millisecond, 6400 * time.Millisecond
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			topo := testbed.Standalone(t, b)
			for _, off := range []time.Duration{time.Hour, -time.Hour} {
				if err := topo.SetClockOffset(ctx, "n1", off); err != nil {
					t.Fatal(err)
				}
				if st, err := topo.ServerTime(ctx, "n1"); err != nil || time.Until(st) < off/2 == (off > 0) {
					t.Fatalf("server clock not shifted by %v: %v %v", off, st, err)
				}
				c, err := topo.Client()
				if err != nil {
					t.Fatal(err)
				}
				h := &rtLog{}
				c.AddHook(h)
				f := prim.New(c).RateLimiters()
				for _, k := range limiterKinds {
					for window := firstWindow; ; window *= 4 {
						what := fmt.Sprintf("%s, server %v off, window %v", k.name, off, window)
						l := mustLimiter(t, k, f, fmt.Sprintf("%s:%v:%v", k.name, off, window), 4, window)
						h.take()
						var ds [5]prim.Decision
						start := time.Now()
						for i := range ds {
							d, err := l.Allow(ctx, 1)
							if err != nil {
								t.Fatalf("%s: call %d: %v", what, i, err)
							}
							ds[i] = d
						}
						took := time.Since(start)
						if took >= window/4 {
							_, _, args := h.take()
							checkArgs(t, k.name, args, 4, window)
							if window >= lastWindow {
								t.Fatalf("%s: five calls took %v, more than a token's refill (%v): a user notices", what, took, window/4)
							}
							t.Logf("%s: five calls took %v, more than a token's refill (%v); again with a longer window", what, took, window/4)
							continue
						}
						for i, d := range ds[:4] {
							if !d.Allowed || d.Remaining != int64(3-i) {
								t.Fatalf("%s: grant %d: %+v", what, i, d)
							}
						}
						d := ds[4]
						if d.Allowed || !d.HasRetryAfter || d.RetryAfter <= 0 || d.RetryAfter > window+window/10+time.Millisecond {
							t.Fatalf("%s: refusal %+v (the five calls took %v)", what, d, took)
						}
						time.Sleep(d.RetryAfter)
						if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
							t.Fatalf("%s: after RetryAfter: %+v, %v", what, d, err)
						}
						_, _, args := h.take()
						checkArgs(t, k.name, args, 4, window)
						break
					}
				}
				c.Close()
			}
		})
	}
}

// checkArgs asserts that every decision command carries only n and the
// configuration: no timestamp of any unit.
func checkArgs(t *testing.T, kind string, cmds [][]any, limit int64, window time.Duration) {
	t.Helper()
	checked := 0
	defer func() {
		if checked == 0 {
			t.Errorf("%s: no decision command seen in %v", kind, cmds)
		}
	}()
	ms := window.Milliseconds()
	for _, a := range cmds {
		name := strings.ToLower(fmt.Sprint(a[0]))
		var vals []any
		switch name {
		case "evalsha", "eval":
			vals = a[4:] // name, script, numkeys, key
		case "increx":
			vals = a[2:]
		default:
			continue
		}
		checked++
		got := fmt.Sprint(vals...)
		var want []string
		for _, n := range []int64{0, 1, 2, 3, 4, 5} {
			switch {
			case name == "increx":
				want = append(want, fmt.Sprint("byint", n, "ubound", limit, "px", ms, "enx"))
			case kind == "fixed":
				want = append(want, fmt.Sprint(n, limit, ms))
			case kind == "sliding":
				want = append(want, fmt.Sprint(n, limit, ms, ms/10))
			case kind == "bucket":
				want = append(want, fmt.Sprint(n, limit, limit, ms))
			}
		}
		if !slices.Contains(want, got) {
			t.Errorf("%s sent %v; want n and the configuration only", kind, a)
		}
		now := time.Now()
		for _, v := range vals {
			x, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
			if err != nil {
				continue
			}
			for _, unit := range []int64{now.Unix(), now.UnixMilli(), now.UnixMicro(), now.UnixNano()} {
				if x > unit/2 && x < unit*2 {
					t.Errorf("%s sent %v: %d looks like a timestamp", kind, a, x)
				}
			}
		}
	}
}

// grantSpan is one grant as the client saw it: the server decided somewhere
// between sent and recv.
type grantSpan struct {
	sent, recv time.Time
	n          int64
}

// maxIn is the most permits granted within one span shorter than L that the
// evidence proves: grants whose [sent, recv] all lie in [s, s+L) for some s
// happened, on any clock that runs at the rate of ours, within less than L.
// (Conservative: latency only hides grants from it.) gs is sorted by sent.
func maxIn(gs []grantSpan, L time.Duration) (most int64, at int) {
	for i := range gs {
		end := gs[i].sent.Add(L)
		var sum int64
		for j := i; j < len(gs) && gs[j].sent.Before(end); j++ {
			if gs[j].recv.Before(end) {
				sum += gs[j].n
			}
		}
		if sum > most {
			most, at = sum, i
		}
	}
	return most, at
}

// 8 goroutines over two Coordinators (two clients) hammer one key for five
// windows; the grants never exceed the algorithm's bound (DESIGN.md
// "Checkers"): fixed ≤ 2·limit in any span < window, sliding ≤ limit in any
// span < window, bucket ≤ limit + rate·span/period.
func TestRateLimitBound(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		const limit, window = 20, 300 * time.Millisecond
		ctx := ctxT(t, time.Minute)
		key := e.k(k.name + ":bound")
		var lims [2]*prim.Limiter
		for i := range lims {
			c, _ := e.client(t)
			lims[i] = mustLimiter(t, k, prim.New(c).RateLimiters(), key, limit, window)
		}
		var (
			mu      sync.Mutex
			grants  []grantSpan
			refused atomic.Int64
		)
		stop := time.Now().Add(5 * window)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				l := lims[g%2]
				for i := 0; i < 20000 && time.Now().Before(stop); i++ {
					n := int64(1 + (i+g)%3)
					sent := time.Now()
					d, err := l.Allow(ctx, n)
					recv := time.Now()
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						refused.Add(1)
						if !d.HasRetryAfter || d.RetryAfter < 0 || d.RetryAfter > window+window/10+time.Millisecond {
							t.Errorf("refusal %+v", d)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					grants = append(grants, grantSpan{sent, recv, n})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.SortFunc(grants, func(a, b grantSpan) int { return a.sent.Compare(b.sent) })
		var total int64
		for _, g := range grants {
			total += g.n
		}
		t.Logf("%d permits in %d grants, %d refusals", total, len(grants), refused.Load())
		if total < 2*limit || refused.Load() == 0 {
			t.Fatalf("%d permits granted, %d refused in five windows: the hammering proves nothing", total, refused.Load())
		}
		check := func(L time.Duration, bound int64) {
			if most, at := maxIn(grants, L); most > bound {
				t.Errorf("%d permits granted within %v from %v (bound %d)", most, L, grants[at].sent.Format("15:04:05.000"), bound)
			}
		}
		switch k.name {
		case "fixed":
			check(window, 2*limit)
		case "sliding":
			check(window, limit)
		case "bucket":
			for _, L := range []time.Duration{window / 10, window / 4, window / 2, window, 2 * window} {
				check(L, limit+int64(float64(limit)*float64(L)/float64(window)))
			}
		}
	})
}

// RetryAfter is honest: a lone retry clearly before it fails, one after it
// succeeds.
//
// The server counts RetryAfter from its refusal, and the window (fixed,
// sliding) or the token's refill (bucket) from the first grant; the client's
// clock bounds both instants: the refusal was decided between sending it and
// its reply, and at most took (from before the first call to after the
// refusal) after the first grant. So RetryAfter is at least the window (the
// refill) less took, and a retry whose reply came before the refusal was
// sent plus RetryAfter was decided before RetryAfter ran out. An attempt
// whose calls took half the window (the refill) or more, or whose early
// retry came back too late, proves nothing and is made again with a window
// twice as long, up to 4s: round trips slower than that on a local server
// are what a user notices, and fail.
func TestRateLimitRetryAfter(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		const limit, firstWindow, lastWindow = 3, time.Second, 4 * time.Second
		ctx := ctxT(t, 2*time.Minute)
		c, _ := e.client(t)
		f := prim.New(c).RateLimiters()
		for window := firstWindow; ; window *= 2 {
			again := func(format string, args ...any) {
				t.Helper()
				what := fmt.Sprintf("window %v: ", window) + fmt.Sprintf(format, args...)
				if window >= lastWindow {
					t.Fatalf("%s: a user notices", what)
				}
				t.Logf("%s; again with a longer window", what)
			}
			l := mustLimiter(t, k, f, e.k(fmt.Sprintf("%s:retry:%v", k.name, window)), limit, window)
			start := time.Now()
			for i := range limit {
				if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("window %v: grant %d: %+v, %v", window, i, d, err)
				}
			}
			sent := time.Now()
			d, err := l.Allow(ctx, 1)
			got := time.Now()
			took := got.Sub(start)
			// fixed: the rest of the window; sliding: the window and up to
			// a segment (rounded forward); bucket: one token's refill,
			// window/limit.
			base, hi := window, window+window/10+time.Millisecond
			if k.name == "bucket" {
				base, hi = window/limit, window/limit+time.Millisecond
			}
			if took >= base/2 {
				again("four calls took %v, half of %v or more", took, base)
				continue
			}
			if err != nil || d.Allowed || !d.HasRetryAfter {
				t.Fatalf("window %v: refusal: %+v, %v", window, d, err)
			}
			r := d.RetryAfter
			if lo := base - took - time.Millisecond; r < lo || r > hi {
				t.Fatalf("window %v: RetryAfter %v, want within [%v, %v] (the calls took %v)", window, r, lo, hi, took)
			}
			time.Sleep(time.Until(got.Add(r / 2)))
			d, err = l.Allow(ctx, 1)
			if back := time.Since(sent); back >= r {
				again("the retry at half the RetryAfter %v came back %v after the refusal was sent", r, back)
				continue
			}
			if err != nil || d.Allowed || !d.HasRetryAfter || d.RetryAfter > r {
				t.Fatalf("window %v: retry at half the RetryAfter %v: %+v, %v; want refused with a shorter RetryAfter", window, r, d, err)
			}
			time.Sleep(time.Until(got.Add(r)))
			if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
				t.Fatalf("window %v: retry after RetryAfter %v: %+v, %v; want granted", window, r, d, err)
			}
			return
		}
	})
}

// The script's own repair of a fixed-window counter without expiry (a full
// counter would otherwise deny forever): a request gives it a window; n == 0
// reports that window and writes nothing.
func TestRateLimitFixedPersistedCounter(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		key := e.k("persisted")
		l, err := prim.New(c).RateLimiters().FixedWindow(key, 3, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.admin.Set(ctx, key, "3", 0)
		before := snapshot(ctx, e.admin, key)
		d, err := l.Allow(ctx, 0)
		if err != nil || d.Allowed || !d.HasRetryAfter || d.RetryAfter != 5*time.Second+time.Millisecond {
			t.Fatalf("n == 0 on a full counter without expiry: %+v, %v", d, err)
		}
		if after := snapshot(ctx, e.admin, key); after != before {
			t.Fatalf("n == 0 wrote:\n%s\n%s", before, after)
		}
		d, err = l.Allow(ctx, 1)
		if err != nil || d.Allowed || !d.HasRetryAfter || d.RetryAfter < 4*time.Second || d.RetryAfter > 5*time.Second+time.Millisecond {
			t.Fatalf("n == 1 on a full counter without expiry: %+v, %v", d, err)
		}
		if p := e.admin.PTTL(ctx, key).Val(); p <= 4*time.Second {
			t.Fatalf("not repaired: PTTL %v", p)
		}
		if v := e.admin.Get(ctx, key).Val(); v != "3" {
			t.Fatalf("counter %q", v)
		}
	})
}

// Uncertain outcomes, with go-redis's default options: a decision whose reply
// is lost when ctx ends is ErrUncertain, and its permit was consumed; a reply
// lost and then resent (go-redis's MaxRetries) consumes twice for one grant:
// over-consumption, never over-admission.
func TestRateLimitUncertain(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, e *env, k limiterKind) {
		ctx := ctxT(t, time.Minute)
		c, cut := defaultClient(t, e)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		f := prim.New(c).RateLimiters()
		// The script cached on the server, and for the fixed window the node
		// recorded as lacking INCREX, so the faults hit the script.
		if _, err := mustLimiter(t, k, f, e.k(k.name+":warm"), 5, time.Minute).Allow(ctx, 1); err != nil {
			t.Fatal(err)
		}
		remaining := func(l *prim.Limiter, want int64) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				d, err := l.Allow(ctx, 0)
				if err == nil && d.Remaining == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("remaining %+v, %v; want %d", d, err, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		t.Run("reply lost at ctx end", func(t *testing.T) {
			l := mustLimiter(t, k, f, e.k(k.name+":lost"), 5, time.Minute)
			if err := link.LoseReplies(); err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			start := time.Now()
			d, err := l.Allow(actx, 1)
			cancel()
			if took := time.Since(start); took > time.Second {
				t.Errorf("Allow returned %v after its 100ms deadline", took)
			}
			if err := link.Heal(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(err, prim.ErrUncertain) || d.Allowed {
				t.Fatalf("reply lost: %+v, %v; want ErrUncertain", d, err)
			}
			remaining(l, 4) // consumed, though not reported granted
		})

		t.Run("reply lost and resent", func(t *testing.T) {
			l := mustLimiter(t, k, f, e.k(k.name+":resent"), 5, time.Minute)
			before := cmdCalls(ctx, e.admin, "evalsha", "eval")
			loseOneReply(t, cut, link)
			d, err := l.Allow(ctx, 1)
			if runs := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; runs < 2 {
				t.Fatalf("the server ran the script %d times: nothing was resent, the test proves nothing", runs)
			}
			if err != nil || !d.Allowed {
				t.Fatalf("resent decision: %+v, %v; want the resend's grant", d, err)
			}
			remaining(l, 3) // one grant, two permits consumed
		})

		// The lost attempt took the only permit, so the resend is denied:
		// the request may have been granted, and a definite "denied, retry
		// after" would be a wrong answer (issue 31, item 5b).
		t.Run("reply lost and resend denied", func(t *testing.T) {
			l := mustLimiter(t, k, f, e.k(k.name+":denied"), 1, time.Minute)
			before := cmdCalls(ctx, e.admin, "evalsha", "eval")
			loseOneReply(t, cut, link)
			d, err := l.Allow(ctx, 1)
			if runs := cmdCalls(ctx, e.admin, "evalsha", "eval") - before; runs < 2 {
				t.Fatalf("the server ran the script %d times: nothing was resent, the test proves nothing", runs)
			}
			if !errors.Is(err, prim.ErrUncertain) || d.Allowed || d.HasRetryAfter {
				t.Fatalf("resend denied after a lost reply: %+v, %v; want ErrUncertain (the lost attempt may have granted)", d, err)
			}
			remaining(l, 0)
		})

		// A 0-permit peek consumes nothing: a denied resend after a lost
		// reply is the answer, not ErrUncertain (review).
		t.Run("peek with reply lost and resend denied", func(t *testing.T) {
			l := mustLimiter(t, k, f, e.k(k.name+":peek"), 1, time.Minute)
			if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
				t.Fatalf("the one permit: %+v, %v", d, err)
			}
			loseOneReply(t, cut, link)
			if d, err := l.Allow(ctx, 0); err != nil || d.Allowed {
				t.Fatalf("a peek after a lost reply: %+v, %v; want a definite denial", d, err)
			}
		})
	})
}

// On a Cluster, each limiter's one key is on one slot: every algorithm works,
// through a prefixed view too, on keys spread over the slots.
func TestRateLimitCluster(t *testing.T) {
	forEachCluster(t, func(t *testing.T, ctx context.Context, c redis.UniversalClient) {
		defer c.Close()
		co := prim.New(c)
		for _, f := range []*prim.RateLimiters{co.RateLimiters(), co.WithPrefix("{app}:").RateLimiters()} {
			for _, k := range limiterKinds {
				for i := range 4 {
					key := fmt.Sprintf("%s:%d", k.name, i)
					l := mustLimiter(t, k, f, key, 2, 10*time.Second)
					for j := range 2 {
						if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed || d.Remaining != int64(1-j) {
							t.Fatalf("%s: grant %d: %+v, %v", l.Key(), j, d, err)
						}
					}
					if d, err := l.Allow(ctx, 1); err != nil || d.Allowed || !d.HasRetryAfter {
						t.Fatalf("%s: refusal: %+v, %v", l.Key(), d, err)
					}
					if d, err := l.Allow(ctx, 0); err != nil || d.Allowed {
						t.Fatalf("%s: n == 0: %+v, %v", l.Key(), d, err)
					}
					if n, err := c.Exists(ctx, l.Key()).Result(); err != nil || n != 1 {
						t.Fatalf("%s: exists %d, %v", l.Key(), n, err)
					}
				}
			}
		}
	})
}

// The bucket's key outlives its time to full across many writes, whether or
// not a write moved the expiry (the script re-sets it only when the deadline,
// rounded to the second, moves): checked after every grant of a bucket that
// refills slowly (10 tokens per 4s) and is drained over seconds.
func TestRateLimitBucketExpiry(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, _ := e.client(t)
		key := e.k("bucket")
		l, err := prim.New(c).RateLimiters().TokenBucket(key, 10, 10, 4*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		grants := 0
		for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			d, err := l.Allow(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				continue
			}
			grants++
			p := e.admin.PTTL(ctx, key).Val()
			if p < d.Reset {
				t.Fatalf("grant %d: the key expires in %v, before the bucket is full again (%v)", grants, p, d.Reset)
			}
			if p > d.Reset+2*time.Second+time.Millisecond {
				t.Fatalf("grant %d: the key expires in %v, more than 2s after the bucket is full again (%v)", grants, p, d.Reset)
			}
		}
		if grants < 12 {
			t.Fatalf("%d grants: the bucket was not drained and refilled", grants)
		}
	})
}

// A bucket on a server whose clock went back (a restart with the clock 3s
// behind; the state kept by the append-only file) refills nothing until the
// clock is past the stored time again, and its RetryAfter counts that wait:
// a retry clearly before it fails, one after it succeeds.
func TestRateLimitBucketClockBack(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			topo := testbed.Standalone(t, b)
			if err := topo.Restart(ctx, "n1", testbed.WithAOFOnRestart(true)); err != nil {
				t.Fatal(err)
			}
			c, err := topo.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := prim.New(c).RateLimiters().TokenBucket("bucket", 2, 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := l.Allow(ctx, 2); err != nil || !d.Allowed {
				t.Fatalf("draining the bucket: %+v, %v", d, err)
			}
			if err := topo.Restart(ctx, "n1", testbed.WithClockOffset(-3*time.Second)); err != nil {
				t.Fatal(err)
			}
			var d prim.Decision
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if d, err = l.Allow(ctx, 1); err == nil || time.Now().After(deadline) {
					break
				}
			}
			got := time.Now()
			if err != nil || d.Allowed || !d.HasRetryAfter {
				t.Fatalf("after the clock went back 3s: %+v, %v; want refused (the state kept)", d, err)
			}
			// 3s behind, less the restart's time, plus half a second's refill.
			if d.RetryAfter < time.Second || d.RetryAfter > 3500*time.Millisecond+time.Millisecond {
				t.Fatalf("RetryAfter %v; want the clock's lag and the refill", d.RetryAfter)
			}
			r := d.RetryAfter
			time.Sleep(time.Until(got.Add(r - 400*time.Millisecond)))
			if d, err := l.Allow(ctx, 1); err != nil || d.Allowed {
				t.Fatalf("400ms before RetryAfter %v: %+v, %v; want refused", r, d, err)
			}
			time.Sleep(time.Until(got.Add(r)))
			if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
				t.Fatalf("after RetryAfter %v: %+v, %v; want granted", r, d, err)
			}
		})
	}
}
