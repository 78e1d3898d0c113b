package prim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// State is what a handle knows about its ownership.
type State int

// The states of a handle. Only StateHeld allows protected work.
const (
	// StateHeld: held, and the local estimate has time left.
	StateHeld State = iota + 1
	// StateEstimateEnded: no renewal came in time and the local estimate ran
	// out. Redis may still hold the lease (a hash-field lease can still be
	// renewed: Renew asks Redis), but protected work must stop.
	StateEstimateEnded
	// StateUncertain: a renewal or release outcome is unknown; the handle fails
	// closed. Release settles it.
	StateUncertain
	// StateLost: Redis said this owner no longer holds the lease.
	StateLost
	// StateReleased: released by this handle.
	StateReleased
)

func (s State) String() string {
	switch s {
	case StateHeld:
		return "held"
	case StateEstimateEnded:
		return "estimate-ended"
	case StateUncertain:
		return "uncertain"
	case StateLost:
		return "lost"
	case StateReleased:
		return "released"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ErrOwnershipEnded is the cause of a context made by a handle's Context
// method once ownership ended (see Done).
var ErrOwnershipEnded = errors.New("prim: lease ownership ended (local estimate ran out, lost, released or uncertain)")

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
	renew, verify, release *luaScript
	// renewNeedsEstimate: Renew answers false without I/O once the local estimate
	// has run out (fenced locks). Hash-field leases ask Redis instead.
	renewNeedsEstimate bool
	// plainKey: the lease is a whole string key, so release and renewal have
	// one-command forms (DELEX … IFEQ, SET … IFEQ … PX) where the node has
	// them. A hash-field lease has none: no command compares a field's value.
	plainKey bool
	// renewFailureLoses: a renewal that fails (error reply) or is uncertain
	// marks the handle lost rather than leaving it unchanged or uncertain
	// (read-write leases).
	renewFailureLoses bool
}

var fencedScripts = &leaseScripts{renew: scriptLeaseRenew, verify: scriptLeaseVerify, release: scriptLeaseRelease,
	renewNeedsEstimate: true, plainKey: true}

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

	mu        sync.Mutex
	deadline  time.Time // local estimate of the lease end, from before the request was sent
	state     lockState
	doneTimer // Done: closed when ownership ends (mu)

	closeOnce sync.Once
	closeErr  error
}

// newHandle takes the owner token boxed (any holding a string), as it was passed
// to the acquisition script, so it is boxed once for the handle's lifetime.
func newHandle(c *Coordinator, kind, key string, owner any, extra []any, deadline time.Time, s *leaseScripts) handle {
	return handle{c: c, kind: kind, key: key, owner: owner, extra: extra, script: s,
		op: make(chan struct{}, 1), deadline: deadline, doneTimer: newDoneTimer()}
}

// start arms the deadline timer of a handle about to be returned.
func (h *handle) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armLocked(&h.mu, &h.deadline)
}

func (h *handle) args(ttl time.Duration) []any {
	a := make([]any, 2, 2+len(h.extra))
	a[0], a[1] = h.owner, ttl.Milliseconds()
	return append(a, h.extra...)
}

// OwnerToken is the value that identifies this owner in Redis: the random
// owner token (for a fenced lock followed by ":" and the fencing token, exactly
// as the lease key holds it).
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

// State reports what the handle knows now: StateHeld while the local estimate
// has time left, StateEstimateEnded once it ran out, or the lost, uncertain or
// released state an operation left it in.
func (h *handle) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case stateUncertain:
		return StateUncertain
	case stateLost:
		return StateLost
	case stateReleased:
		return StateReleased
	}
	if !time.Now().Before(h.deadline) {
		return StateEstimateEnded
	}
	return StateHeld
}

// Done returns a channel that is closed when ownership ends for this handle:
// the local estimate ran out without a renewal, Redis said the lease is lost,
// a renewal or release became uncertain, or the handle released it. Stop
// protected work when it is closed. It stays closed: a hash-field lease renewed
// after its estimate ran out needs a new handle for its protected work (see
// State).
func (h *handle) Done() <-chan struct{} { return h.done }

// Context returns a context derived from parent that is cancelled, with cause
// ErrOwnershipEnded (context.Cause), when Done is closed: run the protected
// work under it. Call the CancelFunc when the work is over.
func (h *handle) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-h.done:
			cancel(ErrOwnershipEnded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

func (h *handle) setState(s lockState) {
	h.mu.Lock()
	h.state = s
	if s != stateHeld {
		h.endLocked()
	}
	h.mu.Unlock()
}

// failClosed marks a held handle uncertain (a later definite answer, such as a
// background release that completed, is kept).
func (h *handle) failClosed() {
	h.mu.Lock()
	if h.state == stateHeld {
		h.state = stateUncertain
		h.endLocked()
	}
	h.mu.Unlock()
}

// renewFailed marks the handle lost after a failed or uncertain renewal, for
// the leases whose rules say so (renewFailureLoses); a later definite answer
// (a background release that completed) is kept.
func (h *handle) renewFailed() {
	if !h.script.renewFailureLoses {
		return
	}
	h.mu.Lock()
	if h.state == stateHeld || h.state == stateUncertain {
		h.state = stateLost
		h.endLocked()
	}
	h.mu.Unlock()
}

func (h *handle) getState() lockState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// begin waits for the handle's other operation to finish. A context already
// done gets its error and nothing else happens.
func (h *handle) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case h.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *handle) end() { <-h.op }

type renewResult struct {
	fc   *fenceConn
	n    int64
	err  error
	sent time.Time
}

// Renew extends the lease to ttl from now, only while this owner holds it; a
// fenced lock keeps its fencing token. It returns:
//
//	true, nil              renewed: the estimate now runs ttl from before the request
//	false, nil             not renewed: Redis says this owner no longer holds it
//	                       (State: StateLost), the handle was already lost, released
//	                       or uncertain, or — for a fenced lock — the local estimate
//	                       had run out (StateEstimateEnded; no I/O)
//	false, ErrUncertain    the outcome is unknown; the handle fails closed
//	false, other error     nothing happened: invalid ttl, a context already done,
//	                       or a definite server refusal (ErrServerRefused …)
//
// A hash-field lease asks Redis even after the local estimate ran out, so it
// can still renew a field that outlived the estimate. A read-write lease asks
// Redis too, and any failed or uncertain renewal marks it lost (StateLost).
//
// The renewal runs on a dedicated connection and returns by ctx's deadline
// whatever the client's options. If its outcome is uncertain the handle fails
// closed, and in the background (bounded by the clean-up timeout, with the
// handle's other operations waiting for it) the connection is fenced with
// CLIENT KILL from another connection — so the renewal cannot run later — and
// an owner-checked release cleans up.
func (h *handle) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := validTTL(ttl); err != nil {
		return false, err
	}
	if err := h.begin(ctx); err != nil {
		return false, err
	}
	if st := h.getState(); st != stateHeld {
		h.end()
		return false, nil
	}
	if h.script.renewNeedsEstimate && h.RemainingEstimate() <= 0 {
		h.end()
		h.c.m.add(ctx, h.c.m.renew, h.kind, "expired-locally")
		return false, nil
	}
	settle := func(r renewResult) {
		h.settleUncertain(r.fc)
		h.end()
	}
	r, cerr := boundedOn(h.c.bg, ctx, func(ctx context.Context) renewResult {
		sent := time.Now()
		fc, cmd, err := h.c.fences.runWith(ctx, h.key, func(ctx context.Context, fc *fenceConn) *redis.Cmd {
			return h.renewOn(ctx, fc, ttl)
		})
		if err != nil {
			return renewResult{err: err, sent: sent}
		}
		n, err := cmd.Int64()
		return renewResult{fc: fc, n: n, err: err, sent: sent}
	}, settle)
	if cerr != nil {
		h.uncertain(ctx, "renew", cerr)
		h.renewFailed()
		return false, fmt.Errorf("%w: renewing %q: %w", ErrUncertain, h.key, cerr)
	}
	if r.err != nil {
		if r.fc != nil && uncertain(r.err) {
			h.uncertain(ctx, "renew", r.err)
			h.renewFailed()
			h.c.goCleanup(func() { settle(r) })
			return false, fmt.Errorf("%w: renewing %q: %w", ErrUncertain, h.key, r.err)
		}
		// No connection (the renewal was never sent), or the server's answer.
		defer h.end()
		if r.fc != nil {
			h.c.fences.put(r.fc)
		}
		h.c.m.add(ctx, h.c.m.renew, h.kind, "error")
		h.renewFailed()
		return false, fmt.Errorf("prim: renew %q: %w", h.key, serverError(r.err))
	}
	defer h.end()
	h.c.fences.put(r.fc)
	if r.n != 1 {
		h.setState(stateLost)
		h.c.m.add(ctx, h.c.m.renew, h.kind, "not-owned")
		return false, nil
	}
	h.mu.Lock()
	h.deadline = r.sent.Add(ttl)
	h.movedLocked(&h.deadline)
	h.mu.Unlock()
	h.c.m.add(ctx, h.c.m.renew, h.kind, "renewed")
	return true, nil
}

// renewOn sends the owner-checked renewal on a dedicated connection: for a
// plain-key lease SET key owner IFEQ owner PX ttl where the node has it (the
// value, and so the fencing token, is written over itself; a missing key is
// not created), else the renewal script. The answer is the script's: 1
// renewed, 0 not this owner's (a key of another type included, as the
// script's GET finds no string of ours). Any other error reply to SET IFEQ
// means SET did not run: the script follows on the same connection, in the
// same call. That covers the node lacking it (older servers: "ERR syntax
// error", the only answer recorded, with "unknown command"), an ACL refusal
// (NOPERM) and a server out of memory, which refuses SET ("OOM command not
// allowed", before SET's parsing on redis-7.0/8.0) but not the script's
// PEXPIRE. A lost reply or a timeout is no answer: the call is uncertain.
func (h *handle) renewOn(ctx context.Context, fc *fenceConn, ttl time.Duration) *redis.Cmd {
	if h.script.plainKey {
		node := nodeOf(fc.node)
		if h.c.caps.use(node, capSetIfeq) {
			cmd := redis.NewCmd(ctx, "set", h.key, h.owner, "ifeq", h.owner, "px", ttl.Milliseconds())
			_ = fc.conn.Process(ctx, noRetryCmd{cmd})
			err := cmd.Err()
			switch {
			case err == nil:
				return intCmd(ctx, 1)
			case errors.Is(err, redis.Nil), notAString(err):
				return intCmd(ctx, 0)
			case errorReply(err):
				// SET did not run: the script below, on the same connection.
				h.c.caps.learn(node, capSetIfeq, err)
			default:
				return cmd
			}
		}
	}
	return evalScript(ctx, fc.conn, h.script.renew, false, []string{h.key}, h.args(ttl)...)
}

// intCmd is a command answered n.
func intCmd(ctx context.Context, n int64) *redis.Cmd {
	c := redis.NewCmd(ctx)
	c.SetVal(n)
	return c
}

// uncertain fails the handle closed and records why.
func (h *handle) uncertain(ctx context.Context, op string, err error) {
	h.failClosed()
	h.c.m.add(ctx, h.c.m.uncertain, h.kind, op)
	h.c.logger.WarnContext(ctx, "prim: "+op+" outcome uncertain; the handle fails closed", "key", h.key, "err", err)
}

// settleUncertain fences the dedicated connection an uncertain command ran on
// (when there is one) and then releases owner-checked. It runs in the
// background, with the operation slot held, bounded by the clean-up timeout
// for each step. If the fence cannot be confirmed nothing is released: the
// delayed command could still run after the release.
func (h *handle) settleUncertain(fc *fenceConn) {
	ctx := context.Background()
	if fc != nil {
		if err := h.c.fence(ctx, fc); err != nil {
			h.c.logger.Warn("prim: could not fence an uncertain command (CLIENT KILL); the lease expires server-side",
				"key", h.key, "client_id", fc.id, "err", err)
			return
		}
	}
	cctx, cancel := h.c.cleanupCtx()
	defer cancel()
	if _, err := h.releaseOnce(cctx); err != nil {
		h.c.logger.Warn("prim: owner-checked clean-up after an uncertain outcome failed; the lease expires server-side",
			"key", h.key, "err", err)
	}
}

type int64Result struct {
	n   int64
	err error
}

// VerifyStillHeld checks, at one instant, that this owner still holds the lease.
// It cannot promise ownership for any later write. A failed check (error,
// including ctx's end, by whose deadline it returns) leaves the handle
// unchanged.
func (h *handle) VerifyStillHeld(ctx context.Context) (bool, error) {
	if err := h.begin(ctx); err != nil {
		return false, err
	}
	switch h.getState() {
	case stateLost, stateReleased:
		h.end()
		return false, nil
	}
	r, cerr := bounded(ctx, func(ctx context.Context) int64Result {
		n, err := evalScript(ctx, h.c.client, h.script.verify, true, []string{h.key}, h.args(0)...).Int64()
		return int64Result{n, err}
	}, func(int64Result) { h.end() })
	if cerr != nil {
		return false, fmt.Errorf("prim: verify %q: %w", h.key, cerr)
	}
	defer h.end()
	if r.err != nil {
		return false, fmt.Errorf("prim: verify %q: %w", h.key, serverError(r.err))
	}
	if r.n == -1 {
		h.setState(stateLost)
		return false, nil
	}
	return true, nil
}

type releaseOutcome struct {
	r   ReleaseResult
	err error
}

// Release removes the lease if this owner still holds it and reports what it
// found. It returns by ctx's deadline. A context already done returns its
// error and changes nothing. A release queued behind another operation of this
// handle waits for it; if ctx ends first, Release returns ErrReleasePending and
// the release still runs once that operation finishes. An uncertain outcome
// (the release is never resent, so a lost reply cannot be mistaken for "it was
// already gone") returns an ErrUncertain error and leaves the handle failing
// closed; calling Release again retries.
func (h *handle) Release(ctx context.Context) (ReleaseResult, error) {
	if h.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case h.op <- struct{}{}:
	case <-ctx.Done():
		h.c.goCleanup(func() {
			h.op <- struct{}{}
			defer h.end()
			cctx, cancel := h.c.cleanupCtx()
			defer cancel()
			if _, err := h.releaseOnce(cctx); err != nil {
				h.c.logger.Warn("prim: queued release failed; the lease expires server-side", "key", h.key, "err", err)
			}
		})
		return 0, fmt.Errorf("%w: %w", ErrReleasePending, ctx.Err())
	}
	o, cerr := bounded(ctx, func(ctx context.Context) releaseOutcome {
		r, err := h.releaseOnce(ctx)
		return releaseOutcome{r, err}
	}, func(releaseOutcome) { h.end() })
	if cerr != nil {
		h.uncertain(ctx, "release", cerr)
		return 0, fmt.Errorf("%w: releasing %q: %w", ErrUncertain, h.key, cerr)
	}
	h.end()
	return o.r, o.err
}

// releaseOnce runs the owner-checked release; the caller holds the op slot.
func (h *handle) releaseOnce(ctx context.Context) (ReleaseResult, error) {
	if h.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	n, done, err := h.releaseFast(ctx)
	if !done {
		n, err = evalScript(ctx, h.c.client, h.script.release, false, []string{h.key}, h.args(0)...).Int64()
	}
	if err != nil {
		if uncertain(err) {
			h.failClosed()
			h.c.m.add(ctx, h.c.m.uncertain, h.kind, "release")
			return 0, fmt.Errorf("%w: releasing %q: %w", ErrUncertain, h.key, err)
		}
		return 0, fmt.Errorf("prim: release %q: %w", h.key, serverError(err))
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

// releaseFast releases a plain-key lease with DELEX key IFEQ owner where the
// node has it: 1 removed, -1 a value of another type (the release script's
// answer: its GET finds no string of ours). done false: the caller runs the
// release script, in the same call, always on the primary, atomically:
//
//   - DELEX answered 0 (removed nothing): the key is missing or another
//     owner's, which DELEX does not tell apart; the script does (0 gone, -1
//     another owner's, and removes our own value should a failover have put
//     back a replica that still had it). A plain read could go to a lagging
//     replica (a Cluster client's ReadOnly, RouteByLatency, RouteRandomly) and
//     answer what the script never could;
//   - any other error reply: DELEX did not run. Only the node's "unknown
//     command" is recorded (it lacks DELEX); an ACL refusal (NOPERM), an
//     out-of-memory refusal and the like change nothing but this call.
//
// DELEX goes with resends off, as the script does: a resend after a lost reply
// could not tell "I removed it" from "it was gone". A lost reply or a timeout
// is returned (done true): the release is uncertain.
func (h *handle) releaseFast(ctx context.Context) (n int64, done bool, err error) {
	if !h.script.plainKey {
		return 0, false, nil
	}
	node := h.c.nodeName(ctx, h.key)
	if !h.c.caps.use(node, capDelex) {
		return 0, false, nil
	}
	cmd := redis.NewIntCmd(ctx, "delex", h.key, "ifeq", h.owner)
	_ = h.c.client.Process(ctx, noRetryInt{cmd})
	n, err = cmd.Result()
	switch {
	case err == nil && n == 1:
		return 1, true, nil
	case err == nil:
		return 0, false, nil // removed nothing: the script tells gone from another owner's
	case notAString(err):
		return -1, true, nil
	case errorReply(err):
		h.c.caps.learn(node, capDelex, err) // DELEX did not run
		return 0, false, nil
	}
	return 0, true, err
}

// notAString reports the answer of DELEX or SET IFEQ on a key that holds
// another type than a string.
func notAString(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	m := re.Error()
	return strings.HasPrefix(m, "WRONGTYPE") || strings.HasPrefix(m, "ERR Key should be of string type")
}

// noRetryInt is an IntCmd go-redis never resends once written.
type noRetryInt struct{ *redis.IntCmd }

// NoRetry implements redis.Cmder.
func (noRetryInt) NoRetry() bool { return true }

// Close releases the lease best-effort (owner-checked, bounded by the
// Coordinator's clean-up timeout). It is idempotent and safe to call from several
// goroutines; it never deletes another owner's lease.
func (h *handle) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := h.c.cleanupCtx()
		defer cancel()
		_, err := h.Release(ctx)
		if errors.Is(err, ErrReleasePending) {
			err = nil
		}
		h.closeErr = err
	})
	return h.closeErr
}
