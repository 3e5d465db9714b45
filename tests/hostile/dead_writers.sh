#!/usr/bin/env bash
# dead_writers.sh CLIENT ATTACKER BINDIR URI: a process killed in the middle
# of a write into another's shared memory must not wedge that process nor
# anyone who sends to it (issue 13: a peer's death costs the RPCs to that
# peer and nothing else).
#
# ATTACKER PID does to process PID what a peer SIGKILLed mid-write does, and
# dies:
#   - ofi+shm (shm_lock_holder): it takes the lock of PID's region, which
#     libfabric's shm provider holds while it writes a receiver's queue;
#   - ucx+shm (ucx_fifo_holer): it takes a slot of PID's receive FIFOs and
#     never writes it, as a UCX sender between its two steps.
# Twice, against one echo_server (from BINDIR) and one long-lived client
# (CLIENT, dying_servers_client):
#   1. the server: the client's call must be answered (before the fix the
#      ofi client spun in fi_inject for good; the ucx server never read it);
#   2. the client, before its next call: the server's answer must still
#      arrive (hostile_dying_servers caught both in CI) and a last call too.
# Each time the owner must say (HM_LOG=warn) that it repaired its memory,
# after HM_OFI_SHM_LOCK_MS / HM_UCX_FIFO_HOLE_MS (1 s); each call has 10 s.
# Exit 77 (skip) when the attacker cannot (another layout, no ptrace rights).
# Everything this script starts is bounded and stopped by its own PID.
set -euo pipefail
client=${1:?usage: dead_writers.sh CLIENT ATTACKER BINDIR URI}
attacker=${2:?usage}
bindir=${3:?usage}
uri=${4:?usage}
repaired="lock was held .* released|FIFO was left unwritten .* filled"
export HM_LOG=warn # both owners say when they repair

# shellcheck source=dying_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/dying_lib.sh"
trap '' PIPE

# attack PID: the attacker must die (SIGKILL, 137) after its write.
attack() {
  local rc=0
  "$attacker" "$1" || rc=$?
  [ "$rc" -eq 77 ] && { echo "SKIP: the attacker cannot write here"; exit 77; }
  [ "$rc" -eq 137 ] || { echo "FAIL: the attacker did not die mid-write ($rc)" >&2; exit 1; }
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

# repaired WHO LOG: LOG must say its owner repaired its memory.
repaired() {
  grep -Eq "$repaired" "$2" && return 0
  echo "FAIL: the $1 did not say it repaired its memory" >&2
  cat "$2" >&2
  exit 1
}

start_server "$work/server.log"
mkfifo "$work/servers"
"$client" "$uri" 10000 < "$work/servers" > "$work/out" 2> "$work/client.err" &
client_pid=$!
exec 3> "$work/servers"

attack "$server_pid"
call 1
repaired server "$work/server.log"

attack "$client_pid"
call 2
repaired client "$work/client.err"
call 3

exec 3>&-
client_rc=0
wait "$client_pid" || client_rc=$?
client_pid=""
[ "$client_rc" -eq 0 ] || { echo "FAIL: the client exited with $client_rc" >&2; exit 1; }
echo "PASS: both dead writers cost their victim about a second, and every call was answered"
