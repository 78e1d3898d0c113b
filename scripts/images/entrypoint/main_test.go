package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadManifest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "MANIFEST")
	text := "name: valkey-9.1\nbinary: usr/bin/valkey-server\npackages:\n  - libc6 2.41\nloader: usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := readManifest(file)
	if err != nil {
		t.Fatal(err)
	}
	if m.flavor != "valkey" || m.loader != "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
		t.Fatalf("manifest %+v", m)
	}
	if err := os.WriteFile(file, []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readManifest(file); err == nil {
		t.Fatal("a manifest without loader read without error")
	}
}

func TestResolve(t *testing.T) {
	have := map[string]bool{"/usr/bin/valkey-server": true, "/usr/bin/valkey-cli": true}
	exists := func(p string) bool { return have[p] }
	m := manifest{loader: "ld.so", flavor: "valkey"}
	for _, c := range []struct {
		args        []string
		prog, argv0 string
		rest        []string
		fails       bool
	}{
		{nil, "/usr/bin/valkey-server", "/usr/bin/valkey-server", nil, false},
		{[]string{"--port", "7"}, "/usr/bin/valkey-server", "/usr/bin/valkey-server", []string{"--port", "7"}, false},
		{[]string{"redis-server", "--port", "7"}, "/usr/bin/valkey-server", "/usr/bin/valkey-server", []string{"--port", "7"}, false},
		{[]string{"redis-sentinel", "/dev/null", "--port", "1"}, "/usr/bin/valkey-server", "/usr/bin/valkey-sentinel", []string{"/data/sentinel.conf", "--port", "1"}, false},
		{[]string{"redis-sentinel", "/data/s.conf"}, "/usr/bin/valkey-server", "/usr/bin/valkey-sentinel", []string{"/data/s.conf"}, false},
		{[]string{"valkey-sentinel"}, "/usr/bin/valkey-server", "/usr/bin/valkey-sentinel", []string{}, false},
		{[]string{"redis-cli", "ping"}, "/usr/bin/valkey-cli", "/usr/bin/valkey-cli", []string{"ping"}, false},
		{[]string{"sh", "-c", "x"}, "", "", nil, true},
	} {
		prog, argv0, rest, err := resolve(m, c.args, exists)
		if (err != nil) != c.fails {
			t.Fatalf("%q: error %v", c.args, err)
		}
		if c.fails {
			continue
		}
		if prog != c.prog || argv0 != c.argv0 || !slices.Equal(rest, c.rest) && len(rest)+len(c.rest) > 0 {
			t.Fatalf("%q: got %s %s %q", c.args, prog, argv0, rest)
		}
	}
}
