#!/usr/bin/env bash
# The GPU check, for a node with nvcc and CMake (and maybe Python with PyTorch) but no package
# registry and no MPI, in steps that each print their results as they finish (a step that fails
# or runs out of time leaves what the earlier ones wrote):
#
#   step     budget  what
#   build     160 s  unpack third_party/debs, configure, build what the gpu tests run + op-bench
#   tests      80 s  ctest -L gpu, but not the e2e scripts, -j 4 (each test's own timeout holds)
#   e2e       300 s  the e2e GPU scripts (--device cuda against cpu): many trainer runs; not in the
#                    plan, named only when a loan has time for it
#   bench      70 s  op-bench --skip-llama: the ceilings, per-op time against its floor, cuDNN
#                    coverage (printed as measured), GPT-2 small's step MFU
#   hf         45 s  bench/gpu/hf_transformers.sh: transformers reads the trainer's --export-hf of
#                    GPT-2, Llama, Qwen3 (YaRN) and Mistral (sliding window) models trained on
#                    the GPU; its loss on a fixed batch against the trainer's (HF_DEVICE=cpu
#                    STEPS=20, all four: 7 s, Zen 5)
#   compare   115 s  bench/gpu/trainer_vs_pytorch.sh: tokens/s and MFU beside PyTorch's
#   nccl       10 s  nccl-bench, with two or more GPUs
#
# One command runs the steps it names, in order, each under its budget (GPU_BUDGET_<STEP>
# overrides one), and refuses a list whose budgets add up to more than COMMAND_LIMIT: a command
# that fails can then be run again inside the same loan. A lent machine returns at most 8 files of
# a command: each command writes OUT_DIR/summary.md (the results, as they come) and
# OUT_DIR/logs-<steps>.tar.gz (every log, packed again after each step), nothing else. The plan
# for a 15-minute loan, two commands back to back on the warm machine (the build area is kept
# between them), is `bench/gpu/run.sh --plan`: it prints the commands, their budgets and files,
# and the device time with the machine's start, and exits 1 if that exceeds PLAN_LIMIT or if what
# is left of the loan could not run the longest command again at once on the warm machine.
# bench/gpu/preflight.sh checks, without a GPU, everything the plan needs, the plan's commands
# run dry (--dry-run: each step's commands are written into its log instead of run) included.
#
# Environment: MPITRAIN_DEBS (default third_party/debs), MPITRAIN_GPU_WORK (build area, default
#   build-gpu/ in this tree: kept between commands on a warm machine), CUDA_ARCH (default: the
#   device's, else 90), CUDNN_ROOT and NCCL_ROOT (default: the toolkit's, else PyTorch's wheels),
#   JOBS (default nproc), MPITRAIN_CMAKE_EXTRA (more CMake arguments), PEAK_TFLOPS and PYTHON
#   (for compare and hf, see their scripts).
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
declare -A BUDGET=([build]=160 [tests]=80 [e2e]=300 [bench]=70 [hf]=45 [compare]=115 [nccl]=10)
ORDER=(build tests e2e bench hf compare nccl)
PLAN=("build tests" "bench hf compare nccl")
COMMAND_LIMIT=300    # s: one command, so that a failed one fits again in the loan's rest
MACHINE_START=180    # s: a fresh machine's start, counted in the loan (minutes, METHOD.md)
PLAN_LIMIT=660       # s: start + the plan's commands, of the loan's 900
LOAN=900
OUT_FILES_LIMIT=8    # files a lent machine returns of one command
for step in "${ORDER[@]}"; do
  var=GPU_BUDGET_${step^^}
  [[ -n ${!var:-} ]] && BUDGET[$step]=${!var}
done

sum_budget() {
  local total=0 step
  for step in "$@"; do total=$((total + BUDGET[$step])); done
  echo "$total"
}
tag() { local IFS=-; echo "$*"; }  # the steps of a command joined: its archive's name

if [[ ${1:-} == --plan ]]; then
  total=$MACHINE_START longest=0
  echo "GPU plan: ${#PLAN[@]} commands, back to back on one warm machine (device time, the machine's start included)"
  printf '  %-58s %6s  %s\n' "machine start (fresh machine)" "$MACHINE_START s" ""
  for steps in "${PLAN[@]}"; do
    read -r -a list <<<"$steps"
    t=$(sum_budget "${list[@]}")
    total=$((total + t)) longest=$((t > longest ? t : longest))
    printf '  %-58s %6s  (%s; files: summary.md logs-%s.tar.gz)\n' \
      "bash bench/gpu/run.sh \"\$OUT\" $steps" "$t s" \
      "$(for s in "${list[@]}"; do printf '%s %d s, ' "$s" "${BUDGET[$s]}"; done | sed 's/, $//')" "$(tag "${list[@]}")"
  done
  echo "  total up to $total s of the loan's $LOAN s (limit $PLAN_LIMIT s); $((LOAN - total)) s left: a failed" \
       "command (at most $longest s) runs again at once on the warm machine; if ${BUDGET[e2e]} s are left" \
       "after both: bash bench/gpu/run.sh \"\$OUT\" e2e"
  ((total <= PLAN_LIMIT)) || { echo "run.sh: the plan needs $total s, more than $PLAN_LIMIT s" >&2; exit 1; }
  ((LOAN - total >= longest)) || { echo "run.sh: $((LOAN - total)) s left cannot run a $longest s command again" >&2; exit 1; }
  exit 0
fi

[[ ${1:-} == --plan-steps ]] && { printf '%s\n' "${PLAN[@]}"; exit 0; }  # one command's steps a line
DRY=0
[[ ${1:-} == --dry-run ]] && { DRY=1; shift; }
usage="usage: bench/gpu/run.sh [--dry-run] OUT_DIR STEP... (steps: ${ORDER[*]}) | bench/gpu/run.sh --plan|--plan-steps"
OUT=${1:?$usage}
shift
(($# > 0)) || { echo "$usage" >&2; exit 2; }
for step in "$@"; do
  [[ -n ${BUDGET[$step]:-} ]] || { echo "run.sh: unknown step '$step' ($usage)" >&2; exit 2; }
done
if (($(sum_budget "$@") > COMMAND_LIMIT)); then
  echo "run.sh: steps '$*' may take $(sum_budget "$@") s, more than one command's $COMMAND_LIMIT s: split them" >&2
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
TAG=$(tag "$@")
LOGS=$WORK/logs/$TAG
ARCHIVE=$OUT/logs-$TAG.tar.gz
SUMMARY=$OUT/summary.md
rm -rf "$LOGS"
mkdir -p "$LOGS"
: >"$SUMMARY"
# shellcheck source=bench/gpu/prefix.sh
source "$SRC/bench/gpu/prefix.sh"

say() { echo "$*" | tee -a "$SUMMARY"; }
indent() { sed 's/^/    /'; }
# run_step NAME LOG SECONDS COMMAND...: the command under a timeout, output to LOG (STREAM=1: also
# into the summary and onto stdout as it comes, indented); the exit status returned. --dry-run:
# the command is written into LOG instead.
run_step() {
  local name=$1 log=$2 limit=$3 t0 rc
  shift 3
  t0=$(date +%s)
  if ((DRY)); then  # a command timeout cannot start (this shell's function or builtin) fails it too
    echo "dry run: $*" >"$log"
    case $(type -t "$1") in
      function | builtin | keyword | alias) echo "run_step: timeout cannot run '$1'" | tee -a "$log"; rc=127 ;;
      *) rc=0 ;;  # a program, or one the build step makes
    esac
  elif [[ ${STREAM:-0} == 1 ]]; then
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log" | indent | tee -a "$SUMMARY"
    rc=${PIPESTATUS[0]}
  else
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    rc=$?
  fi
  say "- $name: exit $rc in $(($(date +%s) - t0)) of $limit s$( ((rc == 124 || rc == 137)) && echo ' (timed out)') (log: $(basename "$log") in $(basename "$ARCHIVE"))"
  return $rc
}
# The logs into one archive, packed again after each step (a command stopped later keeps it).
pack() {
  tar -czf "$LOGS.tar.gz.tmp" -C "$(dirname "$LOGS")" "$TAG" && mv -f "$LOGS.tar.gz.tmp" "$ARCHIVE"
}

say "# mpitrain GPU run: $*$( ((DRY)) && echo ' (dry run)'), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null ||
    echo "no nvidia-smi"
  nvcc --version 2>&1 | grep release; cmake --version | head -1; } | indent | tee -a "$SUMMARY"
say "    steps: $(for s in "$@"; do printf '%s %d s, ' "$s" "${BUDGET[$s]}"; done | sed 's/, $//')"
gpu_unpack "$DEBS" | tee -a "$SUMMARY"
gpu_environment
say "    cuDNN from ${CUDNN_ROOT:-nowhere}; NCCL from ${NCCL_ROOT:-the toolkit, if it has one}"
status=0
gpu_nvrtc || status=1
say "    $NVRTC_FOUND"
export PYTHONUNBUFFERED=1  # the Python benchmarks' lines as they come
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

step_build() {
  local arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
  local -a extra targets
  read -r -a extra <<<"${MPITRAIN_CMAKE_EXTRA:-}"
  local t0 left
  t0=$(date +%s)
  # timeout runs programs, not this shell's functions: the configure runs in a bash of its own
  run_step "configure (CUDA arch ${arch:-90})" "$LOGS/configure.log" "${BUDGET[build]}" \
    env SRC="$SRC" WORK="$WORK" CUDNN_ROOT="${CUDNN_ROOT:-}" NCCL_ROOT="${NCCL_ROOT:-}" \
    bash -c 'source "$SRC/bench/gpu/prefix.sh" && gpu_configure "$@"' gpu_configure \
    "$BUILD" "${arch:-90}" "${extra[@]}" || { tail -30 "$LOGS/configure.log"; return 1; }
  mapfile -t targets < <(gpu_targets "$BUILD")
  ((${#targets[@]} > 0)) || { say "- no gpu targets read back from ctest"; return 1; }
  left=$((BUDGET[build] - ($(date +%s) - t0)))
  run_step "build (${targets[*]}, -j$JOBS)" "$LOGS/build.log" "$left" \
    cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" ||
    { grep -E 'error|Error' "$LOGS/build.log" | head -30; return 1; }
}

step_tests() {
  run_step "gpu tests (ctest -L gpu -E '^e2e_' -j 4)" "$LOGS/tests.log" "${BUDGET[tests]}" \
    ctest --test-dir "$BUILD" -L gpu -E '^e2e_' -j 4 --output-on-failure
  local rc=$?
  grep -E "tests passed|tests failed|\*\*\*|Not Run|SKIP" "$LOGS/tests.log" | indent | tee -a "$SUMMARY"
  return $rc
}

step_e2e() {
  run_step "gpu e2e (ctest -L gpu -R '^e2e_')" "$LOGS/e2e.log" "${BUDGET[e2e]}" \
    ctest --test-dir "$BUILD" -L gpu -R '^e2e_' --output-on-failure
  local rc=$?
  grep -E "tests passed|tests failed|\*\*\*|within|SKIP" "$LOGS/e2e.log" | indent | tee -a "$SUMMARY"
  return $rc
}

step_bench() {
  STREAM=1 run_step "op-bench --skip-llama" "$LOGS/bench.log" "${BUDGET[bench]}" "$BUILD/op-bench" --skip-llama
}

step_hf() {
  STREAM=1 run_step "transformers reads the trainer's --export-hf" "$LOGS/hf.log" "${BUDGET[hf]}" \
    bash "$SRC/bench/gpu/hf_transformers.sh" "$BUILD" "$LOGS/hf"
}

step_compare() {
  local tvp=$((BUDGET[compare] - 10))
  STREAM=1 run_step "trainer vs PyTorch (budget $tvp s)" "$LOGS/trainer_vs_pytorch.log" "${BUDGET[compare]}" \
    env TVP_BUDGET="$tvp" bash "$SRC/bench/gpu/trainer_vs_pytorch.sh" "$BUILD" "$LOGS/compare"
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
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STREAM=1 run_step "nccl-bench ($GPUS GPUs)" \
      "$LOGS/nccl_bench.log" "${BUDGET[nccl]}" "$mpirun" --oversubscribe --bind-to none \
      -x LD_LIBRARY_PATH -np "$GPUS" "$BUILD/nccl-bench" 256M 20
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
  if [[ $step != build && ${build_failed:-0} == 1 ]]; then  # its programs are missing or stale
    say "- not run: the build step failed"
    continue
  fi
  "step_$step" || { status=1; [[ $step == build ]] && build_failed=1; }
  pack || { say "- the logs could not be packed into $ARCHIVE"; status=1; }
done
say ""
say "total $(($(date +%s) - START)) s"
files=$(find "$OUT" -type f | wc -l)
if ((files > OUT_FILES_LIMIT)); then
  say "- $OUT holds $files files: a lent machine returns $OUT_FILES_LIMIT of a command"
  status=1
fi
exit $status
