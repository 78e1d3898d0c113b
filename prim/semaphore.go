package prim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	scriptSemAcquire = loadScript("semaphore_acquire.lua")
	scriptSemRenew   = loadScript("semaphore_renew.lua")
	scriptSemVerify  = loadScript("semaphore_verify.lua")
	scriptSemRelease = loadScript("semaphore_release.lua")

	semaphoreScripts = &leaseScripts{renew: scriptSemRenew, verify: scriptSemVerify, release: scriptSemRelease}
)

// NoExpiry, given as a duration to [Semaphore.TryAcquire] or [Permit.Renew],
// asks for a permit that only a release ends. Such a permit has no server-side
// fallback: see the package documentation, "Semaphores".
const NoExpiry time.Duration = math.MaxInt64

// ErrInvalidCapacity: a semaphore's capacity must be positive. It matches
// ErrInvalidArgument too; nothing is sent.
var ErrInvalidCapacity = argError("semaphore capacity must be positive")

// ErrCapacityMismatch is returned by [Semaphore.TryAcquire] when the
// semaphore's live permits were taken with another capacity. Nothing was
// written (expired permits may have been pruned). errors.As with
// *CapacityMismatchError gives both capacities.
var ErrCapacityMismatch = errors.New("prim: semaphore capacity mismatch")

// CapacityMismatchError is the error of an acquisition whose capacity differs
// from the one the semaphore's live permits were taken with.
type CapacityMismatchError struct {
	Key       string // the semaphore key as stored (prefixed)
	Requested int    // the capacity of the acquisition
	Live      int    // the capacity of the live permits
}

func (e *CapacityMismatchError) Error() string {
	return fmt.Sprintf("prim: semaphore %q: capacity %d requested, live permits use capacity %d", e.Key, e.Requested, e.Live)
}

// Is matches ErrCapacityMismatch.
func (e *CapacityMismatchError) Is(target error) bool { return target == ErrCapacityMismatch }

// semBound bounds Close and the owner-token release that follows a failed
// renewal or release: about a second, whatever the caller's context.
const semBound = time.Second

// farFuture is the local deadline of a permit without expiry.
const farFuture = 100 * 365 * 24 * time.Hour

// Semaphore is a distributed counting semaphore on one key: at most its
// capacity of permits are live at once. Making one sends nothing; see
// [Coordinator.Semaphore].
type Semaphore struct {
	c        *Coordinator
	key      string
	capacity int
	err      error // an input error, returned by every acquisition
}

// Semaphore returns the semaphore at key with the given capacity. It does no
// I/O. An empty key (ErrEmptyKey) or a capacity below 1 (ErrInvalidCapacity) is
// returned by every TryAcquire, before anything is sent. Every contender of
// one key must use the same capacity; use the key for nothing else.
func (c *Coordinator) Semaphore(key string, capacity int) *Semaphore {
	s := &Semaphore{c: c, key: c.key(key), capacity: capacity}
	switch {
	case key == "":
		s.err = invalid(ErrEmptyKey, "semaphore key must be non-empty")
	case capacity <= 0:
		s.err = invalid(ErrInvalidCapacity, strconv.Itoa(capacity))
	}
	return s
}

// Key returns the semaphore key as stored on the server (prefixed).
func (s *Semaphore) Key() string { return s.key }

// Capacity returns the semaphore's capacity.
func (s *Semaphore) Capacity() int { return s.capacity }

// Permit is one held permit of a semaphore, with its own random owner token.
// Renew, VerifyStillHeld and Release are owner-checked, so a permit that
// expired can never change another owner's. Its methods are safe for
// concurrent use and run one at a time; their failure rules are the package
// documentation's ("Semaphores").
type Permit struct {
	handle
	noExpiry    bool // guarded by mu
	surrendered bool // guarded by mu: a renewal failed
	bgOnce      sync.Once
}

// Key returns the semaphore key as stored on the server (prefixed).
func (p *Permit) Key() string { return p.key }

func validSemTTL(ttl time.Duration) error {
	if ttl == NoExpiry {
		return nil
	}
	return validTTL(ttl)
}

// ttlArg is a duration as the scripts take it: ms, 0 for no expiry.
func ttlArg(ttl time.Duration) int64 {
	if ttl == NoExpiry {
		return 0
	}
	return ttl.Milliseconds()
}

func deadlineFor(sent time.Time, ttl time.Duration) time.Time {
	if ttl == NoExpiry {
		return sent.Add(farFuture)
	}
	return sent.Add(ttl)
}

// TryAcquire takes one permit at once, or returns ErrNotAcquired when every
// permit is live; it never waits or polls. ttl is a whole number of
// milliseconds, at least 1ms, or NoExpiry. Input errors (ErrEmptyKey,
// ErrInvalidCapacity, ErrInvalidTTL) are returned before anything is sent. A
// different capacity than the live permits' is ErrCapacityMismatch. A key of
// another type is ErrWrongType.
//
// The acquisition runs on a dedicated connection (its user needs CLIENT INFO
// and CLIENT KILL). An uncertain outcome (ctx ended, a lost reply) is never
// replayed and never returned as acquired: the error matches ErrUncertain,
// and in the background the connection is fenced with CLIENT KILL, then the
// permit released by its owner token. A fence that cannot be confirmed within
// the clean-up window sends no release. An error reply (other than a
// capacity mismatch) is followed by an owner-token release before it is
// returned, as the script may have written before the error.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	if s.err != nil {
		return nil, s.err
	}
	if err := validSemTTL(ttl); err != nil {
		return nil, err
	}
	if err := notSent(ctx, "acquiring a permit of "+strconv.Quote(s.key)); err != nil {
		return nil, err
	}
	c := s.c
	p := &Permit{noExpiry: ttl == NoExpiry}
	sent := time.Now()
	p.handle = newHandle(c, "semaphore", s.key, any("P:"+newOwnerToken()), nil, deadlineFor(sent, ttl), semaphoreScripts)
	a, cerr := boundedOn(c.bg, ctx, func(ctx context.Context) leaseAttempt {
		fc, cmd, err := c.fences.run(ctx, s.key, scriptSemAcquire, []string{s.key}, p.owner, ttlArg(ttl), s.capacity)
		if err != nil {
			return leaseAttempt{err: err}
		}
		res, err := cmd.Slice()
		return leaseAttempt{fc: fc, res: res, err: err}
	}, p.settleAcquisition)
	if cerr == nil && a.err != nil && a.fc != nil && uncertain(a.err) {
		cerr = a.err
		c.goCleanup(func() { p.settleAcquisition(a) })
	}
	if cerr != nil {
		c.m.add(ctx, c.m.uncertain, "semaphore", "acquire")
		c.logger.WarnContext(ctx, "prim: semaphore acquisition outcome uncertain; fencing it and releasing by owner token",
			"key", s.key, "err", cerr)
		return nil, fmt.Errorf("%w: acquiring a permit of %q: %w", ErrUncertain, s.key, cerr)
	}
	if a.fc != nil {
		c.fences.put(a.fc)
	}
	if a.err != nil {
		c.m.add(ctx, c.m.acquire, "semaphore", "error")
		if a.fc != nil && !scriptRefused(a.err) {
			// The script may have written before the error: release first.
			if _, err := p.releaseBounded(); err != nil {
				p.background()
			}
		}
		return nil, fmt.Errorf("prim: acquire a permit of %q: %w", s.key, serverError(a.err))
	}
	status, val, err := parsePair(a.res)
	if err != nil {
		return nil, err
	}
	switch status {
	case 1:
		if ttl != NoExpiry && p.RemainingEstimate() <= 0 {
			c.m.add(ctx, c.m.acquire, "semaphore", "late")
			c.goCleanup(func() { _ = p.Close() })
			return nil, fmt.Errorf("%w: permit reply for %q arrived after the permit duration %v", ErrUncertain, s.key, ttl)
		}
		p.start()
		c.m.add(ctx, c.m.acquire, "semaphore", "acquired")
		return p, nil
	case 0:
		c.m.add(ctx, c.m.acquire, "semaphore", "contended")
		return nil, ErrNotAcquired
	case -1:
		c.m.add(ctx, c.m.acquire, "semaphore", "capacity-mismatch")
		live, _ := strconv.Atoi(val)
		return nil, &CapacityMismatchError{Key: s.key, Requested: s.capacity, Live: live}
	}
	c.m.add(ctx, c.m.acquire, "semaphore", "refused")
	if val == "wrongtype" {
		return nil, fmt.Errorf("%w: %q is not a sorted set", ErrWrongType, s.key)
	}
	return nil, fmt.Errorf("prim: acquire a permit of %q: %s", s.key, val)
}

// scriptRefused reports an error reply refusing the script command itself
// (EVALSHA or EVAL): the script never ran, so there is nothing to release.
func scriptRefused(err error) bool {
	m := err.Error()
	return strings.Contains(m, "'evalsha' command") || strings.Contains(m, "'eval' command")
}

// settleAcquisition settles, in the background, an acquisition whose caller
// was told the outcome is uncertain. If the command went out and its outcome
// is unknown, its connection is fenced with CLIENT KILL first (retrying for the
// clean-up window; if it never succeeds nothing is released, as the delayed
// acquisition could still recreate the permit afterwards). Then the permit is
// released by its owner token, retrying for the clean-up window.
func (p *Permit) settleAcquisition(a leaseAttempt) {
	c := p.c
	if a.fc == nil {
		return // nothing was sent
	}
	if a.err != nil && uncertain(a.err) {
		if err := c.retryCleanup(func(ctx context.Context) error { return c.fence(ctx, a.fc) }); err != nil {
			p.abandon("fence", err)
			return
		}
	} else {
		c.fences.put(a.fc)
	}
	if err := c.retryCleanup(p.releaseStep); err != nil {
		p.abandon("release", err)
	}
}

// RemainingEstimate is the local estimate of the time left on the permit,
// measured from before the acquisition (or last renewal) was sent: NoExpiry
// for a held permit without expiry, 0 once it is lost, released, surrendered
// or uncertain.
func (p *Permit) RemainingEstimate() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != stateHeld {
		return 0
	}
	if p.noExpiry {
		return NoExpiry
	}
	return max(0, time.Until(p.deadline))
}

// Surrendered reports whether the permit was given up locally: a renewal
// failed (the permit is then released by its owner token, with retries in the
// background) or the handle released it. Later renewals return false without
// I/O.
func (p *Permit) Surrendered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.surrendered || p.state == stateReleased
}

// Renew sets the permit's expiry to ttl from now (NoExpiry: none), only while
// this owner holds it. It returns:
//
//	true, nil     renewed
//	false, nil    not renewed: Redis says this owner holds no permit (State:
//	              StateLost), or the handle was lost, released, surrendered or
//	              uncertain (no I/O)
//	false, error  an invalid ttl or a ctx that ended while waiting for
//	              another operation of this permit: nothing changed. Any other
//	              error (the renewal was sent: a timeout, a cancellation, a lost
//	              reply, an error reply) surrenders the permit
//
// A renewal that started and failed surrenders the permit: it may still run on
// the server, and an error reply does not undo the writes made before it, so
// the permit's lifetime there is unknown. Before the error is returned the
// permit is released by its owner token, bounded to about a second (then
// retried in the background for the clean-up window); a renewal that runs
// late cannot create it again. The error matches ErrUncertain unless it is
// the server's error reply. Acquire a new permit to go on.
func (p *Permit) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := validSemTTL(ttl); err != nil {
		return false, err
	}
	if err := p.begin(ctx); err != nil {
		return false, err
	}
	if p.getState() != stateHeld {
		p.end()
		return false, nil
	}
	r, cerr := bounded(ctx, func(ctx context.Context) renewResult {
		sent := time.Now()
		n, err := evalScript(ctx, p.c.client, scriptSemRenew, true, []string{p.key}, p.owner, ttlArg(ttl)).Int64()
		return renewResult{n: n, err: err, sent: sent}
	}, func(renewResult) { p.end() })
	if cerr == nil {
		p.end()
		if r.err == nil {
			if r.n != 1 {
				p.markLost()
				p.c.m.add(ctx, p.c.m.renew, p.kind, "not-owned")
				return false, nil
			}
			p.mu.Lock()
			p.deadline, p.noExpiry = deadlineFor(r.sent, ttl), ttl == NoExpiry
			p.movedLocked(&p.deadline)
			p.mu.Unlock()
			p.c.m.add(ctx, p.c.m.renew, p.kind, "renewed")
			return true, nil
		}
	}
	err, uncertainErr := cerr, cerr != nil
	if err == nil {
		err, uncertainErr = serverError(r.err), uncertain(r.err)
	}
	p.mu.Lock()
	p.surrendered = true
	if p.state == stateHeld {
		p.state = stateUncertain
	}
	p.endLocked()
	p.mu.Unlock()
	p.c.m.add(ctx, p.c.m.renew, p.kind, "surrendered")
	p.c.logger.WarnContext(ctx, "prim: semaphore renewal failed; the permit is surrendered and released by its owner token",
		"key", p.key, "err", err)
	if _, rerr := p.releaseBounded(); rerr != nil {
		p.background()
	}
	if uncertainErr {
		return false, fmt.Errorf("%w: renewing a permit of %q (surrendered): %w", ErrUncertain, p.key, err)
	}
	return false, fmt.Errorf("prim: renew a permit of %q (surrendered): %w", p.key, err)
}

// markLost records Redis's answer that this owner holds no permit, unless the
// handle has released it meanwhile.
func (p *Permit) markLost() {
	p.mu.Lock()
	if p.state != stateReleased {
		p.state = stateLost
	}
	p.endLocked()
	p.mu.Unlock()
}

// VerifyStillHeld checks, at one instant, that this owner still holds the
// permit. It prunes expired permits, so it runs on the primary and needs write
// permission for the key. A failed or cancelled check returns its error and
// leaves the permit as it was: retry it.
func (p *Permit) VerifyStillHeld(ctx context.Context) (bool, error) {
	return p.handle.VerifyStillHeld(ctx)
}

// Release releases the permit by its owner token and reports what it found
// (Released, or AlreadyReleased when it had expired or was released before).
// It returns by ctx's deadline. If it fails or ctx ends (before or while it
// runs, or while another operation of the permit is in flight), one more
// owner-token release is sent, bounded to about a second whatever ctx, before
// the error is returned; if that one confirms, the permit is released (the
// result says how) and the error is still returned. If it cannot confirm
// either, the error matches ErrUncertain and the permit fails closed: keep it
// only to call Release again (or Close, which retries in the background).
func (p *Permit) Release(ctx context.Context) (ReleaseResult, error) {
	if p.getState() == stateReleased {
		return AlreadyReleased, nil
	}
	ferr := p.begin(ctx)
	if ferr == nil {
		o, cerr := bounded(ctx, func(ctx context.Context) releaseOutcome {
			r, err := p.releaseOnce(ctx)
			return releaseOutcome{r, err}
		}, func(releaseOutcome) { p.end() })
		if cerr == nil {
			p.end()
			if o.err == nil {
				return o.r, nil
			}
			ferr = o.err
		} else {
			ferr = cerr
		}
	}
	r, err := p.releaseBounded()
	if err != nil {
		p.failClosed()
		return 0, fmt.Errorf("%w: releasing a permit of %q: %w (the owner-token release that followed: %w)", ErrUncertain, p.key, ferr, err)
	}
	return r, fmt.Errorf("prim: release a permit of %q: %w (the owner-token release that followed confirmed it: %v)", p.key, ferr, r)
}

// Close releases the permit best-effort. It never fails (it returns nil) and
// waits about a second at most; if the release is not confirmed by then, it
// goes on in the background with capped, jittered back-off for the clean-up
// window (a minute, WithCleanupWindow; WaitCleanups waits for it), after which it gives up, counts it
// (prim.cleanup.abandoned) and logs a warning. It is idempotent.
func (p *Permit) Close() error {
	p.closeOnce.Do(func() {
		if p.getState() == stateReleased {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), semBound)
		defer cancel()
		if p.begin(ctx) == nil {
			o, cerr := bounded(ctx, func(ctx context.Context) releaseOutcome {
				r, err := p.releaseOnce(ctx)
				return releaseOutcome{r, err}
			}, func(releaseOutcome) { p.end() })
			if cerr == nil {
				p.end()
				if o.err == nil {
					return
				}
			}
		}
		p.failClosed()
		p.background()
	})
	return nil
}

// releaseBounded sends one owner-token release, bounded to semBound whatever
// the caller's context; a late answer still settles the handle's state.
func (p *Permit) releaseBounded() (ReleaseResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), semBound)
	defer cancel()
	return p.releaseStepResult(ctx)
}

func (p *Permit) releaseStepResult(ctx context.Context) (ReleaseResult, error) {
	// A release still in flight when its bound ends is awaited by
	// WaitCleanups: it may yet land.
	o, cerr := boundedOn(p.c.bg, ctx, func(ctx context.Context) releaseOutcome {
		r, err := p.releaseOnce(ctx)
		return releaseOutcome{r, err}
	}, nil)
	if cerr != nil {
		return 0, cerr
	}
	return o.r, o.err
}

func (p *Permit) releaseStep(ctx context.Context) error {
	_, err := p.releaseStepResult(ctx)
	return err
}

// background retries the owner-token release for the clean-up window, once
// per permit.
func (p *Permit) background() {
	p.bgOnce.Do(func() {
		p.c.goCleanup(func() {
			if err := p.c.retryCleanup(p.releaseStep); err != nil {
				p.abandon("release", err)
			}
		})
	})
}

// abandon records a background clean-up that gave up.
func (p *Permit) abandon(stage string, err error) {
	reason := cleanupReason(err)
	ctx := context.Background()
	p.c.m.abandonedAdd(ctx, p.kind, stage, reason)
	p.c.logger.Warn("prim: background clean-up gave up; the permit stays until it expires (a permit without expiry until it is removed)",
		"key", p.key, "owner", p.OwnerToken(), "stage", stage, "reason", reason, "err", err)
}

// cleanupReason classifies why a clean-up step failed, for the metric.
func cleanupReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrNoPermission):
		return "no-permission"
	case errors.Is(err, ErrServerRefused):
		return "refused"
	case errors.Is(err, ErrUncertain), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return "unreachable"
	}
	return "error"
}

// retryCleanup runs step, each attempt bounded to about a second, until it
// succeeds or the clean-up window is over, pausing between attempts with
// capped, jittered exponential back-off (50ms doubling to 5s, each pause
// between half and all of it). It returns the last error, or nil.
func (c *Coordinator) retryCleanup(step func(context.Context) error) error {
	end := time.Now().Add(c.window)
	pause := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), semBound)
		err := step(ctx)
		cancel()
		if err == nil {
			return nil
		}
		d := pause/2 + rand.N(pause/2+1)
		if time.Now().Add(d).After(end) {
			return err
		}
		time.Sleep(d)
		pause = min(2*pause, 5*time.Second)
	}
}
