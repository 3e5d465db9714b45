#!/usr/bin/env bash
# dead_lock_holder.sh CLIENT HOLDER BINDIR: a process killed while it holds
# the lock of an ofi+shm endpoint's region must not wedge that endpoint nor
# anyone who sends to it (issue 13: a peer's death costs the RPCs to that
# peer and nothing else).
#
# The attacker (HOLDER, shm_lock_holder) takes the lock in a region's header
# and dies holding it, as a peer SIGKILLed inside libfabric's shm provider
# does. Twice, against one echo_server (from BINDIR) and one long-lived
# client (CLIENT, dying_servers_client):
#   1. the server's region: the client's call must be answered (before the
#      guard the client spun in fi_inject for good); the server says it
#      released its lock;
#   2. the client's region, before its next call: the server's answer must
#      still arrive (before, the server spun for good answering it, which
#      hostile_dying_servers_ofi+shm caught in CI) and the client says it
#      released its lock; a last call must be answered too.
# Each call has 10 s; the owner releases after HM_OFI_SHM_LOCK_MS (1 s).
# Everything this script starts is bounded and stopped by its own PID.
set -euo pipefail
client=${1:?usage: dead_lock_holder.sh CLIENT HOLDER BINDIR}
holder=${2:?usage}
bindir=${3:?usage}
uri="ofi+shm://"
export HM_LOG=warn # both owners say when they release their lock

# shellcheck source=dying_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/dying_lib.sh"
trap '' PIPE

# region_of PID: the region file of PID's first context (hm-<pid>-0-<nonce>).
region_of() {
  local f
  for _ in $(seq 500); do
    for f in /dev/shm/hm-"$1"-0-*; do
      [ -e "$f" ] && { echo "$f"; return 0; }
    done
    sleep 0.01
  done
  echo "FAIL: no region file for pid $1 within 5 s" >&2
  exit 1
}

# hold REGION: the attacker dies holding REGION's lock; 77 (layout unknown) skips.
hold() {
  local rc=0
  "$holder" "$1" || rc=$?
  [ "$rc" -eq 77 ] && { echo "SKIP: not libfabric 1.17's shm region layout"; exit 77; }
  [ "$rc" -eq 137 ] || { echo "FAIL: the attacker did not die holding the lock ($rc)" >&2; exit 1; }
}

# call N: hand the server to the client (10 s deadline) and wait for its Nth result.
call() {
  echo "$(cat "$work/addr") 10000" >&3
  for _ in $(seq 150); do
    [ "$(grep -c '^result: ' "$work/out")" -ge "$1" ] && break
    sleep 0.1
  done
  local got
  got=$(sed -n 's/^result: //p' "$work/out" | sed -n "${1}p")
  if [ "$got" != "success" ]; then
    echo "FAIL: call $1 was not answered: ${got:-no result within 15 s}" >&2
    echo "--- the client's errors:" >&2; tail -n 20 "$work/client.err" >&2
    echo "--- the server's output:" >&2; tail -n 20 "$work/server.log" >&2
    exit 1
  fi
  echo "call $1: success"
}

start_server "$work/server.log"
mkfifo "$work/servers"
"$client" "$uri" 10000 < "$work/servers" > "$work/out" 2> "$work/client.err" &
client_pid=$!
exec 3> "$work/servers"

hold "$(region_of "$server_pid")"
call 1
grep -q "lock was held .* released" "$work/server.log" || {
  echo "FAIL: the server did not say it released its region's lock" >&2
  cat "$work/server.log" >&2; exit 1; }

hold "$(region_of "$client_pid")"
call 2
grep -q "lock was held .* released" "$work/client.err" || {
  echo "FAIL: the client did not say it released its region's lock" >&2
  cat "$work/client.err" >&2; exit 1; }
call 3

exec 3>&-
client_rc=0
wait "$client_pid" || client_rc=$?
client_pid=""
[ "$client_rc" -eq 0 ] || { echo "FAIL: the client exited with $client_rc" >&2; exit 1; }
echo "PASS: both dead holders cost one second, and every call was answered"
