package mutants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Redlock mutants, run by the redlock scenarios (scenarios.RedlockImpl): one
// counts a node that timed out as a success, one renews on a minority, one
// forgets the drift allowance in the validity it claims, one the time the
// acquisition took.

func init() {
	scenarios.RegisterRedlockImpl(Redlock{})
	scenarios.RegisterRedlockImpl(Redlock{TimeoutCountsAsSuccess: true})
	scenarios.RegisterRedlockImpl(Redlock{RenewsOnMinority: true})
	scenarios.RegisterRedlockImpl(Redlock{IgnoresDrift: true})
	scenarios.RegisterRedlockImpl(Redlock{IgnoresElapsed: true})
}

// Redlock is the Redlock algorithm of the description, written small: SET NX
// PX with one random token on every node in parallel, each node bounded by
// redlockNodeTimeout, a majority with positive validity (ttl − elapsed −
// drift, drift = 0.01·ttl + 2ms); a failed attempt removes its token
// (owner-checked) from every node; renewals and releases owner-checked on
// every node, a majority needed. With no flag set it is correct (the
// reference the tests run beside the mutants); each flag breaks one rule.
type Redlock struct {
	// TimeoutCountsAsSuccess: a node that did not answer in time counts as
	// having set the token, so a client cut from a majority "acquires" on
	// the one node it reaches.
	TimeoutCountsAsSuccess bool
	// RenewsOnMinority: a renewal confirmed by any node counts as renewed,
	// so a holder cut from a majority keeps a lease the others take.
	RenewsOnMinority bool
	// IgnoresDrift: the validity claimed leaves out the drift allowance.
	IgnoresDrift bool
	// IgnoresElapsed: the validity claimed runs from the quorum's answer,
	// not from before the first request: ttl − drift, leaving out the time
	// the acquisition took.
	IgnoresElapsed bool
}

// redlockNodeTimeout bounds each node's command (prim's default).
const redlockNodeTimeout = 100 * time.Millisecond

// Name implements scenarios.RedlockImpl.
func (m Redlock) Name() string {
	switch {
	case m.TimeoutCountsAsSuccess:
		return "mutant-redlock-timeout-counts-as-success"
	case m.RenewsOnMinority:
		return "mutant-redlock-renews-on-minority"
	case m.IgnoresDrift:
		return "mutant-redlock-ignores-drift"
	case m.IgnoresElapsed:
		return "mutant-redlock-ignores-elapsed"
	}
	return "reference-redlock"
}

// UncertainRenewalReleases: a renewal that does not reach a quorum ends the
// lease and removes the token from every node it reaches, at once, inside
// Renew (as prim's does), so another client can take the lock before Renew
// returns; the checkers end the holder's window at the renewal's invocation
// (models.Options.UncertainRenewalReleases). Without it they held the holder
// to the lease it had just surrendered, and called the next grant an overlap.
// The mutants declare it too: each breaks a rule the checkers catch anyway
// (a renewal on a minority returns true, so no window is cut for it).
func (Redlock) UncertainRenewalReleases() bool { return true }

// DriftAllowance implements scenarios.RedlockImpl: what the algorithm
// declares (the mutant that ignores it declares it too).
func (Redlock) DriftAllowance(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
}

var (
	rlRenew = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	rlDel   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// nodeAnswer is one node's answer: ok (set, renewed, removed), a definite
// refusal (held by another owner, not ours), or err (failed or too slow;
// timedOut when it did not answer within the node timeout).
type nodeAnswer struct {
	ok       bool
	err      error
	timedOut bool
}

// onEach runs f on every node in parallel, each bounded by the node
// timeout: a node that has not answered by then counts as timed out (its
// command goes on; the caller does not wait for it). f's context ends at
// the node timeout too, so that go-redis, which keeps a command waiting for
// its reply up to ReadTimeout whatever the context (ContextTimeoutEnabled
// is off by default), does not resend it after that (its retries check the
// context): a SET NX resent seconds after the attempt gave up would plant a
// token nobody removes (until its ttl), found by the leak scan.
func onEach(ctx context.Context, nodes []redis.UniversalClient, f func(ctx context.Context, c redis.UniversalClient) (bool, error)) []nodeAnswer {
	out := make([]nodeAnswer, len(nodes))
	var wg sync.WaitGroup
	for i, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan nodeAnswer, 1)
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redlockNodeTimeout)
			go func() {
				defer cancel()
				ok, err := f(nctx, c)
				ch <- nodeAnswer{ok: ok, err: err}
			}()
			t := time.NewTimer(redlockNodeTimeout)
			defer t.Stop()
			select {
			case a := <-ch:
				if errors.Is(a.err, context.DeadlineExceeded) && ctx.Err() == nil {
					// The node's own bound ran out (go-redis waiting for a
					// connection, say) before the timer fired: a timeout.
					a = nodeAnswer{err: errors.New("node timeout"), timedOut: true}
				}
				out[i] = a
			case <-t.C:
				out[i] = nodeAnswer{err: errors.New("node timeout"), timedOut: true}
			case <-ctx.Done():
				out[i] = nodeAnswer{err: ctx.Err()}
			}
		}()
	}
	wg.Wait()
	return out
}

// TryAcquire implements scenarios.RedlockImpl.
func (m Redlock) TryAcquire(ctx context.Context, nodes []redis.UniversalClient, key string, ttl time.Duration) (scenarios.RedlockHeld, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	owner := hex.EncodeToString(b[:])
	start := time.Now()
	answers := onEach(ctx, nodes, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		return c.SetNX(ctx, key, owner, ttl).Result()
	})
	n := 0
	for _, a := range answers {
		if a.ok || a.timedOut && m.TimeoutCountsAsSuccess {
			n++
		}
	}
	drift := m.DriftAllowance(ttl)
	if m.IgnoresDrift {
		drift = 0
	}
	h := &rlHeld{m: m, nodes: nodes, key: key, owner: owner}
	if n >= len(nodes)/2+1 && ttl-time.Since(start)-drift > 0 {
		from := start
		if m.IgnoresElapsed {
			from = time.Now()
		}
		h.until = from.Add(ttl - drift)
		return h, nil
	}
	h.remove(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", scenarios.ErrUncertain, ctx.Err())
	}
	return nil, fmt.Errorf("%w: %d of %d nodes", scenarios.ErrContended, n, len(nodes))
}

type rlHeld struct {
	m     Redlock
	nodes []redis.UniversalClient
	key   string
	owner string
	mu    sync.Mutex
	until time.Time
}

func (h *rlHeld) Owner() string { return h.owner }

func (h *rlHeld) Validity() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(0, time.Until(h.until))
}

// remove deletes the token, owner-checked, from every node; it reports how
// many answered (removed or not ours).
func (h *rlHeld) remove(ctx context.Context) int {
	answered := 0
	for _, a := range onEach(ctx, h.nodes, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		n, err := rlDel.Run(ctx, c, []string{h.key}, h.owner).Int64()
		return n == 1, err
	}) {
		if a.err == nil {
			answered++
		}
	}
	return answered
}

func (h *rlHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	start := time.Now()
	answers := onEach(ctx, h.nodes, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		n, err := rlRenew.Run(ctx, c, []string{h.key}, h.owner, ttl.Milliseconds()).Int64()
		return n == 1, err
	})
	n, failed := 0, 0
	for _, a := range answers {
		switch {
		case a.ok:
			n++
		case a.err != nil:
			failed++
		}
	}
	need := len(h.nodes)/2 + 1
	if h.m.RenewsOnMinority {
		need = 1
	}
	if n >= need {
		h.mu.Lock()
		h.until = start.Add(ttl - h.m.DriftAllowance(ttl))
		h.mu.Unlock()
		return true, nil
	}
	h.mu.Lock()
	h.until = time.Time{}
	h.mu.Unlock()
	h.remove(context.WithoutCancel(ctx))
	if refused := len(h.nodes) - n - failed; refused >= len(h.nodes)/2+1 {
		return false, nil // a majority answered: not ours
	}
	return false, fmt.Errorf("%w: %d of %d nodes did not answer the renewal", scenarios.ErrUncertain, failed, len(h.nodes))
}

func (h *rlHeld) Release(ctx context.Context) (string, error) {
	h.mu.Lock()
	h.until = time.Time{}
	h.mu.Unlock()
	if h.remove(ctx) >= len(h.nodes)/2+1 {
		return history.ValueGone, nil
	}
	return "", fmt.Errorf("%w: no majority answered the release", scenarios.ErrUncertain)
}
