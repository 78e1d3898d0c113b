package prim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
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

type lockState int

const (
	stateHeld      lockState = iota
	stateUncertain           // a renewal or release outcome is unknown: fail closed
	stateLost                // known not to hold the lease any more
	stateReleased            // released by this handle
)

// FencedLock is a held fencing-token lock: an expiring lease key holding a random
// owner token, and the fencing token the persistent counter gave this
// acquisition. Send FencingToken with every protected write; the resource must
// reject tokens lower than one it has accepted (see FencedRecord).
//
// Its methods are safe for concurrent use and run one at a time.
type FencedLock struct {
	c        *Coordinator
	leaseKey string // physical (prefixed) keys
	counter  string
	token    int64
	owner    string

	op chan struct{} // one operation at a time

	mu       sync.Mutex
	deadline time.Time // local estimate of the lease end, from before the request was sent
	state    lockState

	closeOnce sync.Once
	closeErr  error
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
// ErrNotAcquired and the holder's remaining PTTL.
func (c *Coordinator) tryFenced(ctx context.Context, lk, ck string, ttl time.Duration) (*FencedLock, time.Duration, error) {
	owner := newOwnerToken()
	sent := time.Now()
	res, err := scriptFencedAcquire.Run(ctx, c.client, []string{lk, ck}, owner, ttl.Milliseconds()).Slice()
	if err != nil {
		if uncertain(err) {
			c.m.add(ctx, c.m.uncertain, "fenced-lock", "acquire")
			c.logger.WarnContext(ctx, "prim: fenced lock acquisition outcome uncertain; not returned as acquired",
				"lease", lk, "err", err)
			return nil, 0, fmt.Errorf("%w: acquiring %q: %w", ErrUncertain, lk, err)
		}
		c.m.add(ctx, c.m.acquire, "fenced-lock", "error")
		return nil, 0, fmt.Errorf("prim: acquiring %q: %w", lk, err)
	}
	status, val, perr := parsePair(res)
	if perr != nil {
		return nil, 0, perr
	}
	switch status {
	case 1:
		tok, err := strconv.ParseInt(val, 10, 64)
		if err != nil || tok <= 0 {
			return nil, 0, fmt.Errorf("prim: server returned fencing token %q", val)
		}
		l := &FencedLock{c: c, leaseKey: lk, counter: ck, token: tok, owner: owner,
			op: make(chan struct{}, 1), deadline: sent.Add(ttl)}
		if l.RemainingEstimate() <= 0 {
			// The reply came after the lease's whole duration: it may already be
			// someone else's. Not returned; our entry is removed if still there.
			c.m.add(ctx, c.m.acquire, "fenced-lock", "late")
			go l.Close()
			return nil, 0, fmt.Errorf("%w: acquisition reply for %q arrived after the lease duration %v", ErrUncertain, lk, ttl)
		}
		c.m.add(ctx, c.m.acquire, "fenced-lock", "acquired")
		return l, 0, nil
	case 0:
		c.m.add(ctx, c.m.acquire, "fenced-lock", "contended")
		ms, _ := strconv.ParseInt(val, 10, 64)
		return nil, time.Duration(ms) * time.Millisecond, ErrNotAcquired
	default:
		c.m.add(ctx, c.m.acquire, "fenced-lock", "counter-invalid")
		return nil, 0, counterReason(ck, val)
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

// OwnerToken is the random token that identifies this owner in Redis.
func (l *FencedLock) OwnerToken() string { return l.owner }

// LeaseKey and CounterKey are the physical (prefixed) keys.
func (l *FencedLock) LeaseKey() string { return l.leaseKey }

// CounterKey is the physical (prefixed) fencing-counter key.
func (l *FencedLock) CounterKey() string { return l.counter }

// RemainingEstimate is the local estimate of the time left on the lease,
// measured from before the acquisition (or last renewal) request was sent; never
// negative. It cannot prove ownership: stop protected work well before it ends.
func (l *FencedLock) RemainingEstimate() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return 0
	}
	return max(0, time.Until(l.deadline))
}

func (l *FencedLock) setState(s lockState) {
	l.mu.Lock()
	l.state = s
	l.mu.Unlock()
}

func (l *FencedLock) getState() lockState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// begin waits for the handle's other operation to finish.
func (l *FencedLock) begin(ctx context.Context) error {
	select {
	case l.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *FencedLock) end() { <-l.op }

// Renew extends the lease to ttl from now, only while this owner holds it; the
// fencing token stays the same. It returns false without contacting Redis once
// the local estimate has run out or ownership was lost or became uncertain.
//
// The renewal runs on a dedicated connection. If its outcome is uncertain the
// handle fails closed: Renew returns false (with an ErrUncertain error), the
// connection is fenced with CLIENT KILL ID from another connection — so the
// renewal cannot run later — and an owner-checked release cleans up.
func (l *FencedLock) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := validTTL(ttl); err != nil {
		return false, err
	}
	if err := l.begin(ctx); err != nil {
		return false, err
	}
	defer l.end()
	if l.RemainingEstimate() <= 0 {
		l.c.m.add(ctx, l.c.m.renew, "fenced-lock", "expired-locally")
		return false, nil
	}
	fc, err := l.c.fences.get(ctx, l.leaseKey)
	if err != nil {
		// CLIENT ID did not complete, so the renewal was never sent: definitive.
		return false, fmt.Errorf("prim: renew %q: dedicated connection: %w", l.leaseKey, err)
	}
	sent := time.Now()
	n, err := scriptLeaseRenew.Run(ctx, fc.conn, []string{l.leaseKey}, l.owner, ttl.Milliseconds()).Int64()
	if err != nil {
		if uncertain(err) {
			l.setState(stateUncertain)
			l.c.m.add(ctx, l.c.m.uncertain, "fenced-lock", "renew")
			l.c.logger.WarnContext(ctx, "prim: renewal outcome uncertain; handle fails closed", "lease", l.leaseKey, "err", err)
			l.settleUncertain(ctx, fc)
			return false, fmt.Errorf("%w: renewing %q: %w", ErrUncertain, l.leaseKey, err)
		}
		l.c.fences.put(fc)
		l.c.m.add(ctx, l.c.m.renew, "fenced-lock", "error")
		return false, fmt.Errorf("prim: renew %q: %w", l.leaseKey, err)
	}
	l.c.fences.put(fc)
	if n != 1 {
		l.setState(stateLost)
		l.c.m.add(ctx, l.c.m.renew, "fenced-lock", "not-owned")
		return false, nil
	}
	l.mu.Lock()
	l.deadline = sent.Add(ttl)
	l.mu.Unlock()
	l.c.m.add(ctx, l.c.m.renew, "fenced-lock", "renewed")
	return true, nil
}

// settleUncertain fences the dedicated connection an uncertain command ran on and
// then releases owner-checked. Called with the operation slot held.
func (l *FencedLock) settleUncertain(ctx context.Context, fc *fenceConn) {
	if err := l.c.fence(ctx, fc); err != nil {
		l.c.logger.WarnContext(ctx, "prim: could not fence an uncertain command (CLIENT KILL); the lease expires server-side",
			"lease", l.leaseKey, "client_id", fc.id, "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.c.cleanup)
	defer cancel()
	if _, err := l.releaseOnce(cctx); err != nil {
		l.c.logger.WarnContext(ctx, "prim: owner-checked clean-up after an uncertain outcome failed; the lease expires server-side",
			"lease", l.leaseKey, "err", err)
	}
}

// VerifyStillHeld checks, at one instant, that this owner still holds the lease.
// It cannot promise ownership for any later write. A failed check (error) leaves
// the handle unchanged.
func (l *FencedLock) VerifyStillHeld(ctx context.Context) (bool, error) {
	if err := l.begin(ctx); err != nil {
		return false, err
	}
	defer l.end()
	switch l.getState() {
	case stateLost, stateReleased:
		return false, nil
	}
	ms, err := scriptLeaseVerify.Run(ctx, l.c.client, []string{l.leaseKey}, l.owner).Int64()
	if err != nil {
		return false, fmt.Errorf("prim: verify %q: %w", l.leaseKey, err)
	}
	if ms == -1 {
		l.setState(stateLost)
		return false, nil
	}
	return true, nil
}

// Release removes the lease if this owner still holds it and reports what it
// found. A release queued behind another operation of this handle waits for it;
// if ctx ends first, Release returns ErrReleasePending and the release still runs
// once that operation finishes. An uncertain outcome returns an ErrUncertain
// error and leaves the handle failing closed; calling Release again retries.
func (l *FencedLock) Release(ctx context.Context) (ReleaseResult, error) {
	if l.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	select {
	case l.op <- struct{}{}:
	case <-ctx.Done():
		go func() {
			l.op <- struct{}{}
			defer l.end()
			cctx, cancel := context.WithTimeout(context.Background(), l.c.cleanup)
			defer cancel()
			if _, err := l.releaseOnce(cctx); err != nil {
				l.c.logger.Warn("prim: queued release failed; the lease expires server-side", "lease", l.leaseKey, "err", err)
			}
		}()
		return 0, fmt.Errorf("%w: %w", ErrReleasePending, ctx.Err())
	}
	defer l.end()
	return l.releaseOnce(ctx)
}

// releaseOnce runs the owner-checked release; the caller holds the op slot.
func (l *FencedLock) releaseOnce(ctx context.Context) (ReleaseResult, error) {
	if l.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	n, err := scriptLeaseRelease.Run(ctx, l.c.client, []string{l.leaseKey}, l.owner).Int64()
	if err != nil {
		if uncertain(err) {
			l.setState(stateUncertain)
			l.c.m.add(ctx, l.c.m.uncertain, "fenced-lock", "release")
			return 0, fmt.Errorf("%w: releasing %q: %w", ErrUncertain, l.leaseKey, err)
		}
		return 0, fmt.Errorf("prim: release %q: %w", l.leaseKey, err)
	}
	l.setState(stateReleased)
	var r ReleaseResult
	switch n {
	case 1:
		r = Released
	case 0:
		r = AlreadyReleased
	default:
		r = NotOwned
	}
	l.c.m.add(ctx, l.c.m.release, "fenced-lock", r.String())
	return r, nil
}

// Close releases the lease best-effort (owner-checked, bounded by the
// Coordinator's clean-up timeout). It is idempotent and safe to call from several
// goroutines; it never deletes another owner's lease.
func (l *FencedLock) Close() error {
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.c.cleanup)
		defer cancel()
		_, err := l.Release(ctx)
		if errors.Is(err, ErrReleasePending) {
			err = nil
		}
		l.closeErr = err
	})
	return l.closeErr
}
