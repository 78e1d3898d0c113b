package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/internal/knobs"
)

// ---- the fixed window's INCREX fast path ----------------------------------------

// increxStandIn answers the INCREX command for a client of a real server.
//
// This is the one place in prim's tests where a stand-in is acceptable (issue
// 17 allows it, and says why): INCREX is Redis 8.8+ / Valkey 9.2+, no build
// of the matrix has it (they answer "ERR unknown command 'INCREX'"), and prim's
// handling of its reply — a grant, a refusal whose RetryAfter comes from the
// PTTL in the same pipeline, a counter without expiry, an error reply, a lost
// reply — must be tested before such a server exists. The stand-in keeps as
// much real as it can: it runs an equivalent Lua emulation of INCREX key BYINT
// n UBOUND limit PX ms ENX (reply [new value, applied increment]; out of
// bounds: [current, 0], key and expiry untouched; ENX: the expiry only if the
// key has none) on the same real server, so the counter, its expiry and the
// PTTL that follows it in the pipeline are the server's. It checks the
// command's shape and answers anything else with a syntax error.
type increxStandIn struct {
	emu       *redis.Client // another client of the same server
	runs      atomic.Int64  // emulations run
	loseReply atomic.Bool   // run the emulation, then answer a lost reply
	expire    atomic.Bool   // run the emulation, then delete the counter (it expired before PTTL)
}

var increxEmulation = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local cur = 0
if v then
  cur = tonumber(v)
  if not cur or not string.match(v, '^%-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
  end
end
local by, ub = tonumber(ARGV[1]), tonumber(ARGV[2])
if cur + by > ub then
  return {cur, 0}
end
local nv = redis.call('INCRBY', KEYS[1], by)
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {nv, by}
`)

// errStandInLost is what the stand-in answers for a reply it "lost": not a
// server reply, so the outcome is unknown to the caller.
var errStandInLost = errors.New("read tcp: i/o timeout (stand-in: INCREX reply lost)")

func (s *increxStandIn) answer(ctx context.Context, cmd redis.Cmder) {
	a := cmd.Args()
	str := func(i int) string { return strings.ToLower(fmt.Sprint(a[i])) }
	sc, ok := cmd.(interface {
		SetVal([]any)
		SetErr(error)
	})
	if !ok {
		panic(fmt.Sprintf("stand-in: INCREX sent as %T, not a slice command", cmd))
	}
	if len(a) != 9 || str(2) != "byint" || str(4) != "ubound" || str(6) != "px" || str(8) != "enx" {
		sc.SetErr(redisError("ERR syntax error"))
		return
	}
	s.runs.Add(1)
	v, err := increxEmulation.Run(ctx, s.emu, []string{fmt.Sprint(a[1])}, a[3], a[5], a[7]).Slice()
	if s.expire.Load() {
		s.emu.Del(ctx, fmt.Sprint(a[1]))
	}
	switch {
	case s.loseReply.Load():
		sc.SetErr(errStandInLost)
	case err != nil:
		sc.SetErr(err)
	default:
		sc.SetVal(v)
	}
}

func (s *increxStandIn) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *increxStandIn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "increx" {
			s.answer(ctx, cmd)
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (s *increxStandIn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rest []redis.Cmder
		for _, c := range cmds {
			if c.Name() != "increx" {
				rest = append(rest, c)
				continue
			}
			s.answer(ctx, c)
			if errors.Is(c.Err(), errStandInLost) {
				// The connection is gone: nothing after it is answered.
				for _, r := range cmds {
					if r != c {
						r.SetErr(errStandInLost)
					}
				}
				return errStandInLost
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// The fast path's reply handling, against the stand-in: one round trip
// (INCREX and PTTL in one pipeline) per decision, grants and refusals with
// RetryAfter from the PTTL, n == 0 by the script, a counter without expiry
// repaired by the script in the same call, a malformed counter typed by the
// script, a lost reply ErrUncertain and never resent.
func TestRateLimitIncrexStandIn(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, log := rtClient(t, e)
		s := &increxStandIn{emu: e.admin}
		c.AddHook(s)
		f := prim.New(c).RateLimiters()
		const window = 2 * time.Second
		fixed := func(key string) *prim.Limiter {
			l, err := f.FixedWindow(e.k(key), 3, window)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		// The script cached on the server, so a fallback is one EVALSHA.
		if _, err := fixed("warm").Allow(ctx, 0); err != nil {
			t.Fatal(err)
		}
		log.take()
		expect := func(what string, trips int, names string) {
			t.Helper()
			gotTrips, gotNames, args := log.take()
			if gotTrips != trips || gotNames != names {
				t.Fatalf("%s: %d round trips (%s); want %d (%s)", what, gotTrips, gotNames, trips, names)
			}
			checkArgs(t, "fixed", args, 3, window)
		}

		l := fixed("fast")
		for i := int64(1); i <= 3; i++ {
			d, err := l.Allow(ctx, 1)
			if err != nil || !d.Allowed || d.Remaining != 3-i || d.Reset <= window/2 || d.Reset > window {
				t.Fatalf("grant %d: %+v, %v", i, d, err)
			}
			expect("a grant", 1, "increx pttl")
		}
		d, err := l.Allow(ctx, 1)
		if err != nil || d.Allowed || d.Remaining != 0 || !d.HasRetryAfter || d.RetryAfter <= window/2 || d.RetryAfter > window+time.Millisecond {
			t.Fatalf("refusal: %+v, %v", d, err)
		}
		expect("a refusal", 1, "increx pttl")
		if v := e.admin.Get(ctx, e.k("fast")).Val(); v != "3" {
			t.Fatalf("counter %q after three grants and a refusal", v)
		}
		if d, err := l.Allow(ctx, 0); err != nil || d.Allowed || !d.HasRetryAfter {
			t.Fatalf("n == 0: %+v, %v", d, err)
		}
		expect("n == 0", 1, "evalsha")
		if s.runs.Load() != 4 {
			t.Fatalf("INCREX ran %d times for four decisions", s.runs.Load())
		}

		// A full counter without expiry: INCREX refuses and leaves it so, PTTL
		// says -1, the script gives it a window in the same call.
		e.admin.Persist(ctx, e.k("fast"))
		d, err = l.Allow(ctx, 1)
		if err != nil || d.Allowed || !d.HasRetryAfter || d.RetryAfter <= window-window/4 || d.RetryAfter > window+time.Millisecond {
			t.Fatalf("refusal on a counter without expiry: %+v, %v", d, err)
		}
		expect("a counter without expiry", 2, "increx pttl evalsha")
		if p := e.admin.PTTL(ctx, e.k("fast")).Val(); p <= 0 {
			t.Fatalf("the counter without expiry was not repaired: PTTL %v", p)
		}

		// A full counter that expires between INCREX and PTTL (PTTL -2): the
		// refusal's RetryAfter is 1ms (a retry now succeeds), never 0, which
		// would read as "Retry-After: 0".
		gone := fixed("gone")
		if d, err := gone.Allow(ctx, 3); err != nil || !d.Allowed {
			t.Fatalf("filling: %+v, %v", d, err)
		}
		s.expire.Store(true)
		d, err = gone.Allow(ctx, 1)
		s.expire.Store(false)
		if err != nil || d.Allowed || !d.HasRetryAfter || d.RetryAfter != time.Millisecond {
			t.Fatalf("refusal with the counter gone before PTTL: %+v, %v; want RetryAfter 1ms", d, err)
		}
		log.take()

		// A counter without expiry, not full: ENX gives it the window.
		e.admin.Set(ctx, e.k("persisted"), "1", 0)
		if d, err := fixed("persisted").Allow(ctx, 1); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("grant on a counter without expiry: %+v, %v", d, err)
		}
		expect("ENX", 1, "increx pttl")
		if p := e.admin.PTTL(ctx, e.k("persisted")).Val(); p <= 0 {
			t.Fatalf("ENX did not give the counter an expiry: PTTL %v", p)
		}

		// INCREX's error reply (not an integer): it did not run; the script
		// types the state and leaves it.
		e.admin.Set(ctx, e.k("bad"), "abc", 0)
		if _, err := fixed("bad").Allow(ctx, 1); !errors.Is(err, prim.ErrLimiterState) {
			t.Fatalf("malformed counter: %v, want ErrLimiterState", err)
		}
		expect("a malformed counter", 2, "increx pttl evalsha")
		if v := e.admin.Get(ctx, e.k("bad")).Val(); v != "abc" {
			t.Fatalf("malformed counter changed to %q", v)
		}
		e.admin.HSet(ctx, e.k("hash"), "a", "1")
		if _, err := fixed("hash").Allow(ctx, 1); !errors.Is(err, prim.ErrWrongType) {
			t.Fatalf("a hash: %v, want ErrWrongType", err)
		}
		log.take()

		// A lost reply: ErrUncertain, the permit consumed, INCREX not resent.
		s.loseReply.Store(true)
		runs := s.runs.Load()
		_, err = fixed("lost").Allow(ctx, 1)
		s.loseReply.Store(false)
		if !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("lost INCREX reply: %v, want ErrUncertain", err)
		}
		if n := s.runs.Load() - runs; n != 1 {
			t.Fatalf("INCREX sent %d times; a lost reply must not be resent", n)
		}
		expect("a lost reply", 1, "increx pttl")
		if v := e.admin.Get(ctx, e.k("lost")).Val(); v != "1" {
			t.Fatalf("counter %q after the uncertain decision; want the permit consumed (1)", v)
		}
		// The node is still recorded as having INCREX: a lost reply is not
		// evidence.
		if _, err := fixed("lost").Allow(ctx, 1); err != nil {
			t.Fatal(err)
		}
		expect("after a lost reply", 1, "increx pttl")
	})
}

// After one "unknown command", every limiter of the Coordinator and of its
// prefixed views goes straight to the script on that node; five minutes later
// (the capability clock advanced) INCREX is tried again, once. Real servers:
// none of the matrix has INCREX.
func TestRateLimitIncrexProbeShared(t *testing.T) {
	defer knobs.AdvanceCapClock(0)()
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		if !strings.Contains(fmt.Sprint(e.admin.Do(ctx, "INCREX", e.k("probe"), "BYINT", 1).Err()), "unknown command") {
			t.Skip("this server has INCREX: TestRateLimitIncrexStandIn's checks apply to it as they are")
		}
		c, log := rtClient(t, e)
		co := prim.New(c)
		view := co.WithPrefix(e.ns + "view:")
		lim := func(co *prim.Coordinator, key string) *prim.Limiter {
			l, err := co.RateLimiters().FixedWindow(key, 5, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		a, b, v := lim(co, e.k("a")), lim(co, e.k("b")), lim(view, "c")
		if _, err := lim(co, e.k("warm")).Allow(ctx, 0); err != nil { // the script cached
			t.Fatal(err)
		}
		log.take()
		allow := func(l *prim.Limiter, wantTrips int, wantNames string) {
			t.Helper()
			if d, err := l.Allow(ctx, 1); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", l.Key(), d, err)
			}
			if trips, names, _ := log.take(); trips != wantTrips || names != wantNames {
				t.Fatalf("%s: %d round trips (%s); want %d (%s)", l.Key(), trips, names, wantTrips, wantNames)
			}
		}
		allow(a, 2, "increx pttl evalsha") // the probe: unknown command, the script in the same call
		allow(a, 1, "evalsha")
		allow(b, 1, "evalsha")
		allow(v, 1, "evalsha")                                      // the view shares the record
		allow(lim(prim.New(c), e.k("d")), 2, "increx pttl evalsha") // another Coordinator has its own
		knobs.AdvanceCapClock(5*time.Minute - 5*time.Second)
		allow(b, 1, "evalsha")
		knobs.AdvanceCapClock(10 * time.Second)
		allow(v, 2, "increx pttl evalsha") // five minutes on: probed again, once
		allow(a, 1, "evalsha")
		allow(b, 1, "evalsha")
		for key, want := range map[string]string{e.k("a"): "3", e.k("b"): "3", e.ns + "view:c": "2"} {
			if got := e.admin.Get(ctx, key).Val(); got != want {
				t.Fatalf("%s holds %q, want %s", key, got, want)
			}
			if e.admin.PTTL(ctx, key).Val() <= 0 {
				t.Fatalf("%s has no expiry", key)
			}
		}
	})
}
