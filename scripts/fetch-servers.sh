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
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dest=${COORDTORTURE_SERVERS_DIR:-$here/.servers}

# name suite server-package tools-package version-prefix binary
builds=(
  "redis-7.0  bookworm redis-server  redis-tools  7.0. redis-server"
  "redis-8.0  trixie   redis-server  redis-tools  8.0. redis-server"
  "valkey-8.1 trixie   valkey-server valkey-tools 8.1. valkey-server"
  "valkey-9.1 sid      valkey-server valkey-tools 9.1. valkey-server"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1
}
if [ ${#want[@]} -gt 0 ]; then
  for w in "${want[@]}"; do
    ok=0; for b in "${builds[@]}"; do set -- $b; [ "$1" = "$w" ] && ok=1; done
    [ $ok = 1 ] || { echo "fetch-servers: unknown build '$w' (known: redis-7.0 redis-8.0 valkey-8.1 valkey-9.1)" >&2; exit 2; }
  done
fi

mirror() {
  if [ -n "${COORDTORTURE_DEBIAN_MIRROR:-}" ]; then echo "$COORDTORTURE_DEBIAN_MIRROR"; return; fi
  local u=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    u=$(awk '/^URIs:/{for(i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}' "$f")
    [ -n "$u" ] && { echo "$u"; return; }
  done
  if [ -f /etc/apt/sources.list ]; then
    u=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
    [ -n "$u" ] && { echo "$u"; return; }
  fi
  echo "fetch-servers: cannot find a Debian mirror in the system's apt sources; set COORDTORTURE_DEBIAN_MIRROR" >&2
  exit 1
}

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "fetch-servers: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }

# apt_for SUITE: prepares a private apt state for SUITE and sets APT_OPTS.
declare -A updated=()
apt_for() {
  local suite=$1 root=$dest/.apt/$suite
  mkdir -p "$root/etc/sources.list.d" "$root/etc/preferences.d" "$root/state/lists/partial" "$root/cache/archives/partial" "$root/debs"
  printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$(mirror)" "$suite" >"$root/etc/sources.list"
  : >"$root/status"
  APT_OPTS=(-o "Dir::Etc::SourceList=$root/etc/sources.list" -o "Dir::Etc::SourceParts=$root/etc/sources.list.d"
    -o "Dir::Etc::Preferences=$root/etc/preferences" -o "Dir::Etc::PreferencesParts=$root/etc/preferences.d"
    -o "Dir::State=$root/state" -o "Dir::State::status=$root/status" -o "Dir::Cache=$root/cache" -o "Dir::Cache::pkgcache=$root/cache/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$root/cache/srcpkgcache.bin"
    -o "APT::Architecture=amd64" -o "APT::Architectures=amd64" -o "Acquire::Languages=none"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
    -o "Debug::NoLocking=1")
  APT_ROOT=$root
  if [ -z "${updated[$suite]:-}" ]; then
    echo "fetch-servers: reading the $suite package index" >&2
    apt-get -q "${APT_OPTS[@]}" update >"$root/update.log" 2>&1 || { cat "$root/update.log" >&2; exit 1; }
    updated[$suite]=1
  fi
}

# closure PKG…: the packages themselves plus every lib*/lua* package they depend on, recursively.
closure() {
  local -A seen=()
  local queue=("$@") p d
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}; queue=("${queue[@]:1}")
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    echo "$p"
    while read -r d; do
      case "$d" in lib*|lua*) [ -z "${seen[$d]:-}" ] && queue+=("$d");; esac
    done < <(apt-cache "${APT_OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks \
               --no-replaces --no-enhances "$p" 2>/dev/null |
             awk '$1 ~ /^(\|)?(Pre)?Depends:$/ && $2 !~ /^</ {print $2}' | sort -u)
  done
}

version_of() { apt-cache "${APT_OPTS[@]}" show --no-all-versions "$1" 2>/dev/null | awk '/^Version:/{print $2; exit}'; }

for b in "${builds[@]}"; do
  set -- $b
  name=$1 suite=$2 srv=$3 tools=$4 prefix=$5 bin=$6
  selected "$name" || continue
  tree=$dest/$name
  if [ -f "$tree/MANIFEST" ] && grep -q '^complete: yes$' "$tree/MANIFEST"; then
    echo "fetch-servers: $name present ($(awk '/^version:/{print $2}' "$tree/MANIFEST"))" >&2
    continue
  fi
  start=$(date +%s)
  apt_for "$suite"
  ver=$(version_of "$srv")
  upstream=${ver#*:}
  case "$upstream" in
    "$prefix"*) ;;
    *) echo "fetch-servers: $name wants $srv $prefix* from $suite, the suite offers '$ver'" >&2; exit 1;;
  esac
  mapfile -t pkgs < <(closure "$srv" "$tools" libfaketime)
  echo "fetch-servers: $name: $srv $ver from $suite, ${#pkgs[@]} packages" >&2
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
  for p in "${pkgs[@]}"; do
    v=$(version_of "$p")
    f=$(ls "$APT_ROOT/debs/${p}_"*"_"*.deb 2>/dev/null | while read -r cand; do
          [ "$(dpkg-deb -f "$cand" Version)" = "$v" ] && echo "$cand"; done | head -1)
    [ -n "$f" ] || { echo "fetch-servers: $name: no downloaded .deb for $p $v" >&2; exit 1; }
    dpkg-deb -x "$f" "$tree.tmp"
    echo "  - $p $v" >>"$tree.tmp/MANIFEST.tmp"
  done
  # Debian before trixie ships the loader under /lib, trixie and later under /usr/lib.
  ld=""
  for cand in usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib64/ld-linux-x86-64.so.2; do
    [ -e "$tree.tmp/$cand" ] && { ld=$tree.tmp/$cand; echo "loader: $cand" >>"$tree.tmp/MANIFEST.tmp"; break; }
  done
  [ -n "$ld" ] || { echo "fetch-servers: $name: the tree has no dynamic loader (libc6 not unpacked?)" >&2; exit 1; }
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
  echo "fetch-servers: $name ready in $(( $(date +%s) - start ))s: $got" >&2
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
