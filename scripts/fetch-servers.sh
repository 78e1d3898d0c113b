#!/usr/bin/env bash
# fetch-servers.sh — put pinned Redis/Valkey server builds under .servers/<name>/.
#
# Each build is unpacked from Debian's package registry into its own tree together
# with every shared library it needs (from the same suite) and libfaketime, so the
# system's apt sources and libraries are never touched. Binaries are run through the
# tree's own dynamic loader (see testbed/servers.go).
#
# Usage: scripts/fetch-servers.sh [NAME…]     (default: every build below)
# Env:   COORDTORTURE_SERVERS_DIR  where trees go (default: <repo>/.servers)
#        COORDTORTURE_DEBIAN_MIRROR the Debian archive URI (default: the first URIs: of
#                                   the system's own Debian apt sources)
# Idempotent: a tree whose manifest is complete is left alone.
# The private apt lives in debian-apt.sh and is removed when the script exits. Headless
# chromium for the HTML report test is fetch-chromium.sh's (`make browser`).
#
# Each tree gets launchers: .servers/<name>/bin/<program> for every program of
# usr/bin (redis-server, redis-cli, …), a shell script that runs it on the tree's
# own loader and libraries with the arguments it was given, so a server can be
# started by hand:
#
#   .servers/redis-8.0/bin/redis-server --port 7000 --save ''
#   .servers/redis-8.0/bin/redis-cli -p 7000 ping
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dest=${COORDTORTURE_SERVERS_DIR:-$here/.servers}

# name suite server-package tools-package version-prefix binary
# (experimental: the server and tools from Debian experimental, every dependency from
# sid; see apt_for in debian-apt.sh)
builds=(
  "redis-7.0  bookworm     redis-server  redis-tools  7.0. redis-server"
  "redis-8.0  trixie       redis-server  redis-tools  8.0. redis-server"
  "redis-8.6  experimental redis-server  redis-tools  8.6. redis-server"
  "valkey-8.1 trixie       valkey-server valkey-tools 8.1. valkey-server"
  "valkey-9.1 sid          valkey-server valkey-tools 9.1. valkey-server"
)

want=("$@")
names=$(for b in "${builds[@]}"; do set -- $b; echo "$1"; done | paste -sd' ')
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1
}
if [ ${#want[@]} -gt 0 ]; then
  for w in "${want[@]}"; do
    ok=0; for b in "${builds[@]}"; do set -- $b; [ "$1" = "$w" ] && ok=1; done
    [ $ok = 1 ] || { echo "fetch-servers: unknown build '$w' (known: $names)" >&2; exit 2; }
  done
fi

prog=fetch-servers
# shellcheck source=scripts/debian-apt.sh
. "$here/scripts/debian-apt.sh"

# write_launchers TREE: TREE/bin/<program> for every program of TREE/usr/bin, each
# a shell script that finds the tree from its own location (the tree may move) and
# execs the program through the tree's loader. Rewritten only when missing or
# different (a tree fetched before launchers existed gets them on the next run).
write_launchers() {
  local tree=$1 rel exe name text n=0
  rel=$(awk '/^loader:/{print $2}' "$tree/MANIFEST")
  [ -n "$rel" ] || { echo "fetch-servers: $tree/MANIFEST names no loader" >&2; exit 1; }
  mkdir -p "$tree/bin"
  for exe in "$tree"/usr/bin/*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    name=${exe##*/}
    text="#!/bin/sh
# Written by scripts/fetch-servers.sh: runs $name ($(awk '/^server:/{s=$2} /^version:/{v=$2} /^suite:/{d=$2} END{print s, v, "from Debian", d}' "$tree/MANIFEST"))
# on the tree's own dynamic loader and libraries, passing its arguments through.
t=\$(dirname \"\$(dirname \"\$(readlink -f \"\$0\")\")\")
exec \"\$t/$rel\" --library-path \"\$t/lib/x86_64-linux-gnu:\$t/usr/lib/x86_64-linux-gnu\" \"\$t/usr/bin/$name\" \"\$@\""
    if [ "$(cat "$tree/bin/$name" 2>/dev/null)" != "$text" ]; then
      printf '%s\n' "$text" >"$tree/bin/$name.tmp"
      chmod +x "$tree/bin/$name.tmp"
      mv "$tree/bin/$name.tmp" "$tree/bin/$name"
      n=$((n + 1))
    fi
  done
  [ $n = 0 ] || echo "fetch-servers: ${tree##*/}: wrote $n launchers in $tree/bin/" >&2
}

total=0
for b in "${builds[@]}"; do set -- $b; selected "$1" && total=$((total + 1)); done
k=0
for b in "${builds[@]}"; do
  set -- $b
  name=$1 suite=$2 srv=$3 tools=$4 prefix=$5 bin=$6
  selected "$name" || continue
  k=$((k + 1))
  tree=$dest/$name
  if [ -f "$tree/MANIFEST" ] && grep -q '^complete: yes$' "$tree/MANIFEST"; then
    echo "fetch-servers: $name ($k of $total) present ($(awk '/^version:/{print $2}' "$tree/MANIFEST"))" >&2
    write_launchers "$tree"
    continue
  fi
  start=$(date +%s)
  APT_STEP="$name ($k of $total): "
  apt_for "$suite" "$srv" "$tools"
  ver=$(version_of "$srv")
  upstream=${ver#*:}
  case "$upstream" in
    "$prefix"*) ;;
    *) echo "fetch-servers: $name wants $srv $prefix* from $suite, the suite offers '$ver'" >&2; exit 1;;
  esac
  mapfile -t pkgs < <(closure "$srv" "$tools" libfaketime)
  echo "fetch-servers: $name ($k of $total): $srv $ver from $suite: downloading and unpacking ${#pkgs[@]} packages…" >&2
  (cd "$APT_ROOT/debs" && apt-get -q "${APT_OPTS[@]}" download "${pkgs[@]}" >"$APT_ROOT/download-$name.log" 2>&1) ||
    { cat "$APT_ROOT/download-$name.log" >&2; exit 1; }
  rm -rf "$tree.tmp"; mkdir -p "$tree.tmp"
  {
    echo "name: $name"
    echo "suite: $suite"
    echo "server: $srv"
    echo "version: $ver"
    echo "binary: usr/bin/$bin"
    echo "fetched: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "packages:"
  } >"$tree.tmp/MANIFEST.tmp"
  versions "${pkgs[@]}"
  for p in "${pkgs[@]}"; do
    v=${VERSION[$p]:-}
    f=$(deb_of "$p" "$v")
    [ -n "$f" ] || { echo "fetch-servers: $name: no downloaded .deb for $p $v" >&2; exit 1; }
    dpkg-deb -x "$f" "$tree.tmp"
    echo "  - $p $v" >>"$tree.tmp/MANIFEST.tmp"
  done
  rel=$(loader_of "$tree.tmp")
  [ -n "$rel" ] || { echo "fetch-servers: $name: the tree has no dynamic loader (libc6 not unpacked?)" >&2; exit 1; }
  ld=$tree.tmp/$rel
  echo "loader: $rel" >>"$tree.tmp/MANIFEST.tmp"
  libs=$tree.tmp/lib/x86_64-linux-gnu:$tree.tmp/usr/lib/x86_64-linux-gnu
  [ -d "$tree.tmp/usr/lib/x86_64-linux-gnu/faketime" ] && libs=$libs:$tree.tmp/usr/lib/x86_64-linux-gnu/faketime
  for exe in "$tree.tmp/usr/bin/$bin" "$tree.tmp/usr/bin/${bin%-server}-cli"; do
    missing=$("$ld" --library-path "$libs" --list "$exe" 2>&1 | grep 'not found' || true)
    [ -z "$missing" ] || { echo "fetch-servers: $name: $exe misses libraries:" >&2; echo "$missing" >&2; exit 1; }
  done
  got=$("$ld" --library-path "$libs" "$tree.tmp/usr/bin/$bin" --version 2>&1) ||
    { echo "fetch-servers: $name: $bin --version failed: $got" >&2; exit 1; }
  ls "$tree.tmp"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 >/dev/null 2>&1 ||
    { echo "fetch-servers: $name: libfaketime.so.1 missing from the tree" >&2; exit 1; }
  { echo "reports: $got"; echo "complete: yes"; } >>"$tree.tmp/MANIFEST.tmp"
  mv "$tree.tmp/MANIFEST.tmp" "$tree.tmp/MANIFEST"
  rm -rf "$tree"; mv "$tree.tmp" "$tree"
  write_launchers "$tree"
  echo "fetch-servers: $name ready in $(( $(date +%s) - start ))s ($(du -sm "$tree" | cut -f1) MB): $got" >&2
  rm -f "$APT_ROOT"/debs/*.deb # the tree has them unpacked
done

# The clock-skew shim (scripts/clockskew/clockskew.c; why not libfaketime: see there).
shim_src=$here/scripts/clockskew/clockskew.c
shim=$dest/clockskew/libclockskew.so
if [ ! -f "$shim" ] || [ "$shim_src" -nt "$shim" ]; then
  cc=${CC:-cc}
  command -v "$cc" >/dev/null || { echo "fetch-servers: no C compiler ($cc) to build the clock-skew shim: apt-get install gcc" >&2; exit 1; }
  mkdir -p "$dest/clockskew"
  "$cc" -O2 -shared -fPIC -Wall -Wno-nonnull-compare -o "$shim.tmp" "$shim_src"
  mv "$shim.tmp" "$shim"
  echo "fetch-servers: built $shim" >&2
fi
apt_cleanup
echo "fetch-servers: done: $total builds in $dest (launchers: $dest/<build>/bin/), no apt state left" >&2
