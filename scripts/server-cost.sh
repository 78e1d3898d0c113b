#!/usr/bin/env bash
# server-cost.sh — what each lock command costs the server, in CPU instructions
# per call, counted by valgrind's callgrind: nearly the same figure on every run and
# whatever else the machine is doing (wall-clock benchmarks on a shared 2-core VM
# move by ±20% between runs; this moves by well under 1%: the keys are random
# and some expire during the run).
#
# For each command it starts the build's server under callgrind, sends N calls
# with redis-benchmark (pipelined by 16, a fresh random lease key each call),
# shuts the server down and subtracts an idle run's count. The figure includes
# reading, parsing and replying, as a server spends them. The server runs with
# hz 1, so its background cron (which runs by wall time, and so more under
# valgrind's slowdown) stays out of the figures.
#
# Release and renewal are measured on both of prim's paths: the scripts, and the
# plain owner-checked commands of servers that have them (DELEX … IFEQ, Redis 8.4+;
# DELIFEQ, Valkey 9.0+; SET … IFEQ … PX, Redis 8.4+ and Valkey 8.1+); a command the
# build refuses prints "n/a" with the server's answer. A renewal renews one held
# lease N times. A release of a held lease needs a lease per call: N pairs (SET NX
# PX of lease i, then its release) are piped in one stream (redis-cli --pipe) and
# the count of N SET NX PX alone, piped the same way, is subtracted; these "held"
# rows compare with each other (piped in bulk, their reading costs a little less
# per command than redis-benchmark's batches of 16).
#
# Usage: scripts/server-cost.sh [BUILD] [N]   (default redis-8.0, 20000)
# Needs: `make servers`, and valgrind: the system's (on PATH) if it has one, else
# Debian's, fetched into .servers/valgrind/ by fetch-valgrind.sh the way the servers
# are. Env: COORDTORTURE_VALGRIND a valgrind to use, or "fetch" for the fetched one.
set -euo pipefail

shopt -s inherit_errexit

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-redis-8.0}
n=${2:-20000}
root=${COORDTORTURE_SERVERS_DIR:-$here/.servers}/$build
valgrind=${COORDTORTURE_VALGRIND:-}
[ -n "$valgrind" ] || valgrind=$(command -v valgrind || echo fetch)
if [ "$valgrind" = fetch ]; then
  "$here/scripts/fetch-valgrind.sh"
  valgrind=${COORDTORTURE_SERVERS_DIR:-$here/.servers}/valgrind/bin/valgrind
fi
vgversion=$("$valgrind" --version 2>&1) || { echo "server-cost: $valgrind --version failed: $vgversion" >&2; exit 2; }
grep -qx 'complete: yes' "$root/MANIFEST" 2>/dev/null || { echo "server-cost: $build not found under ${root%/*}: run make servers" >&2; exit 2; }
flavor=redis; case $build in valkey*) flavor=valkey;; esac
loader=$root/$(sed -n 's/^loader: //p' "$root/MANIFEST")
libs=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
tool() { "$loader" --library-path "$libs" "$root/usr/bin/$flavor-$1" "${@:2}"; }

work=$(mktemp -d /tmp/coordtorture-cost.XXXXXX)
pid=
stop_server() {
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true # SIGTERM: the server exits cleanly
  local i
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
}
trap 'stop_server; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# The scripts, exactly as each implementation sends them.
acquire=$(cat "$here/prim/scripts/fenced_acquire.lua")
release=$(cat "$here/prim/scripts/lease_release.lua")
renew=$(cat "$here/prim/scripts/lease_renew.lua")
rlfixed=$(cat "$here/prim/scripts/ratelimit_fixed.lua")
rlsliding=$(cat "$here/prim/scripts/ratelimit_sliding.lua")
rlbucket=$(cat "$here/prim/scripts/ratelimit_bucket.lua")
# go-redis/redis_rate's GCRA script (its Allow), for comparison: read from the
# module cache of prim/internal/servertest (its benchmarks import it); empty
# when Go or the module is not at hand.
rlgcra=$(cd "$here/prim/internal/servertest" 2>/dev/null &&
  dir=$(go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10 2>/dev/null) &&
  awk '/^var allowN = redis.NewScript\(`/{on=1; next} on && /^`\)/{exit} on' "$dir/lua.go" 2>/dev/null || true)
casdel="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
onecall="return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
sha() { printf %s "$1" | sha1sum | cut -c1-40; }

# measure ARGS…: runs one server lifetime under callgrind that serves the
# command N times (none for "idle") and sets $total to its instruction count.
# With pre set (an array), that command is sent once first (the lease a renewal
# renews). With optional=1 a refused command sets $total to "" and $refused to
# the server's answer instead of ending the script. "pipe FILE" sends FILE with
# redis-cli --pipe instead of redis-benchmark (every reply must be a success).
pre=()
optional=0
refused=
start_server() {
  rm -f "$work/cg" "$work/s"
  "$valgrind" --tool=callgrind --callgrind-out-file="$work/cg" "$loader" --library-path "$libs" \
    "$root/usr/bin/$flavor-server" --port 0 --unixsocket "$work/s" --save '' --appendonly no --hz 1 \
    >"$work/log" 2>&1 &
  pid=$!
  local i up=0
  for i in $(seq 300); do
    if tool cli -s "$work/s" ping >/dev/null 2>&1; then up=1; break; fi
    sleep 0.2
  done
  if [ $up = 0 ]; then
    echo "server-cost: $flavor-server under valgrind did not answer in 60s; its log:" >&2
    tail -20 "$work/log" >&2
    exit 1
  fi
  for s in "$acquire" "$release" "$renew" "$casdel" "$onecall" "return 1" "$rlfixed" "$rlsliding" "$rlbucket" ${rlgcra:+"$rlgcra"}; do
    tool cli -s "$work/s" script load "$s" >/dev/null
  done
}
finish_server() {
  tool cli -s "$work/s" shutdown nosave >/dev/null 2>&1 || true
  stop_server
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$work/cg")
  [[ $total =~ ^[0-9]+$ ]] || { echo "server-cost: no instruction count in callgrind's output" >&2; exit 1; }
}
measure() {
  start_server
  refused=
  if [ "$1" = pipe ]; then
    tool cli -s "$work/s" --pipe <"$2" >"$work/pipe.log" 2>&1 || true
    if ! grep -q '^errors: 0, replies: ' "$work/pipe.log"; then
      echo "server-cost: piping $(basename "$2") failed:" >&2; tail -5 "$work/pipe.log" >&2; exit 1
    fi
  elif [ "$1" != idle ]; then
    [ ${#pre[@]} -eq 0 ] || tool cli -s "$work/s" "${pre[@]}" >/dev/null
    # One call first, to see that it is answered, not refused: an error reply
    # would be counted as cheaply as any other.
    local reply
    reply=$(tool cli -s "$work/s" "$@" 2>&1)
    if grep -qE '^(\(error\) )?[A-Z]+ ' <<<"$reply" && ! grep -qE '^[0-9-]' <<<"$reply"; then
      if [ "$optional" = 1 ]; then
        refused=$reply
        tool cli -s "$work/s" shutdown nosave >/dev/null 2>&1 || true
        stop_server
        total=
        return
      fi
      echo "server-cost: '$*' was refused: $reply" >&2
      exit 1
    fi
    tool benchmark -s "$work/s" -P 16 -n "$n" -r 100000000 -q "$@" >"$work/bench.log" 2>&1 || {
      echo "server-cost: the benchmark of '$*' failed:" >&2; tail -5 "$work/bench.log" >&2; exit 1; }
  fi
  finish_server
}

# pipe_file NAME [CMD…]: writes $work/NAME, N times "SET L:i OWNER NX PX 100000"
# each followed by CMD (if given) with KEY replaced by L:i, in RESP.
pipe_file() {
  local name=$1; shift
  awk -v n="$n" -v owner="$owner" -v then="$*" '
    function put(s,   a, k, i, out) {
      k = split(s, a, " ")
      out = "*" k "\r\n"
      for (i = 1; i <= k; i++) out = out "$" length(a[i]) "\r\n" a[i] "\r\n"
      printf "%s", out
    }
    BEGIN {
      for (i = 1; i <= n; i++) {
        key = "L:" i
        put("SET " key " " owner " NX PX 100000")
        if (then != "") { c = then; gsub(/KEY/, key, c); put(c) }
      }
    }' >"$work/$name"
}

owner=0123456789abcdef0123456789abcdef
echo "server-cost: $build, $n calls each, instructions per call (callgrind, $vgversion)"
measure idle
idle=$total
row() {
  local name=$1; shift
  measure "$@"
  printf '  %-44s %8d\n' "$name" $(((total - idle) / n))
}
row "SET NX PX (the baseline's acquisition)" SET "L:__rand_int__" "$owner" NX PX 10000
row "EVALSHA of 'return 1' (a script's floor)" EVALSHA "$(sha "return 1")" 0
row "one-call script SET NX PX (redislock's kind)" EVALSHA "$(sha "$onecall")" 1 "L:__rand_int__" "$owner" 10000
row "prim fenced acquisition (fenced_acquire.lua)" EVALSHA "$(sha "$acquire")" 2 "L:__rand_int__" C "$owner" 10000
row "prim release of a missing lease" EVALSHA "$(sha "$release")" 1 "L:__rand_int__" "$owner" 0
row "compare-and-delete of a missing lease" EVALSHA "$(sha "$casdel")" 1 "L:__rand_int__" "$owner"

# A row of a command only some servers have: "n/a" and the server's answer elsewhere.
optrow() {
  local name=$1; shift
  optional=1
  measure "$@"
  optional=0
  if [ -z "$total" ]; then
    printf '  %-44s %8s  (%s)\n' "$name" n/a "$(head -1 <<<"$refused")"
  else
    printf '  %-44s %8d\n' "$name" $(((total - idle) / n))
  fi
}
optrow "DELEX IFEQ of a missing lease" DELEX "L:__rand_int__" IFEQ "$owner"
delex_refused=$refused
optrow "DELIFEQ of a missing lease (Valkey 9)" DELIFEQ "L:__rand_int__" "$owner"
delifeq_refused=$refused

echo "renewal of a held lease (the same lease N times):"
pre=(SET L "$owner" PX 100000)
row "prim renewal script (lease_renew.lua)" EVALSHA "$(sha "$renew")" 1 L "$owner" 10000
optrow "SET IFEQ PX" SET L "$owner" IFEQ "$owner" PX 10000
pre=()

echo "release of a held lease (N piped pairs of SET NX PX and the release, less N piped SET NX PX):"
pipe_file sets
measure pipe "$work/sets"
sets=$total
held() {
  local name=$1; shift
  pipe_file pairs "$@"
  measure pipe "$work/pairs"
  printf '  %-44s %8d\n' "$name" $(((total - sets) / n))
}
held "prim release script (lease_release.lua)" EVALSHA "$(sha "$release")" 1 KEY "$owner" 0
held "compare-and-delete" EVALSHA "$(sha "$casdel")" 1 KEY "$owner"
if [ -z "$delex_refused" ]; then
  held "DELEX IFEQ" DELEX KEY IFEQ "$owner"
else
  printf '  %-44s %8s  (%s)\n' "DELEX IFEQ" n/a "$(head -1 <<<"$delex_refused")"
fi
if [ -z "$delifeq_refused" ]; then
  held "DELIFEQ (Valkey 9)" DELIFEQ KEY "$owner"
else
  printf '  %-44s %8s  (%s)\n' "DELIFEQ (Valkey 9)" n/a "$(head -1 <<<"$delifeq_refused")"
fi

# One key per limiter, N grants in a row (a million permits per second: the
# write path, with the state of a steady load: the sliding window's hash holds
# its 10 or 11 segments, the bucket its two fields).
echo "rate-limiter decisions (one key, N grants; a million permits per second):"
row "prim fixed window (ratelimit_fixed.lua)" EVALSHA "$(sha "$rlfixed")" 1 RLF 1 1000000 1000
row "prim sliding window, 10 segments" EVALSHA "$(sha "$rlsliding")" 1 RLS 1 1000000 1000 100
row "prim token bucket (ratelimit_bucket.lua)" EVALSHA "$(sha "$rlbucket")" 1 RLB 1 1000000 1000000 1000
if [ -n "$rlgcra" ]; then
  row "go-redis/redis_rate GCRA Allow" EVALSHA "$(sha "$rlgcra")" 1 RLR 1000000 1000000 1 1
else
  printf '  %-44s %8s  (%s)\n' "go-redis/redis_rate GCRA Allow" n/a "its module is not in the Go module cache"
fi
