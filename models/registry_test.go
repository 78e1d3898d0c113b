package models

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/history"
)

// mutants pairs, for every checker of the registry, a correct history with
// one from a deliberately broken implementation.
var mutants = map[string]struct{ good, bad func() *builder }{
	"fenced-resource": {
		func() *builder { return new(builder).ok(1, 0, 10, write("r", 5)).fail(2, 20, 30, write("r", 4)) },
		// resource that ignores tokens
		func() *builder { return new(builder).ok(1, 0, 10, write("r", 5)).ok(2, 20, 30, write("r", 4)) },
	},
	"token-order": {
		func() *builder {
			return new(builder).ok(1, m(0), m(1), acq("k", 1, 10)).ok(2, m(20), m(30), acq("k", 2, 10))
		},
		// counter reset (restore from an older snapshot)
		func() *builder {
			return new(builder).ok(1, m(0), m(1), acq("k", 7, 10)).ok(2, m(20), m(30), acq("k", 1, 10))
		},
	},
	"exclusion": {
		func() *builder {
			return new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(1, m(10), m(11), rel("k")).ok(2, m(5), m(12), acq("k", 2, 100))
		},
		// release without owner check
		func() *builder {
			return new(builder).ok(1, m(0), m(1), acq("k", 1, 100)).ok(2, m(10), m(11), rel("k")).ok(3, m(12), m(13), acq("k", 2, 100))
		},
	},
	"lease-protocol": {
		func() *builder {
			return new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A")).ok(1, m(10), m(11), owned(rel("k"), "A")).
				ok(2, m(20), m(21), owned(acq("k", 2, 100), "B"))
		},
		// renew without owner check: the expired holder's renewal succeeds
		// after another owner was granted (a zombie renewal)
		func() *builder {
			return new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A")).
				ok(2, m(150), m(151), owned(acq("k", 2, 1000), "B")).
				ok(1, m(200), m(201), owned(history.Op{F: history.FRenew, Key: "k", TTLMs: 100}, "A"))
		},
	},
	"no-phantom-owner": {
		func() *builder {
			return new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A:1")).
				info(2, m(2), m(300), owned(acq("k", 0, 100), "B")).ok(9, m(301), m(302), sample("k", "B:2"))
		},
		// an acquisition script that is not idempotent for its owner: go-redis
		// resends it after a lost reply, the resend finds the lease held (by
		// itself) and answers "not acquired"
		func() *builder {
			return new(builder).ok(1, m(0), m(1), owned(acq("k", 1, 100), "A:1")).
				fail(2, m(2), m(300), owned(acq("k", 0, 100), "B")).ok(9, m(301), m(302), sample("k", "B:2"))
		},
	},
	"progress": {
		func() *builder { return cycles(new(builder), "", "") },
		// a connection that never follows MOVED after a failover: refused for
		// the rest of the run
		func() *builder { return cycles(new(builder), "", "MOVED 12539 127.0.0.1:7002") },
	},
	"rw-exclusion": {
		func() *builder { return new(builder).ok(1, m(0), m(1), rd("k", 100)).ok(2, m(2), m(3), rd("k", 100)) },
		func() *builder { return new(builder).ok(1, m(0), m(1), rd("k", 100)).ok(2, m(2), m(3), wr("k", 100)) },
	},
	"semaphore": {
		func() *builder {
			return new(builder).ok(1, m(0), m(1), sem("s", 0, 1, 50)).ok(2, m(60), m(61), sem("s", 0, 1, 100))
		},
		// non-atomic prune
		func() *builder {
			return new(builder).ok(1, m(0), m(1), sem("s", 0, 1, 50)).ok(2, m(60), m(61), sem("s", 0, 1, 100)).ok(3, m(60), m(62), sem("s", 0, 1, 100))
		},
	},
	"latch": {
		func() *builder {
			return new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, cd("l", 1, 1)).ok(2, 40, 50, cd("l", 1, 0))
		},
		// latch that decrements twice
		func() *builder { return new(builder).ok(1, 0, 10, create("l", 2, 1)).ok(2, 20, 30, cd("l", 1, 0)) },
	},
	"rate-limit": {
		func() *builder { return grants(new(builder), bucket("r", 3, 1, 10), 3, 0, 1, 1) },
		// limiter using client time
		func() *builder { return grants(new(builder), bucket("r", 3, 1, 10), 6, 0, 1, 1) },
	},
	"liveness": {
		func() *builder {
			return new(builder).ok(1, 0, m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).ok(2, m(50), m(102), acqWait("k", 2, 1000))
		},
		// waiter that misses the release notification and polls slowly
		func() *builder {
			return new(builder).ok(1, 0, m(1), acq("k", 1, 1000)).ok(1, m(100), m(101), rel("k")).ok(2, m(50), m(2000), acqWait("k", 2, 1000))
		},
	},
	"redlock-validity": {
		// 492ms claimed on a 500ms lease that took 1ms, 7ms declared for drift
		func() *builder { return new(builder).ok(1, 0, m(1), claim(500, 492000, 7000)) },
		// an implementation that ignores its drift allowance
		func() *builder { return new(builder).ok(1, 0, m(1), claim(500, 499000, 7000)) },
	},
	"stale-write-shown": {
		// the unfenced resource accepts the paused holder's stale write
		func() *builder { return new(builder).ok(1, 0, 10, write("r", 5)).ok(2, 20, 30, write("r", 4)) },
		// a resource that refuses a current write
		func() *builder { return new(builder).ok(1, 0, 10, write("r", 5)).fail(2, 20, 30, write("r", 6)) },
	},
	"completion-cut-off": {
		func() *builder {
			return new(builder).ok(9, 100, 110, history.Op{F: history.FNemesis, Key: NemesisFault, Value: "cut"}).
				ok(1, 120, 130, history.Op{F: history.FLatchCountDown, Key: "l", Gen: 1}).
				ok(9, 400, 420, history.Op{F: history.FNemesis, Key: NemesisHeal, Value: "heal (2 tracking connections closed by the cut)"})
		},
		nil, // a proof that the fault happened: PASS or UNKNOWN, never FAIL
	},
	"no-expiry-kept": {
		func() *builder { return crashedHolder(PermitKept) },
		// a semaphore that gives permits taken without expiry a deadline
		func() *builder { return crashedHolder("1700000000000") },
	},
	"refused-untouched": {
		func() *builder {
			return untouchedReads("0").fail(1, 0, 10, history.Op{F: history.FAcquire, Key: "leases", Field: "a", TTLMs: 100,
				Err: "this server has no hash-field expiration (Redis 7.4+, Valkey 9.0+)"})
		},
		// a lease that falls back to a plain hash write on an old server
		func() *builder {
			return untouchedReads("1").ok(1, 0, 10, history.Op{F: history.FAcquire, Key: "leases", Field: "a", TTLMs: 100})
		},
	},
	"leaks": {
		func() *builder {
			return new(builder).ok(1, 0, m(1), acq("k", 1, 100)).ok(9, m(500), m(501), leakScan(0, ""))
		},
		// release that forgets the owner entry
		func() *builder {
			return new(builder).ok(1, 0, m(1), acq("k", 1, 100)).ok(9, m(500), m(501), leakScan(1, "k:owners"))
		},
	},
}

// cycles is 30 try-acquisitions before a failover and 30 from 3s after it,
// those before answered with errBefore, those after with errAfter ("": a
// contended fail, an answer).
func cycles(b *builder, errBefore, errAfter string) *builder {
	for i := int64(0); i < 30; i++ {
		b.add(1, m(10*i), m(10*i+1), history.Fail, history.Op{F: history.FAcquire, Key: "k", TTLMs: 100, Err: errBefore})
	}
	b.ok(9, m(400), m(500), history.Op{F: history.FNemesis, Key: NemesisEvent, Value: "CLUSTER FAILOVER"})
	for i := int64(0); i < 30; i++ {
		b.add(1, m(3000+10*i), m(3000+10*i+1), history.Fail, history.Op{F: history.FAcquire, Key: "k", TTLMs: 100, Err: errAfter})
	}
	return b
}

func TestProgressPeriods(t *testing.T) {
	// Refusals while degraded (between a fault and its heal, and within the
	// recovery bound) do not count.
	b := cycles(new(builder), "", "")
	b.ok(9, m(600), m(601), history.Op{F: history.FNemesis, Key: NemesisFault, Value: "partition"})
	for i := int64(0); i < 30; i++ {
		b.info(2, m(700+10*i), m(700+10*i+5), history.Op{F: history.FAcquire, Key: "k", TTLMs: 100})
	}
	b.ok(9, m(1000), m(1001), history.Op{F: history.FNemesis, Key: NemesisHeal, Value: "heal"})
	expect(t, CheckProgress(b.build(t), Options{}), Pass)
	// A fault never healed leaves nothing after it to judge; before it the
	// answers count.
	b = new(builder)
	b.ok(9, m(0), m(1), history.Op{F: history.FNemesis, Key: NemesisFault, Value: "maxmemory"})
	for i := int64(0); i < 30; i++ {
		b.add(1, m(10+10*i), m(10+10*i+1), history.Fail, history.Op{F: history.FAcquire, Key: "k", Err: "OOM command not allowed"})
	}
	expect(t, CheckProgress(b.build(t), Options{}), Unknown)
	// Refusals in the run's healthy tail fail it.
	b = cycles(new(builder), "OOM command not allowed", "")
	r := CheckProgress(b.build(t), Options{})
	expect(t, r, Fail)
	if r.Kinds[KindNoProgress] != 1 || !strings.Contains(r.Summary, "0 of 30 acquire") {
		t.Errorf("%v %s", r.Kinds, r.Summary)
	}
}

func TestEveryCheckerPassesAndFails(t *testing.T) {
	if len(mutants) != len(Checkers()) {
		t.Errorf("%d mutant pairs for %d checkers", len(mutants), len(Checkers()))
	}
	for _, c := range Checkers() {
		t.Run(c.Name, func(t *testing.T) {
			pair, ok := mutants[c.Name]
			if !ok {
				t.Fatal("no mutant pair for this checker")
			}
			if c.Doc == "" {
				t.Error("no Doc")
			}
			o := Options{WakeBound: live.WakeBound}
			good := pair.good().build(t)
			expect(t, c.Check(good, o), Pass)
			if pair.bad == nil {
				if c.Own == "" {
					t.Fatal("a general property needs a history that FAILs it")
				}
				return
			}
			bad := pair.bad().build(t)
			if c.Own == "" && (!c.Applies(good) || !c.Applies(bad)) {
				t.Fatal("does not apply to its own histories")
			}
			if c.Own != "" && (c.Applies(good) || c.Applies(bad)) {
				t.Fatal("a scenario's own check applies unasked")
			}
			r := c.Check(bad, o)
			expect(t, r, Fail)
			if r.Checker != c.Name {
				t.Errorf("result named %q", r.Checker)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
			// The other checkers do not apply to, or pass, this history (a
			// scenario's own check's may be a demonstration: a stale write).
			for _, other := range Checkers() {
				if c.Own == "" && other.Name != c.Name && other.Applies(good) {
					if r := other.Check(good, o); r.Verdict == Fail {
						t.Errorf("%s fails on %s's good history: %s", other.Name, c.Name, r.Summary)
					}
				}
			}
		})
	}
}

func TestSelect(t *testing.T) {
	h := new(builder).ok(1, 0, 10, acq("k", 1, 100)).ok(2, 20, 30, write("r", 1)).build(t)
	var names []string
	for _, c := range Applicable(h) {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "fenced-resource,token-order,exclusion,lease-protocol" { // too few for progress
		t.Errorf("applicable: %s", got)
	}
	cs, err := Select(h, "")
	if err != nil || len(cs) != 4 {
		t.Errorf("default selection: %d, %v", len(cs), err)
	}
	cs, err = Select(h, " latch , exclusion ")
	if err != nil || len(cs) != 2 || cs[0].Name != "latch" {
		t.Errorf("named selection: %v, %v", cs, err)
	}
	if cs, _ := Select(h, "all"); len(cs) != len(Checkers()) {
		t.Error("all")
	}
	if _, err := Select(h, "exclusion,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown checker: %v", err)
	}
	if len(Applicable(new(builder).build(t))) != 0 {
		t.Error("checkers apply to an empty history")
	}
	rs := Run(h, cs, Options{})
	if len(rs) != 2 || Worst(rs) != Pass {
		t.Errorf("run: %+v", rs)
	}
	if Worst([]Result{{Verdict: Unknown}, {Verdict: Pass}}) != Unknown || Worst([]Result{{Verdict: Unknown}, {Verdict: Fail}}) != Fail {
		t.Error("Worst")
	}
}

func TestVerdictText(t *testing.T) {
	for _, v := range []Verdict{Pass, Fail, Unknown} {
		b, _ := v.MarshalText()
		var back Verdict
		if err := back.UnmarshalText(b); err != nil || back != v {
			t.Errorf("%v: %v", v, err)
		}
	}
	if new(Verdict).UnmarshalText([]byte("MAYBE")) == nil || Verdict(7).String() != "Verdict(7)" {
		t.Error("bad verdicts")
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Drift: -1}.withDefaults()
	if o.Drift != 0 || o.Timeout <= 0 || o.WakeBound <= 0 || o.MaxEvidence != 10 || o.VisualizeLimit <= 0 {
		t.Errorf("%+v", o)
	}
	if ms(1<<62) != history.Never || ms(-(1<<62)) != -history.Never || addSat(history.Never-1, 5) != history.Never {
		t.Error("saturation")
	}
}
