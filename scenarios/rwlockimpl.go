package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// Read-write lease implementations: the rwlock family drives them through
// RWImpl, as the lock families drive theirs through LockImpl. Only they run
// the rwlock scenarios (Scenario.RW), and they run nothing else.

// RWImpl adapts one read-write lease implementation to the rwlock workload.
type RWImpl interface {
	Name() string
	// TryAcquire attempts, once, a read lease (write false) or a write lease
	// of key on client c, leased for ttl. It returns ErrContended when the
	// lease was definitely not granted, an error matching ErrUncertain (or
	// prim.ErrUncertain) when the outcome is unknown, or another error.
	TryAcquire(ctx context.Context, c redis.UniversalClient, key string, write bool, ttl time.Duration) (RWHeld, error)
}

// RWHeld is an acquired read or write lease: owner-checked renewal,
// verification and release, as Renewer and Held say.
type RWHeld interface {
	Renewer
	// Owner is the owner the acquisition sent (what the history records).
	Owner() string
	// Release returns one of history.ValueReleased, ValueAlreadyReleased,
	// ValueNotOwned.
	Release(ctx context.Context) (string, error)
}

var rwImpls = map[string]RWImpl{}

// RegisterRWImpl adds a read-write lease implementation under its Name, for
// the rwlock scenarios: scenarios/mutants registers its deliberately broken
// ones this way.
func RegisterRWImpl(l RWImpl) { rwImpls[l.Name()] = l }

// RWMutants lists the registered read-write lease implementations (the
// mutants), by name.
func RWMutants() []string {
	return registered(rwImpls)
}

// lookupRW returns the named read-write lease implementation.
func lookupRW(name string) (RWImpl, bool) {
	switch name {
	case "", "prim":
		return &primRW{}, true
	}
	l, ok := rwImpls[name]
	return l, ok
}

// primRW is prim's read-write leases, one prim.Coordinator per client, as a
// service would have.
type primRW struct {
	log    *slog.Logger
	mu     sync.Mutex
	coords map[redis.UniversalClient]*prim.Coordinator
}

func (p *primRW) setLogger(l *slog.Logger) { p.log = l }
func (*primRW) Name() string               { return "prim" }

func (p *primRW) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, write bool, ttl time.Duration) (RWHeld, error) {
	p.mu.Lock()
	co := coordinatorOf(&p.coords, c, p.log)
	p.mu.Unlock()
	acquire := co.TryAcquireReadLock
	if write {
		acquire = co.TryAcquireWriteLock
	}
	l, err := acquire(ctx, key, ttl)
	switch {
	case err == nil:
		return primRWHeld{l}, nil
	case errors.Is(err, prim.ErrNotAcquired):
		return nil, ErrContended
	case errors.Is(err, prim.ErrUncertain):
		return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	return nil, err
}

// UncertainRenewalReleases: a read-write lease whose renewal is uncertain
// is lost for its holder, and prim fences the renewal and releases the
// entry owner-checked in the background, unrecorded
// (models.Options.UncertainRenewalReleases).
func (*primRW) UncertainRenewalReleases() bool { return true }

type primRWHeld struct{ l *prim.RWLease }

func (h primRWHeld) Owner() string { return h.l.OwnerToken() }
func (h primRWHeld) Release(ctx context.Context) (string, error) {
	return primRelease(ctx, h.l.Release)
}
func (h primRWHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return h.l.Renew(ctx, ttl)
}
func (h primRWHeld) Verify(ctx context.Context) (bool, error) { return h.l.VerifyStillHeld(ctx) }

// PrimRWLease returns the prim lease behind an RWHeld of the prim
// implementation (for mutants that break one of its operations), or nil.
func PrimRWLease(h RWHeld) *prim.RWLease {
	if p, ok := h.(primRWHeld); ok {
		return p.l
	}
	return nil
}
