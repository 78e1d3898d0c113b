#!/usr/bin/env bash
# fetch-chromium.sh — put Debian's chromium under .servers/chromium/ for the HTML
# report test (reports/html_test.go), the way fetch-servers.sh fetches the servers.
#
# chromium, chromium-common, every shared library they need (from one suite), a font
# and patchelf are unpacked with dpkg-deb -x into one tree, never touching the
# system's apt sources or libraries. Chromium re-executes itself (/proc/self/exe) for
# its renderer and utility processes, and finds its resources next to that file, so
# it cannot be started through the tree's loader as the servers are: patchelf points
# the ELF interpreter of the tree's executables at the tree's own loader instead (an
# absolute path: the tree is not relocatable; a moved tree is fetched again), and the
# wrapper .servers/chromium/chromium sets LD_LIBRARY_PATH and a fontconfig file of
# the tree's own. Run it headless:
#
#   .servers/chromium/chromium --headless --no-sandbox --disable-gpu \
#     --user-data-dir="$(mktemp -d)" --dump-dom file:///path/to/index.html
#
# Usage: scripts/fetch-chromium.sh   (`make browser`; `make test` runs it, `make torture`
#        does not: only reports/browser_test.go needs chromium)
# Env:   COORDTORTURE_SERVERS_DIR   where the tree goes (default: <repo>/.servers)
#        COORDTORTURE_DEBIAN_MIRROR the Debian archive URI (default: from the system's
#                                   apt sources)
#        COORDTORTURE_CHROMIUM      a chromium of your own: nothing is fetched
#        COORDTORTURE_SKIP_CHROMIUM=1  nothing is fetched (the report test skips)
# Idempotent: a tree whose manifest is complete (for this location) is left alone.
# The private apt state (debian-apt.sh) is removed once the tree is unpacked, and on
# any exit.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dest=${COORDTORTURE_SERVERS_DIR:-$here/.servers}
mkdir -p "$dest" && dest=$(cd "$dest" && pwd) # the patched interpreter path must be absolute
prog=fetch-chromium
suite=trixie
tree=$dest/chromium

if [ -n "${COORDTORTURE_CHROMIUM:-}" ]; then
  echo "$prog: using COORDTORTURE_CHROMIUM=$COORDTORTURE_CHROMIUM" >&2; exit 0
fi
if [ "${COORDTORTURE_SKIP_CHROMIUM:-}" = 1 ]; then
  echo "$prog: COORDTORTURE_SKIP_CHROMIUM=1: not fetching chromium" >&2; exit 0
fi
if [ -f "$tree/MANIFEST" ] && grep -qxF 'complete: yes' "$tree/MANIFEST" && grep -qxF "root: $tree" "$tree/MANIFEST"; then
  echo "$prog: chromium present ($(awk '/^version:/{print $2}' "$tree/MANIFEST"))" >&2
  exit 0
fi

# shellcheck source=scripts/debian-apt.sh
. "$here/scripts/debian-apt.sh"

start=$(date +%s)
apt_for "$suite"
mapfile -t pkgs < <(closure chromium chromium-common zlib1g fonts-dejavu-core fonts-dejavu-mono patchelf)
versions "${pkgs[@]}"
ver=${VERSION[chromium]:-}
[ -n "$ver" ] || { echo "$prog: $suite offers no chromium" >&2; exit 1; }
need=()
for p in "${pkgs[@]}"; do
  [ -n "${VERSION[$p]:-}" ] || { echo "$prog: $suite offers no $p" >&2; exit 1; }
  [ -n "$(deb_of "$p" "${VERSION[$p]}")" ] || need+=("$p")
done
echo "$prog: chromium $ver from $suite: ${#pkgs[@]} packages (${#need[@]} to download, about 160 MB)…" >&2
if [ ${#need[@]} -gt 0 ]; then
  (cd "$APT_ROOT/debs" && apt-get -q "${APT_OPTS[@]}" download "${need[@]}" >"$APT_ROOT/download-chromium.log" 2>&1) ||
    { cat "$APT_ROOT/download-chromium.log" >&2; exit 1; }
fi

rm -rf "$tree.tmp" "$tree"
mkdir -p "$tree.tmp"
{
  echo "name: chromium"
  echo "suite: $suite"
  echo "package: chromium"
  echo "version: $ver"
  echo "binary: usr/lib/chromium/chromium"
  echo "wrapper: chromium"
  echo "root: $tree"
  echo "fetched: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "packages:"
} >"$tree.tmp/MANIFEST.tmp"
debs=()
for p in "${pkgs[@]}"; do
  f=$(deb_of "$p" "${VERSION[$p]}")
  [ -n "$f" ] || { echo "$prog: no downloaded .deb for $p ${VERSION[$p]}" >&2; exit 1; }
  debs+=("$f")
  echo "  - $p ${VERSION[$p]}" >>"$tree.tmp/MANIFEST.tmp"
done
# Packages do not share files; unpack them in parallel (chromium alone is ~90 MB of xz).
echo "$prog: unpacking ${#debs[@]} packages into $tree (about 520 MB)…" >&2
printf '%s\0' "${debs[@]}" | xargs -0 -n 4 -P "$(nproc 2>/dev/null || echo 2)" sh -c \
  'for f; do dpkg-deb -x "$f" "$0" || exit 255; done' "$tree.tmp"

rel=$(loader_of "$tree.tmp")
[ -n "$rel" ] || { echo "$prog: the tree has no dynamic loader (libc6 not unpacked?)" >&2; exit 1; }
echo "loader: $rel" >>"$tree.tmp/MANIFEST.tmp"
ld=$tree.tmp/$rel
# libpulse finds libpulsecommon through a RUNPATH of /usr/lib/x86_64-linux-gnu/pulseaudio.
libs=$tree.tmp/usr/lib/x86_64-linux-gnu:$tree.tmp/lib/x86_64-linux-gnu:$tree.tmp/usr/lib/x86_64-linux-gnu/pulseaudio

# Every library an executable needs must come from the tree, not from the system's
# directories (which the loader falls back to).
mapfile -t exes < <(cd "$tree.tmp" && for f in usr/lib/chromium/*; do
  case "$f" in *.so|*.so.*) continue;; esac
  [ -f "$f" ] && [ -x "$f" ] && [ "$(head -c 4 "$f")" = $'\x7fELF' ] && echo "$f"; done)
[ ${#exes[@]} -gt 0 ] && [ -f "$tree.tmp/usr/lib/chromium/chromium" ] ||
  { echo "$prog: usr/lib/chromium/chromium missing from the tree" >&2; exit 1; }
for exe in "${exes[@]}"; do
  out=$("$ld" --library-path "$libs:$tree.tmp/usr/lib/chromium" --list "$tree.tmp/$exe" 2>&1) ||
    { echo "$prog: $exe: $out" >&2; exit 1; }
  bad=$(echo "$out" | awk -v t="$tree.tmp/" '/not found/ {print; next} /=>/ && index($3, t) != 1 {print}')
  [ -z "$bad" ] || { echo "$prog: $exe needs libraries the tree lacks:" >&2; echo "$bad" >&2; exit 1; }
done

apt_cleanup # the .debs are unpacked: the apt state is no longer needed

# Point the executables at the tree's loader (its final location).
patchelf=("$ld" --library-path "$libs" "$tree.tmp/usr/bin/patchelf")
for exe in "${exes[@]}"; do
  [ "$(basename "$exe")" = chrome-sandbox ] && continue # setuid helper; --no-sandbox does not use it
  "${patchelf[@]}" --set-interpreter "$tree/$rel" "$tree.tmp/$exe"
  echo "patched: $exe" >>"$tree.tmp/MANIFEST.tmp"
done

mkdir -p "$tree.tmp/etc/fonts" "$tree.tmp/var/cache/fontconfig"
cat >"$tree.tmp/etc/fonts/coordtorture.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<!-- Written by scripts/fetch-chromium.sh: the tree's own fonts only. -->
<fontconfig>
  <dir>$tree/usr/share/fonts</dir>
  <cachedir>$tree/var/cache/fontconfig</cachedir>
  <alias><family>sans-serif</family><prefer><family>DejaVu Sans</family></prefer></alias>
  <alias><family>serif</family><prefer><family>DejaVu Serif</family></prefer></alias>
  <alias><family>monospace</family><prefer><family>DejaVu Sans Mono</family></prefer></alias>
</fontconfig>
EOF
cat >"$tree.tmp/chromium" <<EOF
#!/bin/sh
# Written by scripts/fetch-chromium.sh: chromium $ver from Debian $suite on the
# tree's own libraries and fonts. Headless use:
#   $tree/chromium --headless --no-sandbox --disable-gpu --user-data-dir=DIR --dump-dom URL
LD_LIBRARY_PATH=$tree/usr/lib/x86_64-linux-gnu:$tree/lib/x86_64-linux-gnu:$tree/usr/lib/x86_64-linux-gnu/pulseaudio:$tree/usr/lib/chromium
FONTCONFIG_FILE=$tree/etc/fonts/coordtorture.conf
GCONV_PATH=$tree/usr/lib/x86_64-linux-gnu/gconv
export LD_LIBRARY_PATH FONTCONFIG_FILE GCONV_PATH
exec $tree/usr/lib/chromium/chromium "\$@"
EOF
chmod +x "$tree.tmp/chromium"

mv "$tree.tmp" "$tree"
# A smoke run: headless chromium renders a page and runs its script.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; apt_cleanup' EXIT
echo "$prog: smoke test: headless chromium renders a page…" >&2
got=$(timeout -k 5 60 "$tree/chromium" --headless --no-sandbox --disable-gpu --no-first-run \
  --user-data-dir="$tmp" --dump-dom \
  'data:text/html,<p id="x"></p><script>document.getElementById("x").textContent="smoke "+(1+1)</script>' 2>"$tmp/stderr") ||
  { echo "$prog: headless chromium failed:" >&2; tail -20 "$tmp/stderr" >&2; exit 1; }
case "$got" in
  *'<p id="x">smoke 2</p>'*) ;;
  *) echo "$prog: headless chromium did not run the page's script; it printed:" >&2; echo "$got" | head -20 >&2
     tail -20 "$tmp/stderr" >&2; exit 1;;
esac
vers=$("$tree/chromium" --version 2>/dev/null | head -1 || true)
{ echo "reports: ${vers:-?}"; echo "complete: yes"; } >>"$tree/MANIFEST.tmp"
mv "$tree/MANIFEST.tmp" "$tree/MANIFEST"
echo "$prog: chromium ready in $(( $(date +%s) - start ))s: ${vers:-$ver} ($(du -sm "$tree" | cut -f1) MB)" >&2
