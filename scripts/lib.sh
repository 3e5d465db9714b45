# shellcheck shell=bash
# Shared by scripts/demo, scripts/test, perf/compare and perf/plot (sourced,
# not run).

HM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

hm_say() { printf '\n==> %s\n' "$*"; }
hm_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# hm_missing PKG...: the Debian packages named that dpkg does not have, one a line.
hm_missing() {
  local pkg
  for pkg in "$@"; do
    if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
      echo "$pkg"
    fi
  done
}

# hm_install PKG...: install the Debian packages named that are missing.
# Runs apt-get update once, and only if something is missing.
hm_install() {
  local missing=()
  mapfile -t missing < <(hm_missing "$@")
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  command -v apt-get >/dev/null || hm_die "missing packages (${missing[*]}) and no apt-get: install them by hand"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || hm_die "missing packages (${missing[*]}): run as root or install sudo"
    sudo=(sudo)
  fi
  hm_say "installing: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# hm_install_packages: install what scripts/packages.txt lists and dpkg does
# not have yet.
hm_install_packages() {
  local pkg pkgs=()
  while read -r pkg; do
    pkg=${pkg%%#*}
    pkg=${pkg//[[:space:]]/}
    [ -n "$pkg" ] || continue
    pkgs+=("$pkg")
  done <"$HM_ROOT/scripts/packages.txt"
  if [ -z "$(hm_missing "${pkgs[@]}")" ]; then
    echo "all Debian packages present"
    return 0
  fi
  hm_install "${pkgs[@]}"
}

hm_jobs() { nproc 2>/dev/null || echo 2; }

# ---- the raw transports' own benchmarks (scripts/demo, perf/compare, perf/pair-raw) ----
# Each runs a server and a client process on this machine over loopback,
# both bounded by `timeout`, and prints nothing when the tool is missing or
# the run failed.

# HM_RAW_SERVER_CPU / HM_RAW_CLIENT_CPU, when set, pin the two processes
# (taskset), as perf/pair-raw does.

# hm_port: a random TCP port for a benchmark's control connection.
hm_port() { echo $((20000 + RANDOM % 20000)); }

# hm_raw_pin server|client: the taskset prefix for that side, or nothing.
hm_raw_pin() {
  local cpu=${HM_RAW_CLIENT_CPU:-}
  [ "$1" != server ] || cpu=${HM_RAW_SERVER_CPU:-}
  [ -z "$cpu" ] || echo "taskset -c $cpu"
}

# hm_ucx_perftest TLS TEST ITERS [ARGS...]: ucx_perftest's "Final:" figures
# over UCX transports TLS: iterations, latency median, average, overall (us),
# bandwidth average, overall (MB/s of 2^20 bytes), message rate average,
# overall (msg/s). Latency tests (*_lat) print HALF a round trip.
hm_ucx_perftest() {
  command -v ucx_perftest >/dev/null || return 0
  local tls=$1 test=$2 iters=$3 port srv
  shift 3
  port=$(hm_port)
  # shellcheck disable=SC2046 # the pin prefix is words or nothing
  UCX_TLS=$tls $(hm_raw_pin server) timeout 120 ucx_perftest -t "$test" -n "$iters" -p "$port" \
    "$@" >/dev/null 2>&1 &
  srv=$!
  sleep 1
  # shellcheck disable=SC2046
  UCX_TLS=$tls $(hm_raw_pin client) timeout 120 ucx_perftest 127.0.0.1 -t "$test" -n "$iters" -p "$port" "$@" \
    2>/dev/null | awk '/^Final:/ {$1 = ""; sub(/^ /, ""); print}' || true
  wait "$srv" 2>/dev/null || true
}

# hm_fi_pingpong PROVIDER SIZE ITERS: fi_pingpong's "usec/xfer MB/sec" for
# SIZE-byte messages over an RDM endpoint. usec/xfer is HALF a round trip
# (one message); MB/sec is in 10^6 bytes. Server port -B, client -P.
hm_fi_pingpong() {
  command -v fi_pingpong >/dev/null || return 0
  local port srv
  port=$(hm_port)
  # shellcheck disable=SC2046 # the pin prefix is words or nothing
  $(hm_raw_pin server) timeout 120 fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -B "$port" \
    >/dev/null 2>&1 &
  srv=$!
  sleep 1
  # shellcheck disable=SC2046
  $(hm_raw_pin client) timeout 120 fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -P "$port" \
    127.0.0.1 2>/dev/null \
    | awk 'hdr {print $7, $6; exit} $1 == "bytes" {hdr = 1}' || true
  wait "$srv" 2>/dev/null || true
}

# hm_ucx_tls PROTOCOL: the UCX_TLS that matches a Hermod ucx protocol.
hm_ucx_tls() {
  case "$1" in
    ucx+tcp) echo tcp ;;
    ucx+shm) echo posix,sysv,cma ;;
    *) return 1 ;;
  esac
}

# hm_ofi_provider PROTOCOL: the libfabric provider of a Hermod ofi protocol.
hm_ofi_provider() {
  case "$1" in
    ofi+tcp) echo "tcp;ofi_rxm" ;;
    ofi+shm) echo shm ;;
    *) return 1 ;;
  esac
}

# hm_raw_rtt PROTOCOL [ITERS]: the raw transport's round trip for a small
# message in us (ucx_perftest ucp_am_lat 8 bytes, fi_pingpong 64 bytes),
# or "n/a". Both tools print half a round trip: doubled here.
hm_raw_rtt() {
  local iters=${2:-20000} half=""
  case "$1" in
    ucx+*) half=$(hm_ucx_perftest "$(hm_ucx_tls "$1")" ucp_am_lat "$iters" | awk '{print $2}') ;;
    ofi+*) half=$(hm_fi_pingpong "$(hm_ofi_provider "$1")" 64 "$iters" | awk '{print $1}') ;;
  esac
  if [ -n "$half" ]; then awk -v h="$half" 'BEGIN {printf "%.2f", 2 * h}'; else echo n/a; fi
}

# hm_json_field KEY: the number KEY has in each JSON record read on stdin
# (hm-perf and hm-ceiling print one flat object per line).
hm_json_field() {
  awk -v k="\"$1\":" '{i = index($0, k); if (i) {s = substr($0, i + length(k)); sub(/[,}].*/, "", s); print s}}'
}
