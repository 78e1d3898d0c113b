package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/prim"
)

// Rate limiter implementations: the ratelimit family drives them through
// LimiterImpl, as the lock families drive theirs through LockImpl. An
// implementation runs only in the scenarios of the algorithms it implements
// (Algos): Scenario.Supports says no for the others, and the CLI skips them.

// LimitConfig is one limiter's configuration, as recorded on its operations.
type LimitConfig struct {
	Algo     string        // history.AlgoFixed, AlgoSliding or AlgoBucket
	Limit    int64         // fixed, sliding: permits per window
	Window   time.Duration // fixed, sliding
	Segments int64         // sliding
	Burst    int64         // bucket: its size
	Rate     int64         // bucket: tokens per Period
	Period   time.Duration // bucket
}

// op is the configuration as a history operation's fields.
func (c LimitConfig) op() history.Op {
	return history.Op{Algo: c.Algo, Limit: c.Limit, WindowMs: c.Window.Milliseconds(), Segments: c.Segments,
		Burst: c.Burst, Rate: c.Rate, PeriodMs: c.Period.Milliseconds()}
}

// most is the most permits one request may ask for.
func (c LimitConfig) most() int64 {
	if c.Algo == history.AlgoBucket {
		return c.Burst
	}
	return c.Limit
}

// span is the window or the period: the time scale of the limiter.
func (c LimitConfig) span() time.Duration {
	if c.Algo == history.AlgoBucket {
		return c.Period
	}
	return c.Window
}

// LimiterImpl adapts one rate limiter implementation to the ratelimit
// workload.
type LimiterImpl interface {
	Name() string
	// Algos lists the algorithms it implements (history.AlgoFixed…).
	Algos() []string
	// New returns the limiter of key on client c. clock is the calling
	// process's own clock, which disagrees with the other processes' (the
	// workload skews it): an implementation on server time ignores it.
	New(c redis.UniversalClient, key string, cfg LimitConfig, clock func() time.Time) (Limiter, error)
}

// Limiter is one limiter of a LimiterImpl.
type Limiter interface {
	// Allow asks once for n permits: true when granted, false when
	// refused. An error is an outcome the workload cannot tell: a server
	// refusal that did not run (NotExecuted) is recorded as fail, anything
	// else as info.
	Allow(ctx context.Context, n int64) (bool, error)
}

// LimiterWaiter is a Limiter that can also wait for permits (allow_wait).
type LimiterWaiter interface {
	Limiter
	// Wait waits until n permits are granted (true), or are refused for
	// good (false: more than the limit, or no room in the local queue).
	Wait(ctx context.Context, n int64) (bool, error)
}

// LimiterRetry is a Limiter whose denials say when the same request can
// succeed: the workload records it on the denial (count, in µs), and the
// rate-limit checker holds it to the algorithm's state.
type LimiterRetry interface {
	Limiter
	// AllowRetry is Allow, with a denial's RetryAfter (0: none).
	AllowRetry(ctx context.Context, n int64) (bool, time.Duration, error)
}

var limiterImpls = map[string]LimiterImpl{}

// RegisterLimiterImpl adds a rate limiter implementation under its Name, for
// the ratelimit scenarios of its algorithms: scenarios/mutants registers its
// deliberately broken ones this way.
func RegisterLimiterImpl(l LimiterImpl) { limiterImpls[l.Name()] = l }

// LimiterPeers are the rate limiter libraries beside prim (--impl all).
var LimiterPeers = []string{"redis_rate", "ulule"}

// LimiterMutants lists the registered rate limiter implementations (the
// mutants), by name.
func LimiterMutants() []string {
	return registered(limiterImpls)
}

// lookupLimiter returns the named rate limiter implementation.
func lookupLimiter(name string) (LimiterImpl, bool) {
	switch name {
	case "", "prim":
		return &primLimiters{}, true
	case "redis_rate":
		return redisRateImpl{}, true
	case "ulule":
		return &ululeImpl{}, true
	}
	l, ok := limiterImpls[name]
	return l, ok
}

// EveryImpl is what --impl all selects: prim, the lock peers and the rate
// limiter peers; each runs the scenarios that apply to it.
func EveryImpl() []string { return append(AllImpls(), LimiterPeers...) }

// ValidImpl reports whether name is an implementation some scenario can run.
func ValidImpl(name string) error {
	if _, err := NewImpl(name); err == nil {
		return nil
	}
	if _, ok := lookupLimiter(name); ok {
		return nil
	}
	if _, ok := semImpls[name]; ok {
		return nil
	}
	if _, ok := lookupLatch(name); ok {
		return nil
	}
	if _, ok := lookupRW(name); ok {
		return nil
	}
	if _, ok := lookupRedlock(name); ok {
		return nil
	}
	return fmt.Errorf("scenarios: unknown implementation %q (%v, or a mutant: %v)", name, EveryImpl(), AllMutants())
}

// AllMutants lists every registered deliberately broken implementation
// (and the references they derive from), family by family: locks, rate
// limiters, semaphores, latches, read-write leases, Redlock.
func AllMutants() []string {
	return slices.Concat(Mutants(), LimiterMutants(), SemMutants(), LatchMutants(), RWMutants(), RedlockMutants())
}

// limiterImplsFor lists prim and the peers that implement algo.
func limiterImplsFor(algo string) []string {
	var out []string
	for _, n := range append([]string{"prim"}, LimiterPeers...) {
		if l, _ := lookupLimiter(n); slices.Contains(l.Algos(), algo) {
			out = append(out, n)
		}
	}
	return out
}

// primLimiters is prim's rate limiters, one prim.Coordinator per client (as
// a service would have), each limiter with a local queue for Wait.
type primLimiters struct {
	log    *slog.Logger
	mu     sync.Mutex
	coords map[redis.UniversalClient]*prim.Coordinator
}

func (p *primLimiters) setLogger(l *slog.Logger) { p.log = l }
func (*primLimiters) Name() string               { return "prim" }
func (*primLimiters) Algos() []string {
	return []string{history.AlgoFixed, history.AlgoSliding, history.AlgoBucket}
}

func (p *primLimiters) New(c redis.UniversalClient, key string, cfg LimitConfig, _ func() time.Time) (Limiter, error) {
	p.mu.Lock()
	co := coordinatorOf(&p.coords, c, p.log)
	p.mu.Unlock()
	f := co.RateLimiters()
	q := prim.WithQueue(4*cfg.most(), prim.OldestFirst)
	var l *prim.Limiter
	var err error
	switch cfg.Algo {
	case history.AlgoFixed:
		l, err = f.FixedWindow(key, cfg.Limit, cfg.Window, q)
	case history.AlgoSliding:
		l, err = f.SlidingWindow(key, cfg.Limit, cfg.Window, cfg.Segments, q)
	case history.AlgoBucket:
		l, err = f.TokenBucket(key, cfg.Burst, cfg.Rate, cfg.Period, q)
	default:
		return nil, fmt.Errorf("scenarios: prim has no %q limiter", cfg.Algo)
	}
	if err != nil {
		return nil, err
	}
	return primLimiter{l}, nil
}

type primLimiter struct{ l *prim.Limiter }

func (p primLimiter) Allow(ctx context.Context, n int64) (bool, error) {
	d, err := p.l.Allow(ctx, n)
	return d.Allowed, err
}

// AllowRetry implements LimiterRetry.
func (p primLimiter) AllowRetry(ctx context.Context, n int64) (bool, time.Duration, error) {
	d, err := p.l.Allow(ctx, n)
	var retry time.Duration
	if !d.Allowed && d.HasRetryAfter {
		retry = d.RetryAfter
	}
	return d.Allowed, retry, err
}

// Wait: no room in the queue, or the caller's deadline passed while the
// request waited in the local queue (ctx's error, not ErrUncertain: nothing
// was in flight), is a refusal.
func (p primLimiter) Wait(ctx context.Context, n int64) (bool, error) {
	d, err := p.l.Wait(ctx, n)
	switch {
	case errors.Is(err, prim.ErrQueueFull):
		return false, nil
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, prim.ErrUncertain):
		return false, nil
	}
	return d.Allowed, err
}

// redisRateImpl is github.com/go-redis/redis_rate (GCRA on the server's
// TIME, one key): its Limit{Rate, Burst, Period} is a token bucket of Burst
// tokens refilled continuously at Rate per Period, so it is held to the
// bucket bound (burst + rate·span/period).
type redisRateImpl struct{}

func (redisRateImpl) Name() string    { return "redis_rate" }
func (redisRateImpl) Algos() []string { return []string{history.AlgoBucket} }
func (redisRateImpl) New(c redis.UniversalClient, key string, cfg LimitConfig, _ func() time.Time) (Limiter, error) {
	if cfg.Algo != history.AlgoBucket {
		return nil, fmt.Errorf("scenarios: redis_rate has no %q limiter", cfg.Algo)
	}
	return redisRateLimiter{l: redis_rate.NewLimiter(c), key: key,
		limit: redis_rate.Limit{Rate: int(cfg.Rate), Burst: int(cfg.Burst), Period: cfg.Period}}, nil
}

type redisRateLimiter struct {
	l     *redis_rate.Limiter
	key   string
	limit redis_rate.Limit
}

func (r redisRateLimiter) Allow(ctx context.Context, n int64) (bool, error) {
	res, err := r.l.AllowN(ctx, r.key, r.limit, int(n))
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

// ululeImpl is github.com/ulule/limiter with its Redis store: a fixed window
// (INCRBY, and PEXPIRE on the increment that created the key), one store per
// client (it loads its scripts when made).
type ululeImpl struct {
	mu     sync.Mutex
	stores map[redis.UniversalClient]limiter.Store
}

func (*ululeImpl) Name() string    { return "ulule" }
func (*ululeImpl) Algos() []string { return []string{history.AlgoFixed} }
func (u *ululeImpl) New(c redis.UniversalClient, key string, cfg LimitConfig, _ func() time.Time) (Limiter, error) {
	if cfg.Algo != history.AlgoFixed {
		return nil, fmt.Errorf("scenarios: ulule has no %q limiter", cfg.Algo)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.stores[c]
	if st == nil {
		var err error
		if st, err = ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule", MaxRetry: limiter.DefaultMaxRetry}); err != nil {
			return nil, err
		}
		if u.stores == nil {
			u.stores = map[redis.UniversalClient]limiter.Store{}
		}
		u.stores[c] = st
	}
	return ululeLimiter{l: limiter.New(st, limiter.Rate{Period: cfg.Window, Limit: cfg.Limit}), key: key}, nil
}

type ululeLimiter struct {
	l   *limiter.Limiter
	key string
}

func (u ululeLimiter) Allow(ctx context.Context, n int64) (bool, error) {
	lc, err := u.l.Increment(ctx, u.key, n)
	if err != nil {
		return false, err
	}
	return !lc.Reached, nil
}
