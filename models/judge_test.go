package models

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/history"
)

// HAZARD is decided per violation: only violations of the hazard's kinds,
// complete after a fault with a proven effect began, are the hazard; anything
// else is FAIL.
func TestJudge(t *testing.T) {
	// The kill began at 1s; the restart at 1.3s proved the data lost.
	fault := []Effect{{From: int64(time.Second), At: int64(1300 * time.Millisecond), What: "dataset lost"}}
	at := func(d time.Duration) int64 { return int64(d) }
	res := func(kinds map[string]int, earliest map[string]int64, ev ...Evidence) Result {
		n := 0
		for _, c := range kinds {
			n += c
		}
		return Result{Verdict: Fail, Kinds: kinds, Earliest: earliest, Violations: n, Evidence: ev}
	}
	reused := Evidence{Kind: KindTokenReused, Msg: "token 7 reused"}
	stale := Evidence{Kind: KindStaleWrite, Msg: "stale write accepted"}
	may := Property{Checker: "fenced-resource", Expect: MayHazard}
	cases := []struct {
		name string
		p    Property
		r    Result
		log  []Effect
		want Judgement
	}{
		{"reused token after the fault is the hazard", may,
			res(map[string]int{KindTokenReused: 3}, map[string]int64{KindTokenReused: at(2 * time.Second)}, reused), fault, JudgedHazard},
		{"a stale write accepted is never the hazard", may,
			res(map[string]int{KindTokenReused: 2279, KindStaleWrite: 1},
				map[string]int64{KindTokenReused: at(2 * time.Second), KindStaleWrite: at(3 * time.Second)}, reused, reused, stale), fault, JudgedFail},
		{"a violation complete before the first fault is not its doing", may,
			res(map[string]int{KindTokenReused: 1}, map[string]int64{KindTokenReused: at(500 * time.Millisecond)}, reused), fault, JudgedFail},
		{"no fault was seen to have an effect", may,
			res(map[string]int{KindTokenReused: 1}, map[string]int64{KindTokenReused: at(2 * time.Second)}, reused),
			nil, JudgedFail},
		{"the earliest effect's fault counts", may,
			res(map[string]int{KindTokenReused: 1}, map[string]int64{KindTokenReused: at(1200 * time.Millisecond)}, reused),
			append([]Effect{{From: int64(3 * time.Second), At: int64(3 * time.Second)}}, fault...), JudgedHazard},
		{"must hold", Property{Checker: "fenced-resource"},
			res(map[string]int{KindTokenReused: 1}, map[string]int64{KindTokenReused: at(2 * time.Second)}, reused), fault, JudgedFail},
		{"a custom check without kinds", may, Result{Verdict: Fail, Violations: 1}, fault, JudgedFail},
		{"a header that names stale-write a hazard kind is not believed", Property{Checker: "fenced-resource", Expect: MayHazard, Hazards: []string{KindStaleWrite, KindTokenReused}},
			res(map[string]int{KindStaleWrite: 1}, map[string]int64{KindStaleWrite: at(2 * time.Second)}, stale), fault, JudgedFail},
		{"a violation of unknown time cannot be shown to follow the fault", may,
			res(map[string]int{KindTokenReused: 1}, map[string]int64{KindTokenReused: history.Never}, reused), fault, JudgedFail},
		{"a latch underflow is never the hazard", Property{Checker: "latch", Expect: MayHazard, Hazards: []string{KindLatch, KindLatchUnderflow}},
			res(map[string]int{KindLatchUnderflow: 1}, map[string]int64{KindLatchUnderflow: at(2 * time.Second)}, Evidence{Kind: KindLatchUnderflow, Msg: "underflow"}), fault, JudgedFail},
		{"a violation without a time cannot be shown to follow the fault", may,
			res(map[string]int{KindTokenReused: 1}, nil, reused), fault, JudgedFail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			if got := Judge(c.p, &r, c.log); got != c.want {
				t.Fatalf("verdict %s, want %s (summary %q)", got, c.want, r.Summary)
			}
			if c.want == JudgedFail && len(r.Evidence) > 0 && r.Evidence[0].Hazard {
				t.Fatalf("a FAIL lists hazard evidence first: %+v", r.Evidence)
			}
		})
	}
	// The FAIL-class evidence comes first, and the summary splits the kinds.
	r := res(map[string]int{KindTokenReused: 2279, KindStaleWrite: 1},
		map[string]int64{KindTokenReused: at(2 * time.Second), KindStaleWrite: at(3 * time.Second)}, reused, reused, stale)
	Judge(may, &r, fault)
	if r.Evidence[0].Kind != KindStaleWrite || !r.Evidence[1].Hazard {
		t.Fatalf("evidence order %+v", r.Evidence)
	}
	want := "2280 violations: 1 stale-write (FAIL), 2279 token-reused (hazard); first: stale write accepted"
	if r.Summary != want {
		t.Fatalf("summary %q, want %q", r.Summary, want)
	}
}

// A FAIL beside proven effects is not "every property held".
func TestHazardOutcomeFailed(t *testing.T) {
	props := []Property{{Checker: "token-order", Expect: MayHazard}, {Checker: "fenced-resource"}}
	eff := []Effect{{From: 1, At: 2, What: "dataset lost"}}
	for _, c := range []struct {
		js   []Judgement
		eff  []Effect
		want string
	}{
		{[]Judgement{JudgedHazard, JudgedFail}, eff, "shown"},
		{[]Judgement{JudgedPass, JudgedFail}, eff, "failed"},
		{[]Judgement{JudgedPass, JudgedPass}, eff, "not shown"},
		{[]Judgement{JudgedPass, JudgedPass}, nil, "no effect"},
	} {
		if got := HazardOutcome(props, c.js, c.eff); got != c.want {
			t.Errorf("HazardOutcome(%v, %d effects) = %q, want %q", c.js, len(c.eff), got, c.want)
		}
	}
}

// TestJudgePassThrough: PASS and UNKNOWN are the checker's, and the exit
// statuses are coordtorture's (HAZARD passes).
func TestJudgePassThrough(t *testing.T) {
	may := Property{Checker: "exclusion", Expect: MayHazard}
	if j := Judge(may, &Result{Verdict: Pass}, nil); j != JudgedPass {
		t.Fatalf("pass: %s", j)
	}
	if j := Judge(may, &Result{Verdict: Unknown}, nil); j != JudgedUnknown {
		t.Fatalf("unknown: %s", j)
	}
	if w := WorstJudgement(JudgedHazard, JudgedPass); w != JudgedHazard || w.ExitStatus() != 0 {
		t.Fatalf("worst %s exit %d", w, w.ExitStatus())
	}
	if w := WorstJudgement(JudgedHazard, JudgedFail, JudgedUnknown); w != JudgedFail || w.ExitStatus() != 1 {
		t.Fatalf("worst %s", w)
	}
	if w := WorstJudgement(JudgedUnknown, JudgedHazard); w != JudgedUnknown || w.ExitStatus() != 2 {
		t.Fatalf("worst %s", w)
	}
}

// TestHeaderProperties: the properties and options a run writes into its
// history's header come back as they were.
func TestHeaderProperties(t *testing.T) {
	ps := []Property{
		{Checker: "fenced-resource", Expect: MayHazard},
		{Checker: "exclusion", Expect: MayHazard, Hazards: []string{KindOverlap}},
		{Checker: "progress"},
	}
	o := Options{Drift: 5 * time.Millisecond, DenseTokens: true, LostNotifications: true, WakeBound: 3 * time.Second, Capacity: 4}
	h := &history.Header{Options: HeaderOptions(o)}
	for _, p := range ps {
		h.Properties = append(h.Properties, HeaderProperty(p))
	}
	if h.Properties[0].Expect != "may-show-hazard" || h.Properties[2].Expect != "must-hold" ||
		!slices.Equal(h.Properties[0].HazardKinds, []string{KindTokenReused}) || h.Properties[2].HazardKinds != nil {
		t.Fatalf("header properties %+v", h.Properties)
	}
	back, bo, err := FromHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ps {
		if !slices.Equal(back[k].HazardKinds(), ps[k].HazardKinds()) || back[k].Checker != ps[k].Checker || back[k].Expect != ps[k].Expect {
			t.Errorf("property %d: %+v, want %+v", k, back[k], ps[k])
		}
	}
	if bo != o.withDefaults() {
		t.Fatalf("options %+v, want %+v", bo, o.withDefaults())
	}
	h.Options = []byte(`{"drift_ns":"x"}`)
	if _, _, err := FromHeader(h); err == nil {
		t.Fatal("bad options accepted")
	}
}

// TestFaultsNotHappened: a failed nemesis operation, fewer than scheduled,
// or a nemesis that scheduled nothing leave the run undecided; proofs of
// effects are not faults.
func TestFaultsNotHappened(t *testing.T) {
	var b builder
	h := b.ok(9, 10, 20, history.Op{F: history.FNemesis, Key: NemesisFault, Value: "kill n1"}).
		ok(9, 30, 30, history.Op{F: history.FNemesis, Key: NemesisEffect, Value: "dataset lost"}).
		info(9, 40, 50, history.Op{F: history.FNemesis, Key: NemesisHeal, Value: "restart n1", Err: "timeout"}).
		build(t)
	if got := FaultsNotHappened(h, true, 2); len(got) != 1 || !strings.Contains(got[0], "restart n1") {
		t.Fatalf("%q", got)
	}
	if got := FaultsNotHappened(h, true, 3); len(got) != 2 || !strings.Contains(got[1], "1 of the 3") {
		t.Fatalf("%q", got)
	}
	if got := FaultsNotHappened(&history.History{}, true, 0); len(got) != 1 {
		t.Fatalf("%q", got)
	}
	if got := FaultsNotHappened(&history.History{}, false, 0); len(got) != 0 {
		t.Fatalf("%q", got)
	}
}

// A rate limiter's over-admission is a fault's hazard only within the
// fault's reach (Result.Reaches): on a key granted before the effect was
// observed, from spans that start within the horizon after it. The review
// that asked for it: HAZARD was decided by the first violation's time alone,
// so over-admission on a key created after the fault, or long after it, was
// labelled the hazard.
func TestJudgeRateLimitReach(t *testing.T) {
	fault := []Effect{{From: m(1000), At: m(1100), What: "n1's clock reads 4s from real time"}}
	may := Property{Checker: "rate-limit", Expect: MayHazard, Hazards: []string{KindOverLimit}}
	s := sliding("k", 3, 1000, 4) // at most 3 in any span shorter than 1s; reach: 2s after the effect
	bk := bucket("b", 2, 1, 1000) // burst 2, 1 per second; reach: two refills (4s) after the effect
	// before: each key's grants well before the fault, within the bound.
	before := func(b *builder, op history.Op) *builder { return grants(b, op, 2, 0, m(10), m(1)) }
	burst := func(b *builder, op history.Op, at int64) *builder { return grants(b, op, 4, at, m(10), m(1)) }
	// straddle: two grants shortly before the effect, two after it.
	straddle := func(b *builder, op history.Op, at int64) *builder {
		return grants(grants(b, op, 2, at-m(50), m(10), m(1)), op, 2, at+m(50), m(10), m(1))
	}
	k2 := s
	k2.Key = "k2"
	two := append([]Effect{}, fault[0], Effect{From: m(6000), At: m(6100), What: "n1's clock reads 4s from real time"})
	failover := []Effect{{From: m(1000), At: m(1100), What: "the new primary lacks writes", Ongoing: true}}
	cases := []struct {
		name string
		h    *builder
		want Judgement
		log  []Effect // nil: fault
	}{
		{"over-admission straddling the effect", straddle(before(new(builder), s), s, m(1100)), JudgedHazard, nil},
		// Rule 2: every grant invoked after a loss that ended read state
		// written after it, whatever the horizon.
		{"over-admission just after the effect", burst(before(new(builder), s), s, m(1200)), JudgedFail, nil},
		{"over-admission within two windows of the effect", burst(before(new(builder), s), s, m(3000)), JudgedFail, nil},
		// An ongoing loss (a deposed primary still taking writes) keeps its reach.
		{"over-admission just after an ongoing effect", burst(before(new(builder), s), s, m(1200)), JudgedHazard, failover},
		{"over-admission within two windows of an ongoing effect's end", burst(before(new(builder), s), s, m(17000)), JudgedHazard, failover},
		{"over-admission long after an ongoing effect's end", burst(before(new(builder), s), s, m(19000)), JudgedFail, failover},
		{"over-admission long after the effect", burst(before(new(builder), s), s, m(9000)), JudgedFail, nil},
		{"over-admission on a key first granted after the effect", burst(before(new(builder), s), k2, m(1200)), JudgedFail, nil},
		{"one key within reach, another first granted after it", burst(straddle(before(new(builder), s), s, m(1100)), k2, m(1200)), JudgedFail, nil},
		{"a bucket over-admitting across the effect", straddle(before(new(builder), bk), bk, m(1100)), JudgedHazard, nil},
		{"a bucket over-admitting just after the effect", burst(before(new(builder), bk), bk, m(1200)), JudgedFail, nil},
		{"a bucket over-admitting just after an ongoing effect", burst(before(new(builder), bk), bk, m(1200)), JudgedHazard, failover},
		{"a bucket over-admitting long after the effect", burst(before(new(builder), bk), bk, m(9000)), JudgedFail, nil},
		{"a bucket over-admitting both across and long after the effect", burst(straddle(before(new(builder), bk), bk, m(1100)), bk, m(9000)), JudgedFail, nil},
		// Two faults: each run of violations is held to one of them.
		{"two faults, over-admission across each", straddle(straddle(before(new(builder), s), s, m(1100)), s, m(6100)), JudgedHazard, two},
		{"two faults, over-admission between their reaches", burst(straddle(straddle(before(new(builder), s), s, m(1100)), s, m(6100)), s, m(4000)), JudgedFail, two},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckRateLimit(c.h.build(t), Options{})
			if r.Verdict != Fail || len(r.Reaches) == 0 {
				t.Fatalf("want an over-limit violation with its reach, got %s (reaches %v)", r.String(), r.Reaches)
			}
			log := c.log
			if log == nil {
				log = fault
			}
			if c.want == JudgedFail && len(c.log) > 1 && len(r.Reaches) < 2 {
				t.Fatalf("want separate runs of violations, got %+v", r.Reaches)
			}
			if got := Judge(may, &r, log); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
			if c.want == JudgedFail && !strings.Contains(r.Summary, "beyond the reach") {
				t.Fatalf("summary %q does not say why", r.Summary)
			}
		})
	}
}

// Overlapping holders and permits over capacity count as a fault's hazard
// only within its reach: the earlier lease (a permit held) was on the server
// when the effect was observed, and the overlap began within its ttl after
// it; an ongoing effect (a failover) bounds nothing after it. An overlap
// complete before the fault is not its doing, even when a release that
// ended it returned after the fault (review: HAZARD at any time after a
// fault, and an overlap dated by its latest return).
func TestJudgeOverlapReach(t *testing.T) {
	restart := []Effect{{From: m(1000), At: m(1100), What: "the restart lost the dataset"}}
	failover := []Effect{{From: m(1000), At: m(1100), What: "the new primary lacks writes", Ongoing: true}}
	// The deposed primary was seen demoted 200ms after the failover was
	// observed: its loss ended then, well before OngoingFor.
	demoted := []Effect{{From: m(1000), At: m(1100), What: "the new primary lacks writes", Ongoing: true, End: m(1300)}}
	// A lease eviction explains overlaps, not tokens; a counter's eviction
	// the tokens, not overlaps.
	leaseEvicted := []Effect{{From: m(1000), At: m(1100), What: "the lease was evicted", Kinds: LeaseLossKinds}}
	counterEvicted := []Effect{{From: m(1000), At: m(1100), What: "the counter was evicted", Kinds: TokenLossKinds}}
	excl := Property{Checker: "exclusion", Expect: MayHazard}
	sem := Property{Checker: "semaphore", Expect: MayHazard, Hazards: []string{KindOverCapacity}}
	permit := func(key string) history.Op {
		return history.Op{F: history.FSemAcquire, Key: key, TTLMs: 1000, Capacity: 1}
	}
	pair := func(op func() history.Op, a, b int64) *builder {
		return new(builder).ok(1, a, a+m(1), op()).ok(2, b, b+m(1), op())
	}
	lock := func() history.Op { return acq("k", 0, 1000) }
	cases := []struct {
		name string
		p    Property
		b    *builder
		log  []Effect
		want Judgement
	}{
		{"overlap just after a restart", excl, pair(lock, m(900), m(1200)), restart, JudgedHazard},
		{"overlap long after a restart", excl, pair(lock, m(5000), m(5200)), restart, JudgedFail},
		{"overlap seconds after a failover (ongoing)", excl, pair(lock, m(5000), m(5200)), failover, JudgedHazard},
		{"overlap a minute after a failover", excl, pair(lock, m(60000), m(60200)), failover, JudgedFail},
		{"overlap complete before the fault, released after it", excl,
			new(builder).ok(1, 0, m(1), lock()).ok(2, m(200), m(201), lock()).ok(1, m(300), m(1300), rel("k")), restart, JudgedFail},
		{"overlap seconds after a failover whose old primary was demoted at once", excl, pair(lock, m(5000), m(5200)), demoted, JudgedFail},
		{"overlap just before the old primary was demoted", excl, pair(lock, m(1000), m(1250)), demoted, JudgedHazard},
		{"overlap after a lease eviction", excl, pair(lock, m(900), m(1200)), leaseEvicted, JudgedHazard},
		{"overlap after only the counter was evicted", excl, pair(lock, m(900), m(1200)), counterEvicted, JudgedFail},
		{"over capacity just after a restart", sem, pair(func() history.Op { return permit("s") }, m(900), m(1200)), restart, JudgedHazard},
		{"over capacity long after a restart", sem, pair(func() history.Op { return permit("s") }, m(5000), m(5200)), restart, JudgedFail},
		// Issue 30, rule 1: a lease proven on the server after the loss
		// survived it; the overlap that follows is no loss's doing.
		{"overlap with a lease renewed after the restart", excl,
			new(builder).ok(1, m(900), m(901), lock()).ok(1, m(1150), m(1151), renew("k", 1000)).ok(2, m(1200), m(1201), lock()), restart, JudgedFail},
		{"overlap with a lease renewed before the restart", excl,
			new(builder).ok(1, m(900), m(901), lock()).ok(1, m(950), m(951), renew("k", 1000)).ok(2, m(1200), m(1201), lock()), restart, JudgedHazard},
		{"over capacity with the permit verified after the restart", sem,
			new(builder).ok(1, m(900), m(901), owned(permit("s"), "p1")).ok(1, m(1150), m(1151), history.Op{F: history.FVerify, Key: "s", Owner: "p1", Value: history.ValueTrue}).
				ok(2, m(1200), m(1201), permit("s")), restart, JudgedFail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ck, _ := Lookup(c.p.Checker)
			r := ck.Check(c.b.build(t), Options{})
			if r.Verdict != Fail {
				t.Fatalf("want a violation, got %s", r.String())
			}
			if got := Judge(c.p, &r, c.log); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
		})
	}
}

// A latch violation is the failover's hazard only when its generation
// existed before the loss ended (the deposed primary's demotion): a
// generation created on the new primary afterwards owes nothing to it.
// Without the reach, every latch violation after the failover was HAZARD.
func TestJudgeLatchReach(t *testing.T) {
	failover := []Effect{{From: m(1000), At: m(1100), What: "the new primary lacks writes", Ongoing: true, End: m(1500)}}
	p := Property{Checker: "latch", Expect: MayHazard, Hazards: []string{KindLatch, KindStuckWaiter}}
	// Generation 1 (count 2): one count-down answered 1, then a second one
	// answered 1 again (the first lost in the failover).
	twice := func(created int64) *builder {
		return new(builder).ok(1, created, created+m(1), create("l", 2, 1)).
			ok(2, created+m(10), created+m(11), cd("l", 1, 1)).
			ok(3, m(2000), m(2001), cd("l", 1, 1))
	}
	// Review: a generation created before the failover but counted down
	// only long after the loss ended owes nothing to it either.
	late := new(builder).ok(1, m(900), m(901), create("l", 2, 1)).
		ok(2, m(11500), m(11501), cd("l", 1, 1)).
		ok(3, m(11600), m(11601), cd("l", 1, 1))
	if r := CheckLatch(late.build(t), Options{}); r.Verdict != Fail {
		t.Fatalf("want a violation, got %s", r.String())
	} else if got := Judge(p, &r, failover); got != JudgedFail {
		t.Fatalf("count-downs 10s after the loss ended: %s, want FAIL (%+v)", got, r.Reaches)
	}
	for _, c := range []struct {
		name    string
		created int64
		want    Judgement
	}{
		{"generation created before the failover", m(900), JudgedHazard},
		{"generation created before the deposed primary was demoted", m(1200), JudgedHazard},
		{"generation created after the demotion", m(1600), JudgedFail},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckLatch(twice(c.created).build(t), Options{})
			if r.Verdict != Fail || len(r.Reaches) == 0 {
				t.Fatalf("want a violation with its reach, got %s (%+v)", r.String(), r.Reaches)
			}
			if got := Judge(p, &r, failover); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
		})
	}
}

// lease-protocol's hazard kinds have reaches: an owner conflict is the
// hazard only on lease state made before the effect (Since) and within the
// lost lease's TTL after it (Horizon).
func TestJudgeLeaseProtocolReach(t *testing.T) {
	restart := []Effect{{From: m(1000), At: m(1100), What: "the restart lost the dataset"}}
	p := Property{Checker: "lease-protocol", Expect: MayHazard}
	renewed := func(b *builder, owner string, from, to int64) *builder {
		for t := from; t <= to; t += m(500) {
			b = b.ok(1, t, t+m(1), owned(renew("k", 1000), owner))
		}
		return b
	}
	for _, c := range []struct {
		name string
		b    *builder
		want Judgement
	}{
		{"a grant just after the restart, while the first owner held", new(builder).
			ok(1, m(900), m(901), owned(acq("k", 0, 1000), "a")).
			ok(2, m(1200), m(1201), owned(acq("k", 0, 1000), "b")), JudgedHazard},
		{"both leases taken long after the restart", new(builder).
			ok(1, m(5000), m(5001), owned(acq("k", 0, 1000), "a")).
			ok(2, m(5200), m(5201), owned(acq("k", 0, 1000), "b")), JudgedFail},
		{"a lease renewed after the restart, a grant within its ttl", renewed(new(builder).
			ok(1, m(900), m(901), owned(acq("k", 0, 1000), "a")), "a", m(1150), m(1150)).
			ok(2, m(1200), m(1201), owned(acq("k", 0, 1000), "b")), JudgedFail},
		{"a lease held across the restart, the conflict seconds after it", renewed(new(builder).
			ok(1, m(900), m(901), owned(acq("k", 0, 1000), "a")), "a", m(1300), m(5300)).
			ok(2, m(5400), m(5401), owned(acq("k", 0, 1000), "b")), JudgedFail},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckLeaseProtocol(c.b.build(t), Options{})
			if r.Verdict != Fail {
				t.Fatalf("want a violation, got %s", r.String())
			}
			if got := Judge(p, &r, restart); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
		})
	}
}

// A leak is the failover's hazard only when the entry's last write (the
// delete that should have removed it) came before the loss ended.
func TestJudgeLeakReach(t *testing.T) {
	failover := []Effect{{From: m(1000), At: m(1100), What: "the new primary lacks writes", Ongoing: true, End: m(1500)}}
	p := Property{Checker: "leaks", Expect: MayHazard, Hazards: []string{KindLeak}}
	left := func(deleted int64) *builder {
		return new(builder).ok(1, m(100), m(101), create("latch:7", 1, 7)).
			ok(1, deleted, deleted+m(1), history.Op{F: history.FLatchDelete, Key: "latch:7"}).
			ok(9, m(5000), m(5001), leakScan(2, "n1: latch:7 gen (field pttl -1 ms)\nn1: latch:7 count (field pttl -1 ms)"))
	}
	for _, c := range []struct {
		name    string
		deleted int64
		want    Judgement
	}{
		{"deleted before the failover", m(900), JudgedHazard},
		{"deleted while the deposed primary still took writes", m(1400), JudgedHazard},
		{"deleted on the new primary after the demotion", m(2000), JudgedFail},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckLeaks(left(c.deleted).build(t), Options{})
			if r.Verdict != Fail || len(r.Reaches) != 2 {
				t.Fatalf("want a leak with two reaches, got %s (%+v)", r.String(), r.Reaches)
			}
			if got := Judge(p, &r, failover); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
		})
	}
	for _, c := range []struct {
		server, k string
		want      bool
	}{{"latch:7", "latch:7", true}, {"run:latch:7", "latch:7", true}, {"latch:17", "latch:7", false},
		{"{fenced-lock}:lease", "fenced-lock", true}, {"{coordtorture:ab12cd:lock}:lease", "lock", true},
		{"{coordtorture:ab12cd:lock}:fence", "lock", true}, {"{block}:lease", "lock", false}, {"semaphore", "sem", false}} {
		if got := namesKey(c.server, c.k); got != c.want {
			t.Errorf("namesKey(%q, %q) = %v", c.server, c.k, got)
		}
	}
}

// A server clock moved back delays permits (the windows' state lasts
// longer, the bucket refills nothing until the clock catches up): its
// effect explains wrongly-limited denials on keys that had state then, and
// nothing else; no other effect (a restart, a failover) does, since a loss
// only frees permits — the property's hazard kinds gate that.
func TestJudgeWronglyLimited(t *testing.T) {
	f := fixed("r", 2, 100)
	h := func() *builder {
		b := grants(new(builder), f, 2, 0, 0, m(1))
		return b.fail(5, m(1500), m(1501), f)
	}
	back := []Effect{{From: m(1000), At: m(1100), What: "n1's clock reads -400ms from real time", Kinds: []string{KindWronglyLimited}}}
	restart := []Effect{{From: m(1000), At: m(1100), What: "the restart lost the dataset"}}
	mayBack := Property{Checker: "rate-limit", Expect: MayHazard, Hazards: []string{KindWronglyLimited}}
	mayOver := Property{Checker: "rate-limit", Expect: MayHazard, Hazards: []string{KindOverLimit}}
	for _, c := range []struct {
		name string
		p    Property
		b    *builder
		log  []Effect
		want Judgement
	}{
		{"a denial after a backward jump", mayBack, h(), back, JudgedHazard},
		{"a denial before the backward jump", mayBack, grants(new(builder), f, 2, 0, 0, m(1)).fail(5, m(500), m(501), f), back, JudgedFail},
		{"a denial after a restart", mayOver, h(), restart, JudgedFail},
		{"a denial where the bound must hold", Property{Checker: "rate-limit"}, h(), back, JudgedFail},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckRateLimit(c.b.build(t), Options{})
			if r.Verdict != Fail || r.Kinds[KindWronglyLimited] == 0 {
				t.Fatalf("want a wrongly-limited violation, got %s", r.String())
			}
			if got := Judge(c.p, &r, c.log); got != c.want {
				t.Fatalf("verdict %s, want %s: %s (reaches %+v)", got, c.want, r.Summary, r.Reaches)
			}
		})
	}
}
