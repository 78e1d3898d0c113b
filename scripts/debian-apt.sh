# debian-apt.sh — a private apt for fetching Debian packages without touching the
# system: sourced by fetch-servers.sh and fetch-chromium.sh (bash only).
#
# Before sourcing, set:
#   prog  the name errors are prefixed with
#   dest  the .servers directory (private apt states go to $dest/.apt/$prog/<suite>/:
#         one per script, so fetch-servers.sh and fetch-chromium.sh may run at once)
# Env:    COORDTORTURE_DEBIAN_MIRROR the Debian archive URI (default: the first URIs: of
#                                    the system's own Debian apt sources)
#
# Provides mirror, apt_for SUITE [PKG…] (sets APT_OPTS and APT_ROOT), closure PKG…,
# versions PKG… and version_of PKG (candidate versions), deb_of PKG (the downloaded
# .deb of PKG's candidate version) and loader_of TREE (the tree's dynamic loader).
#
# The apt state (package indexes, caches, downloaded .debs: hundreds of MB) is only
# needed during a fetch: sourcing this file removes what an interrupted run or an
# older layout ($dest/.apt/<suite>/) left, and apt_cleanup, run on exit (set as the
# EXIT trap here; a script that sets its own EXIT trap must call it), removes this
# script's state, whether the fetch succeeded or not.

apt_dir=$dest/.apt
# apt_cleanup removes this script's private apt state, and .apt itself once empty.
apt_cleanup() {
  rm -rf "${apt_dir:?}/${prog:?}"
  rmdir "$apt_dir" 2>/dev/null || true
}
# Leftovers: this script's own state (a killed run) and the old per-suite layout,
# whichever script left them; another script's state may be in use (make -j).
if [ -d "$apt_dir" ]; then
  for d in "$apt_dir"/*; do
    [ -d "$d" ] || continue
    case "${d##*/}" in
      fetch-*) [ "${d##*/}" = "$prog" ] || continue;;
    esac
    echo "$prog: removing the private apt state $d left by an earlier fetch ($(du -sh "$d" | cut -f1))" >&2
    rm -rf "$d"
  done
  rmdir "$apt_dir" 2>/dev/null || true
fi
trap apt_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mirror() {
  if [ -n "${COORDTORTURE_DEBIAN_MIRROR:-}" ]; then echo "$COORDTORTURE_DEBIAN_MIRROR"; return; fi
  local u="" f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    u=$(awk '/^URIs:/{for(i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}' "$f")
    [ -n "$u" ] && { echo "$u"; return; }
  done
  if [ -f /etc/apt/sources.list ]; then
    u=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
    [ -n "$u" ] && { echo "$u"; return; }
  fi
  echo "$prog: cannot find a Debian mirror in the system's apt sources; set COORDTORTURE_DEBIAN_MIRROR" >&2
  exit 1
}

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
check_keyring() {
  [ -f "$keyring" ] || { echo "$prog: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
}

# apt_for SUITE [PKG…]: prepares a private apt state for SUITE and sets APT_OPTS.
# SUITE "experimental" is not a whole distribution: its packages depend on sid's, and
# apt gives it priority 1 (NotAutomatic). Its state has both suites, with experimental
# pinned above sid for the PKGs named (the server and its tools) and for nothing else,
# so every dependency comes from sid.
declare -A updated=()
apt_for() {
  local suite=$1 root=$apt_dir/$prog/$1 m
  shift
  check_keyring
  mkdir -p "$root/etc/sources.list.d" "$root/etc/preferences.d" "$root/state/lists/partial" "$root/cache/archives/partial" "$root/debs"
  m=$(mirror)
  printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$m" "$suite" >"$root/etc/sources.list"
  : >"$root/etc/preferences"
  if [ "$suite" = experimental ]; then
    printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$m" sid >>"$root/etc/sources.list"
    if [ $# -gt 0 ]; then
      printf 'Package: %s\nPin: release a=experimental\nPin-Priority: 990\n' "$*" >"$root/etc/preferences"
    fi
  fi
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
    echo "$prog: ${APT_STEP:-}reading the Debian $suite package index…" >&2
    apt-get -q "${APT_OPTS[@]}" update >"$root/update.log" 2>&1 || { cat "$root/update.log" >&2; exit 1; }
    updated[$suite]=1
  fi
}

# closure PKG…: the packages themselves plus every lib*/lua* package they depend on,
# recursively, breadth first. One apt-cache call per level of the graph, not per package.
closure() {
  local -A seen=()
  local level=() next p d
  for p in "$@"; do [ -z "${seen[$p]:-}" ] && { seen[$p]=1; level+=("$p"); }; done
  while [ ${#level[@]} -gt 0 ]; do
    printf '%s\n' "${level[@]}"
    next=()
    while read -r d; do
      case "$d" in lib*|lua*) [ -z "${seen[$d]:-}" ] && { seen[$d]=1; next+=("$d"); };; esac
    done < <(apt-cache "${APT_OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks \
               --no-replaces --no-enhances "${level[@]}" 2>/dev/null |
             awk '$1 ~ /^(\|)?(Pre)?Depends:$/ && $2 !~ /^</ {print $2}' | sort -u)
    level=("${next[@]}")
  done
}

# versions PKG…: sets the associative array VERSION (package → candidate version)
# with one apt-cache call.
declare -A VERSION=()
versions() {
  local k v
  while read -r k v; do VERSION[$k]=$v; done < <(apt-cache "${APT_OPTS[@]}" show --no-all-versions "$@" 2>/dev/null |
    awk '/^Package:/{p=$2} /^Version:/{print p, $2}')
}

version_of() { apt-cache "${APT_OPTS[@]}" show --no-all-versions "$1" 2>/dev/null | awk '/^Version:/{print $2; exit}'; }

# deb_of PKG [VERSION]: the downloaded .deb (in $APT_ROOT/debs) of PKG's VERSION
# (default: its candidate version). apt-get download names it
# PKG_VERSION_ARCH.deb with the epoch's colon as %3a.
deb_of() {
  local v=${2:-} cand
  [ -n "$v" ] || v=$(version_of "$1")
  for cand in "$APT_ROOT/debs/${1}_${v//:/%3a}_"*.deb; do
    [ -f "$cand" ] && { echo "$cand"; return; }
  done
  return 0
}

# loader_of TREE: the dynamic loader unpacked in TREE, relative to it. Debian before
# trixie ships the loader under /lib, trixie and later under /usr/lib.
loader_of() {
  local cand
  for cand in usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib64/ld-linux-x86-64.so.2; do
    [ -e "$1/$cand" ] && { echo "$cand"; return; }
  done
  return 0
}
