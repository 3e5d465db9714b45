#!/usr/bin/env bash
# check_consumers.sh BUILD SRC WORK CC CMAKE [SANITIZE]
# Installs BUILD into WORK/prefix, then builds tests/install/consumer.c out of
# tree with find_package(hermod) (shared and static) and with pkg-config, and
# runs each program. SANITIZE (e.g. "address,undefined") is passed on to the
# consumers so they can load an instrumented libhermod.
set -euo pipefail
build=$1 src=$2 work=$3 cc=$4 cmake=$5 sanitize=${6:-}

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
flags=""
if [ -n "$sanitize" ]; then
  flags="-fsanitize=$sanitize"
fi

step() { echo "== $*"; }
run() {
  # Each consumer must print the error string it asked for.
  local out
  out=$("$@")
  echo "$out"
  grep -q 'hm_strerror(HM_TIMEOUT) = timed out' <<<"$out"
}

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libhermod.so' | head -n1)")
test -f "$libdir/libhermod.a"
test -f "$prefix/include/hermod.h"
test -f "$prefix/include/hermod/version.h"

step "find_package(hermod)"
"$cmake" -S "$src/consumer_cmake" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" >"$work/cmake-configure.log"
"$cmake" --build "$work/cmake" >"$work/cmake-build.log"
LD_LIBRARY_PATH=$libdir run "$work/cmake/consumer_shared"
run "$work/cmake/consumer_static"

step "pkg-config hermod"
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046  # word splitting of the flags is intended
"$cc" $flags -o "$work/consumer_pc" "$src/consumer.c" $(pkg-config --cflags --libs hermod)
LD_LIBRARY_PATH=$libdir run "$work/consumer_pc"

echo "OK: installed package builds and runs consumers (cmake shared, cmake static, pkg-config)"
