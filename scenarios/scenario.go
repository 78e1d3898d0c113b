// Package scenarios runs coordination primitives (package prim, or a peer
// library) on real servers from package testbed while a nemesis injects faults
// on a seeded timeline, records every operation as a history and judges it with
// the checkers of package models.
//
// A scenario is named <family>/<fault>; it declares its topology, its workload
// (concurrent client processes), its nemesis schedule, and for each property
// whether it must hold (a violation is FAIL) or may show a documented hazard (a
// violation is HAZARD, reported with its evidence). Adding a family is one file:
// see fencedlock.go.
package scenarios

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// Expectation says what a property's violation means in a scenario (see
// models.Expectation: the rule is package models', shared with fencecheck).
type Expectation = models.Expectation

const (
	// MustHold: a violation is a bug (FAIL).
	MustHold = models.MustHold
	// MayHazard: the fault is one of the documented hazards (asynchronous
	// failover, restore, eviction, clock skew) that can break the property.
	// Violations are judged one by one (models.Judge): the property is
	// HAZARD, with its evidence, only when every violation is of a kind the
	// hazard produces (Property.Hazards) and was not complete before the
	// first fault with a proven effect began; any other violation makes it
	// FAIL. A stale write the resource accepted is never the hazard: it is
	// the resource's own bug.
	MayHazard = models.MayHazard
)

// Property is one checker of package models with its expectation.
type Property = models.Property

// HazardKinds are the violation kinds a checker's MayHazard property counts
// as the hazard by default (models.DefaultHazards): what a lost counter
// increment or lease can do. models.KindStaleWrite is never one.
var HazardKinds = models.DefaultHazards

// Topology is the shape a scenario runs on.
type Topology struct {
	Kind               testbed.Kind
	Replicas           int // replicated
	Sentinels          int // replicated
	Primaries          int // cluster
	ReplicasPerPrimary int // cluster
	Nodes              int // independent set
	AOF                bool
	// DownAfter is the sentinels' down-after-milliseconds (replicated; 0 =
	// the testbed's default, 1s): how soon they fail over an unreachable
	// primary on their own.
	DownAfter time.Duration
	// Build pins the server build whatever the run's build (hash-lease/
	// old-server needs a server without hash-field expiry).
	Build string
}

func (t Topology) String() string {
	if t.Build != "" {
		return string(t.Kind) + " on " + t.Build
	}
	switch t.Kind {
	case testbed.KindReplicated:
		return fmt.Sprintf("replicated (1 primary, %d replicas, %d sentinels)", t.Replicas, t.Sentinels)
	case testbed.KindCluster:
		return fmt.Sprintf("cluster (%d primaries × %d replicas)", t.Primaries, t.ReplicasPerPrimary)
	case testbed.KindIndependent:
		return fmt.Sprintf("independent set of %d servers", t.Nodes)
	}
	return string(t.Kind)
}

// Event is one fault of a nemesis schedule, at an offset from the start.
type Event struct {
	At   time.Duration
	Name string
	// Kind is what the event does to the system: models.NemesisFault
	// (starts a degraded state), models.NemesisHeal (ends them) or
	// models.NemesisEvent (one-shot, the default). The progress checker
	// judges the periods it leaves healthy.
	Kind string
	Do   func(ctx context.Context, env *Env) error
}

// Schedule returns the nemesis schedule a run of s with seed, duration d
// and leases of ttl runs (nil for a scenario without a nemesis), in time
// order: a function of the three alone, so a replay at the same seed,
// duration and ttl injects the same faults at the same offsets. It is
// Nemesis over the run's schedule window: every event, the last heal
// included, is due ScheduleMargin(d) or more before the run's end.
func (s *Scenario) Schedule(seed int64, d, ttl time.Duration) []Event {
	if s.Nemesis == nil {
		return nil
	}
	// The schedule fills the run less its end margin (ScheduleMargin).
	events := s.Nemesis(rand.New(rand.NewPCG(uint64(seed), 0)), scheduleWindow(d), ttl)
	// Schedules built from several parts run in time order.
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return events
}

// Scenario is one named run: topology, workload, nemesis, properties.
type Scenario struct {
	Name    string
	Summary string
	Topo    Topology
	// Workload runs one client process until ctx ends.
	Workload func(ctx context.Context, env *Env, proc int)
	// Nemesis returns the fault schedule for a schedule window of d with
	// leases of ttl (--ttl): every event, the last heal included, is due
	// before d. d is the run's duration less its end margin
	// (ScheduleMargin: 500ms of a 5s run), so that the run never ends
	// before its own schedule (Schedule is what a run injects). A fault
	// whose summary is stated against the lease (a restart more than a ttl
	// after the kill, a pause longer than a lease) is timed from ttl, not
	// from d alone.
	Nemesis func(r *rand.Rand, d, ttl time.Duration) []Event
	// Needs, when set, says what a run of duration d with leases of ttl
	// lacks for the scenario to do what its summary states against the ttl
	// (see needDuration, and needScheduled for what the schedule window
	// must fit): "" when it has it, else the reason, naming the
	// --duration (or --ttl) that would do. Such a run starts nothing and is
	// UNKNOWN with that reason, never a PASS or a FAIL.
	Needs func(d, ttl time.Duration) string
	// Properties are the checkers that judge the history.
	Properties []Property
	// Check tunes the checkers (drift allowance, lost notifications…).
	Check models.Options
	// Impls lists the implementations the scenario supports ("prim" first).
	Impls []string
	// ClientTimeout is the clients' read/write timeout; 0 is 250ms (see
	// Run). A scenario about replies slower than the lease sets go-redis's
	// default, 3s, so that such replies arrive instead of timing out.
	ClientTimeout time.Duration
	// Waits says the workload waits for the lock through the
	// implementation's Waiter interface (the waiting-lock family): a mutant
	// runs on it only if it is a Waiter.
	Waits bool
	// NoProgress leaves out the progress checker, which Register adds to
	// every scenario: for one whose every operation is meant to be refused.
	NoProgress bool
	// NoLeakScan, when set, says why the leak scan does not apply to the
	// scenario (its leaks property is N/A with this reason). Register adds a
	// leaks property to every scenario of a family that leaves leases on the
	// server (fenced-lock, waiting-lock, hash-lease).
	NoLeakScan string
	// Algo, for a ratelimit scenario, is the algorithm its limiters
	// implement (history.AlgoFixed…): the workload drives a LimiterImpl
	// (Env.Limiter), and only the implementations of that algorithm run it.
	Algo string
	// Sem says the scenario's workload drives a SemImpl (Env.Sem): the
	// semaphore family, which runs prim and the semaphore mutants only.
	Sem bool
	// Latches, for a latch scenario, says the workload drives a LatchImpl
	// (Env.Latch): only the countdown latch implementations run it.
	Latches bool
	// RW says the scenario is a read-write lease one (the rwlock family):
	// the workload drives an RWImpl (Env.RW), and only those run it.
	RW bool
	// Redlock says the scenario is a Redlock one (the redlock family, on an
	// independent set): the workload drives a RedlockImpl (Env.Redlock) with
	// one client per node (Env.NodeClients), and only those run it.
	Redlock bool
	// Reads holds, by property name, the reads of the servers' state after
	// the run that a property's checker needs beside the history (what a
	// history cannot show): the run records them in the history's header as
	// data (history.HeaderProperty.Reads), and the checker of package
	// models judges them with the history, in the run and offline alike.
	Reads map[string]Read
	// Requires lists the server features the scenario's primitive cannot
	// work without (hash-field expiry for named leases). Before the
	// workload the run asks the server for each (Feature.Lacks); a server
	// that lacks one runs nothing, and every property is N/A naming the
	// missing feature: what the server cannot do is not a verdict on the
	// primitive (the run's outcome is N/A, see Run).
	Requires []Feature
}

// Feature is a server feature a scenario needs, and how to learn whether a
// server has it.
type Feature struct {
	// Name names it ("hash-field expiry").
	Name string
	// Where says which servers have it ("Redis 7.4+ and Valkey 9.0+").
	Where string
	// Lacks asks the server through c, with a command that cannot write
	// (key does not exist), whether it lacks the feature: the server's
	// answer when it does ("ERR unknown command 'HPTTL'…"), "" when it
	// has it or the answer does not tell (a refusal by ACL, a timeout:
	// the workload then runs and meets it as the primitive would).
	Lacks func(ctx context.Context, c redis.UniversalClient, key string) string
}

// HashFieldExpiry is hash-field expiry (HPEXPIRE, HPTTL), which prim's
// named hash-field leases need: a server without it (Redis before 7.4,
// Valkey before 9.0) refuses them with prim.ErrFeatureUnsupported.
var HashFieldExpiry = Feature{Name: "hash-field expiry (HPEXPIRE/HPTTL)", Where: "Redis 7.4+ and Valkey 9.0+",
	Lacks: func(ctx context.Context, c redis.UniversalClient, key string) string {
		err := c.Do(ctx, "HPTTL", key, "FIELDS", 1, "f").Err()
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			msg, _, _ := strings.Cut(err.Error(), ", with args") // the key is the run's: not worth showing
			return msg
		}
		return ""
	}}

// lacking reports the first feature of s.Requires the server lacks, asked
// through c on the scenario's own (prefixed) probe key: why, naming the
// feature, the server's answer and where the feature exists; "" when the
// server has every one (or did not tell).
func (s *Scenario) lacking(ctx context.Context, c redis.UniversalClient, key string) string {
	for _, f := range s.Requires {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		answer := f.Lacks(qctx, c, key)
		cancel()
		if answer != "" {
			return fmt.Sprintf("the server has no %s (it answered %q), which %s needs: it exists in %s (coordtorture preflight says so too)",
				f.Name, answer, s.primitive(), f.Where)
		}
	}
	return ""
}

// primitive names, for a message, what the scenario's family exercises.
func (s *Scenario) primitive() string {
	family, _, _ := strings.Cut(s.Name, "/")
	if family == "hash-lease" {
		return "a hash-field lease"
	}
	return family
}

// Read reads, after the workload while the servers are still up, the
// servers' state a property's checker judges (a failed read is recorded
// with its error: the checker is then UNKNOWN).
type Read func(ctx context.Context, env *Env, h *history.History) []history.ServerRead

// Env is what a workload and a nemesis act on.
type Env struct {
	Topo    *testbed.Topology
	Rec     *history.Recorder
	Clients []redis.UniversalClient // one per process, each its own peer ("c0", "c1"…)
	Impl    LockImpl
	// Limiter is the rate limiter implementation under test (ratelimit
	// scenarios; nil otherwise).
	Limiter LimiterImpl
	// Sem is the semaphore implementation under test (semaphore scenarios;
	// nil otherwise).
	Sem SemImpl
	// Latch is the countdown latch implementation under test (latch
	// scenarios; nil otherwise).
	Latch LatchImpl
	// RW is the read-write lease implementation under test (rwlock
	// scenarios; nil otherwise).
	RW RWImpl
	// Redlock is the Redlock implementation under test (redlock scenarios;
	// nil otherwise), and NodeClients each process's clients of the
	// independent set's nodes, in node order (NodeClients[proc][0] is
	// Clients[proc]).
	Redlock     RedlockImpl
	NodeClients [][]redis.UniversalClient
	Resource    *Resource
	Seed        int64
	TTL         time.Duration
	// Prefix goes before every key a workload uses (set on external
	// deployments, so a run never touches another's keys).
	Prefix string
	// Log is handed to the primitives under test.
	Log *slog.Logger

	rands   []*rand.Rand
	virtual atomic.Int64 // acquisition numbers for unfenced implementations
	coords  coordinators
	note    []string // what the running nemesis event chose (Note)
	effects []proven // what the running nemesis event proved (Effect…)

	latch   latchShared // the latch workload's rounds
	holding holderSet   // the redlock workload's holders
}

// proven is one effect a nemesis event proved.
type proven struct {
	what    string
	kinds   []string      // the violation kinds it can explain; nil: any
	ongoing bool          // EffectOngoing
	deposed *testbed.Node // EffectOngoing: its loss ends when this node is demoted
}

// Effect records the proof that a fault had the effect its hazard needs ("the
// restarted server lost the dataset", "the new primary is 812 bytes behind
// the old one"), which can explain a violation of any kind. Only a nemesis
// event's Do calls it, when it has observed the effect on the servers. A
// MayHazard violation counts as the hazard only after such a proof: a fault
// without an observed effect explains nothing, so the violation is FAIL.
func (e *Env) Effect(format string, args ...any) {
	e.effects = append(e.effects, proven{what: fmt.Sprintf(format, args...)})
}

// EffectExplaining is Effect for an effect that can explain only the
// violations of kinds (models.LeaseLossKinds for an evicted lease or a
// clock moved ahead, models.TokenLossKinds for an evicted counter).
func (e *Env) EffectExplaining(kinds []string, format string, args ...any) {
	e.effects = append(e.effects, proven{what: fmt.Sprintf(format, args...), kinds: kinds})
}

// EffectOngoing is Effect for a loss that may go on after it was observed
// (models.NemesisEffectOngoing): a failover, whose deposed primary may take
// writes and lose them until it is demoted. The run watches deposed and
// records when it is no longer a primary (models.NemesisEffectEnd), which
// ends the loss; without that, state made up to models.OngoingFor after the
// proof counts as lost.
func (e *Env) EffectOngoing(deposed *testbed.Node, format string, args ...any) {
	e.effects = append(e.effects, proven{what: fmt.Sprintf(format, args...), ongoing: true, deposed: deposed})
}

// Note records what the running nemesis event chose or found ("c3 cut from
// n1", "new primary n2"): the report shows it beside the event's name. Only a
// nemesis event's Do calls it.
func (e *Env) Note(format string, args ...any) { e.note = append(e.note, fmt.Sprintf(format, args...)) }

// Rand is the process's own seeded random source.
func (e *Env) Rand(proc int) *rand.Rand { return e.rands[proc] }

// Key is name with the run's key prefix.
func (e *Env) Key(name string) string { return e.Prefix + name }

// Peer is the testbed peer name of a process's client.
func Peer(proc int) string { return fmt.Sprintf("c%d", proc) }

var registry = map[string]*Scenario{}

// Register adds a scenario to the registry; a family file calls it from init.
func Register(s *Scenario) {
	if _, dup := registry[s.Name]; dup {
		panic("scenarios: duplicate scenario " + s.Name)
	}
	for _, p := range s.Properties {
		if slices.Contains(p.HazardKinds(), models.KindStaleWrite) {
			panic("scenarios: " + s.Name + ": a stale write accepted is never a hazard")
		}
	}
	if !s.NoProgress && !slices.ContainsFunc(s.Properties, func(p Property) bool { return p.Checker == "progress" }) {
		s.Properties = append(slices.Clip(s.Properties), Property{Checker: "progress"})
	}
	if s.leakKey() != "" && !slices.ContainsFunc(s.Properties, func(p Property) bool { return p.Checker == "leaks" }) {
		s.Properties = append(slices.Clip(s.Properties), Property{Checker: "leaks"})
	}
	registry[s.Name] = s
}

// All returns every registered scenario, by name.
func All() []*Scenario {
	out := make([]*Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Match returns the scenarios whose names match any of the patterns (path.Match
// globs such as "fenced-lock/*", a family such as "fenced-lock", or, without a
// slash, a glob on the part after it such as "*-cluster"). No pattern means all.
func Match(patterns []string) ([]*Scenario, error) {
	if len(patterns) == 0 {
		return All(), nil
	}
	var out []*Scenario
	for _, s := range All() {
		for _, p := range patterns {
			ok, err := path.Match(p, s.Name)
			if err != nil {
				return nil, fmt.Errorf("scenarios: bad pattern %q: %w", p, err)
			}
			if !ok && !strings.Contains(p, "/") {
				// A pattern without a slash may name the fault: "*-cluster", "baseline".
				ok, _ = path.Match(p, path.Base(s.Name))
			}
			if ok || s.Name == p || len(s.Name) > len(p) && s.Name[:len(p)] == p && s.Name[len(p)] == '/' {
				out = append(out, s)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("scenarios: no scenario matches %v (see `coordtorture list`)", patterns)
	}
	return out, nil
}

// write records one write of proc to the protected resource with the token
// (and owner) it holds: ok with the resource's sequence number when
// accepted, fail (with it too) when refused, info when the resource's reply
// did not arrive (lost, timed out, the connection cut or refused): such a
// write may have been applied.
func (e *Env) write(proc int, token int64, owner string) {
	value := fmt.Sprintf("p%d", proc)
	e.Rec.Invoke(proc, history.Op{F: history.FWrite, Key: "resource", Token: token, Owner: owner, Value: value})
	ok, seq, err := e.Resource.Write(context.Background(), proc, token, value)
	switch {
	case err != nil:
		e.Rec.Info(proc, history.Op{Err: err.Error()})
	case ok:
		e.Rec.OK(proc, history.Op{Seq: seq})
	default:
		e.Rec.Fail(proc, history.Op{Seq: seq, Err: "stale token"})
	}
}

// renewVerify records an owner-checked renewal of a held lock, then a
// verification (op carries key, owner, token).
func (e *Env) renewVerify(ctx context.Context, proc int, rn Renewer, op history.Op) {
	op.F, op.TTLMs = history.FRenew, e.TTL.Milliseconds()
	if _, err := e.Rec.Invoke(proc, op); err != nil {
		return
	}
	ok, err := rn.Renew(ctx, e.TTL)
	switch {
	case err != nil:
		e.failed(proc, err)
	case ok:
		e.Rec.OK(proc, history.Op{})
	default:
		e.Rec.Fail(proc, history.Op{}) // not the owner any more: a definite answer
	}
	op.F, op.TTLMs = history.FVerify, 0
	if _, err := e.Rec.Invoke(proc, op); err != nil {
		return
	}
	held, err := rn.Verify(ctx)
	switch {
	case err != nil:
		e.failed(proc, err)
	case held:
		e.Rec.OK(proc, history.Op{Value: history.ValueTrue})
	default:
		e.Rec.OK(proc, history.Op{Value: history.ValueFalse})
	}
}

// release records a release (op carries key, field, owner, token) that
// release performs within a second, whatever ctx, and reports whether it
// completed.
func (e *Env) release(ctx context.Context, proc int, op history.Op, release func(context.Context) (string, error)) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	op.F = history.FRelease
	e.Rec.Invoke(proc, op)
	v, err := release(rctx)
	if err != nil {
		e.failed(proc, err)
		return false
	}
	e.Rec.OK(proc, history.Op{Value: v})
	return true
}

// notExecutedPrefixes are the server error replies that mean the command did
// not run: the cluster sent it elsewhere (MOVED, ASK), the node refused it
// (READONLY, OOM, NOPERM, NOSCRIPT, CLUSTERDOWN, TRYAGAIN, MASTERDOWN,
// LOADING, BUSY, NOAUTH, WRONGTYPE).
var notExecutedPrefixes = []string{"MOVED ", "ASK ", "READONLY ", "OOM ", "NOPERM ", "NOSCRIPT ", "CLUSTERDOWN ",
	"TRYAGAIN ", "MASTERDOWN ", "LOADING ", "BUSY ", "NOAUTH ", "WRONGTYPE "}

// NotExecuted reports whether err is a definite "the command did not run": a
// server error reply of that kind, from an implementation that did not mark
// the outcome uncertain (an uncertain outcome may hide an earlier attempt
// that ran, such as a retry after a lost reply).
func NotExecuted(err error) bool {
	if err == nil || errors.Is(err, ErrUncertain) || errors.Is(err, prim.ErrUncertain) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return slices.ContainsFunc(notExecutedPrefixes, func(p string) bool { return strings.HasPrefix(msg, p) })
}

// failed completes proc's operation that ended with err: fail when err says
// the command did not run (NotExecuted), else info (its outcome is unknown).
func (e *Env) failed(proc int, err error) { e.failedWith(proc, err, history.Op{}) }

// failedWith is failed with more fields on the completion (op).
func (e *Env) failedWith(proc int, err error, op history.Op) {
	op.Err = err.Error()
	if NotExecuted(err) {
		e.Rec.Fail(proc, op)
		return
	}
	e.Rec.Info(proc, op)
}
