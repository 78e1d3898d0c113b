package preflight

import (
	"context"
	"strings"
	"testing"

	"github.com/coordtorture/coordtorture/testbed"
	"github.com/coordtorture/coordtorture/testbed/docker"
)

// TestDockerTopology: preflight works against the docker provider's
// topologies as against local ones: a primary with a replica and three
// sentinels in containers (the most parts: replication, Sentinel, and the
// addresses the containers announce), checked through the sentinels with
// the write probe; nothing FAILs, the replica and the quorum are seen, every
// probe is OK. Skips only when no Docker engine is reachable.
func TestDockerTopology(t *testing.T) {
	b := docker.NeedImages(t, build())[0]
	ctx := context.Background()
	topo, err := testbed.NewReplicated(ctx, b, 1, 3, docker.Provider(""), testbed.WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	var addrs []string
	for _, s := range topo.Sentinels() {
		addrs = append(addrs, s.Addr)
	}
	r := runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), WriteProbe: true})
	var text strings.Builder
	_ = r.WriteText(&text)
	if r.Topology != "sentinel" || r.Failed() {
		t.Fatalf("topology %q, exit status %d:\n%s", r.Topology, r.ExitStatus(), text.String())
	}
	if c := find(t, r, "replication"); !strings.Contains(c.Reason, "1 replica(s)") {
		t.Errorf("replication: %+v", c)
	}
	if c := find(t, r, "sentinel"); c.Status != OK {
		t.Errorf("sentinel: %+v", c)
	}
	probes := 0
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "write-probe/") {
			probes++
			if c.Status != OK {
				t.Errorf("%s: %s %s", c.Name, c.Status, c.Reason)
			}
		}
	}
	if probes == 0 {
		t.Errorf("no write probe ran:\n%s", text.String())
	}
}
