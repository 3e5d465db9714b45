#!/usr/bin/env bash
# check_symbols.sh LIB INCLUDE_DIR: fail unless the shared library LIB
# exports exactly the functions that the public headers in INCLUDE_DIR
# declare with HM_EXPORT, plus what the toolchain always adds.
#   - an exported name no header declares (an internal hmi_* or a stray hm_*)
#     is a leak of the library's insides into its ABI;
#   - a declared name the library does not export is a broken promise.
set -euo pipefail
lib=${1:?usage: check_symbols.sh path/to/libhermod.so include/hermod}
incdir=${2:?usage: check_symbols.sh path/to/libhermod.so include/hermod}

toolchain='^(_init|_fini|_edata|_end|__bss_start)$'
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -Ev "$toolchain" | sort -u)
if [ -z "$exported" ]; then
  echo "FAIL: $lib exports no symbols at all" >&2
  exit 1
fi
# The name before the first '(' of each HM_EXPORT declaration; a declaration
# may span lines, so the headers are read as one line each.
declared=$(for h in "$incdir"/*.h; do tr '\n' ' ' <"$h"; echo; done |
  grep -oP 'HM_EXPORT\b[^;(]*?\b\K(?!__)[A-Za-z_][A-Za-z0-9_]*(?=\s*\()' | sort -u)

fail=0
leaked=$(comm -23 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))
if [ -n "$leaked" ]; then
  echo "FAIL: $lib exports symbols no public header declares:" >&2
  printf '  %s\n' $leaked >&2
  fail=1
fi
missing=$(comm -13 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))
if [ -n "$missing" ]; then
  echo "FAIL: public headers declare functions $lib does not export:" >&2
  printf '  %s\n' $missing >&2
  fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "OK: $(printf '%s\n' "$exported" | wc -l) exported symbols, each declared HM_EXPORT in $incdir"
