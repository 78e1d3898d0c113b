package prim

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

var (
	scriptRWAcquire = loadScript("rw_acquire.lua")
	scriptRWRenew   = loadScript("rw_renew.lua")
	scriptRWVerify  = loadScript("rw_verify.lua")
	scriptRWRelease = loadScript("rw_release.lua")

	rwScripts = &leaseScripts{renew: scriptRWRenew, verify: scriptRWVerify, release: scriptRWRelease,
		renewFailureLoses: true}
)

// The mode markers that begin an owner's member in the sorted set.
const (
	rwReadMarker  = "r:"
	rwWriteMarker = "w:"
)

// RWLease is a held read (shared) or write (exclusive) lease of a read-write
// key. The key is one sorted set: each member is an owner — a mode marker
// ("r:" or "w:") followed by a random owner token, as [RWLease.OwnerToken]
// returns it — scored with its deadline in the server's clock (milliseconds).
// Renew, verify and release are owner-checked and touch only this owner.
//
// Failure rules:
//   - a renewal that fails (an error reply) or whose outcome is uncertain marks
//     the handle lost (StateLost): stop protected work and acquire anew. An
//     uncertain renewal is fenced and released owner-checked in the
//     background;
//   - a verification that fails or is cancelled leaves the handle unchanged, so
//     a later Release still removes the entry;
//   - Close is best-effort and ignores failures: an entry it could not remove
//     keeps blocking incompatible owners until its lease expires. Prefer short
//     leases, and call Release when you must observe whether it succeeded.
//
// Renew asks Redis even after the local estimate ran out: the server's clock
// decides whether the entry is still live.
//
// Its methods are safe for concurrent use and run one at a time.
type RWLease struct {
	handle
	write bool
}

// Key returns the read-write key as stored on the server (prefix included).
func (l *RWLease) Key() string { return l.key }

// Write reports whether this is a write (exclusive) lease.
func (l *RWLease) Write() bool { return l.write }

// Close releases the lease best-effort (owner-checked, bounded by the
// Coordinator's clean-up timeout) and ignores failures: it always returns
// nil. It is idempotent and never removes another owner's entry.
func (l *RWLease) Close() error {
	_ = l.handle.Close()
	return nil
}

// TryAcquireReadLock acquires a shared read lease on key at once, or returns
// ErrNotAcquired while a writer's lease is live. Readers coexist: a read lease
// is granted whatever the number of live readers. It never queues, polls or
// promises fairness — readers keep being admitted while any reader is live, so
// a steady stream of overlapping readers can starve writers (see
// [Coordinator.TryAcquireWriteLock]).
//
// Expired owners are removed atomically before each acquisition, deadlines
// are the server's clock, and the key expires at its latest owner deadline.
// An empty key (ErrEmptyKey) or a bad ttl (ErrInvalidTTL) fails before
// anything is sent; a key of another type fails with ErrWrongType, nothing
// written.
//
// The acquisition is one script, one round trip, never resent (not even by
// go-redis after a lost reply). If its outcome is uncertain (cancellation,
// timeout, a lost reply) the error matches ErrUncertain and the lease is not
// returned: when the late reply says it was acquired, or when the reply is
// lost, the entry is released owner-checked in the background; a release
// that cannot reach the server, or that runs before a delayed acquisition,
// leaves the entry to expire after ttl. A reply that arrives after the local
// estimate ran out is not returned as acquired either: its entry is released.
//
// Asynchronous failover can restore older lease state: this primitive does not
// provide consensus safety.
func (c *Coordinator) TryAcquireReadLock(ctx context.Context, key string, ttl time.Duration) (*RWLease, error) {
	return c.tryRW(ctx, key, ttl, false)
}

// TryAcquireWriteLock acquires an exclusive write lease on key at once, or
// returns ErrNotAcquired while any owner (reader or writer) is live. Everything
// else is as for [Coordinator.TryAcquireReadLock].
//
// Writer starvation: readers are admitted while any reader is live, so a
// steady stream of overlapping readers can keep a writer out indefinitely.
// There is no queue to wait in; retry with a bounded backoff and give up after
// a bound you choose (see the example).
func (c *Coordinator) TryAcquireWriteLock(ctx context.Context, key string, ttl time.Duration) (*RWLease, error) {
	return c.tryRW(ctx, key, ttl, true)
}

func (c *Coordinator) tryRW(ctx context.Context, key string, ttl time.Duration, write bool) (*RWLease, error) {
	if key == "" {
		return nil, invalid(ErrEmptyKey, "read-write key must be non-empty")
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	k := c.key(key)
	if err := notSent(ctx, "acquiring read-write lease "+strconv.Quote(k)); err != nil {
		return nil, err
	}
	mode, kind := rwReadMarker, "rw-read"
	if write {
		mode, kind = rwWriteMarker, "rw-write"
	}
	member := mode + newOwnerToken()
	l := &RWLease{write: write}
	sent := time.Now()
	l.handle = newHandle(c, kind, k, any(member), nil, sent.Add(ttl), rwScripts)
	// One round trip on the caller's client, never resent (resends off): a
	// resend after a lost reply could not tell its own entry from a fresh one.
	// An outcome learnt too late, or never, is settled in the background by an
	// owner-checked release.
	settle := func(a leaseAttempt) {
		if a.err == nil {
			if status, _, err := parsePair(a.res); err != nil || status != 1 {
				return // answered: not acquired, nothing to release
			}
		} else if !uncertain(a.err) {
			return // the server's answer, or never sent
		}
		c.releaseUnreturned(k, member, nil, rwScripts)
	}
	a, cerr := boundedOn(c.bg, ctx, func(ctx context.Context) leaseAttempt {
		res, err := evalScript(ctx, c.client, scriptRWAcquire, false, []string{k}, l.owner, ttl.Milliseconds()).Slice()
		return leaseAttempt{res: res, err: err}
	}, settle)
	if cerr == nil && a.err != nil && uncertain(a.err) {
		cerr = a.err
		c.goCleanup(func() { settle(a) })
	}
	if cerr != nil {
		c.m.add(ctx, c.m.uncertain, kind, "acquire")
		c.logger.WarnContext(ctx, "prim: read-write lease acquisition outcome uncertain; not returned, released owner-checked once known",
			"key", k, "write", write, "err", cerr)
		return nil, fmt.Errorf("%w: acquiring %s lease %q: %w", ErrUncertain, kind, k, cerr)
	}
	if a.err != nil {
		c.m.add(ctx, c.m.acquire, kind, "error")
		// An error reply part-way through the script can follow its writes
		// (Lua does not roll them back): release owner-checked.
		c.goCleanup(func() { c.releaseUnreturned(k, member, nil, rwScripts) })
		return nil, fmt.Errorf("prim: acquire %s lease %q: %w", kind, k, serverError(a.err))
	}
	status, val, perr := parsePair(a.res)
	if perr != nil {
		return nil, perr
	}
	switch status {
	case 1:
		if l.RemainingEstimate() <= 0 {
			c.m.add(ctx, c.m.acquire, kind, "late")
			c.goCleanup(func() { _ = l.Close() })
			return nil, fmt.Errorf("%w: %s lease reply for %q arrived after the lease duration %v", ErrUncertain, kind, k, ttl)
		}
		l.start()
		c.m.add(ctx, c.m.acquire, kind, "acquired")
		return l, nil
	case 0:
		c.m.add(ctx, c.m.acquire, kind, "contended")
		return nil, ErrNotAcquired
	}
	c.m.add(ctx, c.m.acquire, kind, "refused")
	if val == "wrongtype" {
		return nil, fmt.Errorf("%w: %q is not a read-write key (sorted set)", ErrWrongType, k)
	}
	return nil, fmt.Errorf("prim: acquire %s lease %q: %s", kind, k, val)
}
