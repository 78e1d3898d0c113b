package compose

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The host ports each compose file publishes, by variable, with their
// defaults (the ports README.md lists).
var wantPorts = map[string]map[string]string{
	"standalone.yml": {"STANDALONE_PORT": "6379"},
	"sentinel.yml": {"SENTINEL_PRIMARY_PORT": "6380", "SENTINEL_REPLICA1_PORT": "6381", "SENTINEL_REPLICA2_PORT": "6382",
		"SENTINEL1_PORT": "26380", "SENTINEL2_PORT": "26381", "SENTINEL3_PORT": "26382"},
	"cluster.yml": {"CLUSTER_NODE1_PORT": "7001", "CLUSTER_NODE2_PORT": "7002", "CLUSTER_NODE3_PORT": "7003",
		"CLUSTER_NODE4_PORT": "7004", "CLUSTER_NODE5_PORT": "7005", "CLUSTER_NODE6_PORT": "7006"},
	"redlock.yml": {"REDLOCK_NODE1_PORT": "6391", "REDLOCK_NODE2_PORT": "6392", "REDLOCK_NODE3_PORT": "6393"},
}

var (
	// A variable with a default, as docker-compose 1.29 substitutes it.
	substRe = regexp.MustCompile(`\$\{([A-Za-z0-9_]+):-([^}]*)\}`)
	// A host port taken from a variable: ${NAME:-default}.
	hostPortRe = regexp.MustCompile(`^\$\{([A-Z0-9_]+):-([0-9]+)\}$`)
	quotedRe   = regexp.MustCompile(`"([^"]*)"`)
)

// publishedPorts returns the entries of every ports: key of a compose file
// (non-comment lines), in the two shapes the files use: an inline list of
// quoted strings (ports: ["a", "b"]) or a block list of quoted strings
// (ports: then "- "a"" lines indented deeper). Any other shape fails the test,
// so a new file cannot escape the check by its layout.
func publishedPorts(t *testing.T, file string, lines []string) []string {
	t.Helper()
	var entries []string
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i := 0; i < len(lines); i++ {
		ln := lines[i]
		key, rest, ok := strings.Cut(strings.TrimSpace(ln), ":")
		if !ok || key != "ports" {
			continue
		}
		rest = strings.TrimSpace(rest)
		switch {
		case strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]"):
			for _, m := range quotedRe.FindAllStringSubmatch(rest, -1) {
				entries = append(entries, m[1])
			}
		case rest == "":
			for j := i + 1; j < len(lines) && indent(lines[j]) > indent(ln); j++ {
				item, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "- ")
				m := quotedRe.FindStringSubmatch(item)
				if !ok || m == nil || m[0] != item {
					t.Fatalf("%s: a ports entry this test cannot read: %q", file, lines[j])
				}
				entries = append(entries, m[1])
				i = j
			}
		default:
			t.Fatalf("%s: a ports key this test cannot read: %q", file, ln)
		}
	}
	return entries
}

// TestComposeHostPortsFromVariables (issue 32, item 8): every host port a
// compose file publishes comes from a variable whose default is the port
// README.md lists (${NAME:-6380}), so a user moves a topology off ports that
// are taken (their own stack, or the tests, which run on free ports) without
// editing the file. A port the servers also use themselves (the sentinel and
// cluster files publish each port under the same number, the servers announce
// it) follows the same variable everywhere: no default port number is left
// literal in a server's command, healthcheck or address, and a variable has one
// default throughout its file.
func TestComposeHostPortsFromVariables(t *testing.T) {
	files, err := filepath.Glob("*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no compose files: %v", err)
	}
	for _, file := range files {
		want, ok := wantPorts[file]
		if !ok {
			t.Errorf("%s: a compose file this test does not know: add its ports to wantPorts", file)
			continue
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, ln := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(ln), "#") {
				lines = append(lines, ln)
			}
		}
		text := strings.Join(lines, "\n")

		defaults := map[string]string{}
		for _, m := range substRe.FindAllStringSubmatch(text, -1) {
			if d, seen := defaults[m[1]]; seen && d != m[2] {
				t.Errorf("%s: ${%s} has two defaults, %q and %q", file, m[1], d, m[2])
			}
			defaults[m[1]] = m[2]
		}

		got := map[string]string{}
		same := map[string]bool{} // published under the same number inside
		for _, e := range publishedPorts(t, file, lines) {
			parts := strings.SplitN(substRe.ReplaceAllStringFunc(e, func(v string) string {
				return strings.ReplaceAll(v, ":", "\x00") // keep the variable whole across the split
			}), ":", 3)
			for i := range parts {
				parts[i] = strings.ReplaceAll(parts[i], "\x00", ":")
			}
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: ports entry %q is not 127.0.0.1:host:container", file, e)
				continue
			}
			m := hostPortRe.FindStringSubmatch(parts[1])
			if m == nil {
				t.Errorf("%s: ports entry %q publishes host port %q, not one taken from a variable (${NAME:-port})", file, e, parts[1])
				continue
			}
			got[m[1]] = m[2]
			same[m[1]] = parts[2] == parts[1]
		}
		for name, port := range want {
			if got[name] != port {
				t.Errorf("%s: host port variable %s: default %q, want %q (README.md's)", file, name, got[name], port)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s: publishes ${%s}, not in wantPorts (and README.md?)", file, name)
			}
		}
		// A port the servers use themselves must not be left literal anywhere:
		// moving the host port would leave that server on the old one.
		bare := substRe.ReplaceAllString(text, "")
		for name, port := range got {
			if !same[name] {
				continue
			}
			if regexp.MustCompile(`(^|[^0-9])` + port + `([^0-9]|$)`).MatchString(bare) {
				t.Errorf("%s: %s is published under the same number inside (the servers use it), yet %s is still literal in the file, outside ${%s:-%s}", file, name, port, name, port)
			}
		}
	}
}
