# Shared by the tests/e2e scripts: paths from ctest's environment, a scratch dir, small checks.
# shellcheck shell=bash
set -euo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}" "${DATA_DIR:?}" "${MPIRUN:?}"
TRAINER="$BUILD_DIR/trainer"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-e2e.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A tiny model on the sample corpus, fast enough for tests; extra flags override these.
tiny_args() {
  echo --train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5" \
       --n-layer 2 --n-head 4 --d-model 64 --seq-len 32 --global-batch-size 8 \
       --micro-batch-size 2 --lr 3e-3 --warmup-steps 2 --eval-interval 0 --eval-samples 16 \
       --sample-tokens 0 --peak-gflops 100 --threads 1
}

# Values of one key of metrics.jsonl, one per line (steps only, or evals only for val_loss).
metric() {  # metric FILE KEY
  sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"
}

# Largest relative difference between two columns of numbers.
max_rel_diff() {  # max_rel_diff FILE_A FILE_B
  paste "$1" "$2" | awk '{d=$1-$2; if(d<0)d=-d; m=($1<0?-$1:$1); if(m>0)d/=m; if(d>x)x=d} END{printf "%.3g\n", x+0}'
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

# For the GPU scripts: exits 0 with "SKIP: <reason>" unless this build has the CUDA backend and
# the trainer can run an evaluation-only pass of the tiny model on a GPU (the trainer's reason).
require_cuda_trainer() {
  grep -q '^MPITRAIN_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" ||
    { echo "SKIP: this build has no CUDA backend (MPITRAIN_CUDA=OFF)"; exit 0; }
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/probe.log" $(tiny_args) --device cuda --steps 0 --peak-gflops 0 \
    --out-dir "$SCRATCH/probe"
  if [ "$rc" = 2 ] && reason=$(grep -o 'no CUDA device usable: .*' "$SCRATCH/probe.log"); then
    echo "SKIP: $reason"
    exit 0
  fi
  [ "$rc" = 0 ] || { cat "$SCRATCH/probe.log"; fail "--device cuda evaluation-only run exited $rc"; }
}
