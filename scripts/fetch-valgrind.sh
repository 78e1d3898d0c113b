#!/usr/bin/env bash
# fetch-valgrind.sh — put Debian's valgrind under .servers/valgrind/ for
# server-cost.sh (`make server-cost`) when the system has none, the way
# fetch-servers.sh fetches the servers: valgrind and the libraries it needs (libc6,
# libgcc-s1; not libc6-dbg, whose debug symbols callgrind's counts do not need) from
# one suite, unpacked with dpkg-deb -x into their own tree, never touching the
# system's apt sources or libraries. The launcher .servers/valgrind/bin/valgrind runs
# valgrind.bin on the tree's own loader and libraries, with VALGRIND_LIB pointing at
# the tree's tools (valgrind looks for them under /usr/libexec/valgrind otherwise):
#
#   .servers/valgrind/bin/valgrind --tool=callgrind PROGRAM ARGS…
#
# Usage: scripts/fetch-valgrind.sh
# Env:   COORDTORTURE_SERVERS_DIR   where the tree goes (default: <repo>/.servers)
#        COORDTORTURE_DEBIAN_MIRROR the Debian archive URI (default: from the system's
#                                   apt sources)
# Idempotent: a tree whose manifest is complete is left alone. The private apt state
# (debian-apt.sh) is removed on any exit.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dest=${COORDTORTURE_SERVERS_DIR:-$here/.servers}
prog=fetch-valgrind
suite=trixie
tree=$dest/valgrind

if [ -f "$tree/MANIFEST" ] && grep -qxF 'complete: yes' "$tree/MANIFEST" && [ -x "$tree/bin/valgrind" ]; then
  echo "$prog: valgrind present ($(awk '/^version:/{print $2}' "$tree/MANIFEST"))" >&2
  exit 0
fi
mkdir -p "$dest"

# shellcheck source=scripts/debian-apt.sh
. "$here/scripts/debian-apt.sh"

start=$(date +%s)
apt_for "$suite"
pkgs=()
while read -r p; do [ "$p" = libc6-dbg ] || pkgs+=("$p"); done < <(closure valgrind)
versions "${pkgs[@]}"
ver=${VERSION[valgrind]:-}
[ -n "$ver" ] || { echo "$prog: $suite offers no valgrind" >&2; exit 1; }
echo "$prog: valgrind $ver from $suite: downloading and unpacking ${#pkgs[@]} packages…" >&2
(cd "$APT_ROOT/debs" && apt-get -q "${APT_OPTS[@]}" download "${pkgs[@]}" >"$APT_ROOT/download.log" 2>&1) ||
  { cat "$APT_ROOT/download.log" >&2; exit 1; }
rm -rf "$tree.tmp"; mkdir -p "$tree.tmp/bin"
{
  echo "name: valgrind"
  echo "suite: $suite"
  echo "version: $ver"
  echo "fetched: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "packages:"
} >"$tree.tmp/MANIFEST.tmp"
for p in "${pkgs[@]}"; do
  f=$(deb_of "$p" "${VERSION[$p]}")
  [ -n "$f" ] || { echo "$prog: no downloaded .deb for $p ${VERSION[$p]}" >&2; exit 1; }
  dpkg-deb -x "$f" "$tree.tmp"
  echo "  - $p ${VERSION[$p]}" >>"$tree.tmp/MANIFEST.tmp"
done
rel=$(loader_of "$tree.tmp")
[ -n "$rel" ] || { echo "$prog: the tree has no dynamic loader (libc6 not unpacked?)" >&2; exit 1; }
echo "loader: $rel" >>"$tree.tmp/MANIFEST.tmp"
cat >"$tree.tmp/bin/valgrind" <<LAUNCHER
#!/bin/sh
# Written by scripts/fetch-valgrind.sh: runs valgrind $ver (Debian $suite) on the
# tree's own loader and libraries, with its tools from the tree.
t=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
VALGRIND_LIB=\$t/usr/libexec/valgrind exec "\$t/$rel" --library-path "\$t/lib/x86_64-linux-gnu:\$t/usr/lib/x86_64-linux-gnu" "\$t/usr/bin/valgrind.bin" "\$@"
LAUNCHER
chmod +x "$tree.tmp/bin/valgrind"
got=$("$tree.tmp/bin/valgrind" --version 2>&1) || { echo "$prog: valgrind --version failed: $got" >&2; exit 1; }
{ echo "reports: $got"; echo "complete: yes"; } >>"$tree.tmp/MANIFEST.tmp"
mv "$tree.tmp/MANIFEST.tmp" "$tree.tmp/MANIFEST"
rm -rf "$tree"; mv "$tree.tmp" "$tree"
echo "$prog: $got ready in $tree in $(( $(date +%s) - start ))s ($(du -sm "$tree" | cut -f1) MB)" >&2
