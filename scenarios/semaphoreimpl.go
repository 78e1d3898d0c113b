package scenarios

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/coordtorture/coordtorture/prim"
)

// Semaphore implementations: the semaphore family drives them through
// SemImpl, as the ratelimit family drives its limiters through LimiterImpl.
// prim is the implementation under test; scenarios/mutants registers
// deliberately broken ones (RegisterSemImpl), which only the semaphore
// scenarios run.

// SemImpl adapts one semaphore implementation to the semaphore workload.
type SemImpl interface {
	Name() string
	// TryAcquire takes one permit of the semaphore key (capacity permits)
	// on client c, at once, for ttl (prim.NoExpiry: until released). It
	// returns ErrContended when every permit is taken, an error matching
	// ErrUncertain (or prim.ErrUncertain) when the outcome is unknown, or
	// another error.
	TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (SemPermit, error)
}

// SemPermit is one held permit.
type SemPermit interface {
	// Owner is the permit's owner token, as its renewals and releases check.
	Owner() string
	// Renew sets the permit's expiry to ttl from now: true when renewed,
	// false when the permit is no longer this owner's.
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	// Verify reports whether the permit is still this owner's.
	Verify(ctx context.Context) (bool, error)
	// Release returns history.ValueReleased, ValueAlreadyReleased or
	// ValueNotOwned.
	Release(ctx context.Context) (string, error)
}

// SemCounters is a SemImpl that counts what the implementation reports
// through its own telemetry (prim's OpenTelemetry counters): the run puts
// the counts in its outcome (Outcome.Counters).
type SemCounters interface {
	Counters() map[string]int64
}

var semImpls = map[string]SemImpl{}

// RegisterSemImpl adds a semaphore implementation under its Name, for the
// semaphore scenarios: scenarios/mutants registers its deliberately broken
// ones this way.
func RegisterSemImpl(s SemImpl) { semImpls[s.Name()] = s }

// SemMutants lists the registered semaphore implementations (the mutants),
// by name.
func SemMutants() []string {
	return registered(semImpls)
}

// lookupSem returns a new instance of the named semaphore implementation
// (prim's is made per run: it carries the run's meter).
func lookupSem(name string) (SemImpl, bool) {
	switch name {
	case "", "prim":
		return newPrimSems(), true
	}
	s, ok := semImpls[name]
	return s, ok
}

// isSemImpl reports whether name is a semaphore implementation (without
// making one).
func isSemImpl(name string) bool {
	_, ok := semImpls[name]
	return ok || name == "" || name == "prim"
}

// primSems is prim's semaphores, one prim.Coordinator per client (as a
// service would have), every one recording its counters through one
// OpenTelemetry SDK meter provider whose manual reader the run reads at the
// end (prim.cleanup.abandoned, prim.uncertain).
type primSems struct {
	log    *slog.Logger
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	mu     sync.Mutex
	coords map[redis.UniversalClient]*prim.Coordinator
}

func newPrimSems() *primSems {
	r := sdkmetric.NewManualReader()
	return &primSems{reader: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

func (p *primSems) setLogger(l *slog.Logger) { p.log = l }
func (*primSems) Name() string               { return "prim" }

// UncertainRenewalReleases: a permit whose renewal failed or is uncertain
// is surrendered and released by its owner token before Renew returns, then
// in the background (models.Options.UncertainRenewalReleases).
func (*primSems) UncertainRenewalReleases() bool { return true }

func (p *primSems) coordinator(c redis.UniversalClient) *prim.Coordinator {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coords == nil {
		p.coords = map[redis.UniversalClient]*prim.Coordinator{}
	}
	co := p.coords[c]
	if co == nil {
		// The clean-up window is half a second, not prim's minute: a run
		// lasts seconds, and a background clean-up retried for a minute
		// would outlast it, so its giving up could never be counted in the
		// run (semaphore/partition-client's cuts outlast a release's bound,
		// Close's and this window together, so some clean-ups give up).
		opts := []prim.Option{prim.WithMeterProvider(p.mp), prim.WithCleanupWindow(semCleanupWindow)}
		if p.log != nil {
			opts = append(opts, prim.WithLogger(p.log))
		}
		co = prim.New(c, opts...)
		p.coords[c] = co
	}
	return co
}

func (p *primSems) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, capacity int, ttl time.Duration) (SemPermit, error) {
	pm, err := p.coordinator(c).Semaphore(key, capacity).TryAcquire(ctx, ttl)
	switch {
	case err == nil:
		return primPermit{pm}, nil
	case errors.Is(err, prim.ErrNotAcquired):
		return nil, ErrContended
	}
	return nil, err
}

// Counters implements SemCounters: the sums of prim's counters that say
// what the semaphore left undone or unknown, as the manual reader collects
// them now.
func (p *primSems) Counters() map[string]int64 {
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		return map[string]int64{"collect-error": 1}
	}
	out := map[string]int64{"prim.cleanup.abandoned": 0, "prim.uncertain": 0}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if _, want := out[m.Name]; !want {
				continue
			}
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					out[m.Name] += dp.Value
				}
			}
		}
	}
	return out
}

// waitCleanups waits, bounded by ctx, for the background clean-ups of the
// run's coordinators to finish (confirmed or given up), so the counters read
// next include every clean-up the run started.
func (p *primSems) waitCleanups(ctx context.Context) error {
	p.mu.Lock()
	coords := make([]*prim.Coordinator, 0, len(p.coords))
	for _, co := range p.coords {
		coords = append(coords, co)
	}
	p.mu.Unlock()
	for _, co := range coords {
		if err := co.WaitCleanups(ctx); err != nil {
			return err
		}
	}
	return nil
}

// close closes the run's coordinators.
func (p *primSems) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, co := range p.coords {
		co.Close()
	}
	_ = p.mp.Shutdown(context.Background())
}

// semCleanupWindow is the clean-up window of prim's semaphores in a run
// (prim.WithCleanupWindow; prim's default is a minute).
const semCleanupWindow = 500 * time.Millisecond

type primPermit struct{ p *prim.Permit }

func (h primPermit) Owner() string { return h.p.OwnerToken() }
func (h primPermit) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return h.p.Renew(ctx, ttl)
}
func (h primPermit) Verify(ctx context.Context) (bool, error) { return h.p.VerifyStillHeld(ctx) }

// Close releases the permit best-effort (a second at most, then in the
// background for the clean-up window), as a service does after a release
// that failed.
func (h primPermit) Close() error { return h.p.Close() }
func (h primPermit) Release(ctx context.Context) (string, error) {
	return primRelease(ctx, h.p.Release)
}
