#!/usr/bin/env bash
# The GPU check, for a node with nvcc and CMake (and maybe Python with PyTorch) but no package
# registry and no MPI, in steps that each write their results under OUT_DIR as they finish (a
# step that fails or runs out of time leaves what the earlier ones wrote):
#
#   step     budget  what
#   build     240 s  unpack third_party/debs, configure, build what the gpu tests run + op-bench
#   tests     120 s  ctest -L gpu, but not the e2e scripts, -j 4 (each test's own timeout holds)
#   e2e       300 s  the e2e GPU scripts (--device cuda against cpu): many trainer runs; not in the
#                    default plan, named only when there is time for it
#   bench      90 s  op-bench: per-op time against its floor, cuDNN coverage, step MFU
#   compare   170 s  bench/gpu/trainer_vs_pytorch.sh: tokens/s and MFU beside PyTorch
#   nccl       30 s  nccl-bench, with two or more GPUs
#
# One command runs the steps it names, in order, each under its budget (GPU_BUDGET_<STEP>
# overrides one), and refuses a list whose budgets add up to more than 570 s (a command on a lent
# machine may run 600). The plan for a 15-minute loan, two commands back to back on the warm
# machine (the build area is kept between them):
#   bash bench/gpu/run.sh "$OUT" build tests
#   bash bench/gpu/run.sh "$OUT" bench compare nccl
# `bench/gpu/run.sh --plan` prints it with the budgets; bench/gpu/preflight.sh checks, without a
# GPU, everything it needs.
#
# Environment: MPITRAIN_DEBS (default third_party/debs), MPITRAIN_GPU_WORK (build area, default
#   build-gpu/ in this tree: kept between commands on a warm machine), CUDA_ARCH (default: the
#   device's, else 90), CUDNN_ROOT and NCCL_ROOT (default: the toolkit's, else PyTorch's wheels),
#   JOBS (default nproc), MPITRAIN_CMAKE_EXTRA (more CMake arguments), PEAK_TFLOPS and PYTHON
#   (for compare, see trainer_vs_pytorch.sh).
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
declare -A BUDGET=([build]=240 [tests]=120 [e2e]=300 [bench]=90 [compare]=170 [nccl]=30)
ORDER=(build tests e2e bench compare nccl)
PLAN=("build tests" "bench compare nccl")
MAX_COMMAND=570
for step in "${ORDER[@]}"; do
  var=GPU_BUDGET_${step^^}
  [[ -n ${!var:-} ]] && BUDGET[$step]=${!var}
done

sum_budget() {
  local total=0 step
  for step in "$@"; do total=$((total + BUDGET[$step])); done
  echo "$total"
}

if [[ ${1:-} == --plan ]]; then
  total=0
  echo "GPU plan: $((${#PLAN[@]})) commands, back to back on one warm machine"
  for steps in "${PLAN[@]}"; do
    read -r -a list <<<"$steps"
    t=$(sum_budget "${list[@]}")
    total=$((total + t))
    printf '  %-52s up to %3d s  (%s)\n' "bash bench/gpu/run.sh \"\$OUT\" $steps" "$t" \
      "$(for s in "${list[@]}"; do printf '%s %d s, ' "$s" "${BUDGET[$s]}"; done | sed 's/, $//')"
  done
  echo "  total up to $total s of commands; with time left: bash bench/gpu/run.sh \"\$OUT\" e2e (up to ${BUDGET[e2e]} s)"
  exit 0
fi

usage="usage: bench/gpu/run.sh OUT_DIR STEP... (steps: ${ORDER[*]}) | bench/gpu/run.sh --plan"
OUT=${1:?$usage}
shift
(($# > 0)) || { echo "$usage" >&2; exit 2; }
for step in "$@"; do
  [[ -n ${BUDGET[$step]:-} ]] || { echo "run.sh: unknown step '$step' ($usage)" >&2; exit 2; }
done
if (($(sum_budget "$@") > MAX_COMMAND)); then
  echo "run.sh: steps '$*' may take $(sum_budget "$@") s, more than one command's $MAX_COMMAND s: split them" >&2
  exit 2
fi

DEBS=${MPITRAIN_DEBS:-$SRC/third_party/debs}
WORK=${MPITRAIN_GPU_WORK:-$SRC/build-gpu}
JOBS=${JOBS:-$(nproc)}
BUILD=$WORK/build
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
[[ -d $DEBS ]] && DEBS=$(cd "$DEBS" && pwd)
SUMMARY=$OUT/summary.md
# shellcheck source=bench/gpu/prefix.sh
source "$SRC/bench/gpu/prefix.sh"

say() { echo "$*" | tee -a "$SUMMARY"; }
# run_step NAME LOG SECONDS COMMAND...: the command under a timeout, output to LOG; status kept
run_step() {
  local name=$1 log=$2 limit=$3 t0 rc
  shift 3
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  say "- $name: exit $rc in $(($(date +%s) - t0)) of $limit s$( ((rc == 124 || rc == 137)) && echo ' (timed out)') (log: $(basename "$log"))"
  return $rc
}
indent() { sed 's/^/    /'; }

say "# mpitrain GPU run: $*, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null ||
    echo "no nvidia-smi"
  nvcc --version 2>&1 | grep release; cmake --version | head -1; } | indent | tee -a "$SUMMARY"
say "    steps: $(for s in "$@"; do printf '%s %d s, ' "$s" "${BUDGET[$s]}"; done | sed 's/, $//')"
gpu_unpack "$DEBS" | tee -a "$SUMMARY"
gpu_environment
say "    cuDNN from ${CUDNN_ROOT:-nowhere}; NCCL from ${NCCL_ROOT:-the toolkit, if it has one}"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
status=0

step_build() {
  local arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
  local -a extra targets
  read -r -a extra <<<"${MPITRAIN_CMAKE_EXTRA:-}"
  local t0 left
  t0=$(date +%s)
  run_step "configure (CUDA arch ${arch:-90})" "$OUT/configure.log" "${BUDGET[build]}" \
    gpu_configure "$BUILD" "${arch:-90}" "${extra[@]}" || { tail -30 "$OUT/configure.log"; return 1; }
  mapfile -t targets < <(gpu_targets "$BUILD")
  ((${#targets[@]} > 0)) || { say "- no gpu targets read back from ctest"; return 1; }
  left=$((BUDGET[build] - ($(date +%s) - t0)))
  run_step "build (${targets[*]}, -j$JOBS)" "$OUT/build.log" "$left" \
    cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" ||
    { grep -E 'error|Error' "$OUT/build.log" | head -30; return 1; }
}

step_tests() {
  run_step "gpu tests (ctest -L gpu -E '^e2e_' -j 4)" "$OUT/tests.log" "${BUDGET[tests]}" \
    ctest --test-dir "$BUILD" -L gpu -E '^e2e_' -j 4 --output-on-failure
  local rc=$?
  grep -E "tests passed|tests failed|\*\*\*|Not Run|SKIP" "$OUT/tests.log" | indent | tee -a "$SUMMARY"
  return $rc
}

step_e2e() {
  run_step "gpu e2e (ctest -L gpu -R '^e2e_')" "$OUT/e2e.log" "${BUDGET[e2e]}" \
    ctest --test-dir "$BUILD" -L gpu -R '^e2e_' --output-on-failure
  local rc=$?
  grep -E "tests passed|tests failed|\*\*\*|within|SKIP" "$OUT/e2e.log" | indent | tee -a "$SUMMARY"
  return $rc
}

step_bench() {
  run_step "op-bench" "$OUT/bench.log" "${BUDGET[bench]}" "$BUILD/op-bench"
  local rc=$?
  say ""
  indent <"$OUT/bench.log" | tee -a "$SUMMARY"
  return $rc
}

step_compare() {
  local tvp=$((BUDGET[compare] - 15))
  run_step "trainer vs PyTorch (budget $tvp s)" "$OUT/trainer_vs_pytorch.log" "${BUDGET[compare]}" \
    env TVP_BUDGET="$tvp" bash "$SRC/bench/gpu/trainer_vs_pytorch.sh" "$BUILD" "$OUT"
  local rc=$?
  [[ -f $OUT/trainer-vs-pytorch.md ]] && { say ""; tee -a "$SUMMARY" <"$OUT/trainer-vs-pytorch.md"; }
  return $rc
}

step_nccl() {
  local mpirun
  mpirun=$(command -v "$PREFIX/usr/bin/mpirun" mpirun | head -1)
  if ((GPUS < 2)); then
    say "- nccl-bench: SKIP: $GPUS GPU: the collectives need two or more"
  elif [[ ! -x $BUILD/nccl-bench ]]; then
    say "- nccl-bench: SKIP: no nccl-bench (CMake found no NCCL; set NCCL_ROOT)"
  elif [[ -z $mpirun ]]; then
    say "- nccl-bench: SKIP: no mpirun (the unpacked packages have none: openmpi-bin)"
  else
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 run_step "nccl-bench ($GPUS GPUs)" \
      "$OUT/nccl_bench.log" "${BUDGET[nccl]}" "$mpirun" --oversubscribe --bind-to none \
      -x LD_LIBRARY_PATH -np "$GPUS" "$BUILD/nccl-bench" 256M 20
    local rc=$?
    indent <"$OUT/nccl_bench.log" | tee -a "$SUMMARY"
    return $rc
  fi
}

START=$(date +%s)
for step in "$@"; do
  say ""
  say "## $step (budget ${BUDGET[$step]} s)"
  if [[ $step != build && ! -f $BUILD/CMakeCache.txt ]]; then
    say "- not run: no build in $BUILD (run the build step first)"
    status=1
    continue
  fi
  "step_$step" || status=1
done
say ""
say "total $(($(date +%s) - START)) s"
exit $status
