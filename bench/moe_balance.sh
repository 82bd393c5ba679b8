#!/usr/bin/env bash
# How the routers balance the experts' loads, in one run: a small llama MoE (L4 H4 C128, 8
# experts of width 128, top-2, every layer MoE) trained STEPS steps on the sample corpus with
#   softmax-aux     the softmax router, load-balancing loss 0.001 (Mixtral's default)
#   softmax         the softmax router, no balancing at all
#   sigmoid         the sigmoid router, no balancing
#   sigmoid-bias    the sigmoid router balanced by the expert bias alone (DeepSeek-V3's
#                   auxiliary-loss-free balancing), rate RATE (Megatron-Core's default 0.001)
#   sigmoid-bias-x10  the same at 10 x RATE
# Per run, from metrics.jsonl: the imbalance (moe_imbalance: the worst layer's most tokens an
# expert got / the mean per expert; 1 = balanced) as the mean over the first and the last quarter
# of the steps; the mean loss of the last quarter (the cross-entropy alone); and the median step
# time after the first (warm-up), with its ratio to softmax-aux's (the routing's host code is
# the only difference). The machine is a shared VM: compare within one report.
#
#   bash bench/moe_balance.sh [BUILD_DIR]   (default build/; needs trainer and the sample data)
#
# Environment: STEPS (200), RATE (0.001), THREADS (1). Writes BUILD_DIR/moe-balance-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs trainer
bench_sample_data

steps=${STEPS:-200}
rate=${RATE:-0.001}
threads=${THREADS:-1}

run() {  # run NAME ARGS...: "imbalance_first imbalance_last loss_last step_ms"
  local name=$1; shift
  "${mpirun[@]}" -np 1 "$build/trainer" --train-data "$data/train.h5" --arch llama \
    --n-layer 4 --n-head 4 --d-model 128 --seq-len 64 --global-batch-size 8 --micro-batch-size 8 \
    --n-experts 8 --top-k 2 --moe-ff 128 --steps "$steps" --lr 1e-3 --sample-tokens 0 \
    --eval-interval 0 --log-interval "$steps" --threads "$threads" --peak-gflops 100 \
    --out-dir "$scratch/$name" "$@" > "$scratch/$name.log" 2>&1 || { cat "$scratch/$name.log"; exit 1; }
  local metrics=$scratch/$name/metrics.jsonl step
  step=$(step_times "$metrics" | awk '{print $1}' | median)
  sed -n 's/.*"loss": \([^,}]*\).*"moe_imbalance": \([^,}]*\).*/\1 \2/p' "$metrics" |
    awk -v s="$step" '{ loss[NR] = $1; imb[NR] = $2 } END {
      q = int(NR / 4); if (q < 1) q = 1
      for (i = 1; i <= q; ++i) { a += imb[i]; b += imb[NR - q + i]; l += loss[NR - q + i] }
      printf "%.3f %.3f %.4f %.2f\n", a / q, b / q, l / q, s }'
}
sigmoid=(--moe-router-score sigmoid --moe-aux-loss-coef 0)
rate10=$(awk -v r="$rate" 'BEGIN{print 10 * r}')
declare -A row
row[softmax-aux]=$(run softmax-aux --moe-aux-loss-coef 0.001)
row[softmax]=$(run softmax --moe-aux-loss-coef 0)
row[sigmoid]=$(run sigmoid "${sigmoid[@]}")
row[sigmoid-bias]=$(run sigmoid-bias "${sigmoid[@]}" --moe-expert-bias --moe-expert-bias-rate "$rate")
row[sigmoid-bias-x10]=$(run sigmoid-bias-x10 "${sigmoid[@]}" --moe-expert-bias \
  --moe-expert-bias-rate "$rate10")
{
  echo "# MoE load balance, llama L4 H4 C128 E8 top-2 Fe128 T64 batch 8, $steps steps, 1 rank x $threads thread(s), $(date -u +%F)"
  echo "# expert-bias rate $rate (x10: $rate10); imbalance = worst layer's max / mean tokens per expert"
  echo "# router            imbalance_first_q  imbalance_last_q  loss_last_q  step_ms  step/softmax-aux"
  read -r _ _ _ base <<< "${row[softmax-aux]}"
  for name in softmax-aux softmax sigmoid sigmoid-bias sigmoid-bias-x10; do
    read -r first last loss step <<< "${row[$name]}"
    awk -v n="$name" -v f="$first" -v l="$last" -v x="$loss" -v s="$step" -v b="$base" \
      'BEGIN{printf "%-18s %17s %17s %12s %8s %17.2f\n", n, f, l, x, s, s / b}'
  done
} | tee "$results"
