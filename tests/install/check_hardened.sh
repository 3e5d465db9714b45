#!/usr/bin/env bash
# check_hardened.sh LIB FORTIFY(0|1): fail unless the shared library LIB was
# built the way cmake/HermodHarden.cmake says (HM_HARDEN=ON):
#   - full RELRO: a GNU_RELRO segment and BIND_NOW, so its GOT is read-only;
#   - a non-executable stack (GNU_STACK without E);
#   - stack canaries: it calls __stack_chk_fail;
#   - with FORTIFY=1 (optimised, no sanitizer): it calls at least one
#     checked libc function (__*_chk).
# A flag dropped from the build, or a toolchain that ignores it, fails here.
set -euo pipefail
lib=${1:?usage: check_hardened.sh path/to/libhermod.so FORTIFY}
fortify=${2:?usage: check_hardened.sh path/to/libhermod.so FORTIFY}

fail=0
no() { echo "FAIL: $lib: $*" >&2; fail=1; }

headers=$(readelf -lW "$lib")
dynamic=$(readelf -dW "$lib")
imports=$(nm -D --undefined-only "$lib" | awk '{print $NF}')

grep -q 'GNU_RELRO' <<<"$headers" || no "no GNU_RELRO segment (-z relro)"
grep -Eq 'BIND_NOW|Flags:.*\bNOW\b' <<<"$dynamic" || no "not BIND_NOW (-z now)"
stack=$(grep 'GNU_STACK' <<<"$headers" || true)
[ -n "$stack" ] || no "no GNU_STACK header"
grep -q 'RWE' <<<"$stack" && no "executable stack"
grep -q '^__stack_chk_fail' <<<"$imports" || no "no stack canaries (__stack_chk_fail)"
if [ "$fortify" = 1 ]; then
  grep -Eq '^__[a-z]+_chk(@|$)' <<<"$imports" || no "no FORTIFY_SOURCE checked calls"
fi
[ "$fail" = 0 ] || exit 1
echo "OK: $lib has full RELRO, a non-executable stack, canaries$([ "$fortify" = 1 ] && echo ", FORTIFY_SOURCE")"
