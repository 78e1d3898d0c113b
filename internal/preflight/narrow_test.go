package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestRefusedScriptsFail: a user who may not run EVAL/EVALSHA cannot use any
// primitive (every one runs Lua scripts): each primitive asked for is FAIL,
// naming the refusal and the grant, whether or not the ACL lines could be
// checked (they were WARN "could not be probed", exit 0, when neither ACL
// DRYRUN nor MULTI was allowed). A refused CLIENT TRACKING probe only
// degrades waiting (WARN).
func TestRefusedScriptsFail(t *testing.T) {
	topo := testbed.Standalone(t, build())
	addr, dial := topo.Node("n1").Addr, dialer(t, topo)
	admin := topo.Node("n1").Admin()
	ctx := context.Background()
	for _, u := range []struct {
		name  string
		rules []any
	}{
		{"noeval", []any{"~*", "&*", "+@all", "-eval", "-evalsha"}},
		{"noeval-noacl", []any{"~*", "&*", "+@all", "-eval", "-evalsha", "-acl", "-multi"}},
	} {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", u.name, "on", ">pw"}, u.rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
		r := runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: u.name, Password: "pw", Primitives: []string{FencedLock, RateLimiters}})
		for _, prim := range []string{FencedLock, RateLimiters} {
			c := find(t, r, "primitive/"+prim)
			if c.Status != Fail || !strings.Contains(c.Reason, "refused") || !strings.Contains(c.Reason, "NOPERM") || !strings.Contains(c.Fix, "+eval") {
				t.Errorf("%s: primitive/%s: %+v, want FAIL naming the refusal and the grant", u.name, prim, c)
			}
		}
		if r.ExitStatus() != 1 {
			t.Errorf("%s: exit status %d, want 1:\n%s", u.name, r.ExitStatus(), text(r))
		}
	}
	// Tracking refused: waiting polls, a WARN; its Lua is fine.
	if err := admin.Do(ctx, "ACL", "SETUSER", "notrack", "on", ">pw", "~*", "&*", "+@all", "-client|tracking").Err(); err != nil {
		t.Fatal(err)
	}
	r := runOK(t, Options{Addrs: []string{addr}, Dialer: dial, Username: "notrack", Password: "pw", Primitives: []string{Waiting}})
	if c := find(t, r, "primitive/"+Waiting); c.Status != Warn || !strings.Contains(c.Reason, "CLIENT TRACKING") {
		t.Errorf("tracking refused: %+v, want WARN", c)
	}
}

// TestPrimitivesNarrowEverySection: --primitives rate-limiters shows only
// what the rate limiters need and risk: no capability line of another
// primitive (hash-field expiry, DELEX, SET IFEQ, CLIENT TRACKING), no
// tracking-table line, no guarantee or persistence wording about fencing
// tokens, and the scenarios named are the rate limiters' (they were every
// primitive's).
func TestPrimitivesNarrowEverySection(t *testing.T) {
	topo := testbed.Standalone(t, build())
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Primitives: []string{RateLimiters}})
	all := text(r)
	for _, c := range r.Checks {
		for _, other := range []string{"hash-field-expiry", "delex", "set-ifeq", "client-tracking", "tracking-table-max-keys", "primitive/fenced-lock", "acl/fenced-lock"} {
			if strings.Contains(c.Name, other) {
				t.Errorf("--primitives rate-limiters shows %s: %+v", c.Name, c)
			}
		}
		if strings.Contains(c.Reason, "token") || strings.HasPrefix(c.Scenario, "fenced-lock/") {
			t.Errorf("--primitives rate-limiters: %s speaks of fencing: %+v", c.Name, c)
		}
	}
	for _, want := range []string{"capability/lua+time", "capability/increx", "primitive/rate-limiters", "acl/rate-limiters", "persistence"} {
		find(t, r, want)
	}
	for _, g := range r.Guarantees {
		if strings.Contains(g.Guarantee, "fencing") || strings.Contains(g.Guarantee, "waiters") || strings.HasPrefix(g.Scenario, "fenced-lock/") {
			t.Errorf("--primitives rate-limiters: guarantee %+v", g)
		}
	}
	if guarantee(t, r, "ratelimit/fixed/kill-restart-noaof").Holds {
		t.Errorf("rate limits hold across a restart without persistence:\n%s", all)
	}
}

// TestProbesUseTheKeys: a user whose keys are "orders:*" only: the
// capability probes (HPTTL, DELEX, SET IFEQ) run on --key, which its ACL
// allows, so they are OK, not WARN "could not be probed" (they ran on
// coordtorture:preflight:probe:…, which the ACL refused); nothing is
// written.
func TestProbesUseTheKeys(t *testing.T) {
	b := build()
	topo := testbed.Standalone(t, b)
	admin := topo.Node("n1").Admin()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "orders", "on", ">pw", "~orders:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	before := state(t, admin)
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Username: "orders", Password: "pw", Keys: []string{"orders:1"}})
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "capability/") && c.Status != OK {
			t.Errorf("%s: %+v, want OK (probed on orders:1)", c.Name, c)
		}
	}
	if after := state(t, admin); after != before {
		t.Errorf("the probes wrote: %s, then %s", before, after)
	}
	// A --key outside the user's patterns: hash-lease FAIL, telling to give
	// a key of the service's, not to grant the commands.
	r = runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Username: "orders", Password: "pw",
		Keys: []string{"billing:1"}, Primitives: []string{HashLease}})
	// (A server without hash-field expiry answers "unknown command" first.)
	if c := find(t, r, "primitive/"+HashLease); c.Status != Fail || !strings.Contains(c.Fix, "--key") && c.Reason != "hash-field expiry missing" {
		t.Errorf("a --key outside the user's patterns: %+v, want FAIL telling to give a key of the service's", c)
	}
	// The write probe's keys too are under --key (orders:1:coordtorture-probe:…),
	// so every primitive runs (each was FAIL: NOPERM on coordtorture:preflight:probe:…),
	// and none is left.
	r = runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Username: "orders", Password: "pw",
		Keys: []string{"orders:1"}, WriteProbe: true})
	probes := 0
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "write-probe/") {
			probes++
			noHFE := c.Name == "write-probe/"+HashLease && find(t, r, "capability/hash-field-expiry").Status == OK &&
				strings.HasPrefix(find(t, r, "capability/hash-field-expiry").Reason, "absent")
			if c.Status != OK && !noHFE {
				t.Errorf("%s: %+v, want OK", c.Name, c)
			}
		}
	}
	if probes < len(Primitives()) {
		t.Errorf("%d write probes:\n%s", probes, text(r))
	}
	if keys, err := admin.Keys(ctx, "*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("keys left: %v %v", keys, err)
	}
}

// TestRefusedInfoKeepsTheHeader: a user that may not run INFO: the
// header still names the server, its version and the user (it read
// "( , standalone, user )").
func TestRefusedInfoKeepsTheHeader(t *testing.T) {
	topo := testbed.Standalone(t, build())
	admin := topo.Node("n1").Admin()
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	r := runOK(t, Options{Addrs: []string{topo.Node("n1").Addr}, Dialer: dialer(t, topo), Username: "noinfo", Password: "pw"})
	head, _, _ := strings.Cut(text(r), "\n")
	if r.Server == "" || r.Version == "" || r.User != "noinfo" || !strings.Contains(head, "user noinfo") || !strings.Contains(head, r.Server+" "+r.Version) {
		t.Errorf("INFO refused: server %q, version %q, user %q; header %q", r.Server, r.Version, r.User, head)
	}
	if c := find(t, r, "server"); c.Status != Warn || !strings.Contains(c.Reason, "INFO") || !strings.Contains(c.Reason, r.Version) {
		t.Errorf("server line: %+v, want WARN saying INFO was refused, with the version learned otherwise", c)
	}
}

// TestSeveralStandaloneAddresses: several addresses without --cluster are
// taken as a Cluster's nodes; when they are standalone servers, the error
// says so and what to give instead (it said only "cluster support
// disabled").
func TestSeveralStandaloneAddresses(t *testing.T) {
	a, b := testbed.Standalone(t, build()), testbed.Standalone(t, build())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Run(ctx, Options{Addrs: []string{a.Node("n1").DirectAddr(), b.Node("n1").DirectAddr()}})
	if err == nil || !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "several addresses without --cluster") ||
		!strings.Contains(err.Error(), "one address") || !strings.Contains(err.Error(), "--master-name") {
		t.Fatalf("two standalone servers: %v; want an error saying a Cluster was assumed and what to give instead", err)
	}
	t.Log(err)
}
