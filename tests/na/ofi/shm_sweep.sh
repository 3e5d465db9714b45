#!/usr/bin/env bash
# shm_sweep.sh BINDIR: what a SIGKILLed ofi+shm process leaves in /dev/shm
# (its 16 MiB region, hm-<pid>-<context>-<nonce>, its doorbell page,
# hm-ofi-<hash>, and its doorbell FIFO, hm-ofi-<hash>.fifo) is removed by
# the next ofi+shm class to open, and what a live one holds is not
# (src/na/ofi/ofi_sweep.c).
#
# Two echo_servers, A and B, each with its three files. A is SIGKILLed.
# After the sweep's minimum age, an echo_client to B (its class sweeps)
# must get its echo and leave /dev/shm without A's files but with B's. Of
# three files named after A's dead pid, one with a near-miss name and one
# under a shared flock must stay, and the third must go. Every process
# this script starts is stopped by its own PID.
set -euo pipefail
bindir=${1:?usage: shm_sweep.sh BINDIR}
uri="ofi+shm://"
work=$(mktemp -d)
pids=()
decoy="" held="" orphan=""

cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  [ -n "$decoy" ] && rm -f "$decoy" "$held" "$orphan"
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# start_server NAME: an echo_server whose URI lands in $work/NAME.addr.
start_server() {
  "$bindir/echo_server" -u "$uri" -a "$work/$1.addr" > "$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1000); do
    [ -s "$work/$1.addr" ] && return 0
    sleep 0.01
  done
  fail "echo_server $1 published no address within 10 s"
}

# bell_page REGION: the doorbell page of the endpoint named REGION, from
# its name and NUL (FNV-1a 64, as ofi_bell.c hashes it).
bell_page() {
  local name=$1 h=1469598103934665603 i c
  for ((i = 0; i < ${#name}; i++)); do
    printf -v c '%d' "'${name:i:1}"
    h=$(( (h ^ c) * 1099511628211 ))
  done
  h=$(( (h ^ 0) * 1099511628211 ))
  printf '/dev/shm/hm-ofi-%016x' "$h"
}

# region_of PID: the region file of PID's first context.
region_of() {
  local files=(/dev/shm/hm-"$1"-0-*)
  [ -e "${files[0]}" ] || fail "no region /dev/shm/hm-$1-0-* for pid $1"
  echo "${files[0]}"
}

start_server a
a_pid=${pids[0]}
start_server b
b_pid=${pids[1]}
a_region=$(region_of "$a_pid")
b_region=$(region_of "$b_pid")
a_bell=$(bell_page "$(basename "$a_region")")
b_bell=$(bell_page "$(basename "$b_region")")
[ -e "$a_bell" ] || fail "no doorbell page $a_bell for $a_region"
[ -e "$b_bell" ] || fail "no doorbell page $b_bell for $b_region"
[ -p "$a_bell.fifo" ] || fail "no doorbell FIFO $a_bell.fifo for $a_region"
[ -p "$b_bell.fifo" ] || fail "no doorbell FIFO $b_bell.fifo for $b_region"

kill -KILL "$a_pid"
wait "$a_pid" 2>/dev/null || true
# Files of a dead pid named like a region: one held by a shared flock (a
# live owner in another pid and network namespace looks just so), one not.
decoy="/dev/shm/hm-$a_pid-0-not-a-nonce"
held="/dev/shm/hm-$a_pid-7-00000000000000aa"
orphan="/dev/shm/hm-$a_pid-8-00000000000000bb"
: > "$decoy"
: > "$held"
: > "$orphan"
# The holder is this subshell become `sleep`: its pid is the lock's owner.
( exec 9< "$held" && flock -s 9 && exec sleep 60 ) &
pids+=($!)
echo "A (pid $a_pid, killed) had $a_region, $a_bell and its FIFO; B is pid $b_pid"

sleep 3.2 # past the sweep's minimum age (2 s, whole seconds of ctime)
out=$(HM_LOG=info HM_LOG_SUBSYS=na timeout 30 "$bindir/echo_client" "$(cat "$work/b.addr")" \
        "swept" 2> "$work/client.log") || fail "echo_client to B failed: $(tail -5 "$work/client.log")"
[ "$out" = "swept" ] || fail "B echoed \"$out\""
# The client's class swept, unless another ofi+shm process of a parallel
# test run opened its class first past the minimum age and swept for it.
swept=$(grep -o 'removed [0-9]* files ([0-9]* KiB)' "$work/client.log" || echo "another process swept")
[ -e "$a_region" ] && fail "A's region $a_region is still there"
[ -e "$a_bell" ] && fail "A's doorbell page $a_bell is still there"
[ -e "$a_bell.fifo" ] && fail "A's doorbell FIFO $a_bell.fifo is still there"
[ -e "$b_region" ] || fail "B's region $b_region was removed while B lives"
[ -e "$b_bell" ] || fail "B's doorbell page $b_bell was removed while B lives"
[ -p "$b_bell.fifo" ] || fail "B's doorbell FIFO $b_bell.fifo was removed while B lives"
[ -e "$decoy" ] || fail "a file with a near-miss name, $decoy, was removed"
[ -e "$held" ] || fail "a file held by a flock, $held, was removed"
[ -e "$orphan" ] && fail "a dead pid's unheld file, $orphan, is still there"

out=$(timeout 30 "$bindir/echo_client" "$(cat "$work/b.addr")" "still here")
[ "$out" = "still here" ] || fail "B no longer answers after the sweep: \"$out\""
echo "PASS: A's region, doorbell page and FIFO removed, B's kept and B answers; the client: $swept"
