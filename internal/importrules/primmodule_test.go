package importrules

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What a service that imports prim must never get in its module graph or its
// go.sum: the harness's own dependencies, its test libraries and the peer
// libraries it compares prim with. testcontainers-go and the Docker client
// (docker/docker, moby/…, docker/go-connections) are the docker provider's
// (testbed): never prim's.
var primConsumerBanned = []string{
	"github.com/Shopify/toxiproxy",
	"github.com/testcontainers",
	"github.com/docker",
	"github.com/moby",
	"github.com/anishathalye/porcupine",
	"pgregory.net/rapid",
	"github.com/bsm/redislock",
	"github.com/go-redsync/redsync",
	"github.com/rs/zerolog",
	module, // the harness itself (a requirement of prim's would bring its graph's go.mod sums)
}

// consumerGo is the go line of the consumer: the floor prim's dependencies set
// (go-redis v9.23 and the OpenTelemetry metric API v1.47 declare go 1.26.0).
// Importing prim must not raise it.
const consumerGo = "go 1.26.0"

// consumerMain is the consumer's main.go: a service that imports prim and
// go-redis and makes a Coordinator.
const consumerMain = `package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

func main() {
	c := prim.New(redis.NewClient(&redis.Options{}))
	defer c.Close()
}
`

// TestPrimModuleGraph is a service importing prim: a module of its own (go
// 1.26.0) that imports prim through a replace to this repository's prim/ and
// runs `go mod tidy` offline, from the module cache alone. Its module graph
// (`go mod graph`: every requirement of every module, a superset of `go list
// -m all`, read from go.mod files alone) and go.sum must hold none of the
// harness's dependencies, and its go line must stay 1.26.0.
//
// Not `go list -m all`: offline it also wants each listed module's .info from
// the cache, which a machine that only built this repository does not have
// for go-redis's test-only requirements (bsm/ginkgo, testify…): the test then
// failed on a fresh machine for a reason that has nothing to do with prim.
func TestPrimModuleGraph(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The harness is replaced too, so that a prim that required it would show
	// here as such instead of failing to download.
	write("go.mod", "module example.com/service\n\n"+consumerGo+"\n\n"+
		"require github.com/coordtorture/coordtorture/prim v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/coordtorture/coordtorture/prim => "+filepath.Join(root, "prim")+"\n\n"+
		"replace "+module+" => "+root+"\n")
	write("main.go", consumerMain)
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Offline: only the module cache (a test must not need the network;
		// the modules are there from building this repository). The cache
		// verified what it holds when it was filled, so no checksum database.
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// -e: tidy also wants the tests of the consumer's dependencies
	// (go-redis's bsm/ginkgo, otel's testify…), which a fresh machine's
	// cache does not hold (CI failed so on one). What prim brings is in the
	// graph and go.sum all the same.
	gocmd("mod", "tidy", "-e")
	graph := gocmd("mod", "graph")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"module graph (go mod graph)": graph, "go.sum": string(sum)} {
		for _, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			if what == "go.sum" && len(f) > 0 {
				f = f[:1] // path version hash
			}
			for _, m := range f {
				m, _, _ = strings.Cut(m, "@") // graph: path@version
				for _, b := range primConsumerBanned {
					// The harness's module path is prim's prefix: match it exactly.
					if m == b || b != module && strings.HasPrefix(m, b+"/") {
						t.Errorf("a service importing prim has %s in its %s", m, what)
					}
				}
			}
		}
	}
	if !strings.Contains(graph, "github.com/redis/go-redis/v9@") {
		t.Errorf("go-redis is not in the consumer's module graph: the check looked at the wrong graph\n%s", graph)
	}
	var goLine string
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(line, "go ") || strings.HasPrefix(line, "toolchain ") {
			if strings.HasPrefix(line, "toolchain ") {
				t.Errorf("importing prim added %q to the consumer's go.mod", line)
			} else {
				goLine = line
			}
		}
	}
	if goLine != consumerGo {
		t.Errorf("importing prim set the consumer's go line to %q, want %q (the floor of prim's dependencies)", goLine, consumerGo)
	}
	if t.Failed() {
		t.Logf("consumer go.mod after tidy:\n%s\ngo mod graph:\n%s", gomod, graph)
	}

	// And the binary: no harness package is linked into a service using prim.
	for _, pkg := range strings.Fields(gocmd("list", "-deps", ".")) {
		if strings.HasPrefix(pkg, module+"/") && !strings.HasPrefix(pkg, module+"/prim") {
			t.Errorf("the service's binary links %s", pkg)
		}
	}
}
