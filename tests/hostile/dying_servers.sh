#!/usr/bin/env bash
# dying_servers.sh CLIENT BINDIR URI COUNT [MAX_STOP_MS]: servers that die at any point of
# a client's first contact must never end or wedge the client (issue 13: a
# peer's death costs the RPCs to that peer, and nothing else).
#
# One long-lived client (dying_servers_client, the path CLIENT) and COUNT
# echo_servers from BINDIR, one after the other: each is handed to the
# client as soon as it has published its address, then SIGSTOPped 0 to
# MAX_STOP_MS (default 10) ms later (mid lookup, connection or RPC), then
# SIGKILLed 50 ms after. With 1 ms, many die inside their first contact:
# that is how a killed server's half-write into the client's shared memory
# was found (tests/hostile/dead_writers.sh). Each
# call must end with success or a clean error (timeout, unreachable) within
# its 1 s deadline; a last, live server must be answered (within 10 s); the
# client must then close its context and class cleanly. Everything this script starts
# is bounded and stopped by its own PID.
set -euo pipefail
client=${1:?usage: dying_servers.sh CLIENT BINDIR URI COUNT}
bindir=${2:?usage}
uri=${3:?usage}
count=${4:?usage}
max_stop_us=$(( ${5:-10} * 1000 ))
deadline_ms=1000

# shellcheck source=dying_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/dying_lib.sh"

# hand_over [DEADLINE_MS]: give the client the server's URI (and a deadline
# of its own); a client that has ended (its FIFO has no reader) fails the
# test here, not by SIGPIPE.
hand_over() {
  if ! echo "$(cat "$work/addr")${1:+ $1}" >&3 2>/dev/null; then
    echo "FAIL: the client ended; its errors:" >&2
    cat "$work/client.err" >&2
    exit 1
  fi
}
trap '' PIPE

# The client reads server URIs from a FIFO this script holds open on fd 3.
mkfifo "$work/servers"
# Bare, not under `timeout`: its PID is the client's own. It ends at the end
# of its input, which it also meets if this script dies.
"$client" "$uri" "$deadline_ms" < "$work/servers" > "$work/out" 2> "$work/client.err" &
client_pid=$!
exec 3> "$work/servers"

for i in $(seq "$count"); do
  start_server /dev/null
  hand_over
  sleep "$(printf '0.%06d' $(( (RANDOM * 32768 + RANDOM) % max_stop_us )))"
  kill -STOP "$server_pid" 2>/dev/null || true
  sleep 0.05
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  if ! kill -0 "$client_pid" 2>/dev/null; then
    echo "FAIL: the client ended after dying server $i of $count" >&2
    cat "$work/client.err" >&2
    exit 1
  fi
done

# A live server last: the client must reach it and be answered. Its call
# gets 10 s: once (CI, ucx+shm, the suite loading both cores) it took
# longer than 1 s.
start_server "$work/live.log"
hand_over 10000
want=$((count + 1))
for _ in $(seq $(( (count + 20) * 20 ))); do  # each call ends within its deadline
  [ "$(grep -c '^result: ' "$work/out")" -ge "$want" ] && break
  sleep 0.1
done
exec 3>&-
client_rc=0
wait "$client_pid" || client_rc=$?
client_pid=""
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""

sed -n 's/^result: //p' "$work/out" > "$work/results"
echo "results of $count dying servers and a live one:"
sort "$work/results" | uniq -c
if [ "$client_rc" -ne 0 ]; then
  echo "FAIL: the client exited with status $client_rc" >&2
  cat "$work/client.err" "$work/out" >&2
  exit 1
fi
if [ "$(wc -l < "$work/results")" -ne "$want" ]; then
  echo "FAIL: $(wc -l < "$work/results") results for $want servers" >&2
  exit 1
fi
if [ "$(tail -n 1 "$work/results")" != "success" ]; then
  echo "FAIL: the live server was not answered: $(tail -n 1 "$work/results")" >&2
  echo "--- the client's errors:" >&2
  tail -n 30 "$work/client.err" >&2
  echo "--- the live server's output:" >&2
  tail -n 30 "$work/live.log" >&2
  exit 1
fi
# "no such entry": a dead tcp server's port, taken since by another test's
# Hermod server, which serves no echo RPC (seen in a CI dry run on ofi+tcp).
if grep -v -x -e success -e "timed out" -e "peer unreachable or dead" \
     -e "no such entry (unknown RPC id, address or object)" "$work/results" >&2; then
  echo "FAIL: a call to a dying server ended otherwise (above)" >&2
  exit 1
fi
echo "PASS: the client outlived $count dying servers and reached a live one"
