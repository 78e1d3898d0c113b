package prim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReleaseResult is the outcome of releasing a lease.
type ReleaseResult int

// The release outcomes.
const (
	// Released: this call removed this owner's lease.
	Released ReleaseResult = iota + 1
	// AlreadyReleased: the handle was released before, or no lease exists any
	// more (it expired and nobody has taken it).
	AlreadyReleased
	// NotOwned: another owner holds the lease now; it was left untouched.
	NotOwned
)

func (r ReleaseResult) String() string {
	switch r {
	case Released:
		return "Released"
	case AlreadyReleased:
		return "AlreadyReleased"
	case NotOwned:
		return "NotOwned"
	}
	return "ReleaseResult(" + strconv.Itoa(int(r)) + ")"
}

// FencedLock is a held fencing-token lock: an expiring lease key holding a random
// owner token, and the fencing token the persistent counter gave this
// acquisition. Send FencingToken with every protected write; the resource must
// reject tokens lower than one it has accepted (see FencedRecord).
//
// Its methods are safe for concurrent use and run one at a time.
type FencedLock struct {
	handle
	counter string
	token   int64
}

// TryAcquireFencedLock acquires the lock on leaseKey at once, or returns
// ErrNotAcquired if another owner holds it; it never waits or polls. On success
// the persistent counter at counterKey has been incremented and its new value is
// the lock's fencing token.
//
// Input errors (ErrEmptyKey, ErrSameKey, ErrCrossSlot, ErrInvalidTTL) are
// returned before any I/O. A counter that exists with an expiry, is negative,
// is not a decimal integer or would overflow int64 fails with an
// ErrCounterInvalid error and nothing is written. If the outcome is uncertain
// (cancellation, timeout, lost connection after sending), the error matches
// ErrUncertain and the lock is not returned: the script may have run, leaving a
// gap in the tokens and a lease that expires after ttl.
func (c *Coordinator) TryAcquireFencedLock(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*FencedLock, error) {
	lk, ck, err := c.keyPair(leaseKey, counterKey)
	if err != nil {
		return nil, err
	}
	if err := validTTL(ttl); err != nil {
		return nil, err
	}
	l, _, err := c.tryFenced(ctx, lk, ck, ttl)
	return l, err
}

// tryFenced runs the acquisition script once. On contention it returns
// ErrNotAcquired and the holder's remaining PTTL (negative: no expiry).
//
// The script goes through the caller's client, which may resend it after a
// lost reply: the script recognises its own owner token and answers the same
// token, so a resend yields the true outcome. It returns by ctx's deadline; an
// acquisition still in flight then is ErrUncertain, and if it turns out to have
// acquired, the lease is released owner-checked in the background.
func (c *Coordinator) tryFenced(ctx context.Context, lk, ck string, ttl time.Duration) (*FencedLock, time.Duration, error) {
	if err := notSent(ctx, "acquiring "+strconv.Quote(lk)); err != nil {
		return nil, 0, err
	}
	owner := newOwnerToken()
	args := []any{owner, ttl.Milliseconds()}
	sent := time.Now()
	run := func(ctx context.Context) cmdResult {
		// prim resends the script itself, each attempt single (go-redis's own
		// resends off), as often as the client's MaxRetries allows and with its
		// back-off: go-redis would return only its last attempt's error, and an
		// earlier attempt may have run. An attempt that failed before anything
		// was written (a failed dial, a pool timeout, a closed client) or that
		// the server refused for good (NOPERM, WRONGTYPE…) ends the loop; a
		// lost reply, or a refusal that passes (READONLY or LOADING during a
		// failover, TRYAGAIN, max clients), is sent again. The script
		// recognises its own owner token, so a resend that finds the first
		// run's lease answers its token.
		var r cmdResult
		for attempt := 0; ; attempt++ {
			if attempt > 0 && !sleepCtx(ctx, c.retry.backoff(attempt)) {
				return r // ctx ended: r is the last attempt's
			}
			v, err := evalScript(ctx, c.client, scriptFencedAcquire, false, []string{lk, ck}, args...).Result()
			r.v, r.err = v, err
			if uncertain(err) {
				r.written = true // no reply: this attempt may have run
			}
			if !worthResending(err) || attempt >= c.retry.max {
				return r
			}
		}
	}
	late := func(r cmdResult) {
		if r.err != nil {
			return
		}
		if tok, _, err := parseFenced(r.v, ck); err == nil {
			c.releaseUnreturned(lk, owner+":"+strconv.FormatInt(tok, 10), nil, fencedScripts)
		}
	}
	r, cerr := boundedOn(c.bg, ctx, run, late)
	if cerr == nil && r.outcomeUnknown() {
		cerr = r.err
	}
	if cerr != nil {
		c.m.add(ctx, c.m.uncertain, "fenced-lock", "acquire")
		c.logger.WarnContext(ctx, "prim: fenced lock acquisition outcome uncertain; not returned as acquired",
			"lease", lk, "err", cerr)
		return nil, 0, fmt.Errorf("%w: acquiring %q: %w", ErrUncertain, lk, cerr)
	}
	if r.err != nil {
		c.m.add(ctx, c.m.acquire, "fenced-lock", "error")
		return nil, 0, fmt.Errorf("prim: acquiring %q: %w", lk, serverError(r.err))
	}
	tok, remaining, err := parseFenced(r.v, ck)
	if err != nil {
		switch {
		case errors.Is(err, ErrNotAcquired):
			c.m.add(ctx, c.m.acquire, "fenced-lock", "contended")
		case errors.Is(err, ErrCounterInvalid):
			c.m.add(ctx, c.m.acquire, "fenced-lock", "counter-invalid")
		default:
			c.m.add(ctx, c.m.acquire, "fenced-lock", "error")
		}
		if errors.Is(err, ErrWrongType) {
			err = fmt.Errorf("%w: lease key %q does not hold a string", ErrWrongType, lk)
		}
		return nil, remaining, err
	}
	l := &FencedLock{counter: ck, token: tok}
	l.handle = newHandle(c, "fenced-lock", lk, any(owner+":"+strconv.FormatInt(tok, 10)), nil, sent.Add(ttl), fencedScripts)
	if l.RemainingEstimate() <= 0 {
		// The reply came after the lease's whole duration: it may already be
		// someone else's. Not returned; our entry is removed if still there.
		c.m.add(ctx, c.m.acquire, "fenced-lock", "late")
		c.goCleanup(func() { _ = l.Close() })
		return nil, 0, fmt.Errorf("%w: acquisition reply for %q arrived after the lease duration %v", ErrUncertain, lk, ttl)
	}
	l.start()
	c.m.add(ctx, c.m.acquire, "fenced-lock", "acquired")
	return l, 0, nil
}

type cmdResult struct {
	v       any
	err     error
	written bool // an attempt got no reply from the server: it may have run
}

// outcomeUnknown reports whether r's error leaves the acquisition's outcome
// unknown: an attempt got no reply (it may have run, whatever the later
// attempts were told: a READONLY, a pool timeout or a failed dial of the last
// says nothing of it), or the last attempt's error is uncertain by itself.
// Every attempt refused by the server, or failing before it was written, is a
// definite failure.
func (r cmdResult) outcomeUnknown() bool {
	switch {
	case r.err == nil, errors.Is(r.err, redis.Nil):
		return false
	case r.written:
		return true
	default:
		return uncertain(r.err)
	}
}

// worthResending reports whether a single attempt's error is one go-redis
// would have sent the command again for, and whose outcome a resend
// can settle: no reply (a lost or cut connection, a read timeout), or a
// refusal that passes (READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN,
// NOREPLICAS, max clients). Nil, a failed dial, a pool timeout, a closed
// client, a cancelled context and every other server reply are final.
func worthResending(err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), dialFailed(err),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // no reply from the server: the command may have run
	}
	return redis.IsReadOnlyError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err)
}

// parseFenced reads the acquisition script's reply: the token, or
// ErrNotAcquired with the holder's PTTL, or a counter or wrong-type error.
func parseFenced(res any, ck string) (int64, time.Duration, error) {
	var tok int64
	switch v := res.(type) {
	case int64: // acquired, token below 2^53
		tok = v
	case string: // acquired, the counter's own decimal text (2^53 and above)
		tok, _ = strconv.ParseInt(v, 10, 64)
	case []any:
		status, val, perr := parsePair(v)
		if perr != nil {
			return 0, 0, perr
		}
		switch status {
		case 0:
			ms, _ := strconv.ParseInt(val, 10, 64)
			return 0, time.Duration(ms) * time.Millisecond, ErrNotAcquired
		case -1:
			if val == "wrongtype" {
				return 0, 0, ErrWrongType
			}
			return 0, 0, counterReason(ck, val)
		}
		return 0, 0, fmt.Errorf("prim: unexpected script status %d", status)
	default:
		return 0, 0, fmt.Errorf("prim: unexpected script reply %v", res)
	}
	if tok <= 0 {
		return 0, 0, fmt.Errorf("prim: server returned fencing token %v", res)
	}
	return tok, 0, nil
}

// releaseUnreturned releases, owner-checked and in the background, a lease an
// acquisition took after its caller was told the outcome was uncertain.
func (c *Coordinator) releaseUnreturned(key, owner string, extra []any, s *leaseScripts) {
	h := newHandle(c, "unreturned", key, any(owner), extra, time.Time{}, s)
	ctx, cancel := c.cleanupCtx()
	defer cancel()
	if _, err := h.releaseOnce(ctx); err != nil {
		c.logger.Warn("prim: releasing a lease whose acquisition was reported uncertain failed; it expires server-side",
			"key", key, "err", err)
	}
}

func counterReason(ck, reason string) error {
	var base error
	switch reason {
	case "expiring":
		base = ErrCounterExpiring
	case "negative":
		base = ErrCounterNegative
	case "overflow":
		base = ErrCounterOverflow
	default:
		base = ErrCounterMalformed
	}
	return fmt.Errorf("%w (counter %q: %s)", base, ck, reason)
}

// parsePair reads a {status, value} script reply.
func parsePair(res []any) (int64, string, error) {
	if len(res) != 2 {
		return 0, "", fmt.Errorf("prim: unexpected script reply %v", res)
	}
	status, ok := res[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("prim: unexpected script status %v", res[0])
	}
	switch v := res[1].(type) {
	case string:
		return status, v, nil
	case int64:
		return status, strconv.FormatInt(v, 10), nil
	}
	return 0, "", fmt.Errorf("prim: unexpected script value %v", res[1])
}

// FencingToken is the token of this acquisition: positive, exact up to MaxInt64.
func (l *FencedLock) FencingToken() int64 { return l.token }

// LeaseKey returns the lease key as stored on the server: the Coordinator's
// prefix (see [Coordinator.WithPrefix]) followed by the key given to the
// acquisition. Use it to inspect the key directly (redis-cli, another client
// without the prefix).
func (l *FencedLock) LeaseKey() string { return l.key }

// CounterKey returns the fencing-counter key as stored on the server: the
// Coordinator's prefix followed by the key given to the acquisition.
func (l *FencedLock) CounterKey() string { return l.counter }
