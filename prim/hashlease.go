package prim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	scriptHLeaseAcquire = loadScript("hlease_acquire.lua")
	scriptHLeaseRenew   = loadScript("hlease_renew.lua")
	scriptHLeaseVerify  = loadScript("hlease_verify.lua")
	scriptHLeaseRelease = loadScript("hlease_release.lua")

	hashLeaseScripts = &leaseScripts{renew: scriptHLeaseRenew, verify: scriptHLeaseVerify, release: scriptHLeaseRelease}
)

// ErrFeatureUnsupported is returned when the server lacks a command an operation
// needs; nothing was written.
var ErrFeatureUnsupported = errors.New("prim: server does not support the feature")

var errNoHFE = fmt.Errorf("%w: hash-field expiration (HPEXPIRE/HPTTL) is needed for named leases; it exists in Redis 7.4+ and Valkey 9.0+", ErrFeatureUnsupported)

// ErrHashKeyExpiring is returned when a hash key for named leases has a
// key-level expiry: when it elapsed the server would delete every lease in the
// hash at once. Nothing was written.
var ErrHashKeyExpiring = errors.New("prim: the lease hash key has a key-level expiry")

// ErrWrongType is returned when a key holds a value of another type than the
// primitive stores there. Nothing was written.
var ErrWrongType = errors.New("prim: key holds a value of the wrong type")

// Lease is a held named lease: one field of a hash, holding a random owner token,
// with its own field expiry (HPEXPIRE). Other fields of the hash are other,
// independent leases. Renew, verify and release are owner-checked, so an expired
// owner's handle can never change a replacement owner's field or another field.
//
// Its methods are safe for concurrent use and run one at a time. Unlike a
// FencedLock, Renew asks Redis even after the local estimate has run out.
type Lease struct {
	handle
	field string
}

// HashKey returns the hash key as stored on the server: the Coordinator's
// prefix (see [Coordinator.WithPrefix]) followed by the key given to the
// acquisition.
func (l *Lease) HashKey() string { return l.key }

// Field returns the lease's field in the hash, as given to the acquisition
// (fields are never prefixed).
func (l *Lease) Field() string { return l.field }

// TryAcquireLease acquires the named lease field in hashKey at once, or returns
// ErrNotAcquired. It needs hash-field expiration (Redis 7.4+, Valkey 9.0+); on an
// older server it fails before writing with ErrFeatureUnsupported. A hash key
// with a key-level expiry is refused before writing (ErrHashKeyExpiring). An
// empty hash key (ErrEmptyKey), an empty field (ErrEmptyField) or a bad ttl
// (ErrInvalidTTL) fails before anything is sent.
//
// The acquisition runs on a dedicated connection. If its outcome is uncertain
// it is never replayed: the connection is fenced with CLIENT KILL ID, the field
// is released owner-checked, and the error matches ErrUncertain. A reply that
// arrives after the whole lease duration is not returned as acquired either.
func (c *Coordinator) TryAcquireLease(ctx context.Context, hashKey, field string, ttl time.Duration) (*Lease, error) {
	hk, err := c.leaseArgs(hashKey, field, ttl)
	if err != nil {
		return nil, err
	}
	l, _, err := c.tryLease(ctx, hk, field, ttl)
	return l, err
}

// AcquireLease acquires the named lease, waiting as long as ctx allows. It waits
// on invalidations of the whole hash key (so changes of other fields wake it for
// another owner-checked attempt) and on the field's HPTTL deadline; it does not
// poll. Errors are those of TryAcquireLease, and ErrClosed once the
// Coordinator is closed.
func (c *Coordinator) AcquireLease(ctx context.Context, hashKey, field string, ttl time.Duration) (*Lease, error) {
	hk, err := c.leaseArgs(hashKey, field, ttl)
	if err != nil {
		return nil, err
	}
	var lease *Lease
	read := func(ctx context.Context, cn *redis.Conn) (int64, error) {
		v, err := cn.Do(ctx, "HPTTL", hk, "FIELDS", 1, field).Slice()
		if err != nil || len(v) == 0 {
			return 0, err
		}
		n, _ := v[0].(int64)
		return n, nil
	}
	err = c.waitUntil(ctx, hk, field, read, func(ctx context.Context) (bool, time.Duration, error) {
		l, remaining, err := c.tryLease(ctx, hk, field, ttl)
		if errors.Is(err, ErrNotAcquired) {
			return false, remaining, nil
		}
		lease = l
		return err == nil, 0, err
	})
	return lease, err
}

func (c *Coordinator) leaseArgs(hashKey, field string, ttl time.Duration) (string, error) {
	if hashKey == "" {
		return "", invalid(ErrEmptyKey, "hash key must be non-empty")
	}
	if field == "" {
		return "", invalid(ErrEmptyField, "a named lease needs a non-empty field of its hash")
	}
	if err := validTTL(ttl); err != nil {
		return "", err
	}
	return c.key(hashKey), nil
}

type leaseAttempt struct {
	fc  *fenceConn
	res []any
	err error
}

// tryLease runs the acquisition on a dedicated connection to the node that
// serves hk (following Cluster redirections). It returns by ctx's deadline. If
// the outcome is uncertain it is never resent: in the background the connection
// is fenced with CLIENT KILL and the field released owner-checked, and the
// error matches ErrUncertain.
func (c *Coordinator) tryLease(ctx context.Context, hk, field string, ttl time.Duration) (*Lease, time.Duration, error) {
	// A node without hash-field expiry answers "no-hfe" (HPEXPIRE unknown in
	// the script): recorded, but asked again at every acquisition. There is no
	// fallback to take meanwhile, and a Sentinel client's record is the
	// client's, not the node's: a failover to a server that has it must not be
	// refused for five minutes.
	if err := notSent(ctx, "acquiring lease "+strconv.Quote(hk)+"/"+strconv.Quote(field)); err != nil {
		return nil, 0, err
	}
	node := c.nodeName(ctx, hk)
	owner := any(newOwnerToken())
	l := &Lease{field: field}
	sent := time.Now()
	l.handle = newHandle(c, "hash-lease", hk, owner, []any{field}, sent.Add(ttl), hashLeaseScripts)
	settle := func(a leaseAttempt) {
		l.op <- struct{}{}
		l.settleUncertain(a.fc)
		l.end()
	}
	a, cerr := boundedOn(c.bg, ctx, func(ctx context.Context) leaseAttempt {
		fc, cmd, err := c.fences.run(ctx, hk, scriptHLeaseAcquire, []string{hk}, owner, ttl.Milliseconds(), field)
		if err != nil {
			return leaseAttempt{err: err}
		}
		res, err := cmd.Slice()
		return leaseAttempt{fc: fc, res: res, err: err}
	}, settle)
	if cerr == nil && a.err != nil && a.fc != nil && uncertain(a.err) {
		cerr = a.err
		c.goCleanup(func() { settle(a) })
	}
	if cerr != nil {
		c.m.add(ctx, c.m.uncertain, "hash-lease", "acquire")
		c.logger.WarnContext(ctx, "prim: lease acquisition outcome uncertain; fencing it and releasing owner-checked",
			"key", hk, "field", field, "err", cerr)
		return nil, 0, fmt.Errorf("%w: acquiring lease %q/%q: %w", ErrUncertain, hk, field, cerr)
	}
	if a.fc != nil {
		c.fences.put(a.fc)
	}
	if a.err != nil {
		c.m.add(ctx, c.m.acquire, "hash-lease", "error")
		if a.fc != nil {
			// An error reply after the script may have written: release
			// owner-checked (the script already removes a field it could not
			// give an expiry).
			c.goCleanup(func() { c.releaseUnreturned(hk, owner.(string), []any{field}, hashLeaseScripts) })
		}
		return nil, 0, fmt.Errorf("prim: acquire lease %q/%q: %w", hk, field, serverError(a.err))
	}
	status, val, perr := parsePair(a.res)
	if perr != nil {
		return nil, 0, perr
	}
	switch status {
	case 1:
		if l.RemainingEstimate() <= 0 {
			c.m.add(ctx, c.m.acquire, "hash-lease", "late")
			c.goCleanup(func() { _ = l.Close() })
			return nil, 0, fmt.Errorf("%w: lease reply for %q/%q arrived after the lease duration %v", ErrUncertain, hk, field, ttl)
		}
		l.start()
		c.m.add(ctx, c.m.acquire, "hash-lease", "acquired")
		return l, 0, nil
	case 0:
		c.m.add(ctx, c.m.acquire, "hash-lease", "contended")
		ms, _ := strconv.ParseInt(val, 10, 64)
		return nil, time.Duration(ms) * time.Millisecond, ErrNotAcquired
	}
	c.m.add(ctx, c.m.acquire, "hash-lease", "refused")
	switch val {
	case "no-hfe":
		c.caps.markAbsent(node, capHashFieldExpiry)
		return nil, 0, errNoHFE
	case "key-expiry":
		return nil, 0, fmt.Errorf("%w: %q", ErrHashKeyExpiring, hk)
	case "wrongtype":
		return nil, 0, fmt.Errorf("%w: %q is not a hash", ErrWrongType, hk)
	}
	return nil, 0, fmt.Errorf("prim: acquire lease %q/%q: %s", hk, field, val)
}
