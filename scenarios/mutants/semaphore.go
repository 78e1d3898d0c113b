package mutants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Semaphore mutants, run by the semaphore scenarios (scenarios.SemImpl):
// three break "never more than capacity live permits"; one answers for a
// permit that is gone, which lease-protocol catches. Their semaphore is a
// sorted set of owner tokens scored with server-time deadlines (ms), as
// prim's, without the capacity member.

func init() {
	scenarios.RegisterSemImpl(PruneNotAtomic{})
	scenarios.RegisterSemImpl(SemRelease{})
	scenarios.RegisterSemImpl(NoExpiryExpires{})
	scenarios.RegisterSemImpl(RenewRecreates{})
}

func semOwner() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "P:" + hex.EncodeToString(b[:])
}

// deadline is the score of a permit of ttl taken at the server's now (ms).
func deadline(now int64, ttl time.Duration) string {
	if ttl == prim.NoExpiry {
		return "+inf"
	}
	return fmt.Sprint(now + ttl.Milliseconds())
}

// PruneNotAtomic is a semaphore that prunes the expired permits, counts the
// live ones and adds its own in separate commands (TIME, ZREMRANGEBYSCORE,
// ZCARD, ZADD): processes that count at once all see room, and all add.
// Under contention it admits more than the capacity.
type PruneNotAtomic struct{}

// Name implements scenarios.SemImpl.
func (PruneNotAtomic) Name() string { return "mutant-semaphore-prune-not-atomic" }

// TryAcquire implements scenarios.SemImpl.
func (PruneNotAtomic) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (scenarios.SemPermit, error) {
	t, err := c.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	now := t.UnixMilli()
	if err := c.ZRemRangeByScore(ctx, key, "0", fmt.Sprint(now)).Err(); err != nil {
		return nil, err
	}
	n, err := c.ZCard(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	if n >= int64(capacity) {
		return nil, scenarios.ErrContended
	}
	owner := semOwner()
	if err := c.Do(ctx, "ZADD", key, deadline(now, ttl), owner).Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	}
	c.PExpire(ctx, key, 10*time.Second)
	return &semPermit{c: c, key: key, owner: owner}, nil
}

// semAcquireAtomic is an atomic acquisition (as prim's, without the capacity
// check against other contenders' capacities). The key lives 10s past the
// last write, or for good while it holds a permit without expiry.
var semAcquireAtomic = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
local score = '+inf'
if ARGV[2] ~= '0' then score = now + tonumber(ARGV[2]) end
redis.call('ZADD', KEYS[1], score, ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == 'inf' then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], 10000) end
return 1`)

// semRenew renews the caller's own permit, if it is live.
var semRenew = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local score = '+inf'
if ARGV[2] ~= '0' then score = now + tonumber(ARGV[2]) end
redis.call('ZADD', KEYS[1], 'XX', score, ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == 'inf' then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], 10000) end
return 1`)

// semRenewBlind sets the caller's permit's deadline without looking: a
// released or expired permit is created again (RenewRecreates' bug).
var semRenewBlind = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local score = '+inf'
if ARGV[2] ~= '0' then score = now + tonumber(ARGV[2]) end
redis.call('ZADD', KEYS[1], score, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 10000)
return 1`)

// semVerify reports whether the caller's own permit is live.
var semVerify = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and (s == 'inf' or tonumber(s) > now) then return 1 end
return 0`)

// semReleaseAny releases a permit of the semaphore: the one with the
// earliest deadline, whoever holds it.
var semReleaseAny = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
return #redis.call('ZPOPMIN', KEYS[1])`)

// semReleaseOwn releases the caller's own permit.
var semReleaseOwn = redis.NewScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
return redis.call('ZREM', KEYS[1], ARGV[1])`)

// SemRelease is a semaphore with an atomic acquisition whose release does
// not check the owner (OwnerChecked false, the mutant): it removes the
// permit with the earliest deadline, whoever holds it. A holder whose
// permit expired (or whose release comes late) removes another's, which
// the next acquisition hands out again while its holder still holds it.
// With OwnerChecked it is the correct semaphore the mutant breaks.
type SemRelease struct{ OwnerChecked bool }

// Name implements scenarios.SemImpl.
func (s SemRelease) Name() string {
	if s.OwnerChecked {
		return "reference-semaphore-owner-checked-release"
	}
	return "mutant-semaphore-release-without-owner-check"
}

// TryAcquire implements scenarios.SemImpl.
func (s SemRelease) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (scenarios.SemPermit, error) {
	owner := semOwner()
	ms := int64(0)
	if ttl != prim.NoExpiry {
		ms = ttl.Milliseconds()
	}
	ok, err := semAcquireAtomic.Run(ctx, c, []string{key}, owner, ms, capacity).Int64()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, err)
	case ok == 0:
		return nil, scenarios.ErrContended
	}
	return &semPermit{c: c, key: key, owner: owner, any: !s.OwnerChecked}, nil
}

// semPermit is a mutant's permit: owner-checked renewal and verification;
// its release removes its own permit, or any permit (any); its renewal
// checks nothing (blind: RenewRecreates).
type semPermit struct {
	c     redis.UniversalClient
	key   string
	owner string
	any   bool
	blind bool
}

func (p *semPermit) Owner() string { return p.owner }

func (p *semPermit) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ms := int64(0)
	if ttl != prim.NoExpiry {
		ms = ttl.Milliseconds()
	}
	script := semRenew
	if p.blind {
		script = semRenewBlind
	}
	n, err := script.Run(ctx, p.c, []string{p.key}, p.owner, ms).Int64()
	return n == 1, err
}

func (p *semPermit) Verify(ctx context.Context) (bool, error) {
	n, err := semVerify.Run(ctx, p.c, []string{p.key}, p.owner).Int64()
	return n == 1, err
}

func (p *semPermit) Release(ctx context.Context) (string, error) {
	script := semReleaseOwn
	if p.any {
		script = semReleaseAny
	}
	n, err := script.Run(ctx, p.c, []string{p.key}, p.owner).Int64()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return history.ValueAlreadyReleased, nil
	}
	return history.ValueReleased, nil
}

// NoExpiryExpires is the correct semaphore (SemRelease with an owner-checked
// release) that gives a permit asked for without expiry (prim.NoExpiry) a
// minute's lease: a crashed holder's permit is then a permit that expires,
// which the no-expiry-crash scenario's no-expiry-kept check finds on the
// server (FAIL).
type NoExpiryExpires struct{}

// Name implements scenarios.SemImpl.
func (NoExpiryExpires) Name() string { return "mutant-semaphore-no-expiry-expires" }

// TryAcquire implements scenarios.SemImpl.
func (NoExpiryExpires) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (scenarios.SemPermit, error) {
	if ttl == prim.NoExpiry {
		ttl = time.Minute
	}
	return SemRelease{OwnerChecked: true}.TryAcquire(ctx, c, key, capacity, ttl)
}

// RenewRecreates is the correct semaphore (SemRelease with an owner-checked
// release) whose renewal sets the permit's deadline without checking that
// the permit is still there (ZADD without XX): renewing a released or
// expired permit answers "renewed" and creates it again, and the
// verification that follows finds it, so a holder is told it holds a permit
// it released. lease-protocol FAILs it with a renewal and a verification
// answered "held" after the permit was released (after-end).
type RenewRecreates struct{}

// Name implements scenarios.SemImpl.
func (RenewRecreates) Name() string { return "mutant-semaphore-renew-recreates" }

// TryAcquire implements scenarios.SemImpl.
func (RenewRecreates) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (scenarios.SemPermit, error) {
	p, err := SemRelease{OwnerChecked: true}.TryAcquire(ctx, c, key, capacity, ttl)
	if err != nil {
		return nil, err
	}
	sp := p.(*semPermit)
	sp.blind = true
	return sp, nil
}
