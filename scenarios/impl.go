package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/prim"
)

// LockImpl adapts one lock implementation to the workloads.
type LockImpl interface {
	Name() string
	// Fenced reports whether the implementation hands out fencing tokens; an
	// unfenced one writes to an unfenced resource.
	Fenced() bool
	// TryAcquire attempts the lock once on client c. It returns ErrContended,
	// an uncertain error (wrapping ErrUncertain) or another error.
	TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error)
}

// notALock stands for an implementation of another family (a rate limiter,
// semaphore, read-write lease, countdown latch or Redlock) where the runner
// expects a LockImpl: its name, no fencing, what it declares about uncertain
// renewals, and no lock (its own workload calls it directly).
type notALock struct {
	impl interface{ Name() string }
	what string // "a semaphore"…, for the error of TryAcquire
}

func (a notALock) Name() string { return a.impl.Name() }
func (notALock) Fenced() bool   { return false }

// UncertainRenewalReleases passes on what the implementation says
// (models.Options.UncertainRenewalReleases).
func (a notALock) UncertainRenewalReleases() bool {
	u, ok := a.impl.(interface{ UncertainRenewalReleases() bool })
	return ok && u.UncertainRenewalReleases()
}

func (a notALock) TryAcquire(context.Context, redis.UniversalClient, string, time.Duration) (Held, error) {
	return nil, fmt.Errorf("scenarios: %s is %s, not a lock", a.impl.Name(), a.what)
}

// Held is an acquired lock.
type Held interface {
	Token() int64 // 0 when unfenced
	Owner() string
	// Release returns one of history.ValueReleased, ValueAlreadyReleased,
	// ValueNotOwned.
	Release(ctx context.Context) (string, error)
}

// Renewer is a Held lock that can also be renewed and verified
// (owner-checked); the lock workloads exercise both when it is.
type Renewer interface {
	// Renew extends the lease to ttl: true when renewed, false when the
	// lease is no longer this holder's.
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	// Verify reports whether the lease is still this holder's.
	Verify(ctx context.Context) (bool, error)
}

// Waiter is a lock implementation that can also wait for the lock: the
// waiting-lock workload acquires through it (acquire_wait), so a waiting-lock
// scenario runs an implementation, a mutant included, only if it is a Waiter.
type Waiter interface {
	LockImpl
	// Waiting starts one run's waiting acquisitions (their connections and
	// watchers), logging to log; the run closes it when its workload ends.
	Waiting(log *slog.Logger) Waiting
}

// Waiting is one run's waiting acquisitions of a Waiter.
type Waiting interface {
	// Acquire waits on client c for the lock named key (leased for ttl)
	// until it is acquired or ctx ends. When ctx ends before an attempt
	// that may have taken the lock, the error matches ctx's error and not
	// ErrUncertain (nothing happened); an attempt of unknown outcome gives
	// an error matching ErrUncertain (or prim.ErrUncertain).
	Acquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error)
	// Close ends the run's waits and frees what they hold.
	Close()
}

// ErrContended is an acquisition that definitely did not happen.
var ErrContended = errors.New("contended")

// ErrUncertain marks an acquisition whose outcome is unknown.
var ErrUncertain = errors.New("uncertain")

var extraImpls = map[string]LockImpl{}

// RegisterImpl adds an implementation under its Name, for every lock scenario:
// scenarios/mutants registers its deliberately broken ones this way.
func RegisterImpl(l LockImpl) { extraImpls[l.Name()] = l }

// Peers are the implementations other than prim that every lock scenario runs on.
var Peers = []string{"redislock", "redsync"}

// Mutants lists the registered deliberately broken implementations, by name.
func Mutants() []string {
	return registered(extraImpls)
}

// registered lists the names of a registry of implementations (the
// mutants of a family), sorted.
func registered[T any](impls map[string]T) []string { return slices.Sorted(maps.Keys(impls)) }

// NewImpl returns the named implementation: prim, a peer, or a registered one.
func NewImpl(name string) (LockImpl, error) {
	switch name {
	case "", "prim":
		return &primImpl{}, nil
	case "redislock":
		return redislockImpl{}, nil
	case "redsync":
		return redsyncImpl{}, nil
	}
	if l, ok := extraImpls[name]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("scenarios: unknown implementation %q (prim, redislock, redsync)", name)
}

// primImpl keeps one prim.Coordinator per client, as a service would.
type primImpl struct {
	log    *slog.Logger
	mu     sync.Mutex
	coords map[redis.UniversalClient]*prim.Coordinator
}

func (p *primImpl) setLogger(l *slog.Logger) { p.log = l }

func (p *primImpl) coordinator(c redis.UniversalClient) *prim.Coordinator {
	p.mu.Lock()
	defer p.mu.Unlock()
	return coordinatorOf(&p.coords, c, p.log)
}

// coordinatorOf returns the prim.Coordinator of client c in coords, made
// (with logger log, when set) on first use; the caller holds the lock that
// guards coords.
func coordinatorOf(coords *map[redis.UniversalClient]*prim.Coordinator, c redis.UniversalClient, log *slog.Logger) *prim.Coordinator {
	if *coords == nil {
		*coords = map[redis.UniversalClient]*prim.Coordinator{}
	}
	co := (*coords)[c]
	if co == nil {
		var opts []prim.Option
		if log != nil {
			opts = append(opts, prim.WithLogger(log))
		}
		co = prim.New(c, opts...)
		(*coords)[c] = co
	}
	return co
}

func (*primImpl) Name() string { return "prim" }
func (*primImpl) Fenced() bool { return true }

// UncertainRenewalReleases: prim fences a renewal whose outcome is unknown
// and releases the lease owner-checked in the background, then answers "not
// held" (models.Options.UncertainRenewalReleases). The peers and the mutants
// do not say so: their histories are checked without it.
func (*primImpl) UncertainRenewalReleases() bool { return true }

// LeaseKey implements LeaseKeyer.
func (*primImpl) LeaseKey(key string) string { return PrimLeaseKey(key) }

func (p *primImpl) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error) {
	l, err := p.coordinator(c).TryAcquireFencedLock(ctx, PrimLeaseKey(key), "{"+key+"}:fence", ttl)
	switch {
	case err == nil:
		return primHeld{l}, nil
	case errors.Is(err, prim.ErrNotAcquired):
		return nil, ErrContended
	case errors.Is(err, prim.ErrUncertain):
		return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	return nil, err
}

// Waiting implements Waiter: prim's invalidation-driven AcquireFencedLock,
// with one prim.Coordinator per client, so each client's waiters share one
// invalidation watcher, as a service's would.
func (p *primImpl) Waiting(log *slog.Logger) Waiting { return &primWaiting{log: log} }

type primWaiting struct {
	log    *slog.Logger
	mu     sync.Mutex
	coords map[redis.UniversalClient]*prim.Coordinator
}

func (p *primWaiting) Acquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error) {
	p.mu.Lock()
	co := coordinatorOf(&p.coords, c, p.log)
	p.mu.Unlock()
	l, err := co.AcquireFencedLock(ctx, "{"+key+"}:lease", "{"+key+"}:fence", ttl)
	if err != nil {
		return nil, err
	}
	return primHeld{l}, nil
}

func (p *primWaiting) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, co := range p.coords {
		co.Close()
	}
}

type primHeld struct{ l *prim.FencedLock }

func (h primHeld) Token() int64                                { return h.l.FencingToken() }
func (h primHeld) Owner() string                               { return h.l.OwnerToken() }
func (h primHeld) Release(ctx context.Context) (string, error) { return primRelease(ctx, h.l.Release) }
func (h primHeld) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return h.l.Renew(ctx, ttl)
}
func (h primHeld) Verify(ctx context.Context) (bool, error) { return h.l.VerifyStillHeld(ctx) }

// PrimLock returns the prim lock behind a Held of the prim implementation
// (for mutants that break one of its operations), or nil.
func PrimLock(h Held) *prim.FencedLock {
	if p, ok := h.(primHeld); ok {
		return p.l
	}
	return nil
}

// primRelease runs a prim release and names its result as histories do.
func primRelease(ctx context.Context, release func(context.Context) (prim.ReleaseResult, error)) (string, error) {
	r, err := release(ctx)
	if err != nil {
		return "", err
	}
	switch r {
	case prim.Released:
		return history.ValueReleased, nil
	case prim.NotOwned:
		return history.ValueNotOwned, nil
	}
	return history.ValueAlreadyReleased, nil
}

// redislockImpl is github.com/bsm/redislock: SET NX PX with a random token and a
// compare-and-delete release; no fencing token.
type redislockImpl struct{}

func (redislockImpl) Name() string { return "redislock" }
func (redislockImpl) Fenced() bool { return false }
func (redislockImpl) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error) {
	l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
	switch {
	case err == nil:
		return rlHeld{l}, nil
	case errors.Is(err, redislock.ErrNotObtained):
		return nil, ErrContended
	}
	return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
}

type rlHeld struct{ l *redislock.Lock }

func (h rlHeld) Token() int64  { return 0 }
func (h rlHeld) Owner() string { return h.l.Token() }
func (h rlHeld) Release(ctx context.Context) (string, error) {
	err := h.l.Release(ctx)
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return history.ValueNotOwned, nil
	}
	if err != nil {
		return "", err
	}
	return history.ValueReleased, nil
}

// redsyncImpl is github.com/go-redsync/redsync with one pool (the deployment's
// client), one try per acquisition: SET NX PX with a random value, a
// compare-and-delete release, no fencing token.
type redsyncImpl struct{}

func (redsyncImpl) Name() string { return "redsync" }
func (redsyncImpl) Fenced() bool { return false }
func (redsyncImpl) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (Held, error) {
	m := redsync.New(goredis.NewPool(c)).NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case err == nil:
		return rsHeld{m}, nil
	case errors.As(err, &taken):
		return nil, ErrContended
	}
	// ErrFailed also covers "acquired too late and released again", whose
	// release may not have happened: uncertain.
	return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
}

type rsHeld struct{ m *redsync.Mutex }

func (h rsHeld) Token() int64  { return 0 }
func (h rsHeld) Owner() string { return h.m.Value() }
func (h rsHeld) Release(ctx context.Context) (string, error) {
	ok, err := h.m.UnlockContext(ctx)
	var taken *redsync.ErrNodeTaken
	switch {
	case ok:
		return history.ValueReleased, nil
	case errors.Is(err, redsync.ErrLockAlreadyExpired), errors.As(err, &taken):
		return history.ValueNotOwned, nil
	}
	return "", err
}

// AllImpls is prim and every peer (what --impl all selects); the lock
// scenarios run on all of them.
func AllImpls() []string { return append([]string{"prim"}, Peers...) }
