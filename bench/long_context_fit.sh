#!/usr/bin/env bash
# The largest seq-len that fits a rank's memory at cp 1, 2 and 4, by the check the trainer runs
# before it allocates (long-context-fit: planner/memory_fit.hpp over the planner's memory model),
# and that model's figure against the peak RSS of real runs.
#
#   bash bench/long_context_fit.sh [BUILD_DIR]   (BUILD_DIR defaults to build/; needs trainer,
#                                                 long-context-fit and the sample data)
#
# 1. A llama of ~110M parameters (L12 H12 KV4 C768 F2048, vocabulary 32000), bf16, selective
#    recomputation, micro-batch 1, ZeRO off (so that only the activations change with cp), on a
#    rank of GIB GiB (--device-memory-gib's budget): the largest seq-len (a multiple of 2 cp) at
#    each cp, and its plan per part. It should grow about linearly with cp.
# 2. The figure confirmed: a small llama (L2 H8 KV4 C512, the sample data's vocabulary of 256)
#    with the same options at cp 2 on -np 2, one step at two seq-lens: the plan's figure per
#    rank against the largest peak RSS of the ranks (metrics.jsonl's peak_rss_mib). The process
#    without the model (MPI, OpenBLAS, HDF5, the loader) is outside the plan (a constant), so
#    the check is the growth between the sizes: measured / planned.
# Environment: GIB (20), SIZES ("2048 8192"). Writes BUILD_DIR/long-context-fit-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs trainer long-context-fit
bench_sample_data

gib=${GIB:-20}
read -r -a sizes <<< "${SIZES:-2048 8192}"
options=(--recompute selective --micro-batch 1 --zero 0)

printf 'arch = llama\nn-layer = 12\nn-head = 12\nn-kv-head = 4\nd-model = 768\nd-ff = 2048\nvocab-size = 32000\nprecision = bf16\n' \
  > "$scratch/llama110m.ini"
printf 'arch = llama\nn-layer = 2\nn-head = 8\nn-kv-head = 4\nd-model = 512\nvocab-size = 256\nprecision = bf16\n' \
  > "$scratch/small.ini"
{
  echo "# long-context fit, $(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "1. llama L12 H12 KV4 C768 F2048 V32000, bf16, recompute selective, micro-batch 1, ZeRO 0, $gib GiB per rank"
  "$build/long-context-fit" --config "$scratch/llama110m.ini" --gib "$gib" --cp 1,2,4 "${options[@]}"
  echo
  echo "2. plan vs peak RSS: llama L2 H8 KV4 C512 V256, bf16, recompute selective, micro-batch 1, cp 2 on -np 2, 1 step"
  printf "%-8s %12s %14s\n" seq-len "plan MiB" "peak RSS MiB"
  planned=() measured=()
  for T in "${sizes[@]}"; do
    plan=$("$build/long-context-fit" --config "$scratch/small.ini" --cp 2 --seq-len "$T" "${options[@]}" |
      sed -n 's/.*: \([0-9.]*\) MiB per rank.*/\1/p')
    "${mpirun[@]}" -np 2 "$build/trainer" --train-data "$data/train.h5" --config "$scratch/small.ini" \
      --seq-len "$T" --cp 2 --global-batch-size 1 --micro-batch-size 1 --recompute selective \
      --zero 0 --steps 1 --lr 1e-3 --sample-tokens 0 --eval-interval 0 --threads 1 \
      --peak-gflops 100 --out-dir "$scratch/run-$T" > "$scratch/run-$T.log" 2>&1 ||
      { cat "$scratch/run-$T.log"; exit 1; }
    rss=$(sed -n 's/.*"peak_rss_mib": \([0-9.]*\).*/\1/p' "$scratch/run-$T/metrics.jsonl" | tail -1)
    printf "%-8s %12.1f %14.1f\n" "$T" "$plan" "$rss"
    planned+=("$plan") measured+=("$rss")
  done
  awk -v p0="${planned[0]}" -v p1="${planned[-1]}" -v m0="${measured[0]}" -v m1="${measured[-1]}" \
    -v a="${sizes[0]}" -v b="${sizes[-1]}" 'BEGIN {
      printf "growth %s -> %s: planned %.1f MiB, measured %.1f MiB, measured / planned %.3f\n",
             a, b, p1 - p0, m1 - m0, (m1 - m0) / (p1 - p0) }'
} | tee "$results"
