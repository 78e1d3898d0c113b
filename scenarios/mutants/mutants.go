// Package mutants holds deliberately broken implementations of coordination
// primitives, each beside the correct one it breaks. Its tests run both against
// a real server, record histories and require the checkers of package models to
// flag every mutant and pass every correct implementation: a checker that
// cannot fail is worse than none.
package mutants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

func init() {
	scenarios.RegisterImpl(ReleaseWithoutOwnerCheck{})
	scenarios.RegisterImpl(ResourceIgnoresTokens{})
	scenarios.RegisterImpl(ReleaseClaimsReleased{})
	scenarios.RegisterImpl(RenewWithoutOwnerCheck{})
	scenarios.RegisterImpl(TokenNotIncrementedAfterExpiry{})
	scenarios.RegisterImpl(AcquireNotIdempotent{})
}

// The mutants keep their lease where prim does ("{key}:lease"), for the
// state sampler.

// LeaseKey implements scenarios.LeaseKeyer.
func (ReleaseClaimsReleased) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// LeaseKey implements scenarios.LeaseKeyer.
func (RenewWithoutOwnerCheck) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// LeaseKey implements scenarios.LeaseKeyer.
func (TokenNotIncrementedAfterExpiry) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// LeaseKey implements scenarios.LeaseKeyer.
func (ReleaseWithoutOwnerCheck) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// LeaseKey implements scenarios.LeaseKeyer.
func (ResourceIgnoresTokens) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// AcquireNotIdempotent is prim's fenced lock with the replayed-script bug
// of prim's second pass: its acquisition script does not recognise its own
// owner. go-redis resends a script whose reply was lost (MaxRetries 3 by
// default); the resend finds the lease held, by the first run, and answers
// "not acquired", so the client records fail while the lease holds its
// owner until it expires (a phantom owner).
type AcquireNotIdempotent struct{}

// Name implements scenarios.LockImpl.
func (AcquireNotIdempotent) Name() string { return "mutant-acquire-not-idempotent" }

// Fenced implements scenarios.LockImpl.
func (AcquireNotIdempotent) Fenced() bool { return true }

// LeaseKey implements scenarios.LeaseKeyer.
func (AcquireNotIdempotent) LeaseKey(key string) string { return scenarios.PrimLeaseKey(key) }

// The lease holds "<owner>:<token>", as prim's does; no resend branch.
var replayedAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`)

// ownerRelease deletes the lease only for its owner: 1 released, 0 no
// lease, -1 another owner's.
var ownerRelease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v == false then return 0 end
return -1`)

// TryAcquire implements scenarios.LockImpl.
func (AcquireNotIdempotent) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	lease, fence := scenarios.PrimLeaseKey(key), "{"+key+"}:fence"
	var b [16]byte
	_, _ = rand.Read(b[:])
	owner := hex.EncodeToString(b[:])
	tok, err := replayedAcquire.Run(ctx, c, []string{lease, fence}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	}
	if tok == 0 {
		return nil, scenarios.ErrContended // the bug, after a resend: this owner's own lease
	}
	return &ownerHeld{c: c, lease: lease, owner: owner + ":" + strconv.FormatInt(tok, 10), token: tok}, nil
}

type ownerHeld struct {
	c            redis.UniversalClient
	lease, owner string
	token        int64
}

func (h *ownerHeld) Token() int64  { return h.token }
func (h *ownerHeld) Owner() string { return h.owner }
func (h *ownerHeld) Release(ctx context.Context) (string, error) {
	n, err := ownerRelease.Run(ctx, h.c, []string{h.lease}, h.owner).Int64()
	switch {
	case err != nil:
		return "", err
	case n == 1:
		return history.ValueReleased, nil
	case n == 0:
		return history.ValueAlreadyReleased, nil
	}
	return history.ValueNotOwned, nil
}

// primAcquire is prim's own fenced lock, for the mutants that break one
// operation of it.
func primAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	p, _ := scenarios.NewImpl("prim")
	return p.TryAcquire(ctx, c, key, ttl)
}

// ReleaseClaimsReleased is prim's lock whose release always answers
// "released", whatever the server found: a holder whose lease expired, or
// was taken over, is told it released it.
type ReleaseClaimsReleased struct{}

// Name implements scenarios.LockImpl.
func (ReleaseClaimsReleased) Name() string { return "mutant-release-claims-released" }

// Fenced implements scenarios.LockImpl.
func (ReleaseClaimsReleased) Fenced() bool { return true }

// TryAcquire implements scenarios.LockImpl.
func (ReleaseClaimsReleased) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	h, err := primAcquire(ctx, c, key, ttl)
	if err != nil {
		return nil, err
	}
	return claimsReleased{h}, nil
}

type claimsReleased struct{ scenarios.Held }

func (h claimsReleased) Release(ctx context.Context) (string, error) {
	if _, err := h.Held.Release(ctx); err != nil {
		return "", err
	}
	return history.ValueReleased, nil // the bug: whatever the server answered
}

// RenewWithoutOwnerCheck is prim's lock whose renewal extends the lease key
// whoever holds it (PEXPIRE): a holder that outlived its lease extends, and
// believes it still holds, its successor's.
type RenewWithoutOwnerCheck struct{}

// Name implements scenarios.LockImpl.
func (RenewWithoutOwnerCheck) Name() string { return "mutant-renew-without-owner-check" }

// Fenced implements scenarios.LockImpl.
func (RenewWithoutOwnerCheck) Fenced() bool { return true }

// TryAcquire implements scenarios.LockImpl.
func (RenewWithoutOwnerCheck) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	h, err := primAcquire(ctx, c, key, ttl)
	if err != nil {
		return nil, err
	}
	return &blindRenew{Held: h, c: c, lease: scenarios.PrimLock(h).LeaseKey()}, nil
}

type blindRenew struct {
	scenarios.Held
	c     redis.UniversalClient
	lease string
}

func (h *blindRenew) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return h.c.PExpire(ctx, h.lease, ttl).Result() // the bug: no owner check
}

func (h *blindRenew) Verify(ctx context.Context) (bool, error) {
	return h.Held.(scenarios.Renewer).Verify(ctx)
}

// TokenNotIncrementedAfterExpiry is a fenced lock whose counter advances only
// when the previous holder released: after a lease expired, the next owner
// gets the expired holder's token again.
type TokenNotIncrementedAfterExpiry struct{}

// Name implements scenarios.LockImpl.
func (TokenNotIncrementedAfterExpiry) Name() string {
	return "mutant-token-not-incremented-after-expiry"
}

// Fenced implements scenarios.LockImpl.
func (TokenNotIncrementedAfterExpiry) Fenced() bool { return true }

// The counter key holds the last token; KEYS[3] marks a release since.
var lazyAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local tok
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('DEL', KEYS[3]) == 1 then
  tok = redis.call('INCR', KEYS[2])
else
  tok = tonumber(redis.call('GET', KEYS[2]))
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return tok`)

var lazyRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1')
return 1`)

// TryAcquire implements scenarios.LockImpl.
func (TokenNotIncrementedAfterExpiry) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	lease, fence, released := "{"+key+"}:lease", "{"+key+"}:fence", "{"+key+"}:released"
	owner := strconv.FormatInt(time.Now().UnixNano(), 36)
	tok, err := lazyAcquire.Run(ctx, c, []string{lease, fence, released}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	}
	if tok == 0 {
		return nil, scenarios.ErrContended
	}
	return &lazyHeld{c: c, lease: lease, released: released, owner: owner, token: tok}, nil
}

type lazyHeld struct {
	c                      redis.UniversalClient
	lease, released, owner string
	token                  int64
}

func (h *lazyHeld) Token() int64  { return h.token }
func (h *lazyHeld) Owner() string { return h.owner }
func (h *lazyHeld) Release(ctx context.Context) (string, error) {
	n, err := lazyRelease.Run(ctx, h.c, []string{h.lease, h.released}, h.owner).Int64()
	switch {
	case err != nil:
		return "", err
	case n == 1:
		return history.ValueReleased, nil
	}
	return history.ValueNotOwned, nil
}

// ReleaseWithoutOwnerCheck is a fenced lock whose release deletes the lease
// whoever holds it: a holder that outlived its lease deletes its successor's.
type ReleaseWithoutOwnerCheck struct{}

// Name implements scenarios.LockImpl.
func (ReleaseWithoutOwnerCheck) Name() string { return "mutant-release-without-owner-check" }

// Fenced implements scenarios.LockImpl.
func (ReleaseWithoutOwnerCheck) Fenced() bool { return true }

var mutantAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('GET', KEYS[2])`)

// TryAcquire implements scenarios.LockImpl.
func (ReleaseWithoutOwnerCheck) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	lease, fence := "{"+key+"}:lease", "{"+key+"}:fence"
	owner := strconv.FormatInt(time.Now().UnixNano(), 36)
	v, err := mutantAcquire.Run(ctx, c, []string{lease, fence}, owner, ttl.Milliseconds()).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	}
	s, ok := v.(string)
	if !ok {
		return nil, scenarios.ErrContended
	}
	tok, _ := strconv.ParseInt(s, 10, 64)
	return &blindHeld{c: c, lease: lease, owner: owner, token: tok}, nil
}

type blindHeld struct {
	c            redis.UniversalClient
	lease, owner string
	token        int64
}

func (h *blindHeld) Token() int64  { return h.token }
func (h *blindHeld) Owner() string { return h.owner }
func (h *blindHeld) Release(ctx context.Context) (string, error) {
	// The bug: no owner check.
	if err := h.c.Del(ctx, h.lease).Err(); err != nil {
		return "", err
	}
	return history.ValueReleased, nil
}

// ResourceIgnoresTokens is prim's lock in front of a resource that accepts every
// write whatever its token: fencing that is not enforced.
type ResourceIgnoresTokens struct{}

// Name implements scenarios.LockImpl.
func (ResourceIgnoresTokens) Name() string { return "mutant-resource-ignores-tokens" }

// Fenced implements scenarios.LockImpl.
func (ResourceIgnoresTokens) Fenced() bool { return true }

// ResourceFencing makes the scenario's resource accept every write.
func (ResourceIgnoresTokens) ResourceFencing() bool { return false }

// TryAcquire implements scenarios.LockImpl.
func (ResourceIgnoresTokens) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	return primAcquire(ctx, c, key, ttl)
}

// ---- semaphore -------------------------------------------------------------

// Semaphore is a counting semaphore in a sorted set (owner → expiry in server
// ms). Atomic prunes, counts and adds in one script; the mutant does the three
// steps as separate commands, so concurrent acquirers all see room.
type Semaphore struct {
	C        redis.UniversalClient
	Key      string
	Capacity int64
	Atomic   bool
}

var semAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
return 1`)

// TryAcquire takes one permit for owner for ttl.
func (s *Semaphore) TryAcquire(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	if s.Atomic {
		n, err := semAcquire.Run(ctx, s.C, []string{s.Key}, s.Capacity, owner, ttl.Milliseconds()).Int64()
		return n == 1, err
	}
	t, err := s.C.Time(ctx).Result()
	if err != nil {
		return false, err
	}
	now := t.UnixMilli()
	if err := s.C.ZRemRangeByScore(ctx, s.Key, "-inf", strconv.FormatInt(now, 10)).Err(); err != nil {
		return false, err
	}
	n, err := s.C.ZCard(ctx, s.Key).Result()
	if err != nil || n >= s.Capacity {
		return false, err
	}
	time.Sleep(time.Millisecond) // the window the bug lives in, widened a little
	return true, s.C.ZAdd(ctx, s.Key, redis.Z{Score: float64(now + ttl.Milliseconds()), Member: owner}).Err()
}

// Release returns owner's permit.
func (s *Semaphore) Release(ctx context.Context, owner string) error {
	return s.C.ZRem(ctx, s.Key, owner).Err()
}

// ---- latch -----------------------------------------------------------------

// Latch is a countdown latch in one key; the mutant counts down by two.
type Latch struct {
	C     redis.UniversalClient
	Key   string
	Twice bool
}

// Create sets the count (generation 1).
func (l *Latch) Create(ctx context.Context, count int64) error {
	return l.C.Set(ctx, l.Key, count, 0).Err()
}

var latchDown = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '-1')
if v <= 0 then return redis.error_reply('latch already complete') end
return redis.call('DECRBY', KEYS[1], ARGV[1])`)

// CountDown signals once and returns the remaining count.
func (l *Latch) CountDown(ctx context.Context) (int64, error) {
	by := 1
	if l.Twice {
		by = 2
	}
	return latchDown.Run(ctx, l.C, []string{l.Key}, by).Int64()
}

// Done reports whether the count reached zero (or below).
func (l *Latch) Done(ctx context.Context) (bool, error) {
	v, err := l.C.Get(ctx, l.Key).Int64()
	return err == nil && v <= 0, err
}

// ---- fixed-window limiter ---------------------------------------------------

// Limiter is a fixed-window limiter. The correct one takes the window from the
// server's clock inside the script; the mutant from the caller's clock, which
// ClockOffset skews per client.
type Limiter struct {
	C           redis.UniversalClient
	Key         string
	Limit       int64
	Window      time.Duration
	ClientTime  bool
	ClockOffset time.Duration
}

// One key holds "window:count"; the window number comes from ARGV[3] (the
// mutant's client clock) or, when empty, from the server's TIME.
var fixedWindow = redis.NewScript(`
local limit, w, wid = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if wid == '' then
  local t = redis.call('TIME')
  wid = tostring(math.floor((t[1] * 1000 + math.floor(t[2] / 1000)) / w))
end
local cur = redis.call('GET', KEYS[1])
local n = 0
if cur then
  local id, c = string.match(cur, '^(%d+):(%d+)$')
  if id == wid then n = tonumber(c) end
end
if n >= limit then return 0 end
redis.call('SET', KEYS[1], wid .. ':' .. (n + 1), 'PX', 2 * w)
return 1`)

// Allow asks for one permit.
func (l *Limiter) Allow(ctx context.Context) (bool, error) {
	id := ""
	if l.ClientTime {
		id = strconv.FormatInt(time.Now().Add(l.ClockOffset).UnixMilli()/l.Window.Milliseconds(), 10)
	}
	n, err := fixedWindow.Run(ctx, l.C, []string{l.Key}, l.Limit, l.Window.Milliseconds(), id).Int64()
	return n == 1, err
}
