package scenarios_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

// TestExternalSentinelCredentials: an external run through sentinels that
// require a password reaches them with the sentinel credentials (go-redis's
// SentinelUsername/SentinelPassword, never the data user's), and the data
// nodes as the data user; without the sentinel password it cannot reach the
// deployment and says so before any workload runs.
func TestExternalSentinelCredentials(t *testing.T) {
	topo := testbed.Replicated(t, build(), 1, 3)
	sentinels := testbed.DataUser(t, topo, "svc", "pw") // only the data nodes know svc
	testbed.RequireSentinelPassword(t, topo, "spw")
	ss, err := scenarios.Match([]string{"fenced-lock/baseline"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	ext := scenarios.External{Addrs: sentinels, MasterName: testbed.MasterName, Username: "svc", Password: "pw",
		Dialer: topo.PeerDialer("")} // the testbed's proxies accept the clients' source addresses only
	run := func(e scenarios.External) (*scenarios.Outcome, error) {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return scenarios.Run(rctx, ss[0], scenarios.Config{Duration: 2 * time.Second, Seed: 3, Clients: 4, External: &e, Logf: t.Logf})
	}
	if _, err := run(ext); err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "--sentinel-user") {
		t.Errorf("sentinels requiring a password, none given: %v; want cannot reach, naming --sentinel-user", err)
	} else {
		t.Logf("without the sentinel password: %v", err)
	}
	// A sentinel user without its password: refused before anything
	// connects (go-redis would ask as the default user).
	named := ext
	named.SentinelUsername = "default"
	if _, err := run(named); err == nil || !strings.Contains(err.Error(), "needs its password") {
		t.Errorf("a sentinel user without a password: %v", err)
	}
	ext.SentinelPassword = "spw"
	// The data user without PING, which prim does without: a refused PING
	// is an answer, the deployment is reached (review: it was "cannot
	// reach").
	for _, n := range topo.Nodes() {
		if err := n.Admin().Do(context.Background(), "ACL", "SETUSER", "svc", "-ping").Err(); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
	}
	out, err := run(ext)
	if err != nil {
		t.Fatal(err)
	}
	if out.Verdict != scenarios.Pass || out.Provider != "external" || out.Ops < 20 {
		t.Errorf("through password-protected sentinels: %s on %s, %d operations (%s)", out.Verdict, out.Provider, out.Ops, out.Error)
	}
}

// TestExternalClusterWithoutSlots: a cluster user without CLUSTER SLOTS
// (and PING) cannot reach the deployment, and the run says so before any
// workload: the cluster client's PING asks CLUSTER SLOTS first, and a refusal
// of anything but PING itself is no answer (review: every NOPERM passed, and
// the run FAILed progress on prim for a set-up error).
func TestExternalClusterWithoutSlots(t *testing.T) {
	topo := testbed.Cluster(t, build(), 3, 0)
	var addrs []string
	for _, n := range topo.Nodes() {
		if err := n.Admin().Do(context.Background(), "ACL", "SETUSER", "noslots", "on", ">pw", "~*", "&*", "+@all", "-cluster|slots", "-ping").Err(); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, n.Addr)
	}
	ss, err := scenarios.Match([]string{"fenced-lock/baseline"})
	if err != nil || len(ss) != 1 {
		t.Fatal(ss, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ext := scenarios.External{Addrs: addrs, Cluster: true, Username: "noslots", Password: "pw", Dialer: topo.PeerDialer("")}
	out, err := scenarios.Run(ctx, ss[0], scenarios.Config{Duration: time.Second, Seed: 1, Clients: 2, External: &ext, Logf: t.Logf})
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "cluster|slots") {
		t.Fatalf("a cluster user without CLUSTER SLOTS: %v (outcome %+v), want cannot reach, naming cluster|slots", err, out)
	}
}
