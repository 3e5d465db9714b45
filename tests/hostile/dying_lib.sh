# Shared by dying_clients.sh and dying_servers.sh (sourced): a work
# directory, the processes the script started, and echo servers.
#
# Needs $bindir (where echo_server is) and $uri. Sets $work; the EXIT trap
# SIGKILLs $server_pid and $client_pid if they still run (by their PIDs:
# nothing else is ever signalled) and removes $work.

work=$(mktemp -d)
server_pid=""
client_pid=""

dying_cleanup() {
  exec 3>&- 2>/dev/null || true # dying_servers.sh: the client's FIFO
  for pid in $server_pid $client_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
}
trap dying_cleanup EXIT

# start_server LOG: an echo_server in the background (server_pid), its
# stdout and stderr in LOG, its URI in $work/addr within 10 s, else the
# script fails. The server gets no fd 3 (dying_servers.sh's FIFO: a server
# holding it would keep the client's input open).
start_server() {
  rm -f "$work/addr"
  "$bindir/echo_server" -u "$uri" -a "$work/addr" > "$1" 2>&1 3>&- &
  server_pid=$!
  for _ in $(seq 1000); do
    [ -s "$work/addr" ] && return 0
    sleep 0.01
  done
  echo "FAIL: echo_server published no address within 10 s" >&2
  exit 1
}
