// Command entrypoint is the only program of the coordtorture/redis and
// coordtorture/valkey images scripts/build-images.sh makes (they have no
// base image and no shell). It runs one of the tree's programs on the tree's
// own dynamic loader and libraries, named by its first argument as in the
// public images:
//
//	redis-server --port 6379 …     the server (valkey-server in a Valkey image)
//	redis-sentinel sentinel.conf … a sentinel (the server in sentinel mode)
//	redis-cli -p 6379 ping         any other program of usr/bin
//	--port 6379 …                  no program: the server with these arguments
//
// A redis-… name runs the valkey-… program in a Valkey image and the other way
// round, so compose files and providers need not know which server an image
// holds. The loader and the server's name come from /MANIFEST (the tree's
// manifest written by scripts/fetch-servers.sh). It is built static
// (CGO_ENABLED=0) and replaces itself with the program (exec), so the server
// is the container's process 1 and gets its signals.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
)

// manifest is what the entrypoint needs from /MANIFEST.
type manifest struct {
	loader string // the dynamic loader, relative to /
	flavor string // "redis" or "valkey": the server binary is usr/bin/<flavor>-server
}

func readManifest(file string) (manifest, error) {
	f, err := os.Open(file)
	if err != nil {
		return manifest{}, err
	}
	defer f.Close()
	var m manifest
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "loader":
			m.loader = v
		case "binary":
			m.flavor = strings.TrimSuffix(path.Base(v), "-server")
		}
	}
	if err := sc.Err(); err != nil {
		return manifest{}, err
	}
	if m.loader == "" || m.flavor == "" {
		return manifest{}, fmt.Errorf("%s names no loader or no server binary", file)
	}
	return m, nil
}

// resolve returns the program to run, the argv[0] to give it and its
// arguments, from the entrypoint's arguments.
func resolve(m manifest, args []string, exists func(string) bool) (prog, argv0 string, rest []string, err error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") || strings.HasSuffix(args[0], ".conf") {
		args = append([]string{m.flavor + "-server"}, args...)
	}
	name := path.Base(args[0])
	// The other server's name runs this image's own program.
	for _, other := range []string{"redis-", "valkey-"} {
		if strings.HasPrefix(name, other) && !exists("/usr/bin/"+name) {
			name = m.flavor + "-" + strings.TrimPrefix(name, other)
		}
	}
	if strings.HasSuffix(name, "-sentinel") {
		// Both servers run in sentinel mode when called by that name.
		rest := args[1:]
		if len(rest) > 0 && strings.HasPrefix(path.Clean(rest[0]), "/dev/") {
			rest = append([]string{sentinelConf}, rest[1:]...)
		}
		return "/usr/bin/" + m.flavor + "-server", "/usr/bin/" + name, rest, nil
	}
	if !exists("/usr/bin/" + name) {
		return "", "", nil, fmt.Errorf("no program %q in this image (it runs %s-server, %s-sentinel and usr/bin's programs)", args[0], m.flavor, m.flavor)
	}
	return "/usr/bin/" + name, "/usr/bin/" + name, args[1:], nil
}

// sentinelConf is the config file a sentinel given a device is given.
const sentinelConf = "/data/sentinel.conf"

func main() {
	m, err := readManifest("/MANIFEST")
	if err != nil {
		fmt.Fprintln(os.Stderr, "entrypoint:", err)
		os.Exit(127)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	prog, argv0, rest, err := resolve(m, os.Args[1:], exists)
	if err != nil {
		fmt.Fprintln(os.Stderr, "entrypoint:", err)
		os.Exit(127)
	}
	if len(rest) > 0 && rest[0] == sentinelConf {
		if f, err := os.OpenFile(sentinelConf, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			f.Close()
		}
	}
	loader := "/" + m.loader
	argv := append([]string{loader, "--library-path", "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu", "--argv0", argv0, prog}, rest...)
	err = syscall.Exec(loader, argv, os.Environ())
	fmt.Fprintln(os.Stderr, "entrypoint: exec", loader+":", err)
	os.Exit(126)
}
