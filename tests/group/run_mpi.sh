#!/usr/bin/env bash
# run_mpi.sh NP TIMEOUT_S EXPECT_OK EXE ARGS...
# Run EXE under mpirun with NP ranks (oversubscribed, wait-mode progress,
# recovery on so that a rank a test kills does not take the job down),
# bounded by TIMEOUT_S: `timeout` kills mpirun (its own child, by PID) and
# mpirun its ranks. Passes when exactly EXPECT_OK lines "hm-group-test: ...
# OK" were printed and no line says FAIL; mpirun's exit status is not used
# (with --enable-recovery it is 0 even when a rank fails).
set -u
np=$1 limit=$2 want=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -k 10 "$limit" mpirun --allow-run-as-root --oversubscribe --enable-recovery \
  -x HM_PROGRESS=wait -x HM_TRUSTED_PEERS="${HM_TRUSTED_PEERS:-0}" -x LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp" -np "$np" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "run_mpi: mpirun overran ${limit}s and was killed" >&2
  exit 1
fi
if grep -q "cannot open" "$out" && ! grep -q "OK$" "$out"; then
  echo "run_mpi: the protocol does not open here: skipped" >&2
  exit 77
fi
ok=$(grep -c "^hm-group-test: .* OK$" "$out")
if grep -q "FAIL" "$out" || [ "$ok" != "$want" ]; then
  echo "run_mpi: $ok of $want ranks OK (mpirun status $rc)" >&2
  exit 1
fi
echo "run_mpi: $ok ranks OK"
