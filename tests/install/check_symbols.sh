#!/usr/bin/env bash
# check_symbols.sh LIB: fail if the shared library LIB exports a defined
# dynamic symbol that is neither hm_* nor one the toolchain always adds.
set -euo pipefail
lib=${1:?usage: check_symbols.sh path/to/libhermod.so}

# _init/_fini and the linker's section markers; anything else must be hm_*.
allowed='^(hm_[A-Za-z0-9_]+|_init|_fini|_edata|_end|__bss_start)$'
syms=$(nm -D --defined-only "$lib" | awk '{print $NF}')
if [ -z "$syms" ]; then
  echo "FAIL: $lib exports no symbols at all" >&2
  exit 1
fi
bad=$(printf '%s\n' "$syms" | grep -Ev "$allowed" || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib exports symbols outside the hm_ namespace:" >&2
  printf '  %s\n' $bad >&2
  exit 1
fi
echo "OK: $(printf '%s\n' "$syms" | grep -c '^hm_') hm_* symbols, nothing else exported"
