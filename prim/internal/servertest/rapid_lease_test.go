package servertest_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The model-based tests of the primitives with a handle (hash-field lease,
// read-write leases, semaphore permits, Redlock) share one state machine,
// leaseMachine: random acquisitions, renewals with longer and shorter
// durations, verifications, releases, closes, expiries on the server and
// waits for short leases to run out, each answer compared with a model that
// also says what Done, Context and RemainingEstimate must show.
//
// Time is real: a lease's end is only known to lie in a window (from before
// the request was sent to after its reply came, plus the duration). Before
// each step and each check the machine waits out every window that is open
// now or opens within rapidMargin, so every answer the model predicts is
// definite; a step that itself ran longer than rapidMargin (a loaded machine)
// cannot be judged and ends the schedule's checking (logged, never a pass of
// something that was checked).
const (
	rapidShort  = 300 * time.Millisecond // a lease's short duration, waited out
	rapidMargin = 120 * time.Millisecond // no window may open this close to a step
	rapidSlack  = 25 * time.Millisecond  // the server's ms clock and expiry rounding
	// rapidDoneBound: how late Done and the Context may end after the
	// deadline, the bound a user would notice on a loaded machine.
	rapidDoneBound = 2 * time.Second
)

// rapidTTLs are the durations drawn for acquisitions and renewals: a renewal
// moves the deadline later or earlier than it was.
var rapidTTLs = []time.Duration{rapidShort, 10 * time.Second}

// rapidBudget sets rapid's number of checks and of steps for a machine that
// waits out real time, unless they were given on the command line
// (-rapid.checks, -rapid.steps), and puts them back after the test.
func rapidBudget(t *testing.T, checks, steps int) {
	t.Helper()
	// What the command line gave, read before any budget set a flag (flag.Set
	// counts as given for flag.Visit).
	rapidGivenOnce.Do(func() { flag.Visit(func(f *flag.Flag) { rapidGiven[f.Name] = true }) })
	for name, v := range map[string]int{"rapid.checks": checks, "rapid.steps": steps} {
		if rapidGiven[name] {
			continue
		}
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, strconv.Itoa(v)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
}

// rapidChecksFor is the number of schedules a machine runs on build: the
// whole budget on the default build, a quarter (at least 5) on the others of
// the matrix. The machines wait out real time (about 45 s a build at the whole
// budget), and the whole matrix at the whole budget pushed the package past
// its 18-minute bound on a loaded 2-core machine; the other builds run the
// same machine on fewer schedules (-rapid.checks gives them all the same).
func rapidChecksFor(build string, checks int) int {
	if build == testbed.DefaultBuild || len(testbed.Matrix()) == 1 {
		return checks
	}
	return max(5, checks/4)
}

var (
	rapidGivenOnce sync.Once
	rapidGiven     = map[string]bool{}
)

// rapidLease is what the machine drives: the common handle methods, with the
// release answer as a ReleaseResult (a Redlock lease's adapter maps its bool).
type rapidLease interface {
	heldLease
	Release(ctx context.Context) (prim.ReleaseResult, error)
	Close() error
	OwnerToken() string
}

// leaseSpec is one primitive's part of the machine.
type leaseSpec struct {
	kinds    []string        // what an acquisition asks for: a field, a mode, a permit
	ttls     []time.Duration // durations to draw
	noExpiry bool            // prim.NoExpiry may be drawn too (semaphore permits)
	verify   bool            // the handle has VerifyStillHeld
	// acquire tries an acquisition; ErrNotAcquired when contended.
	acquire func(ctx context.Context, kind string, ttl time.Duration) (rapidLease, error)
	// admits: the model's answer to an acquisition of kind with these live
	// entries on the server.
	admits func(kind string, live []*leaseEntry) bool
	// released is the Release answer of a handle not yet released: its entry
	// live or not, and the entries of others live.
	released func(e *leaseEntry, live []*leaseEntry) prim.ReleaseResult
	// releasedAgain is the answer of a Release after one that ran (nil:
	// AlreadyReleased).
	releasedAgain func() prim.ReleaseResult
	// drift is subtracted from the local estimate (Redlock).
	drift func(ttl time.Duration) time.Duration
	// expire removes e's entry on the server (the lease ran out there while
	// its handle still estimates time left: a pause, a skewed clock).
	expire func(ctx context.Context, e *leaseEntry)
	// present: the server holds e's entry, unexpired.
	present func(ctx context.Context, e *leaseEntry) bool
	// settleAcquired waits, if needed, until an acquisition is in place on
	// the server (Redlock's slower nodes) and returns when it was.
	settleAcquired func(ctx context.Context, e *leaseEntry) time.Time
}

// leaseEntry is the model of one handle and of its entry on the server.
type leaseEntry struct {
	i    int
	kind string
	h    rapidLease
	work context.Context // from h.Context at acquisition
	stop context.CancelFunc

	lo, hi   time.Time // the local deadline lies in [lo, hi]
	noExpiry bool      // held without expiry (no deadline)
	ended    bool      // lost, released, surrendered: Done closed, RemainingEstimate 0
	doneDue  bool      // the deadline passed: Done closed (it stays closed)
	released bool      // Release or Close ran: AlreadyReleased from now on

	live         bool      // the server holds the entry
	srvLo, srvHi time.Time // its expiry on the server lies in [srvLo, srvHi]
}

type leaseMachine struct {
	t         *testing.T
	spec      *leaseSpec
	ctx       context.Context
	entries   []*leaseEntry
	abandoned bool
}

// windows are the times of e still to come or open now: its local deadline
// and its expiry on the server.
func (e *leaseEntry) windows() [][2]time.Time {
	var w [][2]time.Time
	if !e.ended && !e.doneDue && !e.noExpiry {
		w = append(w, [2]time.Time{e.lo, e.hi})
	}
	if e.live && !e.noExpiry {
		w = append(w, [2]time.Time{e.srvLo, e.srvHi.Add(rapidSlack)})
	}
	return w
}

// settle waits out every window open now or within rapidMargin, then applies
// the ends that passed.
func (m *leaseMachine) settle() {
	for {
		now, until := time.Now(), time.Time{}
		for _, e := range m.entries {
			for _, w := range e.windows() {
				if !now.Before(w[0].Add(-rapidMargin)) && !now.After(w[1]) && w[1].After(until) {
					until = w[1]
				}
			}
		}
		if until.IsZero() {
			break
		}
		time.Sleep(time.Until(until) + time.Millisecond)
	}
	now := time.Now()
	for _, e := range m.entries {
		if e.noExpiry {
			continue
		}
		if now.After(e.hi) {
			e.doneDue = true
		}
		if e.live && now.After(e.srvHi.Add(rapidSlack)) {
			e.live = false
		}
	}
}

// timed runs a step's call after settling; false: it ran so long that a
// window may have opened meanwhile, and the schedule is not judged further.
func (m *leaseMachine) timed(rt *rapid.T, f func()) (t0, t1 time.Time, ok bool) {
	m.settle()
	t0 = time.Now()
	f()
	t1 = time.Now()
	if t1.Sub(t0) > rapidMargin {
		rt.Logf("a call took %v (over %v): the rest of this schedule is not judged", t1.Sub(t0), rapidMargin)
		m.abandoned = true
		return t0, t1, false
	}
	return t0, t1, true
}

func (m *leaseMachine) liveEntries() []*leaseEntry {
	var out []*leaseEntry
	for _, e := range m.entries {
		if e.live {
			out = append(out, e)
		}
	}
	return out
}

// moved records a confirmed acquisition or renewal for ttl sent at t0 and
// answered at t1 (the server's entry in place at srv).
func (m *leaseMachine) moved(e *leaseEntry, ttl time.Duration, t0, t1, srv time.Time) {
	e.live = true
	if ttl == prim.NoExpiry {
		e.noExpiry = true
		return
	}
	e.noExpiry = false
	var drift time.Duration
	if m.spec.drift != nil {
		drift = m.spec.drift(ttl)
	}
	e.lo, e.hi = t0.Add(ttl-drift), t1.Add(ttl-drift)
	// The server's ms clock may round the deadline down by a millisecond.
	e.srvLo, e.srvHi = t0.Add(ttl-5*time.Millisecond), srv.Add(ttl)
}

func (m *leaseMachine) pick(rt *rapid.T) *leaseEntry {
	if len(m.entries) == 0 {
		rt.Skip("no handle yet")
	}
	return m.entries[rapid.IntRange(0, len(m.entries)-1).Draw(rt, "handle")]
}

func (m *leaseMachine) ttl(rt *rapid.T) time.Duration {
	ttls := m.spec.ttls
	if m.spec.noExpiry {
		ttls = append(append([]time.Duration(nil), ttls...), prim.NoExpiry)
	}
	return rapid.SampledFrom(ttls).Draw(rt, "ttl")
}

func (m *leaseMachine) end(e *leaseEntry) { e.ended, e.live = true, false }

func (m *leaseMachine) actions() map[string]func(*rapid.T) {
	s := m.spec
	acts := map[string]func(*rapid.T){
		"acquire": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			kind := rapid.SampledFrom(s.kinds).Draw(rt, "kind")
			ttl := m.ttl(rt)
			var (
				h   rapidLease
				err error
			)
			want := false
			t0, t1, ok := m.timed(rt, func() {
				want = s.admits(kind, m.liveEntries())
				h, err = s.acquire(m.ctx, kind, ttl)
			})
			if err == nil {
				e := &leaseEntry{i: len(m.entries), kind: kind, h: h}
				e.work, e.stop = h.Context(context.Background())
				srv := t1
				if s.settleAcquired != nil {
					srv = s.settleAcquired(m.ctx, e)
				}
				m.entries = append(m.entries, e)
				m.moved(e, ttl, t0, t1, srv)
			}
			if !ok {
				return
			}
			switch {
			case want && err != nil:
				rt.Fatalf("acquire %s for %v: %v; the model admits it (live: %v)", kind, ttl, err, m.describe())
			case !want && !errors.Is(err, prim.ErrNotAcquired):
				rt.Fatalf("acquire %s for %v: %v, %v; the model refuses it (live: %v)", kind, ttl, h, err, m.describe())
			}
		},
		"renew": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			e := m.pick(rt)
			ttl := m.ttl(rt)
			var (
				got  bool
				err  error
				want bool
			)
			t0, t1, ok := m.timed(rt, func() {
				want = !e.ended && e.live
				got, err = e.h.Renew(m.ctx, ttl)
			})
			if got {
				m.moved(e, ttl, t0, t1, t1)
			} else if !e.ended {
				m.end(e)
			}
			if !ok {
				return
			}
			if err != nil || got != want {
				rt.Fatalf("renew #%d for %v: %v, %v; model %v", e.i, ttl, got, err, want)
			}
		},
		"release": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			e := m.pick(rt)
			var (
				got  prim.ReleaseResult
				err  error
				want = prim.AlreadyReleased
			)
			_, _, ok := m.timed(rt, func() {
				switch {
				case !e.released:
					want = s.released(e, m.liveEntries())
				case s.releasedAgain != nil:
					want = s.releasedAgain()
				}
				got, err = e.h.Release(m.ctx)
			})
			m.end(e)
			e.released = true
			if ok && (err != nil || got != want) {
				rt.Fatalf("release #%d: %v, %v; model %v", e.i, got, err, want)
			}
		},
		"close": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			e := m.pick(rt)
			var err error
			_, _, ok := m.timed(rt, func() { err = e.h.Close() })
			m.end(e)
			e.released = true
			if ok && err != nil {
				rt.Fatalf("close #%d: %v", e.i, err)
			}
		},
		"expire": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			live := m.liveEntries()
			if len(live) == 0 {
				rt.Skip("nothing to expire")
			}
			e := rapid.SampledFrom(live).Draw(rt, "entry")
			s.expire(m.ctx, e)
			e.live = false
		},
		"wait": func(rt *rapid.T) {
			// Wait until the next short deadline has passed.
			if m.abandoned {
				return
			}
			var next time.Time
			for _, e := range m.entries {
				for _, w := range e.windows() {
					if next.IsZero() || w[1].Before(next) {
						next = w[1]
					}
				}
			}
			if next.IsZero() || time.Until(next) > 2*rapidShort+rapidMargin {
				rt.Skip("no short deadline ahead")
			}
			time.Sleep(time.Until(next) + time.Millisecond)
		},
		"": func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			for _, e := range m.entries {
				// Settled again for each handle: the checks of the others
				// take time, on a loaded machine more than rapidMargin.
				m.settle()
				m.checkHandle(rt, e)
				if got := s.present(m.ctx, e); got != e.live {
					rt.Fatalf("#%d (%s): the server holds its entry: %v, model %v", e.i, e.kind, got, e.live)
				}
			}
		},
	}
	if s.verify {
		acts["verify"] = func(rt *rapid.T) {
			if m.abandoned {
				return
			}
			e := m.pick(rt)
			v, ok := e.h.(interface {
				VerifyStillHeld(context.Context) (bool, error)
			})
			if !ok {
				rt.Skip("no VerifyStillHeld")
			}
			var (
				got, want bool
				err       error
			)
			_, _, ok = m.timed(rt, func() {
				want = !e.ended && e.live
				got, err = v.VerifyStillHeld(m.ctx)
			})
			if !got && !e.ended {
				m.end(e)
			}
			if ok && (err != nil || got != want) {
				rt.Fatalf("verify #%d: %v, %v; model %v", e.i, got, err, want)
			}
		}
	}
	return acts
}

// checkHandle compares e's Done, Context and RemainingEstimate with the model.
func (m *leaseMachine) checkHandle(rt *rapid.T, e *leaseEntry) {
	before := time.Now()
	left := e.h.RemainingEstimate()
	after := time.Now()
	switch {
	case e.ended:
		if left != 0 {
			rt.Fatalf("#%d ended: RemainingEstimate %v, model 0", e.i, left)
		}
	case e.noExpiry:
		if left != prim.NoExpiry {
			rt.Fatalf("#%d held without expiry: RemainingEstimate %v, model NoExpiry", e.i, left)
		}
	default:
		lo, hi := max(0, e.lo.Sub(after)), max(0, e.hi.Sub(before))
		if left < lo || left > hi {
			rt.Fatalf("#%d: RemainingEstimate %v, model in [%v, %v]", e.i, left, lo, hi)
		}
	}
	if e.ended || e.doneDue {
		select {
		case <-e.h.Done():
		case <-time.After(rapidDoneBound):
			rt.Fatalf("#%d: Done still open %v after ownership ended (ended %v, deadline passed %v)", e.i, rapidDoneBound, e.ended, e.doneDue)
		}
		select {
		case <-e.work.Done():
		case <-time.After(rapidDoneBound):
			rt.Fatalf("#%d: Context still live %v after Done closed", e.i, rapidDoneBound)
		}
		if c := context.Cause(e.work); !errors.Is(c, prim.ErrOwnershipEnded) {
			rt.Fatalf("#%d: Context's cause %v, want ErrOwnershipEnded", e.i, c)
		}
		return
	}
	// Held, its deadline (if any) at least rapidMargin ahead of the settle.
	select {
	case <-e.h.Done():
		rt.Fatalf("#%d: Done closed while held (deadline in [%v, %v] from now)", e.i, time.Until(e.lo), time.Until(e.hi))
	default:
	}
	if err := e.work.Err(); err != nil {
		rt.Fatalf("#%d: Context ended while held: %v", e.i, context.Cause(e.work))
	}
}

func (m *leaseMachine) describe() string {
	s := ""
	for _, e := range m.liveEntries() {
		s += fmt.Sprintf("#%d %s until [%v, %v]; ", e.i, e.kind, time.Until(e.srvLo).Round(time.Millisecond), time.Until(e.srvHi).Round(time.Millisecond))
	}
	return s
}

// runLeaseMachine runs the machine of spec for one schedule.
func runLeaseMachine(rt *rapid.T, t *testing.T, spec *leaseSpec) {
	m := &leaseMachine{t: t, spec: spec, ctx: context.Background()}
	defer func() {
		for _, e := range m.entries {
			_ = e.h.Close()
			e.stop()
		}
	}()
	rapidRuns.Add(1)
	rt.Repeat(m.actions())
	if m.abandoned {
		rapidAbandoned.Add(1)
	}
}

// rapidOnBuilds runs rapid schedules of f (budget: rapidBudget's) on every
// build, with a Coordinator of go-redis's default options; a build that
// cannot run them is skipped when skip says why.
func rapidOnBuilds(t *testing.T, checks, steps int, skip func(*env) string, f func(rt *rapid.T, e *env, co *prim.Coordinator)) {
	forEachBuild(t, func(t *testing.T, e *env) {
		rapidBudget(t, rapidChecksFor(e.topo.Build.Name, checks), steps)
		if skip != nil {
			if why := skip(e); why != "" {
				t.Skip(why)
			}
		}
		c, _ := e.client(t)
		co := prim.New(c)
		defer co.Close()
		runs, abandoned := rapidRuns.Load(), rapidAbandoned.Load()
		rapid.Check(t, func(rt *rapid.T) { f(rt, e, co) })
		if n := rapidRuns.Load() - runs; n > 0 && rapidAbandoned.Load()-abandoned == n {
			t.Skipf("all %d schedules ran a call slower than %v: nothing was judged", n, rapidMargin)
		}
	})
}

// rapidRuns and rapidAbandoned count the lease machine's schedules and those
// not judged to their end (a call slower than rapidMargin).
var rapidRuns, rapidAbandoned atomic.Int64

// ownRelease is the Release answer of an owner whose entry no other owner
// can take (a permit, a read-write member): Released while it is live.
func ownRelease(l *leaseEntry, _ []*leaseEntry) prim.ReleaseResult {
	if l.live {
		return prim.Released
	}
	return prim.AlreadyReleased
}

// rapidKey is a key of its own for each schedule.
func rapidKey(e *env, what string) string {
	return e.k(fmt.Sprintf("{%s%d}", what, rapidSeq.Add(1)))
}
