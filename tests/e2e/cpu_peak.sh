#!/usr/bin/env bash
# The MFU peak on the CPU (issue 32): 4 ranks x 1 thread unbound on 2 CPUs count each CPU once
# (the host's peak = 2 x the rate per CPU, not 4 x) and are told the count that is wrong, not
# "--bind-to none"; a measurement under deliberate contention (busy loops on the same CPUs) is
# called suspect and never cached; an MFU above 100 % is not printed as a figure.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
export MPITRAIN_PEAK_CACHE="$SCRATCH/peak.jsonl"
# shellcheck disable=SC2207
mine=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])'))
[ "${#mine[@]}" = 2 ] || { echo "SKIP: needs 2 CPUs"; exit 77; }
two="${mine[0]},${mine[1]}"
listed=$two  # as the trainer lists CPUs: a run shortened
[ "${mine[1]}" = $((mine[0] + 1)) ] && listed="${mine[0]}-${mine[1]}"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 2 --log-interval 1 --peak-gflops 0
run_on_two() {  # run_on_two LOG ARGS...: 4 ranks, unbound, on the 2 CPUs
  local log=$1; shift
  set +e
  taskset -c "$two" $MPIRUN -np 4 "$TRAINER" "$@" > "$log" 2>&1
  rc=$?
  set -e
}

# ---- under contention: 3 busy loops on the same 2 CPUs -----------------------------------------
loops=()
# The loops end with the test, however it ends.
trap '[ ${#loops[@]} = 0 ] || kill "${loops[@]}" 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT
for _ in 1 2 3; do taskset -c "$two" bash -c 'while :; do :; done' & loops+=($!); done
run_on_two "$SCRATCH/busy.log" "$@" --out-dir "$SCRATCH/busy"
kill "${loops[@]}"; wait "${loops[@]}" 2>/dev/null || true
loops=()
[ "$rc" = 0 ] || { cat "$SCRATCH/busy.log"; fail "contended run exited $rc"; }
grep -q "^warning: the peak of .* is suspect (measured under contention)" "$SCRATCH/busy.log" ||
  { cat "$SCRATCH/busy.log"; fail "a contended measurement not called suspect"; }
grep -q "SUSPECT: measured under contention" "$SCRATCH/busy.log" || fail "no reason given"
[ ! -e "$MPITRAIN_PEAK_CACHE" ] || { cat "$MPITRAIN_PEAK_CACHE"; fail "contended peak cached"; }
echo "ok: under contention: $(grep -o 'SUSPECT: .*' "$SCRATCH/busy.log" | head -1)"

# ---- as the host is now: the CPU count, the warning, the cache -----------------------------------
run_on_two "$SCRATCH/run.log" "$@" --out-dir "$SCRATCH/run"
[ "$rc" = 0 ] || { cat "$SCRATCH/run.log"; fail "trainer exited $rc"; }
warning=$(grep "^warning: host" "$SCRATCH/run.log") || { cat "$SCRATCH/run.log"; fail "no warning"; }
echo "$warning"
case "$warning" in
  *"in all 4 ranks x 1 thread = 4 threads on 2 CPUs ($listed)"*"Fix: at most 2 ranks of 1 thread"*) ;;
  *) fail "the warning does not name the count" ;;
esac
case "$warning" in *bind-to*) fail "told to --bind-to what is unbound already" ;; esac
banner=$(grep -o "peak [0-9.]* GFLOP/s in all on [0-9]* CPUs (rank 0: [0-9.]* GFLOP/s with 1 thread" \
  "$SCRATCH/run.log") || { cat "$SCRATCH/run.log"; fail "no peak in the banner"; }
echo "$banner"
read -r peak cpus rate < <(echo "$banner" | awk '{print $2, $7, $11}')
[ "$cpus" = 2 ] || fail "peak counts $cpus CPUs, not 2"
# 1 thread: the rate is one CPU's; 4 ranks x 1/2 CPU. (Each rank's rate counted: 4 x $rate.)
awk -v p="$peak" -v r="$rate" 'BEGIN { exit !(p > 2 * r - 0.15 && p < 2 * r + 0.15) }' ||
  fail "peak $peak is not 2 CPUs x $rate"
if grep -q "is suspect" "$SCRATCH/run.log"; then
  [ ! -e "$MPITRAIN_PEAK_CACHE" ] || fail "a suspect peak cached"
  echo "ok: the host is busy now: peak not cached"
else
  grep -q "\"threads\":1,\"cpus\":2,.*\"kind\":\"fp32\",\"gflops\":$rate," "$MPITRAIN_PEAK_CACHE" ||
    { cat "$MPITRAIN_PEAK_CACHE"; fail "the clean peak $rate not cached"; }
  echo "ok: cached $(cat "$MPITRAIN_PEAK_CACHE")"
fi

# ---- a peak far too low: MFU above 100 % is not printed as a figure ----------------------------
# shellcheck disable=SC2046
run_trainer 1 "$SCRATCH/low.log" $(tiny_args) --steps 1 --peak-gflops 0.001 --out-dir "$SCRATCH/low"
[ "$rc" = 0 ] || { cat "$SCRATCH/low.log"; fail "trainer exited $rc"; }
grep -q "| MFU >100% (peak suspect: too low) |" "$SCRATCH/low.log" ||
  { cat "$SCRATCH/low.log"; fail "MFU above 100% printed as a figure"; }
echo "ok: cpu peak"
