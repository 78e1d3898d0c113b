package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The server builds of the matrix, in the order tests run them. Each is a tree
// under ServersDir() put there by `make servers` (scripts/fetch-servers.sh).
var matrix = []string{"redis-7.0", "redis-8.0", "redis-8.6", "valkey-8.1", "valkey-9.1"}

// ErrUnknownBuild is returned for a server name that is not in the matrix.
var ErrUnknownBuild = errors.New("testbed: unknown server build")

// ErrBuildMissing is returned when a build of the matrix has not been fetched.
var ErrBuildMissing = errors.New("testbed: server build not fetched (run `make servers`)")

// EnvServerBin names a server binary to use instead of the fetched builds, e.g.
// /usr/bin/redis-server. It is run directly (no private loader) and as its own
// sentinel (`--sentinel`).
const EnvServerBin = "COORDTORTURE_SERVER_BIN"

// EnvServersDir overrides where fetched builds live (default: <module root>/.servers).
const EnvServersDir = "COORDTORTURE_SERVERS_DIR"

// EnvServers restricts Matrix to a comma-separated list of build names.
const EnvServers = "COORDTORTURE_SERVERS"

// CustomBuild is the name a build given by EnvServerBin or --server-bin carries.
const CustomBuild = "custom"

// Build is one runnable server: a fetched tree or a user's own binary.
type Build struct {
	Name    string // matrix name, or CustomBuild
	Version string // exact package version (fetched trees) or the binary's --version line
	Binary  string // redis-server / valkey-server
	Loader  string // the tree's dynamic loader; empty for a user's binary
	LibPath string // the tree's library path for the loader
	Root    string // the tree, empty for a user's binary
	// Flavor is "redis" or "valkey".
	Flavor string
}

// Matrix returns the build names tests iterate over: every build of the matrix,
// or the ones named by COORDTORTURE_SERVERS, or only CustomBuild when
// COORDTORTURE_SERVER_BIN is set.
func Matrix() []string {
	if os.Getenv(EnvServerBin) != "" {
		return []string{CustomBuild}
	}
	if v := os.Getenv(EnvServers); v != "" {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return append([]string(nil), matrix...)
}

// KnownBuilds lists the names scripts/fetch-servers.sh can fetch.
func KnownBuilds() []string { return append([]string(nil), matrix...) }

// ServersDir is where fetched builds live.
func ServersDir() string {
	if d := os.Getenv(EnvServersDir); d != "" {
		return d
	}
	if root, ok := moduleRoot(); ok {
		return filepath.Join(root, ".servers")
	}
	return ".servers"
}

func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		// The harness's go.mod, not a nested module's (prim's names
		// github.com/coordtorture/coordtorture/prim).
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			slices.Contains(strings.Split(string(b), "\n"), "module github.com/coordtorture/coordtorture") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// LookupBuild resolves a build name. An empty name means the default build
// (redis-8.0), or the user's binary when COORDTORTURE_SERVER_BIN is set.
func LookupBuild(name string) (*Build, error) {
	if bin := os.Getenv(EnvServerBin); bin != "" && (name == "" || name == CustomBuild) {
		return CustomBinary(bin)
	}
	if name == "" {
		name = DefaultBuild
	}
	if name == CustomBuild {
		return nil, fmt.Errorf("%w: %q needs %s or --server-bin", ErrUnknownBuild, name, EnvServerBin)
	}
	known := false
	for _, m := range matrix {
		known = known || m == name
	}
	if !known {
		return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownBuild, name, strings.Join(matrix, ", "))
	}
	root := filepath.Join(ServersDir(), name)
	man, err := readManifest(filepath.Join(root, "MANIFEST"))
	if err != nil || man["complete"] != "yes" {
		return nil, fmt.Errorf("%w: %s not found under %s", ErrBuildMissing, name, ServersDir())
	}
	b := &Build{
		Name:    name,
		Version: man["version"],
		Binary:  filepath.Join(root, man["binary"]),
		Loader:  filepath.Join(root, man["loader"]),
		Root:    root,
		LibPath: strings.Join([]string{
			filepath.Join(root, "lib/x86_64-linux-gnu"),
			filepath.Join(root, "usr/lib/x86_64-linux-gnu"),
		}, ":"),
		Flavor: "redis",
	}
	if strings.HasPrefix(name, "valkey") {
		b.Flavor = "valkey"
	}
	for _, p := range []string{b.Binary, b.Loader} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBuildMissing, name, err)
		}
	}
	return b, nil
}

// CustomBinary wraps a user's own server binary.
func CustomBinary(path string) (*Build, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: server binary %s: %v", ErrBuildMissing, path, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w: server binary %s is not an executable file", ErrBuildMissing, path)
	}
	b := &Build{Name: CustomBuild, Binary: abs, Flavor: "redis"}
	if strings.Contains(filepath.Base(abs), "valkey") {
		b.Flavor = "valkey"
	}
	return b, nil
}

// DefaultBuild is the build used when none is named.
const DefaultBuild = "redis-8.0"

// command returns argv for running the server binary with args.
func (b *Build) command(args ...string) []string {
	if b.Loader == "" {
		return append([]string{b.Binary}, args...)
	}
	return append([]string{b.Loader, "--library-path", b.LibPath, b.Binary}, args...)
}

// commandWithPreload is command with a library preloaded (clock skew).
func (b *Build) commandWithPreload(lib string, args ...string) (argv []string, env []string) {
	if b.Loader == "" {
		return append([]string{b.Binary}, args...), []string{"LD_PRELOAD=" + lib}
	}
	return append([]string{b.Loader, "--library-path", b.LibPath, "--preload", lib, b.Binary}, args...), nil
}

func (b *Build) String() string {
	if b.Version == "" {
		return b.Name
	}
	return b.Name + " (" + b.Version + ")"
}

func readManifest(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, " ") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out, sc.Err()
}

// clockSkewLib is the preload shim built by `make servers` (scripts/clockskew).
func clockSkewLib() (string, error) {
	p := filepath.Join(ServersDir(), "clockskew", "libclockskew.so")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: clock-skew shim %s missing", ErrBuildMissing, p)
	}
	return p, nil
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortStrings(s []string) { sort.Strings(s) }
