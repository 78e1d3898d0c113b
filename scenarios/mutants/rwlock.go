package mutants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Read-write lease mutants, run by the rwlock scenarios
// (scenarios.RWImpl): two break "many readers or one writer", which the
// rw-exclusion checker holds the validity windows to; one lies about
// ownership, which lease-protocol catches.

func init() {
	scenarios.RegisterRWImpl(RWLease{WriterIgnoresReaders: true})
	scenarios.RegisterRWImpl(RWLease{ReleaseWithoutOwnerCheck: true})
	scenarios.RegisterRWImpl(RWLease{VerifyAlwaysTrue: true})
}

// RWLease is a read-write lease on prim's layout — one sorted set per key,
// each member an owner ("r:" or "w:" and a random token) scored with its
// deadline on the server's clock, expired owners pruned before each
// acquisition, the key expiring at the latest deadline — with scripts of its
// own. With no flag set it is correct (the reference the tests run beside
// the mutants); each flag breaks one rule.
type RWLease struct {
	// WriterIgnoresReaders: a write acquisition checks only for a live
	// writer, so a writer is admitted beside live readers.
	WriterIgnoresReaders bool
	// ReleaseWithoutOwnerCheck: a release deletes the whole key, every
	// other owner's entry with it, so a writer is admitted while the other
	// readers still hold their leases.
	ReleaseWithoutOwnerCheck bool
	// VerifyAlwaysTrue: verification answers "held" without asking, so a
	// holder that stalled past its lease is told it still holds it.
	VerifyAlwaysTrue bool
}

// Name implements scenarios.RWImpl.
func (m RWLease) Name() string {
	switch {
	case m.WriterIgnoresReaders:
		return "mutant-rw-writer-ignores-readers"
	case m.ReleaseWithoutOwnerCheck:
		return "mutant-rw-release-without-owner-check"
	case m.VerifyAlwaysTrue:
		return "mutant-rw-verify-always-true"
	}
	return "reference-rw-lease"
}

// rwAcquire: ARGV[1] member, ARGV[2] ttl ms, ARGV[3] "1" when a writer
// ignores readers. Reply 1 acquired, 0 contended.
var rwAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local write = string.sub(ARGV[1], 1, 2) == 'w:'
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(m, 1, 2) == 'w:' then return 0 end
  if write and ARGV[3] ~= '1' then return 0 end
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1`)

// rwRenew: ARGV[1] member, ARGV[2] ttl ms. Reply 1 renewed, 0 not held.
var rwRenew = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1`)

// rwVerify: ARGV[1] member. Reply 1 held, 0 not.
var rwVerify = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now then return 0 end
return 1`)

// rwRelease: ARGV[1] member, ARGV[2] "1" to delete the key whoever owns
// it. Reply 1 released, 0 not held.
var rwRelease = redis.NewScript(`
if ARGV[2] == '1' then
  return redis.call('DEL', KEYS[1])
end
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then redis.call('PEXPIREAT', KEYS[1], last[2]) end
if tonumber(s) <= now then return 0 end
return 1`)

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// TryAcquire implements scenarios.RWImpl: one script, its errors returned
// as they are (the workload records them as of unknown outcome unless the
// server refused to run it).
func (m RWLease) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, write bool, ttl time.Duration) (scenarios.RWHeld, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	member := "r:" + hex.EncodeToString(b[:])
	if write {
		member = "w:" + member[2:]
	}
	n, err := rwAcquire.Run(ctx, c, []string{key}, member, ttl.Milliseconds(), flag(m.WriterIgnoresReaders)).Int64()
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return nil, scenarios.ErrContended
	}
	return rwHeld{m: m, c: c, key: key, member: member}, nil
}

type rwHeld struct {
	m      RWLease
	c      redis.UniversalClient
	key    string
	member string
}

func (h rwHeld) Owner() string { return h.member }

func (h rwHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	n, err := rwRenew.Run(ctx, h.c, []string{h.key}, h.member, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (h rwHeld) Verify(ctx context.Context) (bool, error) {
	if h.m.VerifyAlwaysTrue {
		return true, nil // the bug
	}
	n, err := rwVerify.Run(ctx, h.c, []string{h.key}, h.member).Int64()
	return n == 1, err
}

func (h rwHeld) Release(ctx context.Context) (string, error) {
	n, err := rwRelease.Run(ctx, h.c, []string{h.key}, h.member, flag(h.m.ReleaseWithoutOwnerCheck)).Int64()
	switch {
	case err != nil:
		return "", err
	case n == 1:
		return history.ValueReleased, nil
	}
	return history.ValueAlreadyReleased, nil
}
