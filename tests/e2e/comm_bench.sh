#!/usr/bin/env bash
# comm-bench: nccl-tests-style tables over the trainer's communicator, on the world and on grid
# groups; every result verified; bad options exit 2 with one message.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
BENCH="$BUILD_DIR/comm-bench"

# run_bench NAME NP ARGS...: exit 0, a row per size, every #wrong cell 0 (N/A only where a mode
# does not apply to the op), and the footer.
run_bench() {
  local name=$1 np=$2; shift 2
  local out="$SCRATCH/$name.out" err="$SCRATCH/$name.err" rc=0
  $MPIRUN -np "$np" "$BENCH" --max-bytes 64K --iters 3 --warmup 1 "$@" > "$out" 2> "$err" || rc=$?
  [ $rc = 0 ] || { cat "$out" "$err"; fail "$name: exit code $rc"; }
  local rows others bad checked
  rows=$(awk '!/^#/ && NF == 13' "$out" | wc -l)
  others=$(grep -vc '^#' "$out" || true)
  [ "$rows" -gt 0 ] && [ "$rows" = "$others" ] || { cat "$out"; fail "$name: malformed rows"; }
  bad=$(awk '!/^#/ && !(($9 == "0" || $9 == "N/A") && ($13 == "0" || $13 == "N/A"))' "$out")
  [ -z "$bad" ] || fail "$name: wrong values in rows:"$'\n'"$bad"
  checked=$(awk '!/^#/ { c += ($9 == "0") + ($13 == "0") } END { print c + 0 }' "$out")
  [ "$checked" -ge "$rows" ] || { cat "$out"; fail "$name: rows without a checked result"; }
  grep -Eq '^# Avg bus bandwidth +: [0-9]' "$out" || { cat "$out"; fail "$name: no Avg bus bandwidth"; }
  grep -q '^# Out of bounds values : 0 OK' "$out" || { cat "$out"; fail "$name: out of bounds values"; }
  echo "ok: $name, $rows rows, $(grep '^# Avg bus bandwidth' "$out")"
}

expect_usage_error() {  # expect_usage_error NAME NP EXPECTED_TEXT ARGS...
  local name=$1 np=$2 expected=$3 rc=0; shift 3
  $MPIRUN -np "$np" "$BENCH" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" || rc=$?
  [ $rc = 2 ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit code $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.err" || { cat "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'comm-bench: error:' "$SCRATCH/$name.err")" = 1 ] || { cat "$SCRATCH/$name.err"; fail "$name: not exactly one message"; }
  echo "ok: $name -> $(grep 'comm-bench: error:' "$SCRATCH/$name.err")"
}

run_bench world_np2 2 --group world --op all
grep -q '^# all_reduce on group world: n = 2' "$SCRATCH/world_np2.out" || fail "world_np2: no all_reduce header"
run_bench world_np4 4 --group world --op all
grep -q '^# sendrecv on group world: n = 4' "$SCRATCH/world_np4.out" || fail "world_np4: no sendrecv header"
run_bench tp_np4 4 --tp 2 --group tp --op all
grep -q '^# reduce_scatter on group tp: n = 2, layout dp 2 x tp 2 x pp 1, 2 group(s) at once, rank 0.s \[0,1\]' \
  "$SCRATCH/tp_np4.out" || { cat "$SCRATCH/tp_np4.out"; fail "tp_np4: header"; }
run_bench dp_np4 4 --tp 2 --group dp --op all
grep -q 'on group dp: n = 2, .* rank 0.s \[0,2\]' "$SCRATCH/dp_np4.out" || fail "dp_np4: header"

expect_usage_error bad_option 2 "unrecognised option '--bogus'" --bogus 1
expect_usage_error bad_grid 4 "4 ranks of this job" --dp 3
expect_usage_error bad_op 2 "--op 'all-reduce'" --op all-reduce
expect_usage_error bad_size 2 "--max-bytes" --max-bytes lots
