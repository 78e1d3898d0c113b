package mutants

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Rate limiter mutants, run by the ratelimit scenarios of their algorithm
// (scenarios.LimiterImpl): each breaks the bound the rate-limit checker holds
// the grants to.

func init() {
	scenarios.RegisterLimiterImpl(ClientClockLimiter{})
	scenarios.RegisterLimiterImpl(ReadThenWriteLimiter{})
	scenarios.RegisterLimiterImpl(SlidingWindow{Backward: true})
	scenarios.RegisterLimiterImpl(TokenBucket{ClientClock: true})
	scenarios.RegisterLimiterImpl(TokenBucket{NoCap: true})
	scenarios.RegisterLimiterImpl(NeverRefillsLimiter{})
}

// TokenBucket is a token bucket in one script: a hash holding the tokens
// left and the time of the last refill, refilled continuously at rate per
// period. With neither flag it is correct (the reference the mutants
// derive from, on the server's TIME, capped at the burst). ClientClock: the
// time is the caller's clock, sent as an argument, and every request writes
// it back: the workload skews the processes' clocks (up to three quarters
// of a period apart), so a process ahead of the last writer refills the
// skew again and again, and the bucket breaks its bound. NoCap: the refill
// is not capped at the burst, so an idle bucket fills past it and then
// grants more than burst + rate·span at once (the bursts scenario's idle
// gaps show it).
type TokenBucket struct{ ClientClock, NoCap bool }

// Name implements scenarios.LimiterImpl.
func (b TokenBucket) Name() string {
	switch {
	case b.ClientClock:
		return "mutant-bucket-client-clock"
	case b.NoCap:
		return "mutant-bucket-no-cap"
	}
	return "reference-bucket"
}

// Algos implements scenarios.LimiterImpl.
func (TokenBucket) Algos() []string { return []string{history.AlgoBucket} }

// New implements scenarios.LimiterImpl.
func (b TokenBucket) New(c redis.UniversalClient, key string, cfg scenarios.LimitConfig, clock func() time.Time) (scenarios.Limiter, error) {
	return bucketLimiter{c: c, key: key, cfg: cfg, clock: clock, mode: b}, nil
}

type bucketLimiter struct {
	c     redis.UniversalClient
	key   string
	cfg   scenarios.LimitConfig
	clock func() time.Time
	mode  TokenBucket
}

// bucketScript: ARGV burst, rate, period ms, n, now µs (−1: the server's
// TIME), cap (1: cap the refill at the burst).
var bucketScript = redis.NewScript(`
local burst, rate, period, n, now, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(s[1]), tonumber(s[2])
if not tokens then tokens, ts = burst, now end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = tokens + elapsed * rate / (period * 1000)
if cap and tokens > burst then tokens = burst end
local ok = 0
if tokens >= n then
  tokens = tokens - n
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], 60000)
return ok`)

func (l bucketLimiter) Allow(ctx context.Context, n int64) (bool, error) {
	now := int64(-1)
	if l.mode.ClientClock {
		now = l.clock().UnixMicro()
	}
	capped := "1"
	if l.mode.NoCap {
		capped = "0"
	}
	v, err := bucketScript.Run(ctx, l.c, []string{l.key}, l.cfg.Burst, l.cfg.Rate, l.cfg.Period.Milliseconds(), n, now, capped).Int64()
	return v == 1, err
}

// NeverRefillsLimiter is a fixed window whose counter never expires: it
// grants its limit once and denies every request after that, whatever
// time has passed. It never over-admits; the rate-limit checker's
// availability rule catches it (wrongly-limited: a denial with no grant to
// anyone within two windows before it).
type NeverRefillsLimiter struct{}

// Name implements scenarios.LimiterImpl.
func (NeverRefillsLimiter) Name() string { return "mutant-limiter-never-refills" }

// Algos implements scenarios.LimiterImpl.
func (NeverRefillsLimiter) Algos() []string { return []string{history.AlgoFixed} }

// New implements scenarios.LimiterImpl.
func (NeverRefillsLimiter) New(c redis.UniversalClient, key string, cfg scenarios.LimitConfig, _ func() time.Time) (scenarios.Limiter, error) {
	return neverRefills{c: c, key: key, cfg: cfg}, nil
}

type neverRefills struct {
	c   redis.UniversalClient
	key string
	cfg scenarios.LimitConfig
}

var neverRefillsScript = redis.NewScript(`
local limit, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c + n > limit then return 0 end
redis.call('INCRBY', KEYS[1], n)
return 1`)

func (l neverRefills) Allow(ctx context.Context, n int64) (bool, error) {
	v, err := neverRefillsScript.Run(ctx, l.c, []string{l.key}, l.cfg.Limit, n).Int64()
	return v == 1, err
}

// ClientClockLimiter is a fixed window whose window number comes from the
// caller's clock (ARGV), not the server's TIME: the workload skews every
// process's clock (up to three quarters of a window apart), so processes
// disagree on the window, and each one that writes its window number resets
// the count. It breaks the fixed window's bound. (The Limiter type above,
// with ClientTime off, is the same script on the server's clock.)
type ClientClockLimiter struct{}

// Name implements scenarios.LimiterImpl.
func (ClientClockLimiter) Name() string { return "mutant-limiter-client-clock" }

// Algos implements scenarios.LimiterImpl.
func (ClientClockLimiter) Algos() []string { return []string{history.AlgoFixed} }

// New implements scenarios.LimiterImpl.
func (ClientClockLimiter) New(c redis.UniversalClient, key string, cfg scenarios.LimitConfig, clock func() time.Time) (scenarios.Limiter, error) {
	return clientClock{c: c, key: key, cfg: cfg, clock: clock}, nil
}

type clientClock struct {
	c     redis.UniversalClient
	key   string
	cfg   scenarios.LimitConfig
	clock func() time.Time
}

// fixedWindowN is fixedWindow for n permits.
var fixedWindowN = redis.NewScript(`
local limit, w, wid, n = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local cur = redis.call('GET', KEYS[1])
local c = 0
if cur then
  local id, v = string.match(cur, '^(%d+):(%d+)$')
  if id == wid then c = tonumber(v) end
end
if c + n > limit then return 0 end
redis.call('SET', KEYS[1], wid .. ':' .. (c + n), 'PX', 2 * w)
return 1`)

func (l clientClock) Allow(ctx context.Context, n int64) (bool, error) {
	w := l.cfg.Window.Milliseconds()
	wid := strconv.FormatInt(l.clock().UnixMilli()/w, 10)
	v, err := fixedWindowN.Run(ctx, l.c, []string{l.key}, l.cfg.Limit, w, wid, n).Int64()
	return v == 1, err
}

// ReadThenWriteLimiter is a fixed window in two commands: GET the count,
// then, if the permits fit, SET the count plus n (PX window when it creates
// the key, KEEPTTL after). Concurrent requests read the same count and
// overwrite each other's increments: the window admits more than its limit.
type ReadThenWriteLimiter struct{}

// Name implements scenarios.LimiterImpl.
func (ReadThenWriteLimiter) Name() string { return "mutant-limiter-read-then-write" }

// Algos implements scenarios.LimiterImpl.
func (ReadThenWriteLimiter) Algos() []string { return []string{history.AlgoFixed} }

// New implements scenarios.LimiterImpl.
func (ReadThenWriteLimiter) New(c redis.UniversalClient, key string, cfg scenarios.LimitConfig, _ func() time.Time) (scenarios.Limiter, error) {
	return readThenWrite{c: c, key: key, cfg: cfg}, nil
}

type readThenWrite struct {
	c   redis.UniversalClient
	key string
	cfg scenarios.LimitConfig
}

func (l readThenWrite) Allow(ctx context.Context, n int64) (bool, error) {
	cur, err := l.c.Get(ctx, l.key).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		cur = 0
	case err != nil:
		return false, err
	}
	if cur+n > l.cfg.Limit {
		return false, nil
	}
	ttl := time.Duration(redis.KeepTTL)
	if cur == 0 {
		ttl = l.cfg.Window
	}
	if err := l.c.Set(ctx, l.key, cur+n, ttl).Err(); err != nil {
		return false, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	}
	return true, nil
}

// SlidingWindow is a sliding window on the server's TIME: one hash per
// limiter, one field per segment holding its permits. Each permit is stamped
// with its segment's end (Backward false: the correct rounding, prim's; a
// permit counts for at least a whole window) or its start (Backward true:
// the mutant; a permit stops counting up to one segment early, so more than
// the limit is granted within less than a window).
type SlidingWindow struct{ Backward bool }

// Name implements scenarios.LimiterImpl.
func (s SlidingWindow) Name() string {
	if s.Backward {
		return "mutant-sliding-rounds-backward"
	}
	return "reference-sliding-rounds-forward"
}

// Algos implements scenarios.LimiterImpl.
func (SlidingWindow) Algos() []string { return []string{history.AlgoSliding} }

// New implements scenarios.LimiterImpl.
func (s SlidingWindow) New(c redis.UniversalClient, key string, cfg scenarios.LimitConfig, _ func() time.Time) (scenarios.Limiter, error) {
	return slidingLimiter{c: c, key: key, cfg: cfg, backward: s.Backward}, nil
}

type slidingLimiter struct {
	c        redis.UniversalClient
	key      string
	cfg      scenarios.LimitConfig
	backward bool
}

var slidingScript = redis.NewScript(`
local limit, w, seg, n, back = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #h, 2 do
  if tonumber(h[i]) + w <= now then
    redis.call('HDEL', KEYS[1], h[i])
  else
    total = total + tonumber(h[i + 1])
  end
end
if total + n > limit then return 0 end
local stamp = math.floor(now / seg) * seg
if not back then stamp = stamp + seg end
redis.call('HINCRBY', KEYS[1], tostring(stamp), n)
redis.call('PEXPIRE', KEYS[1], w + seg)
return 1`)

func (l slidingLimiter) Allow(ctx context.Context, n int64) (bool, error) {
	w := l.cfg.Window.Milliseconds()
	back := "0"
	if l.backward {
		back = "1"
	}
	v, err := slidingScript.Run(ctx, l.c, []string{l.key}, l.cfg.Limit, w, w/l.cfg.Segments, n, back).Int64()
	return v == 1, err
}

// Wait implements scenarios.LimiterWaiter by polling (the correct window and
// the mutant alike): Allow every tenth of a segment until granted or ctx
// ends, which is a refusal. It lets the workload's allow_wait path run on an
// implementation other than prim.
func (l slidingLimiter) Wait(ctx context.Context, n int64) (bool, error) {
	step := l.cfg.Window / time.Duration(l.cfg.Segments) / 10
	for {
		ok, err := l.Allow(ctx, n)
		if ok || err != nil {
			return ok, err
		}
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}
