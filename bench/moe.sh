#!/usr/bin/env bash
# Mixture of experts with expert parallelism: step time, exposed communication (the all-to-alls'
# share) and per-rank memory of a Mixtral-shaped model scaled down at --ep 1, 2, 4, and the dense
# model with the same active parameters, in one run.
#
#   bash bench/moe.sh [BUILD_DIR]   (BUILD_DIR defaults to build/; needs trainer and the sample
#                                    data, make data)
#
# The model: llama L6 H8 KV2 C512 (GQA as Mixtral's 32/8), 8 experts of width 1024, top-2
# (about 100 M parameters with the GPT-2 vocabulary's tables); the dense model the same with one
# SwiGLU MLP of width 2048 = top-2 x 1024 (the active parameters of a token). SEQ_LEN 64, global
# batch 8, micro-batch 2, -np 4 (dp 4: one micro-batch per rank), STEPS steps (the first skipped
# as warm-up), medians over the steps of metrics.jsonl (rank 0's). The all-to-alls' exposed share
# is ep N's exposed_comm_ms minus ep 1's (the same gradient sync over dp otherwise; the experts'
# over the smaller expert-dp group), over ep N's step. Memory: the start-up line's parameters +
# gradients and optimizer state per rank, and the peak RSS of rank 0.
# The machine is a shared 2-core VM (4 ranks oversubscribe it): compare the ratios within one
# report, not times between reports. Environment: SEQ_LEN (64), STEPS (4), THREADS (1).
# Writes the report to BUILD_DIR/moe-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs trainer
bench_sample_data

seq_len=${SEQ_LEN:-64}
steps=${STEPS:-4}
threads=${THREADS:-1}

run() {  # run NAME ARGS...: "tokens/s step_ms exposed_comm_ms params_mib optimizer_mib rss_mib"
  local name=$1; shift
  "${mpirun[@]}" -np 4 "$build/trainer" --train-data "$data/train.h5" --arch llama --n-layer 6 \
    --n-head 8 --n-kv-head 2 --d-model 512 --seq-len "$seq_len" --global-batch-size 8 \
    --micro-batch-size 2 --steps "$steps" --lr 1e-3 --sample-tokens 0 --eval-interval 0 \
    --threads "$threads" --peak-gflops 100 --out-dir "$scratch/$name" "$@" \
    > "$scratch/$name.log" 2>&1 || { cat "$scratch/$name.log"; exit 1; }
  local times step exposed mem rss
  times=$(step_times "$scratch/$name/metrics.jsonl")
  step=$(awk '{print $1}' <<< "$times" | median)
  exposed=$(awk '{print $2}' <<< "$times" | median)
  mem=$(sed -n 's/.*parameters and gradients \([0-9.]*\) MiB | optimizer state \([0-9.]*\) MiB.*/\1 \2/p' \
        "$scratch/$name.log")
  rss=$(metric_max "$scratch/$name/metrics.jsonl" peak_rss_mib)
  awk -v s="$step" -v e="$exposed" -v t=$((8 * seq_len)) -v m="$mem" -v r="$rss" \
    'BEGIN{printf "%.0f %.1f %.1f %s %.0f\n", t / (s / 1000), s, e, m, r}'
}
metric_max() {  # metric_max FILE KEY: the largest value of KEY in metrics.jsonl
  sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1" | sort -g | tail -1
}
moe=(--n-experts 8 --top-k 2 --moe-ff 1024)
read -r dense_tps dense_step dense_exp dense_par dense_opt dense_rss <<< "$(run dense --d-ff 2048)"
read -r e1_tps e1_step e1_exp e1_par e1_opt e1_rss <<< "$(run ep1 "${moe[@]}")"
read -r e2_tps e2_step e2_exp e2_par e2_opt e2_rss <<< "$(run ep2 "${moe[@]}" --ep 2)"
read -r e4_tps e4_step e4_exp e4_par e4_opt e4_rss <<< "$(run ep4 "${moe[@]}" --ep 4)"
{
  echo "# MoE, llama L6 H8 KV2 C512 E8 top-2 Fe1024 T$seq_len, -np 4 (dp 4), $threads thread(s) per rank, $(date -u +%F)"
  echo "# layout  tokens/s  step_ms  exposed_comm_ms  params+grads_MiB  optimizer_MiB  rss_MiB  step/ep1  a2a_share"
  for row in "dense $dense_tps $dense_step $dense_exp $dense_par $dense_opt $dense_rss" \
             "ep1 $e1_tps $e1_step $e1_exp $e1_par $e1_opt $e1_rss" \
             "ep2 $e2_tps $e2_step $e2_exp $e2_par $e2_opt $e2_rss" \
             "ep4 $e4_tps $e4_step $e4_exp $e4_par $e4_opt $e4_rss"; do
    awk -v base="$e1_step" -v base_exp="$e1_exp" -v row="$row" 'BEGIN{
      split(row, f, " ")
      share = f[1] ~ /^ep[24]$/ ? sprintf("%.1f%%", 100 * (f[4] - base_exp) / f[3]) : "-"
      printf "%-6s %9s %8s %8s %10s %10s %8s %8.2f %8s\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7],
             f[3] / base, share }'
  done
} | tee "$results"
