#!/usr/bin/env bash
# Single-rank CPU training throughput of mpitrain against this machine's sgemm rate and PyTorch.
#
#   bash bench/run.sh [BUILD_DIR]        (what `make bench` runs; BUILD_DIR defaults to build/)
#
# For 1 and 2 threads: measures OpenBLAS sgemm (n=2048) with bench's sgemm-rate, then trains the
# tiny GPT-2 (L4 H4 C128 V512 T64 B4, 31 steps) and GPT-2 small (L12 H12 C768 V50304 T256 B4,
# 5 steps) with `mpirun -np 1 trainer --threads N --peak-gflops <that sgemm rate>`, so MFU is the
# fraction of this machine's sgemm rate at that thread count. Step time is the median of
# metrics.jsonl's step_ms without the first (warm-up) step. Everything is measured in this one run
# and reported as ratios; the machine is shared and noisy, so compare numbers within a table.
#
# PyTorch column: bench/pytorch_gpt2.py on the same shapes if a python with torch is found
# ($PYTHON, python3, /usr/bin/python3); otherwise the reference figures (measured earlier) are shown, labelled
# "reference (not measured here)". Enable it with: apt-get install python3-torch
#
# Environment: PYTHON (interpreter for the PyTorch column), TINY_STEPS (default 31),
# SMALL_STEPS (default 5), SKIP_PYTORCH=1.
# Writes the table to BUILD_DIR/bench-results.txt. The goals in the footer are informational:
# the script exits 0 whether they are met or not, non-zero only if something fails to run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
data=$build/data
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-bench.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
results=$build/bench-results.txt
tiny_steps=${TINY_STEPS:-31}
small_steps=${SMALL_STEPS:-5}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One rank, threads on every core: Open MPI would otherwise bind a lone rank to one core.
mpirun=(mpirun --oversubscribe --bind-to none -np 1)

for exe in trainer sgemm-rate prepare-data; do
  if [[ ! -x $build/$exe ]]; then
    echo "bench: $build/$exe not found; build first (make build BUILD=$build)" >&2
    exit 2
  fi
done
if [[ ! -f $data/train.h5 ]]; then
  BUILD_DIR=$build bash "$repo/tools/prepare-sample-data.sh" "$data"
fi

# Reference figures measured earlier on this machine type (2-core Zen4): PyTorch 1.13 (Debian
# python3-torch) and llm.c's CPU trainer (1 thread, -Ofast).
declare -A ref_pytorch_ms=([tiny]=30 [gpt2-small]=7300)
ref_llmc_tiny_ms=68

declare -A model_args=(
  [tiny]="--n-layer 4 --n-head 4 --d-model 128 --vocab-size 512 --seq-len 64"
  [gpt2-small]="--n-layer 12 --n-head 12 --d-model 768 --vocab-size 50304 --seq-len 256"
)
declare -A steps=([tiny]=$tiny_steps [gpt2-small]=$small_steps)
configs=(tiny gpt2-small)
thread_counts=(1 2)

python=""
if [[ ${SKIP_PYTORCH:-0} != 1 ]]; then
  for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
    if [[ -n $candidate ]] && "$candidate" -c 'import torch' > /dev/null 2>&1; then
      python=$candidate
      break
    fi
  done
fi
if [[ -n $python ]]; then
  pytorch_label="PyTorch $("$python" -c 'import torch; print(torch.__version__)') measured here"
else
  echo "bench: PyTorch not importable; the PyTorch column is skipped and the reference figures"
  echo "       (PyTorch 1.13 on this machine type, not measured here) are shown instead."
  echo "       To measure it: apt-get install python3-torch (or set PYTHON to a python with torch)."
  pytorch_label="reference (not measured here): PyTorch 1.13 (Debian python3-torch) measured earlier on this 2-core Zen4 machine type"
fi

# median FIELD FILE: median of FIELD over the step records of metrics.jsonl, first step skipped.
median() {
  local values
  values=$(grep '"step_ms"' "$2" | tail -n +2 | grep -o "\"$1\": [^,}]*" | awk '{print $2}' |
           sort -g)
  if [[ -z $values ]]; then
    echo "bench: no step records in $2" >&2
    return 1
  fi
  awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }' \
    <<< "$values"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A sgemm ms tps mfu torch_ms
for threads in "${thread_counts[@]}"; do
  for config in "${configs[@]}"; do
    key=$config/$threads
    # Measured right before each training run: on a shared machine the rate drifts with load.
    echo "bench: sgemm rate, $threads thread(s), n=2048"
    sgemm[$key]=$("$build/sgemm-rate" --threads "$threads" --n 2048 --repeats 5)
    echo "bench:   ${sgemm[$key]} GFLOP/s"
    out=$scratch/$config-t$threads
    echo "bench: mpitrain $config, $threads thread(s), ${steps[$config]} steps"
    # shellcheck disable=SC2086  # model_args holds several words on purpose
    if ! "${mpirun[@]}" "$build/trainer" ${model_args[$config]} --arch gpt2 \
         --global-batch-size 4 --micro-batch-size 4 --steps "${steps[$config]}" \
         --threads "$threads" --peak-gflops "${sgemm[$key]}" --lr 1e-4 \
         --train-data "$data/train.h5" --val-data '' --eval-interval 0 --sample-tokens 0 \
         --out-dir "$out" --overwrite > "$scratch/$config-t$threads.log" 2>&1; then
      cat "$scratch/$config-t$threads.log" >&2
      echo "bench: the trainer failed ($config, $threads threads)" >&2
      exit 1
    fi
    ms[$key]=$(median step_ms "$out/metrics.jsonl")
    tps[$key]=$(median tokens_per_s "$out/metrics.jsonl")
    mfu[$key]=$(median mfu "$out/metrics.jsonl")
    echo "bench:   ${ms[$key]} ms/step"
    if [[ -n $python ]]; then
      echo "bench: PyTorch $config, $threads thread(s)"
      # The same number of timed steps as the trainer's (its first step is the warm-up too).
      torch_ms[$key]=$("$python" "$repo/bench/pytorch_gpt2.py" --config "$config" \
                         --threads "$threads" --steps "$((${steps[$config]} - 1))" |
                       awk '/^ms_per_step/ {print $2}')
      if [[ -z ${torch_ms[$key]} ]]; then
        echo "bench: bench/pytorch_gpt2.py printed no ms_per_step ($config, $threads threads)" >&2
        exit 1
      fi
      echo "bench:   ${torch_ms[$key]} ms/step"
    else
      torch_ms[$key]=${ref_pytorch_ms[$config]}
    fi
  done
done

{
  echo "# mpitrain single-rank CPU training benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
  echo "# CPU: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores;" \
       "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ms/step, tokens/s, MFU: medians over steps 2..N of metrics.jsonl (mpirun -np 1);"
  echo "# MFU = model FLOPs (6N + 12 L d T per token) / sgemm rate (n=2048, same thread count) measured"
  echo "#       just before that row's training run"
  echo "# PyTorch column: $pytorch_label"
  echo "#"
  printf '# %-10s %7s %6s %10s %10s %9s %9s %6s %11s %9s\n' \
    config threads steps ms/step tokens/s "sgemm" "model" MFU "PyTorch" "vs PyTorch"
  printf '# %-10s %7s %6s %10s %10s %9s %9s %6s %11s %9s\n' \
    "" "" "" "" "" "GFLOP/s" "GFLOP/s" "" "ms/step" "x faster"
  for config in "${configs[@]}"; do
    for threads in "${thread_counts[@]}"; do
      key=$config/$threads
      awk -v c="$config" -v t="$threads" -v s="${steps[$config]}" -v ms="${ms[$key]}" \
          -v tps="${tps[$key]}" -v peak="${sgemm[$key]}" -v mfu="${mfu[$key]}" \
          -v pt="${torch_ms[$key]}" 'BEGIN {
        printf "  %-10s %7d %6d %10.1f %10.0f %9.1f %9.1f %6.3f %11.1f %9.2f\n",
               c, t, s, ms, tps, peak, mfu * peak, mfu, pt, pt / ms }'
    done
  done
  echo "#"
  echo "# Goals (informational; the machine is shared and noisy):"
  awk -v mfu="${mfu[gpt2-small/2]}" 'BEGIN {
    printf "#  %-4s GPT-2 small MFU >= 0.65 of the 2-thread sgemm rate: %.3f\n",
           (mfu >= 0.65 ? "PASS" : "MISS"), mfu }'
  for config in "${configs[@]}"; do
    for threads in "${thread_counts[@]}"; do
      key=$config/$threads
      awk -v c="$config" -v t="$threads" -v ms="${ms[$key]}" -v pt="${torch_ms[$key]}" 'BEGIN {
        printf "#  %-4s faster than PyTorch, %s, %d thread(s): %.1f vs %.1f ms/step (%.2fx)\n",
               (ms < pt ? "PASS" : "MISS"), c, t, ms, pt, pt / ms }'
    done
  done
  best=1
  for threads in "${thread_counts[@]}"; do
    if awk -v a="${ms[tiny/$threads]}" -v b="${ms[tiny/$best]}" 'BEGIN { exit !(a < b) }'; then
      best=$threads
    fi
  done
  awk -v ms="${ms[tiny/$best]}" -v t="$best" 'BEGIN {
    printf "#  %-4s tiny well under 30 ms/step (<= 15, best thread count): %.1f ms/step at %d thread(s)\n",
           (ms <= 15 ? "PASS" : "MISS"), ms, t }'
  awk -v ms="${ms[tiny/1]}" -v llmc="$ref_llmc_tiny_ms" 'BEGIN {
    printf "#  info tiny, 1 thread vs llm.c CPU trainer (%d ms/step, reference (not measured here)): %.2fx faster\n",
           llmc, llmc / ms }'
  echo "# Note: PyTorch's OpenBLAS may use both cores even at torch.set_num_threads(1) (measured earlier on this machine type)."
  busy=$(awk -v a="$load_start" -v b="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN { split(a, s, " ");
    print (s[1] > 1.0 || b > 2.5) ? 1 : 0 }')
  over=0
  for key in "${!mfu[@]}"; do
    if awk -v m="${mfu[$key]}" 'BEGIN { exit !(m > 1.0) }'; then over=1; fi
  done
  if [[ $busy == 1 || $over == 1 ]]; then
    echo "# WARNING: other work was running (load average above) or an MFU exceeds 1 (the sgemm rate"
    echo "#          and the training run saw different load): multi-thread rows are unreliable; rerun"
    echo "#          on an idle machine."
  fi
} | tee "$results"
echo "bench: table saved to $results"
