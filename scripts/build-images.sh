#!/usr/bin/env bash
# build-images.sh — local Docker images of the fetched server builds, without a base
# image and without any registry: coordtorture/redis:7.0, :8.0, :8.6 and
# coordtorture/valkey:8.1, :9.1 from .servers/<build>/ (scripts/fetch-servers.sh).
#
# Each image is `docker import` of a root filesystem made here: the build's tree
# (its programs, its own shared libraries and dynamic loader, its MANIFEST; not the
# shell launchers of bin/), a static entrypoint (scripts/images/entrypoint, built with
# CGO_ENABLED=0), /etc/passwd naming the non-root user the image runs as (uid 999),
# /data (owned by that user, the working directory) and /tmp. No shell, no package
# manager. The image's arguments name the program, as in the public images:
#
#   docker run --rm -p 6379:6379 coordtorture/redis:8.0 redis-server --port 6379
#   docker run --rm coordtorture/valkey:9.1 valkey-sentinel /data/sentinel.conf --port 26379 …
#
# (A sentinel needs a writable config file, which it replaces when it saves: the
# entrypoint gives a sentinel named a device (/dev/null) /data/sentinel.conf instead,
# created empty. Never run a sentinel on /dev/null on a host: as root, its first save
# replaces the device with a regular file.)
#
# A library a tree's programs need but the tree lacks (libz.so.1: fetch-servers.sh's
# package closure leaves zlib1g out, the host's is found when the programs run on the
# host) is copied from the host into the image at the path the tree's loader finds it
# (and named in the label coordtorture.host-libs); a program that still misses one
# fails the build.
#
# Idempotent: each image carries the label coordtorture.tree-hash, a hash of its tree,
# the entrypoint's source and this script; a build whose image has the same hash is
# skipped.
#
# Usage: scripts/build-images.sh [BUILD…]   (default: every build: redis-7.0 …)
# Env:   COORDTORTURE_SERVERS_DIR  where the trees are (default: <repo>/.servers)
#        DOCKER                    the docker CLI (default: docker)
#        COORDTORTURE_IMAGE_REPO   the images' repository prefix (default: coordtorture)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
src=${COORDTORTURE_SERVERS_DIR:-$here/.servers}
docker=${DOCKER:-docker}
all=(redis-7.0 redis-8.0 redis-8.6 valkey-8.1 valkey-9.1)
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=("${all[@]}")
uid=999

command -v "$docker" >/dev/null || { echo "build-images: no docker CLI ($docker)" >&2; exit 1; }
"$docker" version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
  { echo "build-images: the Docker engine is not reachable ($docker version fails)" >&2; exit 1; }

# image_of BUILD: redis-8.0 -> coordtorture/redis:8.0
repo=${COORDTORTURE_IMAGE_REPO:-coordtorture}
image_of() { echo "$repo/${1%%-*}:${1#*-}"; }

# host_libs TREE: the libraries (absolute host paths) the tree's programs load from
# outside the tree.
host_libs() {
  local tree=$1 ld p
  ld=$tree/$(awk '/^loader:/{print $2}' "$tree/MANIFEST")
  for p in "$tree"/usr/bin/*; do
    "$ld" --library-path "$tree/lib/x86_64-linux-gnu:$tree/usr/lib/x86_64-linux-gnu" --list "$p" |
      awk -v t="$tree/" '$2 == "=>" && index($3, t) != 1 && $3 ~ /^\// {print $3}
        /not found/ {print "MISSING:" $1}'
  done | sort -u
}

# tree_hash TREE HOSTLIB…: a hash of every file's path, mode and content and every
# link's target under TREE (bin/ excluded: launchers not copied), of the host
# libraries copied in, of the entrypoint's source and of this script.
tree_hash() {
  local tree=$1; shift
  {
    [ $# -eq 0 ] || sha256sum "$@"
    (cd "$tree" && find . -path ./bin -prune -o -type l -printf 'L %p %l\n' -o -type f -printf 'F %p %m\n' | LC_ALL=C sort)
    (cd "$tree" && find . -path ./bin -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    cat "$here/scripts/build-images.sh" "$here"/scripts/images/entrypoint/main.go
  } | sha256sum | cut -c1-64
}

# One build at a time on this machine (test packages running in parallel each
# ask for the same images): the others wait, then find them up to date.
if command -v flock >/dev/null; then
  exec 9>"${TMPDIR:-/tmp}/coordtorture-build-images.lock"
  flock 9
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
entry=$work/entrypoint
built=0
for b in "${builds[@]}"; do
  tree=$src/$b
  case " ${all[*]} " in *" $b "*) ;; *) echo "build-images: unknown build '$b' (known: ${all[*]})" >&2; exit 2;; esac
  [ -f "$tree/MANIFEST" ] && grep -q '^complete: yes$' "$tree/MANIFEST" ||
    { echo "build-images: $tree is not a complete build: run make servers" >&2; exit 1; }
  image=$(image_of "$b")
  start=$(date +%s.%N)
  mapfile -t hostlibs < <(host_libs "$tree")
  for l in "${hostlibs[@]}"; do
    case "$l" in MISSING:*) echo "build-images: $b: no ${l#MISSING:} in the tree nor on the host" >&2; exit 1;; esac
  done
  hash=$(tree_hash "$tree" "${hostlibs[@]}")
  have=$("$docker" image inspect -f '{{index .Config.Labels "coordtorture.tree-hash"}}' "$image" 2>/dev/null || true)
  old=$("$docker" image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  if [ "$have" = "$hash" ]; then
    echo "build-images: $image is up to date (tree hash ${hash:0:12})" >&2
    continue
  fi
  if [ ! -x "$entry" ]; then
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$entry" ./scripts/images/entrypoint)
  fi
  # The extras: entrypoint, passwd and group, /data and /tmp.
  x=$work/extra-$b
  mkdir -p "$x/etc" "$x/data" "$x/tmp"
  cp "$entry" "$x/entrypoint"
  flavor=$(awk '/^binary:/{sub(".*/","",$2); sub("-server$","",$2); print $2}' "$tree/MANIFEST")
  printf 'root:x:0:0:root:/:/nonexistent\n%s:x:%d:%d:%s:/data:/nonexistent\n' "$flavor" $uid $uid "$flavor" >"$x/etc/passwd"
  printf 'root:x:0:\n%s:x:%d:\n' "$flavor" $uid >"$x/etc/group"
  chmod 0755 "$x/data"; chmod 1777 "$x/tmp"
  rootfs=$work/$b.tar
  tar -C "$tree" --exclude=./bin --sort=name --owner=0 --group=0 --numeric-owner -cf "$rootfs" .
  tar -C "$x" --sort=name --owner=0 --group=0 --numeric-owner -rf "$rootfs" ./entrypoint ./etc/passwd ./etc/group ./tmp
  # Host libraries go to usr/lib/x86_64-linux-gnu, where the tree's loader looks by
  # default; /lib64/ld-linux-x86-64.so.2 (the programs' interpreter) is made a link to
  # the tree's loader when the tree has none, so `docker exec … redis-cli` runs too.
  extra=()
  for l in "${hostlibs[@]}"; do
    mkdir -p "$x/usr/lib/x86_64-linux-gnu"
    cp -L "$l" "$x/usr/lib/x86_64-linux-gnu/"
    extra+=("./usr/lib/x86_64-linux-gnu/${l##*/}")
  done
  if [ ! -e "$tree/lib64/ld-linux-x86-64.so.2" ]; then
    mkdir -p "$x/lib64"
    ln -s "/$(awk '/^loader:/{print $2}' "$tree/MANIFEST")" "$x/lib64/ld-linux-x86-64.so.2"
    [ -d "$tree/lib64" ] || extra+=(./lib64)
    extra+=(./lib64/ld-linux-x86-64.so.2)
  fi
  # A Valkey image answers to the redis-… names too (as Debian's valkey-redis-compat),
  # also for `docker exec` and healthchecks, which do not go through the entrypoint.
  if [ "$flavor" = valkey ]; then
    mkdir -p "$x/usr/bin"
    for p in "$tree"/usr/bin/valkey-*; do
      n=${p##*/}; ln -s "$n" "$x/usr/bin/redis-${n#valkey-}"; extra+=("./usr/bin/redis-${n#valkey-}")
    done
  fi
  [ ${#extra[@]} -eq 0 ] || tar -C "$x" --no-recursion --owner=0 --group=0 --numeric-owner -rf "$rootfs" "${extra[@]}"
  tar -C "$x" --owner=$uid --group=$uid --numeric-owner -rf "$rootfs" ./data
  "$docker" import \
    --change "ENTRYPOINT [\"/entrypoint\"]" \
    --change "CMD [\"$flavor-server\"]" \
    --change "USER $uid:$uid" \
    --change "WORKDIR /data" \
    --change "EXPOSE 6379" \
    --change "LABEL coordtorture.tree-hash=$hash" \
    --change "LABEL coordtorture.build=$b" \
    --change "LABEL coordtorture.host-libs=\"$(for l in "${hostlibs[@]}"; do basename "$l"; done | paste -sd' ')\"" \
    --change "LABEL org.opencontainers.image.description=\"$b from Debian, made by scripts/build-images.sh\"" \
    "$rootfs" "$image" >/dev/null
  rm -rf "$x" "$rootfs"
  # The image this one replaces, now untagged (kept if a container still uses it).
  if [ -n "$old" ] && [ "$old" != "$("$docker" image inspect -f '{{.Id}}' "$image")" ]; then
    "$docker" rmi "$old" >/dev/null 2>&1 || true
  fi
  built=$((built + 1))
  echo "build-images: $image built in $(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")s ($("$docker" image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))" >&2
done
echo "build-images: done: $built of ${#builds[@]} images built" >&2
