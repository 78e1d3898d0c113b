package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/prim"
)

// Redlock implementations: the redlock family drives them through
// RedlockImpl on an independent set of servers (one client per node and
// process, Env.NodeClients). Only they run the redlock scenarios
// (Scenario.Redlock), and they run nothing else.

// RedlockImpl adapts one Redlock implementation to the redlock workload.
type RedlockImpl interface {
	Name() string
	// TryAcquire attempts the lock named key once across nodes (one client
	// per independent deployment), leased for ttl. It returns ErrContended
	// when the lock was definitely not granted (contended, no quorum, no
	// validity left: the implementation cleaned up and returns nothing), an
	// error matching ErrUncertain (or prim.ErrUncertain) when the outcome is
	// unknown, or another error.
	TryAcquire(ctx context.Context, nodes []redis.UniversalClient, key string, ttl time.Duration) (RedlockHeld, error)
	// DriftAllowance is what the implementation declares it sets aside for
	// clock drift on a lease of ttl: the validity it may claim is at most
	// ttl minus it, less the time the acquisition took (the
	// redlock-validity check holds it to that).
	DriftAllowance(ttl time.Duration) time.Duration
}

// RedlockHeld is an acquired Redlock lease.
type RedlockHeld interface {
	// Owner is the owner token the acquisition sent to every node.
	Owner() string
	// Validity is the local estimate of the validity left: the holder stops
	// using the lock when it runs out.
	Validity() time.Duration
	// Renew extends the lease to ttl on a quorum: true when renewed, false
	// when the lease is no longer this holder's; an error when no quorum
	// answered (the outcome on the others is unknown).
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	// Release returns one of history.ValueReleased, ValueAlreadyReleased,
	// ValueNotOwned, or ValueGone when the implementation cannot tell them
	// apart (prim's: a quorum answered).
	Release(ctx context.Context) (string, error)
}

// errNotGranted marks an acquisition that definitely did not happen for
// lack of a quorum of answers (nodes failed or too slow, or no validity
// left), as opposed to contention (ErrContended): the implementation cleaned
// up, nothing is held, but the service was not answered.
var errNotGranted = errors.New("not granted")

var redlockImpls = map[string]RedlockImpl{}

// RegisterRedlockImpl adds a Redlock implementation under its Name, for the
// redlock scenarios: scenarios/mutants registers its reference and its
// deliberately broken ones this way.
func RegisterRedlockImpl(l RedlockImpl) { redlockImpls[l.Name()] = l }

// RedlockMutants lists the registered Redlock implementations (the
// reference and the mutants), by name.
func RedlockMutants() []string { return registered(redlockImpls) }

// lookupRedlock returns the named Redlock implementation: prim's, the
// redsync peer on the same nodes, or a registered one.
func lookupRedlock(name string) (RedlockImpl, bool) {
	switch name {
	case "", "prim":
		return &primRedlock{}, true
	case "redsync":
		return redsyncQuorum{}, true
	}
	l, ok := redlockImpls[name]
	return l, ok
}

// redlockNodeTimeout is the node timeout every Redlock implementation of a
// run uses: prim's default.
const redlockNodeTimeout = prim.DefaultNodeTimeout

// primRedlock is prim's Redlock: one group per process (its node clients),
// as a service has one, every group logging through the run's logger.
type primRedlock struct {
	log    *slog.Logger
	mu     sync.Mutex
	groups map[*redis.UniversalClient]*prim.RedlockGroup
}

func (p *primRedlock) setLogger(l *slog.Logger) { p.log = l }

// close waits (a few seconds at most) for the run's groups' background work,
// before the topology closes their clients.
func (p *primRedlock) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, g := range p.groups {
		_ = g.WaitCleanups(ctx)
	}
}
func (*primRedlock) Name() string { return "prim" }

// UncertainRenewalReleases: a Redlock renewal that does not reach a quorum
// ends the lease and removes its token from every node it can
// (models.Options.UncertainRenewalReleases).
func (*primRedlock) UncertainRenewalReleases() bool { return true }

func (*primRedlock) DriftAllowance(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*prim.DefaultClockDriftFactor) + prim.RedlockDriftFixed
}

func (p *primRedlock) group(nodes []redis.UniversalClient) (*prim.RedlockGroup, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groups == nil {
		p.groups = map[*redis.UniversalClient]*prim.RedlockGroup{}
	}
	if g := p.groups[&nodes[0]]; g != nil {
		return g, nil
	}
	opts := []prim.Option{prim.WithNodeTimeout(redlockNodeTimeout)}
	if p.log != nil {
		opts = append(opts, prim.WithLogger(p.log))
	}
	g, err := prim.NewRedlockGroup(nodes, opts...)
	if err != nil {
		return nil, err
	}
	p.groups[&nodes[0]] = g
	return g, nil
}

func (p *primRedlock) TryAcquire(ctx context.Context, nodes []redis.UniversalClient, key string, ttl time.Duration) (RedlockHeld, error) {
	g, err := p.group(nodes)
	if err != nil {
		return nil, err
	}
	l, err := g.TryAcquire(ctx, key, ttl)
	var rerr *prim.RedlockError
	switch {
	case err == nil:
		return primRedlockHeld{l}, nil
	case errors.As(err, &rerr) && (errors.Is(err, prim.ErrNoQuorum) || errors.Is(err, prim.ErrValidityExpired)):
		// Not granted for lack of answers in time: prim released the
		// attempt's token wherever it may be.
		return nil, fmt.Errorf("%w: %w", errNotGranted, err)
	case errors.As(err, &rerr):
		return nil, fmt.Errorf("%w: %w", ErrContended, err) // held by another owner on a majority
	}
	return nil, err
}

type primRedlockHeld struct{ l *prim.RedlockLease }

func (h primRedlockHeld) Owner() string           { return h.l.OwnerToken() }
func (h primRedlockHeld) Validity() time.Duration { return h.l.RemainingEstimate() }
func (h primRedlockHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ok, err := h.l.Renew(ctx, ttl)
	if err != nil {
		// No quorum: the renewal may have landed on some nodes; prim ended
		// the lease and cleans its token up.
		return false, fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	return ok, nil
}
func (h primRedlockHeld) Release(ctx context.Context) (string, error) {
	ok, err := h.l.Release(ctx)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrUncertain, err)
	case !ok:
		return "", fmt.Errorf("%w: no quorum answered the release", ErrUncertain)
	}
	// A quorum answered removed, already absent or another owner's: the
	// token is gone, which says nothing of whether it still held the lock.
	return history.ValueGone, nil
}

// redsyncQuorum is github.com/go-redsync/redsync on the same nodes: one
// pool per node client, a mutex per acquisition (one try), its default
// drift factor (0.01, and no fixed part).
type redsyncQuorum struct{}

func (redsyncQuorum) Name() string { return "redsync" }
func (redsyncQuorum) DriftAllowance(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * 0.01)
}

func (redsyncQuorum) TryAcquire(ctx context.Context, nodes []redis.UniversalClient, key string, ttl time.Duration) (RedlockHeld, error) {
	pools := make([]rsredis.Pool, len(nodes))
	for i, c := range nodes {
		pools[i] = goredis.NewPool(c)
	}
	m := redsync.New(pools...).NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1),
		redsync.WithTimeoutFactor(float64(redlockNodeTimeout)/float64(ttl)))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case err == nil:
		return rsQuorumHeld{m}, nil
	case errors.Is(err, redsync.ErrFailed), errors.As(err, &taken):
		return nil, fmt.Errorf("%w: %w", ErrContended, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	// Errors from nodes (a multierror): redsync releases what it took.
	return nil, fmt.Errorf("%w: %w", errNotGranted, err)
}

type rsQuorumHeld struct{ m *redsync.Mutex }

func (h rsQuorumHeld) Owner() string           { return h.m.Value() }
func (h rsQuorumHeld) Validity() time.Duration { return time.Until(h.m.Until()) }
func (h rsQuorumHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ok, err := h.m.ExtendContext(ctx)
	var node *redsync.RedisError
	switch {
	case ok:
		return true, nil
	case errors.Is(err, redsync.ErrExtendFailed):
		// A majority extended it, too late: the keys were extended.
		return false, fmt.Errorf("%w: %w", ErrUncertain, err)
	case errors.As(err, &node):
		return false, fmt.Errorf("%w: %w", ErrUncertain, err) // a node did not answer
	}
	return false, nil // a majority answered: not ours
}
func (h rsQuorumHeld) Release(ctx context.Context) (string, error) {
	ok, err := h.m.UnlockContext(ctx)
	var node *redsync.RedisError
	var taken *redsync.ErrNodeTaken
	switch {
	case ok:
		return history.ValueReleased, nil
	case errors.As(err, &node):
		return "", fmt.Errorf("%w: %w", ErrUncertain, err)
	case errors.As(err, &taken):
		return history.ValueNotOwned, nil
	case errors.Is(err, redsync.ErrLockAlreadyExpired):
		return history.ValueAlreadyReleased, nil
	}
	return "", fmt.Errorf("%w: %w", ErrUncertain, err)
}
