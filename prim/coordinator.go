package prim

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// luaScript is an embedded script with its SHA1 digest (for EVALSHA).
type luaScript struct{ src, sha string }

func (s *luaScript) Hash() string   { return s.sha }
func (s *luaScript) Source() string { return s.src }

func loadScript(name string) *luaScript {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("prim: missing embedded script " + name)
	}
	sum := sha1.Sum(src)
	return &luaScript{src: string(src), sha: hex.EncodeToString(sum[:])}
}

var (
	scriptFencedAcquire = loadScript("fenced_acquire.lua")
	scriptLeaseRenew    = loadScript("lease_renew.lua")
	scriptLeaseVerify   = loadScript("lease_verify.lua")
	scriptLeaseRelease  = loadScript("lease_release.lua")
)

// Coordinator creates coordination primitives on a go-redis client. It performs
// no I/O when created and never closes the client: the caller keeps owning it.
// A Coordinator is safe for concurrent use.
type Coordinator struct {
	client  redis.UniversalClient
	prefix  string
	logger  *slog.Logger
	meter   metric.Meter
	cleanup time.Duration
	// window is how long a permit's background clean-up retries
	// (WithCleanupWindow).
	window time.Duration
	bg     *cleanups // background clean-ups in progress; shared by views
	m      *metrics
	fences *fencePool
	ws     *watchers
	caps   *capRecord  // what each node can do; shared by prefixed views
	retry  retryPolicy // the client's resend policy, for the resends prim makes itself
	// limiters is the rate-limiter factory, made with the Coordinator (New)
	// or the view (WithPrefix) and never changed; each view has its own.
	limiters *RateLimiters
	// rl holds the options that only NewRedlockGroup reads (WithNodeTimeout,
	// WithClockDriftFactor); New ignores them.
	rl redlockConfig
}

// Option configures a Coordinator.
type Option func(*Coordinator)

// WithLogger sets the logger (default: slog.Default()). Uncertain outcomes and
// failed clean-ups are logged at Warn, ordinary outcomes at Debug. It applies
// to New and to NewRedlockGroup.
func WithLogger(l *slog.Logger) Option { return func(c *Coordinator) { c.logger = l } }

// WithMeterProvider records counters through an OpenTelemetry meter provider
// (default: none). It applies to New and to NewRedlockGroup.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *Coordinator) { c.meter = mp.Meter("github.com/coordtorture/coordtorture/prim") }
}

// WithCleanupTimeout bounds each background clean-up step (fencing an uncertain
// command with CLIENT KILL, owner-checked release after an uncertain outcome,
// Close). Default 2s.
func WithCleanupTimeout(d time.Duration) Option { return func(c *Coordinator) { c.cleanup = d } }

// WithCleanupWindow sets how long a semaphore permit's background clean-up
// (the owner-token release Close, a failed renewal or an acquisition's error
// reply leaves to the background, the CLIENT KILL fence of an uncertain
// acquisition) keeps
// retrying, with capped, jittered back-off, before it gives up, counts it
// (prim.cleanup.abandoned) and logs a warning. Default: a minute. A service
// that exits sooner than that after closing its permits can wait for the
// clean-ups with WaitCleanups. d ≤ 0 keeps the default.
func WithCleanupWindow(d time.Duration) Option {
	return func(c *Coordinator) {
		if d > 0 {
			c.window = d
		}
	}
}

// New returns a Coordinator for client. It sends nothing.
func New(client redis.UniversalClient, opts ...Option) *Coordinator {
	c := &Coordinator{client: client, logger: slog.Default(), cleanup: 2 * time.Second, window: time.Minute, bg: &cleanups{}}
	for _, o := range opts {
		o(c)
	}
	recording := c.meter != nil
	if !recording {
		c.meter = noop.NewMeterProvider().Meter("")
	}
	c.m = newMetrics(c.meter)
	c.m.off = !recording
	c.fences = newFencePool(client)
	c.ws = newWatchers()
	c.caps = newCapRecord()
	c.retry = retryPolicyOf(client)
	c.limiters = &RateLimiters{c: c}
	return c
}

// WithPrefix returns a view whose physical keys are prefixed; prefixes nest in
// order: c.WithPrefix("a:").WithPrefix("b:") writes "a:b:key". The view shares
// the client and the invalidation watchers, and has its own state otherwise.
func (c *Coordinator) WithPrefix(prefix string) *Coordinator {
	v := *c
	v.prefix = c.prefix + prefix
	v.fences = newFencePool(c.client)
	v.limiters = &RateLimiters{c: &v}
	return &v
}

// Prefix is the key prefix of this view.
func (c *Coordinator) Prefix() string { return c.prefix }

func (c *Coordinator) key(k string) string { return c.prefix + k }

// keyPair validates and prefixes a lease/counter pair. Nothing is sent.
func (c *Coordinator) keyPair(lease, counter string) (string, string, error) {
	if lease == "" || counter == "" {
		return "", "", invalid(ErrEmptyKey, "lease and counter keys must be non-empty")
	}
	if lease == counter {
		return "", "", invalid(ErrSameKey, fmt.Sprintf("%q", lease))
	}
	pl, pc := c.key(lease), c.key(counter)
	// Checked on every deployment, not only on Cluster: a pair that works on one
	// server and fails after a move to Cluster would be a latent outage.
	// Equal hash tags (the usual case) share a slot without computing it.
	if hl, hc := hashed(pl), hashed(pc); hl != hc && crc16(hl)&16383 != crc16(hc)&16383 {
		return "", "", invalid(ErrCrossSlot, fmt.Sprintf("%q is in slot %d, %q in slot %d; use a hash tag such as {name}:lease / {name}:fence",
			pl, Slot(pl), pc, Slot(pc)))
	}
	return pl, pc, nil
}

func validTTL(ttl time.Duration) error {
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		return invalid(ErrInvalidTTL, ttl.String())
	}
	return nil
}

func newOwnerToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("prim: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

type metrics struct {
	acquire, renew, release, uncertain metric.Int64Counter
	degraded                           metric.Int64Counter
	abandoned                          metric.Int64Counter
	off                                bool // no meter provider: add does nothing

	mu   sync.Mutex
	opts map[[2]string]metric.AddOption // precomputed attribute sets
}

func newMetrics(m metric.Meter) *metrics {
	mk := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		if err != nil {
			c, _ = noop.NewMeterProvider().Meter("").Int64Counter(name)
		}
		return c
	}
	return &metrics{
		acquire:   mk("prim.lock.acquire", "lock acquisition attempts by result"),
		renew:     mk("prim.lock.renew", "lock renewals by result"),
		release:   mk("prim.lock.release", "lock releases by result"),
		uncertain: mk("prim.uncertain", "operations whose outcome was uncertain, by operation"),
		degraded: mk("prim.waiting.degraded",
			"times a node's invalidation watcher fell back to re-checking on a timer, by reason"),
		abandoned: mk("prim.cleanup.abandoned",
			"background clean-ups that gave up (a permit left on the server until it expires or is removed), by stage and reason"),
		opts: map[[2]string]metric.AddOption{},
	}
}

func (m *metrics) add(ctx context.Context, c metric.Int64Counter, kind, result string) {
	if m.off {
		return
	}
	k := [2]string{kind, result}
	m.mu.Lock()
	o, ok := m.opts[k]
	if !ok {
		o = metric.WithAttributeSet(attribute.NewSet(attribute.String("primitive", kind), attribute.String("result", result)))
		m.opts[k] = o
	}
	m.mu.Unlock()
	c.Add(ctx, 1, o)
}

// degradedAdd counts a watcher falling back to timed re-checks.
func (m *metrics) degradedAdd(ctx context.Context, reason string) {
	if m.off {
		return
	}
	m.degraded.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

// abandonedAdd counts a background clean-up that gave up.
func (m *metrics) abandonedAdd(ctx context.Context, kind, stage, reason string) {
	if m.off {
		return
	}
	m.abandoned.Add(ctx, 1, metric.WithAttributes(attribute.String("primitive", kind),
		attribute.String("stage", stage), attribute.String("reason", reason)))
}
