# Shared by the tests/e2e scripts: paths from ctest's environment, a scratch dir, small checks.
# shellcheck shell=bash
set -euo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}" "${DATA_DIR:?}" "${MPIRUN:?}"
TRAINER="$BUILD_DIR/trainer"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-e2e.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A tiny model on the sample corpus, fast enough for tests; extra flags override these (but for
# --train-data and --val-data, which the trainer takes once: other data go with tiny_model_args,
# and with val_args where they include validation data).
tiny_args() {
  echo --train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5" "$(val_args)" \
    "$(tiny_model_args)"
}
tiny_model_args() {  # tiny_args without the data and the evaluation
  echo --n-layer 2 --n-head 4 --d-model 64 --seq-len 32 --global-batch-size 8 \
       --micro-batch-size 2 --lr 3e-3 --warmup-steps 2 --sample-tokens 0 --peak-gflops 100 \
       --threads 1
}
val_args() {  # the evaluation of tiny_args: after the last step, 16 sequences
  echo --eval-interval 0 --eval-samples 16
}

# The GPUs nvidia-smi lists: 0 without a GPU or nvidia-smi.
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; }

# Values of one key of metrics.jsonl, one per line (steps only, or evals only for val_loss); a
# non-finite value reads null, as the trainer writes it.
metric() {  # metric FILE KEY
  sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"
}

# Largest relative difference |a - b| / |a| between two columns of finite numbers, one per line.
# Fails the script (FAIL naming the line) on unequal or zero line counts, on a value that is not
# a finite decimal number (null, nan, inf, empty, text), or on a = 0 with b != 0.
max_rel_diff() {  # max_rel_diff FILE_A FILE_B
  local na nb
  na=$(wc -l < "$1") nb=$(wc -l < "$2")
  [ "$na" -gt 0 ] || fail "max_rel_diff: $1 holds no values"
  [ "$na" = "$nb" ] || fail "max_rel_diff: $1 has $na values, $2 has $nb"
  paste "$1" "$2" | awk -v fa="$1" -v fb="$2" '
    function number(s) { return s ~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/ }
    {
      if (NF != 2 || !number($1) || !number($2)) {
        printf "FAIL: max_rel_diff: line %d of %s / %s is not two finite numbers: %s\n", NR, fa, fb, $0 > "/dev/stderr"
        bad = 1; exit 1
      }
      d = $1 - $2; if (d < 0) d = -d
      m = $1 < 0 ? -$1 : $1
      if (m > 0) d /= m
      else if (d > 0) {
        printf "FAIL: max_rel_diff: line %d: %s against %s (relative to 0)\n", NR, $1, $2 > "/dev/stderr"
        bad = 1; exit 1
      }
      if (d > x) x = d
    }
    END { if (!bad) printf "%.3g\n", x + 0 }' || exit 1
}

# True when |a - b| / |b| < TOL: a figure A against its reference B (nonzero).
close_to() {  # close_to A B TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN{d=(a-b)/b; if (d<0) d=-d; exit !(d < t)}'
}

# The first step's loss, grad_norm and val_loss in METRICS against a float64 reference's mean
# loss (loss, val_loss) and gradient norm, each within TOL relative; fails naming WHAT and the key.
scored_reference() {  # scored_reference WHAT METRICS REF_LOSS REF_NORM TOL
  local what=$1 metrics=$2 ref_loss=$3 ref_norm=$4 tol=$5 key ours theirs
  for key in loss grad_norm val_loss; do
    ours=$(metric "$metrics" "$key" | head -1)
    theirs=$([ "$key" = grad_norm ] && echo "$ref_norm" || echo "$ref_loss")
    close_to "$ours" "$theirs" "$tol" || fail "$what: $key $ours, PyTorch's float64 reference $theirs"
    echo "$what: $key $ours, PyTorch's float64 reference over the scored targets $theirs"
  done
}

# Each KEY's per-step values of run NAME (files $SCRATCH/NAME.KEY) against run REFERENCE's within
# LOSS_TOL (loss, val_loss), NORM_TOL (grad_norm) or AUX_TOL (any other key), relative; prints
# one line of the differences, fails naming the first key beyond its bound.
same_per_step() {  # same_per_step REFERENCE NAME KEY...
  local reference=$1 name=$2 key d tol line
  shift 2
  line="$name vs $reference:"
  for key in "$@"; do
    case $key in loss | val_loss) tol=$LOSS_TOL ;; grad_norm) tol=$NORM_TOL ;; *) tol=$AUX_TOL ;; esac
    d=$(max_rel_diff "$SCRATCH/$reference.$key" "$SCRATCH/$name.$key")
    line="$line $key $d"
    awk -v d="$d" -v t="$tol" 'BEGIN{exit !(d < t)}' ||
      { paste "$SCRATCH/$reference.$key" "$SCRATCH/$name.$key"; fail "$name: $key differs by $d"; }
  done
  echo "$line"
}

# For the scripts that plan faults with MPITRAIN_FAULT: exits 77 with "SKIP: <reason>" where the
# build compiled fault injection out (-DMPITRAIN_FAULT_INJECTION=OFF).
# $SCRATCH/NAME.KIND (one number a line, e.g. from metric) against REFERENCE's: the largest
# relative difference printed, and below TOLERANCE, else fail.
within() {  # within REFERENCE NAME KIND TOLERANCE
  local d
  d=$(max_rel_diff "$SCRATCH/$1.$3" "$SCRATCH/$2.$3")
  echo "$2 vs $1: $3 within $d"
  awk -v d="$d" -v t="$4" 'BEGIN{exit !(d < t)}' || fail "$2: $3 differs from $1 by $d"
}

# Each of the comma-separated LAYOUTS (2 ranks, 4 steps of ARGS) within 1e-5 of run ONE's losses
# (fp32 sums in another order). RUN NAME NP ARGS... runs one, its losses into $SCRATCH/NAME.loss
# (as ONE's are); a layout's run is named ONE and the layout without spaces and dashes.
layouts_within() {  # layouts_within RUN ONE LAYOUTS ARGS...
  local run=$1 one=$2 layout name list
  IFS=, read -r -a list <<< "$3"
  shift 3
  for layout in "${list[@]}"; do
    name=$one$(echo "$layout" | tr -d ' -')
    # shellcheck disable=SC2086
    "$run" "$name" 2 "$@" --steps 4 $layout
    within "$one" "$name" loss 1e-5
  done
}

require_fault_injection() {
  if grep -q '^MPITRAIN_FAULT_INJECTION:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt"; then
    echo "SKIP: this build has no fault injection (MPITRAIN_FAULT_INJECTION=OFF)"
    exit 77
  fi
}

# Runs the trainer; the exit code is kept in $rc (read by the caller) instead of stopping the
# script.
# shellcheck disable=SC2034
run_trainer() {  # run_trainer NP LOG ARGS...
  local np=$1 log=$2; shift 2
  set +e
  $MPIRUN -np "$np" "$TRAINER" "$@" > "$log" 2>&1
  rc=$?
  set -e
}

# As run_trainer, but once the command READY succeeds (polled every 50 ms, 120 s at most: a
# loaded machine) every rank gets SIGTERM (the children of mpirun), as SLURM signals every task.
# ready_seen: 1 if READY succeeded, else 0 (the signal then comes at the end of the wait).
run_trainer_signalled() {  # run_trainer_signalled NP LOG READY ARGS...
  local np=$1 log=$2 ready=$3; shift 3
  set +e
  $MPIRUN -np "$np" "$TRAINER" "$@" > "$log" 2>&1 &
  local launcher=$!
  ready_seen=0
  for _ in $(seq 1 2400); do
    eval "$ready" && { ready_seen=1; break; }
    sleep 0.05
  done
  pkill -TERM -P "$launcher"
  wait "$launcher"
  rc=$?
  set -e
}

# For the GPU scripts: SKIPs (prints "SKIP: <reason>", exits 77) unless this build has the CUDA
# backend and the trainer can run an evaluation-only pass of the tiny model on a GPU (the
# trainer's reason: it exits 2 saying "no CUDA device usable: ..."); any other failure of that
# pass is a FAIL.
# 6 steps of the tiny model as 3 + 3, the second piece resumed from the first's checkpoint
# under another layout; the per-step losses into $SCRATCH/NAME.loss.
resume_in_pieces() {  # resume_in_pieces NAME NP1 FLAGS1 NP2 FLAGS2
  local name=$1
  # shellcheck disable=SC2046,SC2086
  run_trainer "$2" "$SCRATCH/$name-1.log" $(tiny_args) --out-dir "$SCRATCH/$name" --steps 6 $3 --exit-at-step 3
  [ "$rc" = 85 ] || { cat "$SCRATCH/$name-1.log"; fail "$name: first piece exited $rc"; }
  # shellcheck disable=SC2046,SC2086
  run_trainer "$4" "$SCRATCH/$name-2.log" $(tiny_args) --out-dir "$SCRATCH/$name" --steps 6 $5 --resume auto
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-2.log"; fail "$name: second piece exited $rc"; }
  grep -q "resumed from step 3" "$SCRATCH/$name-2.log" || fail "$name: did not resume from step 3"
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
}

require_cuda_trainer() {
  grep -q '^MPITRAIN_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" ||
    { echo "SKIP: this build has no CUDA backend (MPITRAIN_CUDA=OFF)"; exit 77; }
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/probe.log" $(tiny_args) --device cuda --steps 0 --peak-gflops 0 \
    --out-dir "$SCRATCH/probe"
  if [ "$rc" = 2 ] && reason=$(grep -o 'no CUDA device usable: .*' "$SCRATCH/probe.log"); then
    echo "SKIP: $reason"
    exit 77
  fi
  [ "$rc" = 0 ] || { cat "$SCRATCH/probe.log"; fail "--device cuda evaluation-only run exited $rc"; }
}

# A directory's state in lines: every entry with its type and size, and each file's checksum;
# "absent" for no directory. Equal before and after a command: the command left it untouched.
dir_state() {  # dir_state DIR
  [ -e "$1" ] || { echo absent; return; }
  (cd "$1" && find . -printf '%p %y %s\n' | sort && find . -type f -exec md5sum {} + | sort)
}

# For the stop tests: waits (120 s at most: a loaded machine) until OUT/metrics.jsonl holds N
# steps; steps_seen: how many it held then. Fails when PID ended first or the time ran out.
wait_for_steps() {  # wait_for_steps PID OUT N LOG
  for _ in $(seq 1 2400); do
    steps_seen=$({ metric "$2/metrics.jsonl" loss 2> /dev/null || true; } | wc -l)
    [ "$steps_seen" -ge "$3" ] && return 0
    kill -0 "$1" 2> /dev/null || { cat "$4"; fail "the run ended before $3 steps"; }
    sleep 0.05
  done
  cat "$4"; fail "no $3 steps within 120 s"
}

# After a stop that must save: RC is 85, OUT's checkpoints/latest names a checkpoint of a step at
# least STEPS (the steps logged before the stop: none lost) that ckpt-inspect --verify accepts,
# no step-*.tmp is left, and the run resumes from it (one more step, exit 85 at --exit-at-step).
# ARGS are the stopped run's trainer flags (without --out-dir). stop_step: the checkpoint's step.
expect_stop_saved() {  # expect_stop_saved NAME RC OUT LOG STEPS ARGS...
  local name=$1 code=$2 out=$3 log=$4 steps=$5; shift 5
  [ "$code" = 85 ] || { cat "$log"; fail "$name: launcher exit code $code, expected 85"; }
  [ -s "$out/checkpoints/latest" ] || { cat "$log"; fail "$name: no committed checkpoint (checkpoints/latest)"; }
  local latest
  latest=$(cat "$out/checkpoints/latest")
  stop_step=$((10#${latest#step-}))
  [ "$stop_step" -ge "$steps" ] || fail "$name: checkpoint of step $stop_step, but $steps steps were logged before the stop"
  "$BUILD_DIR/ckpt-inspect" "$out/checkpoints/$latest" --verify > "$out.inspect" 2>&1 \
    || { cat "$out.inspect"; fail "$name: ckpt-inspect --verify failed on $latest"; }
  ! compgen -G "$out/checkpoints/*.tmp" > /dev/null || fail "$name: left $(cd "$out/checkpoints" && echo ./*.tmp)"
  run_trainer 2 "$out.resume.log" "$@" --out-dir "$out" --resume auto --exit-at-step $((stop_step + 1))
  if [ "$rc" != 85 ] || ! grep -q "resumed from step $stop_step " "$out.resume.log"; then
    cat "$out.resume.log"; fail "$name: resuming from step $stop_step exited $rc"
  fi
  echo "ok: $name: exit 85, step $stop_step committed and verified ($steps logged at the signal), resumed"
}

# The trainer with the flags in the array stop_args and --out-dir $SCRATCH/NAME under LAUNCHER...;
# SIGNAL to the launcher's pid once 3 steps are logged, then expect_stop_saved. env
# --default-signal: a job started with & from a script ignores SIGINT, and a signal ignored at
# entry cannot be trapped (a shell does not do that to a command in the foreground).
stop_launcher() {  # stop_launcher NAME SIGNAL LAUNCHER...
  local name=$1 sig=$2; shift 2
  local out=$SCRATCH/$name log=$SCRATCH/$name.log
  set +e
  env --default-signal=INT "$@" "$TRAINER" "${stop_args[@]}" --out-dir "$out" > "$log" 2>&1 &
  local pid=$!
  set -e
  wait_for_steps "$pid" "$out" 3 "$log"
  kill -s "$sig" "$pid" 2> /dev/null ||
    { tail -n 30 "$log" >&2; fail "$name: the launcher ended before its $sig (its log above)"; }
  set +e
  wait "$pid"
  local code=$?
  set -e
  expect_stop_saved "$name" "$code" "$out" "$log" "$steps_seen" "${stop_args[@]}"
}

# Runs independent cases of one script side by side, at most MAX at a time: each CASE is a
# command line (a function of the script and its arguments) run in a subshell of its own, its
# output kept apart and printed whole, in the given order, as soon as it and those before it have
# ended. For cases whose time is waiting (mpirun's start, fsync, a peer's exit), not CPU. Fails
# naming every case that failed (its own FAIL line is in its output). Each case's MPI starts get
# an Open MPI session directory base of their own: two mpiruns starting at the same moment in one
# base fail with "mkdir ... File exists" (tests/CMakeLists.txt; it failed a CI run of
# e2e_expert_parallel).
run_cases() {  # run_cases MAX CASE...
  local max=$1; shift
  local cases=("$@") pids=() failed=() started=0 printed=0 running p code outs sessions
  outs=$(mktemp -d "$SCRATCH/cases.XXXXXX")
  sessions=${OMPI_MCA_orte_tmpdir_base:-$SCRATCH}  # case k's base: c<k> in the test's (short paths)
  while [ "$printed" -lt "${#cases[@]}" ]; do
    running=0
    for p in "${pids[@]:printed}"; do kill -0 "$p" 2> /dev/null && running=$((running + 1)); done
    if [ "$started" -lt "${#cases[@]}" ] && [ "$running" -lt "$max" ]; then
      mkdir -p "$sessions/c$started"
      (export OMPI_MCA_orte_tmpdir_base="$sessions/c$started"; eval "${cases[started]}") \
        > "$outs/$started" 2>&1 &
      pids+=($!)
      started=$((started + 1))
    elif [ "$printed" -lt "$started" ] && ! kill -0 "${pids[printed]}" 2> /dev/null; then
      set +e
      wait "${pids[printed]}"
      code=$?
      set -e
      cat "$outs/$printed"
      [ "$code" = 0 ] || failed+=("'${cases[printed]}' (exit $code)")
      printed=$((printed + 1))
    else
      sleep 0.1
    fi
  done
  [ "${#failed[@]}" = 0 ] || fail "${#failed[@]} of ${#cases[@]} cases failed: ${failed[*]}"
}
