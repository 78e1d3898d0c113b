package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// Verdict is a property's or a scenario's outcome.
type Verdict string

// The verdicts, from best to worst.
const (
	Pass    Verdict = "PASS"
	Hazard  Verdict = "HAZARD"
	Unknown Verdict = "UNKNOWN"
	Fail    Verdict = "FAIL"
)

func rank(v Verdict) int {
	switch v {
	case Hazard:
		return 1
	case Unknown:
		return 2
	case Fail:
		return 3
	}
	return 0
}

// Worst returns the worst verdict of vs (PASS when empty).
func Worst(vs ...Verdict) Verdict {
	w := Pass
	for _, v := range vs {
		if rank(v) > rank(w) {
			w = v
		}
	}
	return w
}

// Config is one run's settings.
type Config struct {
	Build    string        // server build (testbed name); "" = default
	Duration time.Duration // workload duration (default 10s)
	Clients  int           // client processes (default 8)
	Seed     int64         // nemesis and workload randomness
	Impl     string        // "prim" (default) or a peer
	TTL      time.Duration // lock lease duration (default 500ms)
	// Progress, when set, is called about once a second with the time elapsed.
	Progress func(elapsed, total time.Duration)
	Logf     func(string, ...any)
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
}

// PropertyResult is one property's verdict with the checker's result.
type PropertyResult struct {
	Property Property      `json:"-"`
	Checker  string        `json:"checker"`
	Expect   string        `json:"expect"`
	Verdict  Verdict       `json:"verdict"`
	Result   models.Result `json:"result"`
}

// EventLog is a nemesis event as it ran.
type EventLog struct {
	At   time.Duration `json:"at_ns"`
	Name string        `json:"name"`
	Err  string        `json:"err,omitempty"`
}

// Outcome is the result of one scenario run.
type Outcome struct {
	Scenario string           `json:"scenario"`
	Build    string           `json:"build"`
	Impl     string           `json:"impl"`
	Seed     int64            `json:"seed"`
	Clients  int              `json:"clients"`
	Duration time.Duration    `json:"duration_ns"`
	Verdict  Verdict          `json:"verdict"`
	Results  []PropertyResult `json:"properties"`
	Events   []EventLog       `json:"events"`
	Ops      int              `json:"ops"`
	Error    string           `json:"error,omitempty"`
	// Records is the history, for writing as JSONL.
	Records []history.Op `json:"-"`
}

// Run runs one scenario on a fresh topology and judges its history. An error
// is returned only when the scenario could not run at all (servers did not
// start); a run whose checkers found violations returns an Outcome.
func Run(ctx context.Context, s *Scenario, cfg Config) (*Outcome, error) {
	cfg.defaults()
	impl, err := NewImpl(cfg.Impl)
	if err != nil {
		return nil, err
	}
	_, registered := extraImpls[impl.Name()]
	supported := len(s.Impls) == 0 || registered
	for _, i := range s.Impls {
		supported = supported || i == impl.Name()
	}
	if !supported {
		return nil, fmt.Errorf("scenarios: %s does not run on %s (supports %v)", s.Name, impl.Name(), s.Impls)
	}
	topo, err := startTopology(ctx, s.Topo, cfg)
	if err != nil {
		return nil, err
	}
	defer topo.Close()

	env := &Env{Topo: topo, Impl: impl, Seed: cfg.Seed, TTL: cfg.TTL,
		Resource: &Resource{Fencing: impl.Fenced()}}
	if r, ok := impl.(interface{ ResourceFencing() bool }); ok {
		env.Resource.Fencing = r.ResourceFencing()
	}
	for i := 0; i < cfg.Clients; i++ {
		c, err := topo.Client(testbed.AsPeer(Peer(i)), testbed.WithTimeout(250*time.Millisecond),
			testbed.WithOptions(func(o *redis.UniversalOptions) { o.MaxRetries = -1 }))
		if err != nil {
			return nil, err
		}
		env.Clients = append(env.Clients, c)
		env.rands = append(env.rands, rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i)+1)))
	}
	events := []Event(nil)
	if s.Nemesis != nil {
		events = s.Nemesis(rand.New(rand.NewPCG(uint64(cfg.Seed), 0)), cfg.Duration)
	}

	start := time.Now()
	env.Rec = history.NewRecorder(start)
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < cfg.Clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Workload(wctx, env, i) }()
	}
	var log []EventLog
	var logMu sync.Mutex
	wg.Add(1)
	go func() { // the nemesis
		defer wg.Done()
		for _, ev := range events {
			t := time.NewTimer(time.Until(start.Add(ev.At)))
			select {
			case <-wctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			at := time.Since(start)
			el := EventLog{At: at, Name: ev.Name}
			if err := ev.Do(wctx, env); err != nil {
				el.Err = err.Error()
				cfg.Logf("nemesis %s at %v: %v", ev.Name, at.Round(time.Millisecond), err)
			}
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
	env.closeCoordinators()
	// Leave the topology whole again (the nemesis may have been cut short).
	_ = topo.HealAll()
	for _, n := range append(topo.Nodes(), topo.Sentinels()...) {
		_ = topo.Resume(n.Name)
	}

	out := &Outcome{Scenario: s.Name, Build: topo.Build.Name, Impl: impl.Name(), Seed: cfg.Seed,
		Clients: cfg.Clients, Duration: cfg.Duration, Events: log, Records: env.Rec.Records()}
	h := env.Rec.History()
	out.Ops = len(h.Ops)
	var vs []Verdict
	for _, p := range s.Properties {
		c, ok := models.Lookup(p.Checker)
		if !ok {
			return nil, fmt.Errorf("scenarios: %s: unknown checker %q", s.Name, p.Checker)
		}
		r := c.Check(h, s.Check)
		v := Pass
		switch r.Verdict {
		case models.Fail:
			v = Fail
			if p.Expect == MayHazard {
				v = Hazard
			}
		case models.Unknown:
			v = Unknown
		}
		out.Results = append(out.Results, PropertyResult{Property: p, Checker: p.Checker, Expect: p.Expect.String(), Verdict: v, Result: r})
		vs = append(vs, v)
	}
	out.Verdict = Worst(vs...)
	return out, nil
}

func startTopology(ctx context.Context, t Topology, cfg Config) (*testbed.Topology, error) {
	opts := []testbed.Option{testbed.WithLogf(cfg.Logf), testbed.WithAOF(t.AOF)}
	switch t.Kind {
	case testbed.KindReplicated:
		return testbed.NewReplicated(ctx, cfg.Build, t.Replicas, t.Sentinels, opts...)
	case testbed.KindCluster:
		return testbed.NewCluster(ctx, cfg.Build, t.Primaries, t.ReplicasPerPrimary, opts...)
	}
	return testbed.NewStandalone(ctx, cfg.Build, opts...)
}
