#!/usr/bin/env bash
# The memory and bandwidth savers of mpitrain, measured (issue: mixed precision, ZeRO-1,
# gradient compression, recomputation):
#
#   bash bench/memory.sh [BUILD_DIR]     (BUILD_DIR defaults to build/; trainer built there)
#
# 1. Peak memory per rank, GPT-2 small (L12 H12 C768 V50304) and a Llama-style model of the same
#    width (L12 H12 KV4 C768 F2048 V32000), T=256, micro-batch 2, -np 2 --dp 2, 2 steps, for
#    precision fp32 / bf16 / bf16e x ZeRO-1 off/on x recompute none/selective/full: the measured
#    peak RSS (max over ranks, metrics.jsonl's peak_rss_mib) next to the trainer's own accounting
#    (parameters + gradients, optimizer state incl. fp32 master weights, activations; the host
#    scratch, metrics.jsonl's host_scratch_mib: the fp32 staging of 2-byte tensors). bf16 keeps
#    activations, activation gradients and the compute weights in 2 bytes; bf16e is the emulated
#    path (MPITRAIN_PRECISION_STORAGE=fp32: the same numbers in fp32 containers), what bf16 was
#    before 2-byte storage.
# 2. Throughput of bf16 and fp16 (and bf16e) against fp32 on the CPU: GPT-2 small, T=256, batch
#    4, one rank with 2 threads, median ms/step over STEPS steps (the first left out), in
#    alternating order.
# 3. Bytes per step of the data-parallel gradient sync per --grad-compress mode (metrics.jsonl's
#    dp_bytes: what this rank handed to MPI for other ranks), the tiny model at dp 2 and 4, and
#    each mode's mean loss over the last 10 of 100 steps against uncompressed.
# 4. The pages behind the CPU backend's tensors: part 2's run in fp32 and bf16 with --huge-pages
#    true (the default: 2 MiB transparent huge pages) and false (4 KiB pages), in alternating order;
#    median ms/step and off / on, with the kernel's transparent_hugepage setting.
#
# Parameter gradients, the fp32 master and the optimizer state stay 4 bytes, so bf16 saves 2 of
# fp32's 16 bytes per parameter less the 4 of its master (ZeRO-1 shards the master and the
# state), plus half of the activations. All numbers come from this one run on a shared 2-core VM:
# compare within the tables. Exit 0 unless a program fails.
# Environment: STEPS (4), COMPRESS_STEPS (100), PARTS ("1 2 3 4"), MODELS ("gpt2 llama"), ZERO
# ("0 1"), RECOMPUTE ("none selective full"). Writes BUILD_DIR/memory-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
steps=${STEPS:-4}
compress_steps=${COMPRESS_STEPS:-100}
bench_needs trainer
bench_sample_data

metric() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; }
run() {  # run NAME NP ARGS... (--precision bf16e: bf16 on the emulated path)
  local name=$1 np=$2; shift 2
  local storage=""
  [[ " $* " == *" --precision bf16e "* ]] && storage=fp32
  set -- "${@/#bf16e/bf16}"
  MPITRAIN_PRECISION_STORAGE=$storage "${mpirun[@]}" -x MPITRAIN_PRECISION_STORAGE -np "$np" "$build/trainer" --train-data "$data/train.h5" --sample-tokens 0 \
    --eval-interval 0 --peak-gflops 100 --warmup-steps 1 --lr 1e-3 --out-dir "$scratch/$name" \
    --overwrite "$@" > "$scratch/$name.log" 2>&1 || { cat "$scratch/$name.log"; exit 1; }
}
field() { sed -n "s/.*$2 \([0-9.]*\) MiB.*/\1/p" "$scratch/$1.log" | head -1; }

{
echo "mpitrain memory and bandwidth savers — $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
gpt2=(--arch gpt2 --n-layer 12 --n-head 12 --d-model 768 --vocab-size 50304)
llama=(--arch llama --n-layer 12 --n-head 12 --n-kv-head 4 --d-model 768 --d-ff 2048 --vocab-size 32000)
parts=${PARTS:-1 2 3 4}
if [[ " $parts " == *" 1 "* ]]; then
echo
echo "1. Peak memory per rank (MiB), -np 2 --dp 2, T=256, micro-batch 2"
printf "%-11s %-5s %-4s %-10s %12s %12s %12s %12s %12s\n" model prec zero recompute "params+grads" optimizer activations "host scratch" "peak RSS"
for model in ${MODELS:-gpt2 llama}; do
  declare -n args=$model
  for prec in fp32 bf16 bf16e; do for zero in ${ZERO:-0 1}; do for rc in ${RECOMPUTE:-none selective full}; do
    name="mem-$model-$prec-$zero-$rc"
    run "$name" 2 "${args[@]}" --seq-len 256 --global-batch-size 4 --micro-batch-size 2 --dp 2 \
      --steps 2 --threads 1 --precision $prec --zero $zero --recompute $rc
    printf "%-11s %-5s %-4s %-10s %12s %12s %12s %12s %12s\n" "$model" $prec $zero $rc \
      "$(field "$name" "parameters and gradients")" "$(field "$name" "optimizer state")" \
      "$(field "$name" "activations")" "$(metric "$scratch/$name/metrics.jsonl" host_scratch_mib | tail -1)" \
      "$(metric "$scratch/$name/metrics.jsonl" peak_rss_mib | tail -1)"
  done; done; done
done
fi
if [[ " $parts " == *" 2 "* ]]; then
echo
echo "2. Throughput by precision, GPT-2 small T=256 batch 4, 1 rank x 2 threads ($steps steps, first left out)"
for round in 1 2; do for prec in fp32 bf16 fp16 bf16e; do
  run "tput-$prec-$round" 1 "${gpt2[@]}" --seq-len 256 --global-batch-size 4 --micro-batch-size 4 \
    --steps "$steps" --threads 2 --precision $prec
done; done
base=""
printf "%-6s %10s %10s %14s\n" prec ms/step tokens/s "vs fp32"
for prec in fp32 bf16 fp16 bf16e; do
  ms=$(for r in 1 2; do metric "$scratch/tput-$prec-$r/metrics.jsonl" step_ms | tail -n +2; done | median)
  [ -n "$base" ] || base=$ms
  printf "%-6s %10.1f %10.0f %13.2fx\n" $prec "$ms" "$(awk -v m="$ms" 'BEGIN{print 1024000/m}')" \
    "$(awk -v a="$base" -v b="$ms" 'BEGIN{print a/b}')"
done
fi
if [[ " $parts " == *" 3 "* ]]; then
echo
echo "3. Gradient compression, tiny model (L2 H4 C64 T32), $compress_steps steps"
printf "%-4s %-6s %14s %10s %12s %12s\n" dp mode "bytes/step" "vs none" "last-10 loss" "vs none"
for dp in 2 4; do
  ref_bytes="" ref_loss=""
  for mode in none bf16 fp16 int8 topk; do
    name="cmp-$dp-$mode"
    run "$name" $dp --n-layer 2 --n-head 4 --d-model 64 --seq-len 32 --global-batch-size 8 \
      --micro-batch-size 2 --lr 3e-3 --threads 1 --steps "$compress_steps" --grad-compress $mode
    bytes=$(metric "$scratch/$name/metrics.jsonl" dp_bytes | median)
    loss=$(metric "$scratch/$name/metrics.jsonl" loss | tail -10 | awk '{s+=$1} END{printf "%.5f", s/NR}')
    [ -n "$ref_bytes" ] || { ref_bytes=$bytes; ref_loss=$loss; }
    printf "%-4s %-6s %14.0f %10.3f %12s %+11.2f%%\n" $dp $mode "$bytes" \
      "$(awk -v a="$bytes" -v b="$ref_bytes" 'BEGIN{print a/b}')" "$loss" \
      "$(awk -v a="$loss" -v b="$ref_loss" 'BEGIN{print 100*(a-b)/b}')"
  done
done
fi
if [[ " $parts " == *" 4 "* ]]; then
echo
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo "absent")
echo "4. Huge pages, part 2's run ($steps steps, first left out); transparent_hugepage: $thp"
for round in 1 2; do for prec in fp32 bf16; do for pages in true false; do
  run "pages-$prec-$pages-$round" 1 "${gpt2[@]}" --seq-len 256 --global-batch-size 4 \
    --micro-batch-size 4 --steps "$steps" --threads 2 --precision $prec --huge-pages $pages
done; done; done
# median ms/step of both rounds of precision $1 with --huge-pages $2, each first step left out
pages_ms() { for r in 1 2; do metric "$scratch/pages-$1-$2-$r/metrics.jsonl" step_ms | tail -n +2; done | median; }
printf "%-6s %12s %12s %10s\n" prec "on ms/step" "off ms/step" "off / on"
for prec in fp32 bf16; do
  on=$(pages_ms $prec true)
  off=$(pages_ms $prec false)
  printf "%-6s %12.1f %12.1f %9.3fx\n" $prec "$on" "$off" "$(awk -v a="$off" -v b="$on" 'BEGIN{print a/b}')"
done
fi
} | tee "$results"
