#!/usr/bin/env bash
# Context parallelism on the same ranks: tokens/s at a long sequence with --cp 2 against
# --dp 2 (cp 1), and the exposed share of the ring's communication.
#
#   bash bench/context_parallel.sh [BUILD_DIR]   (BUILD_DIR defaults to build/; needs trainer
#                                                 and the sample data, make data)
#
# A llama (L2 H4 KV2 C128, SEQ_LEN 4096 by default), global batch 2, micro-batch 1, STEPS steps
# (the first skipped as warm-up), -np 2 each: --dp 2 (each rank a whole sequence, attention over
# T keys) and --cp 2 (both ranks on each sequence, half its rows, the K/V ring). Both sum their
# gradients over 2 ranks, so the difference of their exposed_comm_ms is the ring's exposed
# communication; its share of the cp step is reported. Medians over the steps of metrics.jsonl.
# The machine is a shared 2-core VM: compare the ratios within one report, not times between
# reports. Environment: SEQ_LEN (4096), STEPS (4), THREADS (1).
# Writes the report to BUILD_DIR/context-parallel-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs trainer
bench_sample_data

seq_len=${SEQ_LEN:-4096}
steps=${STEPS:-4}
threads=${THREADS:-1}

run() {  # run NAME ARGS...: the median "tokens/s step_ms exposed_comm_ms"
  local name=$1; shift
  "${mpirun[@]}" -np 2 "$build/trainer" --train-data "$data/train.h5" --arch llama --n-layer 2 \
    --n-head 4 --n-kv-head 2 --d-model 128 --seq-len "$seq_len" --max-seq-len "$seq_len" \
    --global-batch-size 2 --micro-batch-size 1 --steps "$steps" --lr 1e-3 --sample-tokens 0 \
    --eval-interval 0 --threads "$threads" --peak-gflops 100 --out-dir "$scratch/$name" "$@" \
    > "$scratch/$name.log" 2>&1 || { cat "$scratch/$name.log"; exit 1; }
  local times step exposed
  times=$(step_times "$scratch/$name/metrics.jsonl")
  step=$(awk '{print $1}' <<< "$times" | median)
  exposed=$(awk '{print $2}' <<< "$times" | median)
  awk -v s="$step" -v e="$exposed" -v t=$((2 * seq_len)) 'BEGIN{printf "%.0f %.1f %.1f\n", t / (s / 1000), s, e}'
}
read -r dp_tps dp_step dp_exposed <<< "$(run dp2 --dp 2)"
read -r cp_tps cp_step cp_exposed <<< "$(run cp2 --cp 2)"
{
  echo "# context parallelism, llama L2 H4 KV2 C128 T$seq_len, -np 2, $threads thread(s) per rank, $(date -u +%F)"
  echo "# layout   tokens/s   step_ms   exposed_comm_ms"
  echo "dp2 cp1    $dp_tps   $dp_step   $dp_exposed"
  echo "dp1 cp2    $cp_tps   $cp_step   $cp_exposed"
  awk -v a="$cp_tps" -v b="$dp_tps" -v ce="$cp_exposed" -v de="$dp_exposed" -v cs="$cp_step" 'BEGIN{
    printf "cp2 / cp1 tokens/s: %.2f\n", a / b
    r = ce - de; if (r < 0) r = 0
    printf "ring exposed: %.1f ms per step, %.1f%% of the cp step\n", r, 100 * r / cs }'
} | tee "$results"
