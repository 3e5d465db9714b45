#!/usr/bin/env bash
# run_attach.sh NP TIMEOUT_S EXE PROTO
# A server job of NP ranks (mpirun, case "serve") writes its group file; a
# client outside the job (EXE ... attach FILE) attaches to the group, runs
# collectives and stops the job. Everything bounded by TIMEOUT_S; the job
# is stopped by its PID (timeout's child) if it overruns.
set -u
np=$1 limit=$2 exe=$3 proto=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
file=$dir/group
timeout -k 10 "$limit" mpirun --allow-run-as-root --oversubscribe --enable-recovery \
  -x HM_PROGRESS=wait -x HM_TRUSTED_PEERS="${HM_TRUSTED_PEERS:-0}" -x LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp" -np "$np" "$exe" "$proto" serve "$file" >"$dir/job" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ -s "$file" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$file" ]; then
  cat "$dir/job"
  if grep -q "cannot open" "$dir/job"; then echo "run_attach: skipped" >&2; exit 77; fi
  echo "run_attach: the job wrote no group file" >&2
  kill "$job" 2>/dev/null
  exit 1
fi
HM_PROGRESS=wait timeout -k 5 "$limit" "$exe" "$proto" attach "$file" 2>&1 | tee "$dir/client"
wait "$job"
cat "$dir/job"
ok=$(grep -c "^hm-group-test: .* OK$" "$dir/job")
if grep -q FAIL "$dir/job" "$dir/client" || [ "$ok" != "$np" ] ||
   ! grep -q "^hm-group-test: client OK$" "$dir/client"; then
  echo "run_attach: $ok of $np ranks OK, client: $(tail -1 "$dir/client")" >&2
  exit 1
fi
echo "run_attach: $np ranks and the client OK"
