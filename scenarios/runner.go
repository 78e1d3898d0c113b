package scenarios

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/internal/tlsopt"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
	"github.com/coordtorture/coordtorture/testbed/docker"
)

// Verdict is a property's or a scenario's outcome (models.Judgement: the
// same verdicts fencecheck reaches from the history's header).
type Verdict = models.Judgement

// The verdicts, from best to worst.
const (
	Pass    = models.JudgedPass
	Hazard  = models.JudgedHazard
	Unknown = models.JudgedUnknown
	Fail    = models.JudgedFail
	// NA is a property with nothing to check in the run (the reason is its
	// summary): never a PASS, and it leaves the scenario's verdict to the
	// other properties.
	NA = models.JudgedNA
)

// Worst returns the worst verdict of vs (PASS when empty).
func Worst(vs ...Verdict) Verdict { return models.WorstJudgement(vs...) }

// Config is one run's settings.
type Config struct {
	Build    string        // server build (testbed name); "" = default
	Duration time.Duration // workload duration (default 10s)
	Clients  int           // client processes (default 8)
	Seed     int64         // nemesis and workload randomness
	Impl     string        // "prim" (default) or a peer
	TTL      time.Duration // lock lease duration (default 500ms)
	// Hardened gives the clients no retries (MaxRetries -1). By default they
	// keep go-redis's defaults (MaxRetries 3, ContextTimeoutEnabled false),
	// as a user's client has them: prim must be right with those, where a
	// retried script whose reply was lost can run twice.
	Hardened bool
	// Progress, when set, is called about once a second with the time elapsed.
	Progress func(elapsed, total time.Duration)
	Logf     func(string, ...any)
	// Logger receives what the primitives under test log (prim's warnings
	// about uncertain outcomes and fencing); nil discards it.
	Logger *slog.Logger
	// External, when set, runs the workload against an existing deployment
	// instead of local servers: no faults are injected (scenarios with a
	// nemesis refuse to run), and every key the run writes carries a random
	// prefix and is deleted afterwards.
	External *External
	// Docker, when set, runs the servers in containers (testbed/docker.Provider)
	// instead of local processes, with the same faults (but for clock
	// offsets); its Image "" is the build's local image (make images).
	Docker *Docker
}

// Docker selects the docker provider (Config.Docker).
type Docker struct {
	Image string // "" = the build's local image, coordtorture/redis:8.0 for redis-8.0
}

// External is an existing Redis/Valkey deployment to run workloads against.
type External struct {
	// Addrs: one address for a standalone server (or a cluster's configuration
	// endpoint with Cluster set), several for a cluster, or the sentinels'
	// addresses with MasterName.
	Addrs      []string
	MasterName string
	Cluster    bool
	Username   string
	Password   string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (with MasterName), go-redis's FailoverOptions of those names: the data
	// user's credentials are never sent to them.
	SentinelUsername string
	SentinelPassword string
	// TLS connects with TLS: with TLSConfig, or a default configuration (the
	// system's CAs) without.
	TLS       bool
	TLSConfig *tls.Config
	// Dialer, when set, opens every TCP connection (a proxy, a source
	// address the deployment accepts); with TLS the handshake is done over
	// it. Nil: go-redis's own dialer.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// tlsConfig is the configuration the clients use; nil for plaintext.
func (e *External) tlsConfig() *tls.Config {
	if e.TLSConfig != nil {
		return e.TLSConfig
	}
	if e.TLS {
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return nil
}

// Supports reports whether s runs on the named implementation. A registered
// mutant runs only where the workload drives the implementation under test
// (Env.Impl): the scenarios that also run the peer libraries, which only that
// interface can drive, and the waiting scenarios (Waits) when the mutant is a
// Waiter. A workload that calls prim directly would test prim and pass the
// mutant.
func (s *Scenario) Supports(impl string) bool {
	if s.Redlock {
		// A Redlock scenario runs the Redlock implementations.
		_, ok := lookupRedlock(impl)
		return ok
	}
	if _, ok := redlockImpls[impl]; ok {
		return false // a Redlock mutant is no single-server lock
	}
	if s.Latches {
		// A latch scenario runs the countdown latch implementations.
		_, ok := lookupLatch(impl)
		return ok
	}
	if _, ok := latchImpls[impl]; ok {
		return false // a latch mutant is no lock
	}
	if s.RW {
		// A read-write lease scenario runs the read-write implementations.
		_, ok := lookupRW(impl)
		return ok
	}
	if _, ok := rwImpls[impl]; ok {
		return false // a read-write lease mutant is no lock
	}
	if s.Algo != "" {
		// A rate limiter scenario runs the implementations of its algorithm.
		l, ok := lookupLimiter(impl)
		return ok && slices.Contains(l.Algos(), s.Algo)
	}
	if s.Sem {
		return isSemImpl(impl)
	}
	if _, ok := limiterImpls[impl]; ok {
		return false // a rate limiter mutant is no lock
	}
	if _, ok := semImpls[impl]; ok {
		return false // a semaphore mutant is no lock
	}
	if m, mutant := extraImpls[impl]; mutant {
		if s.Waits {
			_, ok := m.(Waiter)
			return ok
		}
		return slices.ContainsFunc(Peers, func(p string) bool { return slices.Contains(s.Impls, p) })
	}
	if len(s.Impls) == 0 {
		return true
	}
	for _, i := range s.Impls {
		if i == impl || i == "prim" && impl == "" {
			return true
		}
	}
	return false
}

// MovesClock reports whether s restarts servers with their wall clocks moved
// (the clock-skew scenarios, named …/clock-skew…): the shim that moves them
// is a library of the host, so they run only on local servers, not in
// containers (Config.Docker) nor on an external deployment.
func (s *Scenario) MovesClock() bool { return strings.Contains(s.Name, "/clock-skew") }

// Runnable reports whether s can run on an external deployment: it injects no
// faults and needs no particular topology or server build.
func (s *Scenario) Runnable(ext bool) error {
	if !ext {
		return nil
	}
	switch {
	case s.Nemesis != nil:
		return fmt.Errorf("%s injects faults into servers it starts; it runs only with --provider local", s.Name)
	case s.Topo.Kind != testbed.KindStandalone || s.Topo.Build != "":
		return fmt.Errorf("%s needs its own %s topology; it runs only with --provider local", s.Name, s.Topo)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Clients <= 0 {
		c.Clients = 8
	}
	if c.TTL <= 0 {
		c.TTL = 500 * time.Millisecond
	}
	if c.Impl == "" {
		c.Impl = "prim"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// InFlightGrace bounds how long a run's clients go on past its duration
// while the nemesis finishes the events due within the run (one in flight
// at the end, or one started late): the schedule ends ScheduleMargin before
// the end, so only a loaded machine or a slow fault (a restart, a
// failover's confirmation) makes a run wait, and past this bound the
// clients stop and an event not done is UNKNOWN with the wait named.
const InFlightGrace = 10 * time.Second

// PropertyResult is one property's verdict with the checker's result.
type PropertyResult struct {
	Property Property      `json:"-"`
	Checker  string        `json:"checker"`
	Expect   string        `json:"expect"`
	Verdict  Verdict       `json:"verdict"`
	Result   models.Result `json:"result"`
}

// EventLog is a nemesis event as it ran: from At to End.
type EventLog struct {
	At   time.Duration `json:"at_ns"`
	End  time.Duration `json:"end_ns"`
	Name string        `json:"name"`
	Kind string        `json:"kind"`
	Err  string        `json:"err,omitempty"`
	// Effect is what the event proved the fault did (Env.Effect), if anything.
	Effect string `json:"effect,omitempty"`
}

// Outcome is the result of one scenario run.
type Outcome struct {
	Scenario string        `json:"scenario"`
	Build    string        `json:"build"`
	Impl     string        `json:"impl"`
	Seed     int64         `json:"seed"`
	Clients  int           `json:"clients"`
	Duration time.Duration `json:"duration_ns"`
	// Overran is how long past Duration the clients ran while the nemesis
	// finished an event due within the run (InFlightGrace at most); zero
	// when the schedule was done by the end.
	Overran time.Duration `json:"overran_ns,omitempty"`
	// TTL is the run's lease duration (--ttl): with the seed and the
	// duration it fixes the schedule of a scenario whose faults are stated
	// against the lease, so a replay uses it. Zero in reports written before
	// it was recorded.
	TTL     time.Duration    `json:"ttl_ns,omitempty"`
	Verdict Verdict          `json:"verdict"`
	Results []PropertyResult `json:"properties"`
	Events  []EventLog       `json:"events"`
	Ops     int              `json:"ops"`
	// Uncertain counts the operations of unknown outcome and how many of
	// them the run's own state shows really happened.
	Uncertain models.Uncertainty `json:"uncertain"`
	// Hazard says, for a scenario with a property that may show a hazard,
	// whether it did: "shown", "failed" (a property FAILed: a violation the
	// hazard does not explain), "no effect" (no fault was observed to have
	// the effect the hazard needs) or "not shown" (the effect happened and
	// every property held); "" for scenarios without a hazard
	// (models.HazardOutcome).
	Hazard string `json:"hazard,omitempty"`
	// Effects lists the observed fault effects ("at 1.8s: …").
	Effects []string `json:"effects,omitempty"`
	// Provider is "local", "docker" or "external"; Target names the external
	// deployment, or the docker provider's image.
	// Counters are what the implementation under test counted through its
	// own telemetry during the run (a semaphore's prim.cleanup.abandoned,
	// read with the OpenTelemetry SDK's manual reader), by name; nil when
	// it reports none.
	Counters map[string]int64 `json:"counters,omitempty"`
	Provider string           `json:"provider"`
	Target   string           `json:"target,omitempty"`
	// Transport is how the clients reached an external deployment:
	// "plaintext connection", or the TLS version and how the server's
	// certificate was checked.
	Transport string `json:"transport,omitempty"`
	Error     string `json:"error,omitempty"`
	// Unsupported, when set, says which feature the server lacks that the
	// scenario requires (Scenario.Requires): the run ran nothing, and its
	// verdict and every property's are N/A.
	Unsupported string `json:"unsupported,omitempty"`
	// Records is the history, for writing as JSONL.
	Records []history.Op `json:"-"`
	// Header is the history's header line: the run's expectations and
	// checker options (nil when the run did not start).
	Header *history.Header `json:"-"`
}

// watchDemotion polls deposed (a primary a failover replaced, whose writes
// are lost until it is demoted) until it no longer answers as a primary, and
// records that observation (models.NemesisEffectEnd) as process proc; it
// gives up silently when ctx ends first (the loss then counts for
// models.OngoingFor).
func (e *Env) watchDemotion(ctx context.Context, mu *sync.Mutex, proc int, deposed *testbed.Node) {
	for ctx.Err() == nil {
		if role, _, ok := replicationOf(ctx, deposed); ok && role != "master" {
			mu.Lock()
			defer mu.Unlock()
			what := fmt.Sprintf("%s demoted (role %s): the loss it began has ended", deposed.Name, role)
			if _, err := e.Rec.Invoke(proc, history.Op{F: history.FNemesis, Key: models.NemesisEffectEnd, Field: deposed.Name, Value: what}); err == nil {
				_, _ = e.Rec.Complete(proc, history.OK, history.Op{Value: what})
			}
			return
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// Run runs one scenario on a fresh topology and judges its history. An error
// is returned only when the scenario could not run at all (servers did not
// start); a run whose checkers found violations returns an Outcome.
func Run(ctx context.Context, s *Scenario, cfg Config) (*Outcome, error) {
	cfg.defaults()
	var impl LockImpl
	var limiter LimiterImpl
	var sem SemImpl
	var latch LatchImpl
	var rw RWImpl
	var rl RedlockImpl
	if s.Redlock {
		l, ok := lookupRedlock(cfg.Impl)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s runs Redlock; %q is none (prim, redsync, or a mutant: %v)", s.Name, cfg.Impl, RedlockMutants())
		}
		rl, impl = l, notALock{l, "a Redlock implementation (it needs one client per node)"}
	} else if s.Latches {
		l, ok := lookupLatch(cfg.Impl)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s runs countdown latches; %q is none (prim, or a mutant: %v)", s.Name, cfg.Impl, LatchMutants())
		}
		latch, impl = l, notALock{l, "a countdown latch"}
	} else if s.RW {
		l, ok := lookupRW(cfg.Impl)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s runs read-write leases; %q is none (prim, or a mutant: %v)", s.Name, cfg.Impl, RWMutants())
		}
		rw, impl = l, notALock{l, "a read-write lease"}
	} else if s.Algo != "" {
		l, ok := lookupLimiter(cfg.Impl)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s runs rate limiters; %q is none (%v, or a mutant: %v)", s.Name, cfg.Impl,
				limiterImplsFor(s.Algo), LimiterMutants())
		}
		if !slices.Contains(l.Algos(), s.Algo) {
			return nil, fmt.Errorf("scenarios: %s is a %s limiter scenario; %s implements %v", s.Name, s.Algo, l.Name(), l.Algos())
		}
		limiter, impl = l, notALock{l, "a rate limiter"}
	} else if s.Sem {
		si, ok := lookupSem(cfg.Impl)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s runs semaphores; %q is none (prim, or a mutant: %v)", s.Name, cfg.Impl, SemMutants())
		}
		sem, impl = si, notALock{si, "a semaphore"}
	} else {
		var err error
		if impl, err = NewImpl(cfg.Impl); err != nil {
			return nil, err
		}
	}
	supported := s.Supports(impl.Name())
	if !supported {
		if _, mutant := extraImpls[impl.Name()]; mutant && s.Waits {
			return nil, fmt.Errorf("scenarios: %s waits for the lock, and the mutant %s cannot wait (it is not a scenarios.Waiter)", s.Name, impl.Name())
		}
		if _, mutant := extraImpls[impl.Name()]; mutant {
			return nil, fmt.Errorf("scenarios: %s calls prim directly, so it cannot run the mutant %s (mutants run on the scenarios that also run the peers, such as fenced-lock/*)", s.Name, impl.Name())
		}
		return nil, fmt.Errorf("scenarios: %s does not run on %s (supports %v)", s.Name, impl.Name(), s.Impls)
	}
	if err := s.Runnable(cfg.External != nil); err != nil {
		return nil, fmt.Errorf("scenarios: %w", err)
	}
	if cfg.Docker != nil && s.MovesClock() {
		return nil, fmt.Errorf("scenarios: %s moves a server's clock (a host library): it runs only with --provider local", s.Name)
	}
	if s.Needs != nil {
		// A run too short for what the scenario states against the ttl
		// would test something else (a restart inside a live lease, a
		// pause shorter than one): it starts nothing and is UNKNOWN.
		if why := s.Needs(cfg.Duration, cfg.TTL); why != "" {
			return notRun(s, cfg, impl.Name(), why), nil
		}
	}
	env := &Env{Impl: impl, Limiter: limiter, Sem: sem, Latch: latch, RW: rw, Redlock: rl, Seed: cfg.Seed, TTL: cfg.TTL, Log: cfg.Logger,
		Resource: &Resource{Fencing: impl.Fenced()}}
	if r, ok := impl.(interface{ ResourceFencing() bool }); ok {
		env.Resource.Fencing = r.ResourceFencing()
	}
	if l, ok := impl.(interface{ setLogger(*slog.Logger) }); ok {
		l.setLogger(cfg.Logger)
	}
	if l, ok := limiter.(interface{ setLogger(*slog.Logger) }); ok {
		l.setLogger(cfg.Logger)
	}
	if l, ok := sem.(interface{ setLogger(*slog.Logger) }); ok {
		l.setLogger(cfg.Logger)
	}
	if l, ok := rw.(interface{ setLogger(*slog.Logger) }); ok {
		l.setLogger(cfg.Logger)
	}
	if l, ok := rl.(interface{ setLogger(*slog.Logger) }); ok {
		l.setLogger(cfg.Logger)
	}
	buildName, provider, target, transport := "", "local", "", ""
	if ext := cfg.External; ext != nil {
		if ext.SentinelUsername != "" && ext.SentinelPassword == "" {
			// go-redis authenticates only with a password: the name alone
			// would silently ask the sentinels as their default user.
			return nil, fmt.Errorf("scenarios: the sentinel user %s needs its password ($COORDTORTURE_SENTINEL_PASSWORD)", ext.SentinelUsername)
		}
		// One connection first, as the clients will connect: a plaintext
		// client on a TLS-only port (or the reverse) is told so at once.
		tr, err := tlsopt.ProbeAny(ctx, ext.Addrs, ext.tlsConfig(), ext.Dialer, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("scenarios: cannot reach %v: %w", ext.Addrs, err)
		}
		transport = tr.Describe()
		var b [6]byte
		_, _ = rand.Read(b[:])
		env.Prefix = "coordtorture:" + hex.EncodeToString(b[:]) + ":"
		provider, target, buildName = "external", fmt.Sprint(ext.Addrs), "external"
		for i := 0; i < cfg.Clients; i++ {
			c, err := externalClient(ctx, ext, cfg.Hardened)
			if err != nil {
				env.closeClients()
				return nil, err
			}
			env.Clients = append(env.Clients, c)
		}
		defer env.closeClients()
		defer env.deletePrefixed()
	} else {
		topo, err := startTopology(ctx, s.Topo, cfg)
		if err != nil {
			return nil, err
		}
		defer topo.Close()
		env.Topo, buildName = topo, topo.Build.Name
		if cfg.Docker != nil {
			provider, target = "docker", cfg.Docker.Image
			if target == "" {
				target = docker.ImageOf(buildName)
			}
		}
		if s.Algo == "" && !s.Sem && !s.Latches && !s.RW { // a rate limiter, a semaphore, a latch or a read-write lease protects no resource
			if env.Resource, err = startResource(ctx, topo, cfg.Clients, env.Resource.Fencing); err != nil {
				return nil, err
			}
		}
		for i := 0; i < cfg.Clients; i++ {
			// A 250ms read/write timeout (the default is 3s) makes lost
			// replies and slow links uncertain within a lease; the retry
			// policy stays go-redis's unless Hardened.
			timeout := 250 * time.Millisecond
			if s.ClientTimeout > 0 {
				timeout = s.ClientTimeout
			}
			opts := []testbed.ClientOption{testbed.AsPeer(Peer(i)), testbed.WithTimeout(timeout),
				testbed.WithOptions(func(o *redis.UniversalOptions) {
					if cfg.Hardened {
						o.MaxRetries = -1
					}
					// go-redis v9.23 races on its own options when a server
					// refuses the maintenance-notifications handshake: Conn()
					// shares the client's Options without their lock (see
					// prim/dedicated.go). CI's -race runs hit it twice in a
					// cluster takeover, where new node clients start under
					// load. The handshake plays no part in what the harness
					// checks (these servers send no maintenance
					// notifications), so the workload's clients skip it; prim's
					// own tests keep the default (TestDedicatedFirstUseConcurrent).
					o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
				})}
			if s.Topo.Kind == testbed.KindIndependent {
				// One client per node (the process's own link to each).
				var nodes []redis.UniversalClient
				for _, n := range topo.Nodes() {
					c, err := topo.NodeClient(n.Name, opts...)
					if err != nil {
						return nil, err
					}
					c.AddHook(ownerHook{})
					nodes = append(nodes, c)
				}
				env.NodeClients = append(env.NodeClients, nodes)
				env.Clients = append(env.Clients, nodes[0])
				continue
			}
			c, err := topo.Client(opts...)
			if err != nil {
				return nil, err
			}
			env.Clients = append(env.Clients, c)
		}
	}
	for i := 0; i < cfg.Clients; i++ {
		env.rands = append(env.rands, mrand.New(mrand.NewPCG(uint64(cfg.Seed), uint64(i)+1)))
		// Acquisitions learn the owner they sent from their commands (an
		// independent set's node clients have the hook already).
		if env.NodeClients == nil {
			env.Clients[i].AddHook(ownerHook{})
		}
	}
	// A server without a feature the primitive needs (hash-field expiry)
	// runs nothing: N/A naming it, not a verdict on the primitive.
	if why := s.lacking(ctx, env.Clients[0], env.Key("coordtorture:requires")); why != "" {
		return unsupported(s, cfg, impl.Name(), buildName, provider, target, transport, why), nil
	}
	events := s.Schedule(cfg.Seed, cfg.Duration, cfg.TTL)
	// The nemesis records its events in the history as one more process.
	nemesisProc := cfg.Clients
	warmUp(ctx, env)

	start := time.Now()
	env.Rec = history.NewRecorder(start)
	// The clients stop at the run's end, once the nemesis has done every
	// event due within the run: an event in flight at the end (a restart,
	// a failover's confirmation, one a loaded machine started late) ends
	// first, for InFlightGrace at most (then the clients stop and the
	// events left are UNKNOWN, the wait named). The schedule keeps
	// ScheduleMargin before the end, so a run seldom waits.
	wctx := newRunEnd(ctx, start.Add(cfg.Duration))
	cancel := func() { wctx.stop(context.DeadlineExceeded) } // the run's end, as a deadline
	defer wctx.stop(context.Canceled)
	nemesisDone := make(chan struct{})
	if len(events) == 0 {
		close(nemesisDone)
	}
	var stopped struct {
		over   time.Duration // how long the clients waited past the end for the nemesis
		waited bool          // InFlightGrace ran out with events not done
	}
	stopDone := make(chan struct{})
	go func() { // the run's end
		defer close(stopDone)
		end := time.NewTimer(cfg.Duration)
		defer end.Stop()
		select {
		case <-wctx.Done():
			return
		case <-end.C:
		}
		select {
		case <-nemesisDone:
		default: // an event due within the run is not done
			grace := time.NewTimer(InFlightGrace)
			defer grace.Stop()
			select {
			case <-nemesisDone:
			case <-wctx.Done():
			case <-grace.C:
				stopped.waited = true
			}
			stopped.over = time.Since(start) - cfg.Duration
		}
		cancel()
	}()
	var wg sync.WaitGroup
	for i := 0; i < cfg.Clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Workload(wctx, env, i) }()
	}
	var log []EventLog
	var logMu sync.Mutex
	var demoteMu sync.Mutex // the demotion watches share one process (+3)
	wg.Add(1)
	go func() { // the nemesis
		defer wg.Done()
		if len(events) > 0 {
			defer close(nemesisDone)
		}
		for _, ev := range events {
			// An event due at or after the run's end never runs (the
			// schedule window keeps none there); one due within it runs,
			// late if the one before outran its time, while the clients
			// wait for it — unless they were stopped: the run was
			// interrupted, or InFlightGrace ran out.
			if ev.At >= cfg.Duration || wctx.Err() != nil {
				return
			}
			if d := time.Until(start.Add(ev.At)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-wctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			kind := ev.Kind
			if kind == "" {
				kind = models.NemesisEvent
			}
			inv, _ := env.Rec.Invoke(nemesisProc, history.Op{F: history.FNemesis, Key: kind, Value: ev.Name})
			at := time.Duration(inv.T)
			el := EventLog{At: at, Name: ev.Name, Kind: kind}
			env.note, env.effects = nil, nil
			err := ev.Do(wctx, env)
			if len(env.note) > 0 {
				el.Name += " (" + strings.Join(env.note, "; ") + ")"
			}
			typ, comp := history.OK, history.Op{Value: el.Name}
			if err != nil {
				el.Err = err.Error()
				cfg.Logf("nemesis %s at %v: %v", ev.Name, at.Round(time.Millisecond), err)
				typ, comp.Err = history.Info, firstLine(el.Err)
			}
			done, _ := env.Rec.Complete(nemesisProc, typ, comp)
			el.End = time.Duration(done.T)
			// Each proven effect is an observation of its own in the history,
			// so an offline check can tell when a hazard became possible.
			for _, ef := range env.effects {
				key := models.NemesisEffect
				if ef.ongoing {
					key = models.NemesisEffectOngoing
				}
				op := history.Op{F: history.FNemesis, Key: key, Value: ef.what, Explains: strings.Join(ef.kinds, ",")}
				if ef.deposed != nil {
					op.Field = ef.deposed.Name // its effect-end names it too
				}
				if _, err := env.Rec.Invoke(nemesisProc, op); err == nil {
					_, _ = env.Rec.Complete(nemesisProc, history.OK, history.Op{Value: ef.what})
				}
				if ef.deposed != nil {
					wg.Add(1)
					go func() {
						defer wg.Done()
						env.watchDemotion(wctx, &demoteMu, nemesisProc+3, ef.deposed)
					}()
				}
			}
			whats := make([]string, len(env.effects))
			for i, ef := range env.effects {
				whats[i] = ef.what
			}
			el.Effect = strings.Join(whats, "; ")
			logMu.Lock()
			log = append(log, el)
			logMu.Unlock()
		}
	}()
	if cfg.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
					cfg.Progress(time.Since(start), cfg.Duration)
				}
			}
		}()
	}
	wg.Wait()
	cancel() // the workload may all have returned before the end
	<-stopDone
	if stopped.over > 0 {
		cfg.Logf("the clients ran %v past the run's end while the nemesis finished its schedule", stopped.over.Round(time.Millisecond))
	}
	env.closeCoordinators()
	if c, ok := sem.(interface{ close() }); ok {
		defer c.close()
	}
	if c, ok := rl.(interface{ close() }); ok {
		c.close() // before the topology closes the groups' clients
	}
	if topo := env.Topo; topo != nil {
		// Leave the topology whole again (the nemesis may have been cut short).
		_ = topo.HealAll()
		for _, n := range append(append(topo.Nodes(), topo.Sentinels()...), topo.Aux()...) {
			_ = topo.Resume(n.Name)
		}
	}
	var counters map[string]int64
	if c, ok := sem.(SemCounters); ok {
		// The implementation's background clean-ups end (confirmed or given
		// up) before its counters are read, so the run counts them all.
		if w, ok := sem.(interface{ waitCleanups(context.Context) error }); ok {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := w.waitCleanups(wctx); err != nil {
				env.Log.Warn("coordtorture: background clean-ups still running when the counters were read", "err", err)
			}
			cancel()
		}
		counters = c.Counters()
	}
	// The leak step: once every lease of the run could have expired, read
	// the servers for what is left of them (a leak_scan the leaks checker
	// judges), where that applies.
	leakNA := ""
	if key := s.leakKey(); key != "" && slices.ContainsFunc(s.Properties, func(p Property) bool { return p.Checker == "leaks" }) {
		healed := time.Since(start)
		h := env.Rec.History()
		if leakNA = s.leakScanNA(env, h); leakNA == "" {
			sleep(ctx, time.Until(start.Add(leakScanAt(h, healed, cfg.TTL, s.Check.Drift))))
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			env.scanLeaks(sctx, nemesisProc+2, key, keptOwners(h)) // +1 is the sampler
			cancel()
		}
	}

	out := &Outcome{Scenario: s.Name, Build: buildName, Impl: impl.Name(), Seed: cfg.Seed,
		Clients: cfg.Clients, Duration: cfg.Duration, Overran: stopped.over, TTL: cfg.TTL, Events: log, Records: env.Rec.Records(),
		Provider: provider, Target: target, Transport: transport, Counters: counters}
	h := env.Rec.History()
	out.Ops = len(h.Ops)
	out.Uncertain = models.CountUncertain(h)
	effects := models.Effects(h)
	for _, ef := range effects {
		line := fmt.Sprintf("at %.1fs: %s", time.Duration(ef.At).Seconds(), ef.What)
		if ef.Ongoing && ef.End > 0 {
			line += fmt.Sprintf(" (the loss ended at %.1fs: the deposed primary was demoted)", time.Duration(ef.End).Seconds())
		}
		out.Effects = append(out.Effects, line)
	}
	// The checkers learn what the implementation does after an uncertain
	// renewal (models.Options.UncertainRenewalReleases).
	check := s.Check
	if u, ok := impl.(interface{ UncertainRenewalReleases() bool }); ok {
		check.UncertainRenewalReleases = u.UncertainRenewalReleases()
	}
	// The header carries the run's expectations into the history file, so
	// that fencecheck reaches this verdict offline.
	out.Header = &history.Header{Header: history.HeaderMagic, Version: 1, Scenario: s.Name, Impl: impl.Name(),
		Build: buildName, Seed: cfg.Seed, Clients: cfg.Clients, DurationNs: int64(cfg.Duration), TTLMs: cfg.TTL.Milliseconds(),
		Nemesis: s.Nemesis != nil, FaultsScheduled: len(events), Options: models.HeaderOptions(check)}
	// Every property is judged by its models checker from the history and
	// the data the header carries (models.CheckProperty), as fencecheck
	// judges it offline: first the header gets that data — the run's reason
	// for a property with nothing to check, the servers' state a checker
	// needs read after the run — then the history carries the header.
	for _, p := range s.Properties {
		if _, ok := models.Lookup(p.Checker); !ok {
			return nil, fmt.Errorf("scenarios: %s: unknown checker %q", s.Name, p.Checker)
		}
		hp := models.HeaderProperty(p)
		switch {
		case p.Checker == "leaks" && leakNA != "":
			hp.NotChecked = leakNA
		case p.Checker == "token-order" && !impl.Fenced():
			hp.NotChecked = "nothing to check: " + impl.Name() + " hands out no fencing tokens"
		}
		if read, ok := s.Reads[p.Checker]; ok {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			hp.Reads = read(rctx, env, h)
			cancel()
		}
		out.Header.Properties = append(out.Header.Properties, hp)
	}
	h.Header = out.Header
	var vs []Verdict
	for k, p := range s.Properties {
		r, v, _ := models.CheckProperty(h, p, out.Header.Properties[k].NotChecked, check, effects)
		out.Results = append(out.Results, PropertyResult{Property: p, Checker: p.Checker, Expect: p.Expect.String(), Verdict: v, Result: r})
		// N/A too: models.Overall leaves it to the other properties, and a
		// run whose every property had nothing to check is UNKNOWN, as
		// fencecheck judges the same history.
		vs = append(vs, v)
	}
	// A fault that did not happen as scheduled leaves the scenario untested:
	// it cannot PASS (a FAIL found anyway still stands).
	var failed []string
	for _, ev := range log {
		if ev.Err != "" {
			failed = append(failed, fmt.Sprintf("nemesis event %q at %v failed: %s", ev.Name, ev.At.Round(time.Millisecond), firstLine(ev.Err)))
		}
	}
	// So does one that was scheduled but never ran: the run was
	// interrupted, or an event before it was still running InFlightGrace
	// after the run's end (the run waits that long for its schedule); and a
	// scenario about a fault whose run scheduled none.
	if len(log) < len(events) {
		why := fmt.Sprintf("the run (%v) was interrupted first", cfg.Duration)
		if stopped.waited {
			why = fmt.Sprintf("the events before it were still running %v after the run's end (%v), the longest a run waits for its schedule",
				InFlightGrace, cfg.Duration)
		}
		for _, ev := range events[len(log):] {
			failed = append(failed, fmt.Sprintf("nemesis event %q scheduled at %v did not happen: %s",
				ev.Name, ev.At.Round(time.Millisecond), why))
		}
	}
	if s.Nemesis != nil && len(events) == 0 {
		failed = append(failed, fmt.Sprintf("no fault was scheduled in a run of %v: the scenario's faults need a longer --duration", cfg.Duration))
	}
	if len(failed) > 0 {
		vs = append(vs, Unknown)
		out.Error = strings.Join(failed, "\n")
	}
	out.Hazard = models.HazardOutcome(s.Properties, vs, effects)
	out.Verdict = models.Overall(vs...)
	return out, nil
}

// NotRun reports whether the run started nothing: too short for what its
// scenario states against the ttl (Scenario.Needs); Error says why.
func (o *Outcome) NotRun() bool { return strings.HasPrefix(o.Error, o.Scenario+notRunSep) }

// notRunSep follows the scenario's name in a not-run outcome's error.
const notRunSep = ": not run: "

// notRun is the outcome of a run that started nothing because of why:
// UNKNOWN, with why as its error (no properties, no history).
func notRun(s *Scenario, cfg Config, impl, why string) *Outcome {
	b, provider := cmp.Or(s.Topo.Build, cfg.Build, testbed.DefaultBuild), "local"
	switch {
	case cfg.External != nil:
		b, provider = "external", "external"
	case cfg.Docker != nil:
		provider = "docker"
	}
	return &Outcome{Scenario: s.Name, Build: b, Impl: impl, Seed: cfg.Seed, Clients: cfg.Clients, Duration: cfg.Duration,
		TTL: cfg.TTL, Verdict: Unknown, Provider: provider, Error: s.Name + notRunSep + why}
}

// unsupported is the outcome of a run on a server that lacks a feature the
// scenario requires (Scenario.Requires), asked before the workload: N/A,
// every property N/A with why (no history: nothing ran). It checked nothing,
// so a run of such outcomes alone is UNKNOWN (reports.Run.Overall), but
// beside runs that checked something it leaves the verdict to them: a
// matrix over builds with and without the feature can PASS.
func unsupported(s *Scenario, cfg Config, impl, build, provider, target, transport, why string) *Outcome {
	o := &Outcome{Scenario: s.Name, Build: build, Impl: impl, Seed: cfg.Seed, Clients: cfg.Clients, Duration: cfg.Duration,
		TTL: cfg.TTL, Verdict: NA, Provider: provider, Target: target, Transport: transport, Unsupported: why}
	// The history file holds the header alone: each property with why it
	// had nothing to check, so fencecheck says it too.
	o.Header = &history.Header{Header: history.HeaderMagic, Version: 1, Scenario: s.Name, Impl: impl, Build: build, Seed: cfg.Seed,
		Clients: cfg.Clients, DurationNs: int64(cfg.Duration), TTLMs: cfg.TTL.Milliseconds(), Nemesis: s.Nemesis != nil,
		Options: models.HeaderOptions(s.Check)}
	for _, p := range s.Properties {
		hp := models.HeaderProperty(p)
		hp.NotChecked = why
		o.Header.Properties = append(o.Header.Properties, hp)
	}
	for _, p := range s.Properties {
		o.Results = append(o.Results, PropertyResult{Property: p, Checker: p.Checker, Expect: p.Expect.String(), Verdict: NA,
			Result: models.Result{Checker: p.Checker, Verdict: models.Unknown, Summary: why}})
	}
	return o
}

func startTopology(ctx context.Context, t Topology, cfg Config) (*testbed.Topology, error) {
	opts := []testbed.Option{testbed.WithLogf(cfg.Logf), testbed.WithAOF(t.AOF)}
	if t.DownAfter > 0 {
		opts = append(opts, testbed.WithDownAfter(t.DownAfter))
	}
	if t.Build != "" {
		cfg.Build = t.Build
	}
	if cfg.Docker != nil {
		opts = append(opts, docker.Provider(cfg.Docker.Image))
	}
	switch t.Kind {
	case testbed.KindReplicated:
		return testbed.NewReplicated(ctx, cfg.Build, t.Replicas, t.Sentinels, opts...)
	case testbed.KindCluster:
		return testbed.NewCluster(ctx, cfg.Build, t.Primaries, t.ReplicasPerPrimary, opts...)
	case testbed.KindIndependent:
		return testbed.NewIndependentSet(ctx, cfg.Build, t.Nodes, opts...)
	}
	return testbed.NewStandalone(ctx, cfg.Build, opts...)
}

// externalClient dials the deployment once per process, with the harness's
// timeouts and go-redis's retries (none when hardened).
func externalClient(ctx context.Context, ext *External, hardened bool) (redis.UniversalClient, error) {
	retries := 0 // go-redis's default (3)
	if hardened {
		retries = -1
	}
	o := &redis.UniversalOptions{Addrs: ext.Addrs, MasterName: ext.MasterName, IsClusterMode: ext.Cluster,
		Username: ext.Username, Password: ext.Password, SentinelUsername: ext.SentinelUsername,
		SentinelPassword: ext.SentinelPassword, MaxRetries: retries,
		DialTimeout: 2 * time.Second, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond}
	o.TLSConfig = ext.tlsConfig()
	if ext.Dialer != nil {
		o.Dialer = tlsopt.WrapDialer(ext.Dialer, o.TLSConfig)
	}
	c := redis.NewUniversalClient(o)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A refused PING (a user without +ping, which prim does without) is an
	// answer: the deployment is reached. Any other refusal is not (a cluster
	// client's PING first asks CLUSTER SLOTS, without which every command
	// fails: review).
	if err := c.Ping(pctx).Err(); err != nil && !tlsopt.PingRefused(err) {
		c.Close()
		hint := ""
		if msg := err.Error(); ext.MasterName != "" && strings.Contains(msg, "sentinels") &&
			(strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOPERM")) {
			hint = " (the sentinels are asked with the sentinel credentials, not the data user's: --sentinel-user, " +
				"password from $COORDTORTURE_SENTINEL_PASSWORD)"
		}
		return nil, fmt.Errorf("scenarios: cannot reach %v: %w%s", ext.Addrs, err, hint)
	}
	return c, nil
}

func (e *Env) closeClients() {
	for _, c := range e.Clients {
		c.Close()
	}
}

// deletePrefixed removes every key the run wrote on an external deployment
// (every one contains the run's random prefix), on every primary.
func (e *Env) deletePrefixed() {
	if e.Prefix == "" || len(e.Clients) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sweep := func(ctx context.Context, c *redis.Client) error {
		// The prefix can sit inside a hash tag ("{coordtorture:…:lock}:fence").
		iter := c.Scan(ctx, 0, "*"+e.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			// Keys are deleted one at a time: on a cluster node they can sit in
			// different slots.
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := e.Clients[0].(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, sweep)
	case *redis.Client:
		err = sweep(ctx, c)
	}
	if err != nil {
		e.Log.Warn("coordtorture: could not delete the run's keys", "prefix", e.Prefix, "err", err)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// warmUp opens a connection on every client (each node client of an
// independent set) before the history starts: a service's pool is warm, and
// a cold one on a loaded machine made the first operations of a run miss a
// 100ms node timeout while dialling through the proxies, which left the
// period before the first fault (the only healthy one of a busy nemesis)
// too few completions to judge progress. Errors are ignored: the workload
// meets them, recorded.
func warmUp(ctx context.Context, env *Env) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var cs []redis.UniversalClient
	if env.NodeClients != nil {
		for _, nodes := range env.NodeClients {
			cs = append(cs, nodes...)
		}
	} else {
		cs = env.Clients
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cc, ok := c.(*redis.ClusterClient); ok {
				// Every node of a cluster, not the one a PING lands on.
				_ = cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
				return
			}
			_ = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
}

// runEnd is the clients' and the nemesis's context: it ends at the run's
// end (once the nemesis has done the events due within it, see Run) and then
// reads as a deadline, as a context.WithTimeout of the run's duration did
// before the run waited for its schedule: Err (and a child's) is
// context.DeadlineExceeded, not context.Canceled, so a workload that records
// a wait cut by the end as "nothing happened" (DeadlineExceeded and not
// uncertain) still does, and Deadline is the run's nominal end (the sampler
// spaces its samples by it). Interrupted from outside (the parent's end), it
// reads as the parent did. Its Done channel is its own, so children made
// with context.WithTimeout take their error from its Err.
type runEnd struct {
	parent context.Context
	end    time.Time
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	err    error
	unhook func() bool
}

func newRunEnd(parent context.Context, end time.Time) *runEnd {
	c := &runEnd{parent: parent, end: end, done: make(chan struct{})}
	c.unhook = context.AfterFunc(parent, func() { c.stop(parent.Err()) })
	return c
}

// stop ends the context with err (the first call wins).
func (c *runEnd) stop(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
		c.unhook()
	})
}

// Deadline implements context.Context: the run's nominal end.
func (c *runEnd) Deadline() (time.Time, bool) { return c.end, true }

// Done implements context.Context.
func (c *runEnd) Done() <-chan struct{} { return c.done }

// Err implements context.Context.
func (c *runEnd) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value implements context.Context.
func (c *runEnd) Value(key any) any { return c.parent.Value(key) }
