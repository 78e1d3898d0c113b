package prim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type lockState int

const (
	stateHeld      lockState = iota
	stateUncertain           // a renewal or release outcome is unknown: fail closed
	stateLost                // known not to hold the lease any more
	stateReleased            // released by this handle
)

// leaseScripts are the owner-checked scripts of one kind of lease. Each takes
// KEYS[1] = the key, ARGV = owner, ttl ms (0 when unused), then the extra
// arguments of the handle (the field of a hash-field lease).
type leaseScripts struct {
	renew, verify, release *redis.Script
	// renewNeedsEstimate: Renew answers false without I/O once the local estimate
	// has run out (fenced locks). Hash-field leases ask Redis instead.
	renewNeedsEstimate bool
}

var fencedScripts = &leaseScripts{renew: scriptLeaseRenew, verify: scriptLeaseVerify, release: scriptLeaseRelease, renewNeedsEstimate: true}

// handle is the lifecycle every owner-token lease shares: renew, verify,
// release and close, one at a time, failing closed on uncertain outcomes.
type handle struct {
	c      *Coordinator
	kind   string // metric and log label
	key    string // physical key
	owner  any    // the owner token (a string), boxed once for every command's arguments
	extra  []any
	script *leaseScripts

	op chan struct{} // one operation at a time

	mu       sync.Mutex
	deadline time.Time // local estimate of the lease end, from before the request was sent
	state    lockState

	closeOnce sync.Once
	closeErr  error
}

// newHandle takes the owner token boxed (any holding a string), as it was passed
// to the acquisition script, so it is boxed once for the handle's lifetime.
func newHandle(c *Coordinator, kind, key string, owner any, extra []any, deadline time.Time, s *leaseScripts) handle {
	return handle{c: c, kind: kind, key: key, owner: owner, extra: extra, script: s,
		op: make(chan struct{}, 1), deadline: deadline}
}

func (h *handle) args(ttl time.Duration) []any {
	a := make([]any, 2, 2+len(h.extra))
	a[0], a[1] = h.owner, ttl.Milliseconds()
	return append(a, h.extra...)
}

// OwnerToken is the random token that identifies this owner in Redis.
func (h *handle) OwnerToken() string { return h.owner.(string) }

// RemainingEstimate is the local estimate of the time left on the lease,
// measured from before the acquisition (or last renewal) request was sent; never
// negative, and 0 once ownership is lost, released or uncertain. It cannot prove
// ownership: stop protected work well before it ends.
func (h *handle) RemainingEstimate() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return 0
	}
	return max(0, time.Until(h.deadline))
}

func (h *handle) setState(s lockState) {
	h.mu.Lock()
	h.state = s
	h.mu.Unlock()
}

func (h *handle) getState() lockState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// begin waits for the handle's other operation to finish.
func (h *handle) begin(ctx context.Context) error {
	select {
	case h.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *handle) end() { <-h.op }

// Renew extends the lease to ttl from now, only while this owner holds it; a
// fenced lock keeps its fencing token. A fenced lock's Renew returns false
// without contacting Redis once the local estimate has run out; a hash-field
// lease asks Redis, so it can still renew a field that outlived the estimate.
// Once ownership was lost, released or became uncertain, Renew returns false
// without I/O.
//
// The renewal runs on a dedicated connection. If its outcome is uncertain the
// handle fails closed: Renew returns false with an ErrUncertain error, the
// connection is fenced with CLIENT KILL ID from another connection — so the
// renewal cannot run later — and an owner-checked release cleans up.
func (h *handle) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := validTTL(ttl); err != nil {
		return false, err
	}
	if err := h.begin(ctx); err != nil {
		return false, err
	}
	defer h.end()
	if st := h.getState(); st != stateHeld {
		return false, nil
	}
	if h.script.renewNeedsEstimate && h.RemainingEstimate() <= 0 {
		h.c.m.add(ctx, h.c.m.renew, h.kind, "expired-locally")
		return false, nil
	}
	fc, err := h.c.fences.get(ctx, h.key)
	if err != nil {
		// CLIENT ID did not complete, so the renewal was never sent: definitive.
		return false, fmt.Errorf("prim: renew %q: dedicated connection: %w", h.key, err)
	}
	sent := time.Now()
	n, err := h.script.renew.Run(ctx, fc.conn, []string{h.key}, h.args(ttl)...).Int64()
	if err != nil {
		if uncertain(err) {
			h.setState(stateUncertain)
			h.c.m.add(ctx, h.c.m.uncertain, h.kind, "renew")
			h.c.logger.WarnContext(ctx, "prim: renewal outcome uncertain; handle fails closed", "key", h.key, "err", err)
			h.settleUncertain(ctx, fc)
			return false, fmt.Errorf("%w: renewing %q: %w", ErrUncertain, h.key, err)
		}
		h.c.fences.put(fc)
		h.c.m.add(ctx, h.c.m.renew, h.kind, "error")
		return false, fmt.Errorf("prim: renew %q: %w", h.key, err)
	}
	h.c.fences.put(fc)
	if n != 1 {
		h.setState(stateLost)
		h.c.m.add(ctx, h.c.m.renew, h.kind, "not-owned")
		return false, nil
	}
	h.mu.Lock()
	h.deadline = sent.Add(ttl)
	h.mu.Unlock()
	h.c.m.add(ctx, h.c.m.renew, h.kind, "renewed")
	return true, nil
}

// settleUncertain fences the dedicated connection an uncertain command ran on and
// then releases owner-checked. Called with the operation slot held.
func (h *handle) settleUncertain(ctx context.Context, fc *fenceConn) {
	if err := h.c.fence(ctx, fc); err != nil {
		h.c.logger.WarnContext(ctx, "prim: could not fence an uncertain command (CLIENT KILL); the lease expires server-side",
			"key", h.key, "client_id", fc.id, "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.c.cleanup)
	defer cancel()
	if _, err := h.releaseOnce(cctx); err != nil {
		h.c.logger.WarnContext(ctx, "prim: owner-checked clean-up after an uncertain outcome failed; the lease expires server-side",
			"key", h.key, "err", err)
	}
}

// VerifyStillHeld checks, at one instant, that this owner still holds the lease.
// It cannot promise ownership for any later write. A failed check (error) leaves
// the handle unchanged.
func (h *handle) VerifyStillHeld(ctx context.Context) (bool, error) {
	if err := h.begin(ctx); err != nil {
		return false, err
	}
	defer h.end()
	switch h.getState() {
	case stateLost, stateReleased:
		return false, nil
	}
	ms, err := h.script.verify.Run(ctx, h.c.client, []string{h.key}, h.args(0)...).Int64()
	if err != nil {
		return false, fmt.Errorf("prim: verify %q: %w", h.key, err)
	}
	if ms == -1 {
		h.setState(stateLost)
		return false, nil
	}
	return true, nil
}

// Release removes the lease if this owner still holds it and reports what it
// found. A release queued behind another operation of this handle waits for it;
// if ctx ends first, Release returns ErrReleasePending and the release still runs
// once that operation finishes. An uncertain outcome returns an ErrUncertain
// error and leaves the handle failing closed; calling Release again retries.
func (h *handle) Release(ctx context.Context) (ReleaseResult, error) {
	if h.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	select {
	case h.op <- struct{}{}:
	case <-ctx.Done():
		go func() {
			h.op <- struct{}{}
			defer h.end()
			cctx, cancel := context.WithTimeout(context.Background(), h.c.cleanup)
			defer cancel()
			if _, err := h.releaseOnce(cctx); err != nil {
				h.c.logger.Warn("prim: queued release failed; the lease expires server-side", "key", h.key, "err", err)
			}
		}()
		return 0, fmt.Errorf("%w: %w", ErrReleasePending, ctx.Err())
	}
	defer h.end()
	return h.releaseOnce(ctx)
}

// releaseOnce runs the owner-checked release; the caller holds the op slot.
func (h *handle) releaseOnce(ctx context.Context) (ReleaseResult, error) {
	if h.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	n, err := h.script.release.Run(ctx, h.c.client, []string{h.key}, h.args(0)...).Int64()
	if err != nil {
		if uncertain(err) {
			h.setState(stateUncertain)
			h.c.m.add(ctx, h.c.m.uncertain, h.kind, "release")
			return 0, fmt.Errorf("%w: releasing %q: %w", ErrUncertain, h.key, err)
		}
		return 0, fmt.Errorf("prim: release %q: %w", h.key, err)
	}
	h.setState(stateReleased)
	var r ReleaseResult
	switch n {
	case 1:
		r = Released
	case 0:
		r = AlreadyReleased
	default:
		r = NotOwned
	}
	h.c.m.add(ctx, h.c.m.release, h.kind, r.String())
	return r, nil
}

// Close releases the lease best-effort (owner-checked, bounded by the
// Coordinator's clean-up timeout). It is idempotent and safe to call from several
// goroutines; it never deletes another owner's lease.
func (h *handle) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.c.cleanup)
		defer cancel()
		_, err := h.Release(ctx)
		if errors.Is(err, ErrReleasePending) {
			err = nil
		}
		h.closeErr = err
	})
	return h.closeErr
}
