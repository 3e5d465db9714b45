#!/usr/bin/env bash
# run_echo.sh BINDIR URI: start echo_server on URI, wait for its address,
# run echo_client against it and check the echo. Bounded: the server gets
# 30 s in all, and only the server this script started is ever killed.
set -euo pipefail
bindir=${1:?usage: run_echo.sh BINDIR URI}
uri=${2:?usage: run_echo.sh BINDIR URI}

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# -n 1: the server exits by itself after answering one request.
timeout 30 "$bindir/echo_server" -u "$uri" -a "$work/addr" -n 1 &
server_pid=$!

for _ in $(seq 100); do  # up to 10 s for the server to publish its address
  [ -s "$work/addr" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid" || true
    echo "FAIL: echo_server exited before publishing its address" >&2
    exit 1
  fi
  sleep 0.1
done
if [ ! -s "$work/addr" ]; then
  echo "FAIL: echo_server published no address within 10 s" >&2
  exit 1
fi
addr=$(cat "$work/addr")
msg="hello from $$"
echo "server at $addr"

reply=$(timeout 20 "$bindir/echo_client" "$addr" "$msg")
echo "client got: $reply"
if [ "$reply" != "$msg" ]; then
  echo "FAIL: expected \"$msg\"" >&2
  exit 1
fi
if ! wait "$server_pid"; then
  server_pid=""
  echo "FAIL: echo_server exited with an error" >&2
  exit 1
fi
server_pid=""
echo "OK"
