#!/usr/bin/env bash
# 3D-parallelism numbers for mpitrain: memory per rank by layout, exposed data-parallel
# communication with and without bucket overlap, and the bus bandwidth of the trainer's gradient
# sync against plain MPI_Allreduce.
#
#   bash bench/parallel.sh [BUILD_DIR]      (BUILD_DIR defaults to build/; needs trainer,
#                                            prepare-data and grad-sync-bench built there)
#
# 1. Memory: a small GPT-2 (L8 H8 C256 V512 T64, global batch 8, micro-batch 2, 2 steps) at the
#    layouts (dp,tp,pp) in LAYOUTS; the trainer's start-up "per rank (at most)" line (parameters
#    and gradients + optimizer state, the AdamW state, of the largest rank) against the
#    single-rank figure and 1/(tp*pp).
# 2. Exposed communication at -np 2 --dp 2: L8 H8 C384 V512 T64, DP_STEPS steps, step 1 skipped,
#    with --bucket-mb 1 (many buckets started during backward), the default 25 (for reference)
#    and --bucket-mb 100000 (one bucket: the whole sum after backward, no overlap), DP_REPEATS
#    runs each in alternating order; medians over the pooled steps of step_ms, exposed_comm_ms and
#    exposed_comm_ms / step_ms (metrics.jsonl).
# 3. grad-sync-bench (bench/grad_sync_bench.cpp) at -np 2 and 4: GradBuckets (25 MiB buckets)
#    vs MPI_Allreduce of 4..256 MiB, busbw as nccl-tests, goal trainer >= 90% of MPI.
# 4. grad-sync-bench --modes at -np 2 and 4: the sync per mode (fp32 all-reduce, ZeRO-1
#    reduce-scatter + all-gather, bf16, fp16, int8, topk): bytes handed to MPI per step (measured
#    by the communicator), ratio to fp32, time and busbw of COMPRESS_SIZES.
# 5. The trainer per mode (--zero 1 / --grad-compress) on a tiny GPT-2 (L2 H4 C64 V512 T64),
#    COMPRESS_STEPS steps at dp 2 and 4: dp_bytes per step (metrics.jsonl, median), final loss and
#    validation loss, and their difference to the uncompressed run.
#
# All numbers of a table come from this one run; the machine is a shared, noisy 2-core VM, so
# compare ratios within the report, not times between reports. Goals are informational: the exit
# code is 0 unless a program fails or grad-sync-bench finds a wrong element (then 1); 2 = usage.
# Environment: LAYOUTS ("dp,tp,pp ..."), DP_STEPS (6), DP_REPEATS (3), SYNC_RANKS ("2 4"),
# SYNC_SIZES (4M,16M,64M,256M), SYNC_ITERS (7), COMPRESS_MODES ("none zero bf16 fp16 int8 topk"),
# COMPRESS_SIZES (4M,64M), COMPRESS_STEPS (100).
# Writes the report to BUILD_DIR/parallel-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
read -r -a layouts <<< "${LAYOUTS:-1,1,1 2,1,1 1,2,1 1,1,2 1,2,2 2,2,2 1,4,1 1,1,4 1,4,2}"
dp_steps=${DP_STEPS:-6}
dp_repeats=${DP_REPEATS:-3}
read -r -a sync_ranks <<< "${SYNC_RANKS:-2 4}"
sync_sizes=${SYNC_SIZES:-4M,16M,64M,256M}
sync_iters=${SYNC_ITERS:-7}
read -r -a compress_modes <<< "${COMPRESS_MODES:-none zero bf16 fp16 int8 topk}"
compress_sizes=${COMPRESS_SIZES:-4M,64M}
compress_steps=${COMPRESS_STEPS:-100}
if (( dp_steps < 2 || dp_repeats < 1 || sync_iters < 1 || compress_steps < 1 )); then
  echo "parallel: DP_STEPS >= 2, DP_REPEATS >= 1, SYNC_ITERS >= 1 and COMPRESS_STEPS >= 1" >&2
  exit 2
fi
if [[ ${compress_modes[0]:-} != none ]]; then
  echo "parallel: COMPRESS_MODES must start with none (the reference)" >&2
  exit 2
fi
bench_needs trainer prepare-data grad-sync-bench
bench_sample_data

common=(--arch gpt2 --seq-len 64 --vocab-size 512 --global-batch-size 8 --micro-batch-size 2
        --threads 1 --sample-tokens 0 --eval-interval 0 --peak-gflops 100
        --train-data "$data/train.h5" --overwrite)
mem_model=(--n-layer 8 --n-head 8 --d-model 256 --steps 2)
dp_model=(--n-layer 8 --n-head 8 --d-model 384 --steps "$dp_steps")

# train NAME NP ARGS...: runs the trainer into $scratch/NAME (log $scratch/NAME.log).
train() {
  local name=$1 np=$2
  shift 2
  if ! "${mpirun[@]}" -np "$np" "$build/trainer" "${common[@]}" "$@" \
       --out-dir "$scratch/$name" > "$scratch/$name.log" 2>&1; then
    cat "$scratch/$name.log" >&2
    echo "parallel: the trainer failed ($name: -np $np $*)" >&2
    exit 1
  fi
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 1. memory per rank by layout ----------------------------------------------------------------
declare -A mib
for layout in "${layouts[@]}"; do
  IFS=, read -r dp tp pp <<< "$layout"
  np=$((dp * tp * pp))
  echo "parallel: memory, dp $dp tp $tp pp $pp ($np ranks)"
  train "mem-$dp-$tp-$pp" "$np" "${mem_model[@]}" --dp "$dp" --tp "$tp" --pp "$pp"
  mib[$layout]=$(sed -n 's/^per rank (at most): parameters and gradients \([0-9.]*\) MiB | optimizer state \([0-9.]*\) MiB.*/\1 \2/p' \
                   "$scratch/mem-$dp-$tp-$pp.log" | awk '{ print $1 + $2 }')
  if [[ -z ${mib[$layout]} ]]; then
    echo "parallel: no 'per rank (at most)' line in the trainer's output (dp $dp tp $tp pp $pp)" >&2
    exit 1
  fi
done
model_line=$(grep -m1 '^mpitrain ' "$scratch/mem-${layouts[0]//,/-}.log" || true)

# ---- 2. exposed communication at dp 2, overlapped buckets vs one bucket --------------------------
dp_configs=(overlap default one-bucket)
declare -A bucket_mb=([overlap]=1 [default]=25 [one-bucket]=100000) buckets
for config in "${dp_configs[@]}"; do : > "$scratch/dp-$config.steps"; done
for ((rep = 1; rep <= dp_repeats; rep++)); do
  # Alternate the order so that drifting load does not favour one configuration.
  if ((rep % 2)); then order=(overlap default one-bucket); else order=(one-bucket default overlap); fi
  for config in "${order[@]}"; do
    echo "parallel: dp 2, --bucket-mb ${bucket_mb[$config]} ($config), run $rep of $dp_repeats"
    train "dp-$config-$rep" 2 "${dp_model[@]}" --dp 2 --tp 1 --pp 1 \
      --bucket-mb "${bucket_mb[$config]}"
    step_times "$scratch/dp-$config-$rep/metrics.jsonl" >> "$scratch/dp-$config.steps"
    buckets[$config]=$(sed -n 's/.*| \([0-9]*\) gradient buckets.*/\1/p' \
                         "$scratch/dp-$config-$rep.log")
  done
done
dp_model_line=$(grep -m1 '^mpitrain ' "$scratch/dp-overlap-1.log" || true)
declare -A step_med comm_med frac_med nsteps
for config in "${dp_configs[@]}"; do
  f=$scratch/dp-$config.steps
  nsteps[$config]=$(wc -l < "$f")
  step_med[$config]=$(awk '{ print $1 }' "$f" | median)
  comm_med[$config]=$(awk '{ print $2 }' "$f" | median)
  frac_med[$config]=$(awk '{ print ($1 > 0 ? $2 / $1 : 0) }' "$f" | median)
done

# ---- 3. bus bandwidth: GradBuckets vs MPI_Allreduce -----------------------------------------------
sync_status=0
for np in "${sync_ranks[@]}"; do
  echo "parallel: grad-sync-bench, $np ranks, $sync_sizes"
  if ! "${mpirun[@]}" -np "$np" "$build/grad-sync-bench" --sizes "$sync_sizes" \
       --iters "$sync_iters" > "$scratch/sync-$np.log" 2>&1; then
    sync_status=1
    echo "parallel: grad-sync-bench failed or found wrong elements at $np ranks" >&2
  fi
done

# ---- 4. the sync per mode: bytes and bandwidth -----------------------------------------------------
modes_csv=$(IFS=,; echo "${compress_modes[*]}")
for np in "${sync_ranks[@]}"; do
  echo "parallel: grad-sync-bench --modes $modes_csv, $np ranks, $compress_sizes"
  if ! "${mpirun[@]}" -np "$np" "$build/grad-sync-bench" --modes "$modes_csv" \
       --sizes "$compress_sizes" --iters "$sync_iters" > "$scratch/modes-$np.log" 2>&1; then
    sync_status=1
    echo "parallel: grad-sync-bench --modes failed or found wrong elements at $np ranks" >&2
  fi
done

# ---- 5. the trainer per mode: bytes per step and final loss ---------------------------------------
mode_args() {  # the trainer flags of a mode
  case $1 in
    none) echo "--zero 0 --grad-compress none" ;;
    zero) echo "--zero 1 --grad-compress none" ;;
    *) echo "--zero 0 --grad-compress $1" ;;
  esac
}
tiny_model=(--n-layer 2 --n-head 4 --d-model 64 --lr 3e-3 --warmup-steps 2
            --val-data "$data/val.h5" --eval-interval 0 --eval-samples 16 --steps "$compress_steps")
declare -A mode_bytes mode_loss mode_val
for np in "${sync_ranks[@]}"; do
  for mode in "${compress_modes[@]}"; do
    echo "parallel: trainer, dp $np, $mode, $compress_steps steps"
    # shellcheck disable=SC2046
    train "mode-$np-$mode" "$np" "${tiny_model[@]}" --dp "$np" --tp 1 --pp 1 $(mode_args "$mode")
    f=$scratch/mode-$np-$mode/metrics.jsonl
    mode_bytes[$np,$mode]=$(sed -n 's/.*"dp_bytes": \([0-9]*\).*/\1/p' "$f" | median)
    mode_loss[$np,$mode]=$(sed -n 's/.*"loss": \([^,}]*\).*/\1/p' "$f" | tail -n 1)
    mode_val[$np,$mode]=$(sed -n 's/.*"val_loss": \([^,}]*\).*/\1/p' "$f" | tail -n 1)
  done
done
mode_model_line=$(grep -m1 '^mpitrain ' "$scratch/mode-${sync_ranks[0]}-none.log" || true)

# ---- the report ------------------------------------------------------------------------------------
{
  echo "# mpitrain 3D-parallelism benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
  echo "# CPU: $(cpu_field "model name"), $(nproc) cores;" \
       "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(mpirun --version 2>/dev/null | head -n 1); mpirun --oversubscribe --bind-to none, 1 thread per rank"
  echo "# Everything below was measured in this one run; the machine is shared and noisy: compare"
  echo "# ratios within a table."
  echo "#"
  echo "# == 1. Memory per rank by layout =="
  echo "# model: ${model_line:-?}"
  echo "# trainer ${mem_model[*]} --global-batch-size 8 --micro-batch-size 2; MiB per rank ="
  echo "# parameters + gradients + AdamW m and v (4 x 4 bytes per parameter) of the largest rank."
  printf '# %-10s %5s %12s %16s %10s %8s\n' "(dp,tp,pp)" ranks "MiB per rank" \
    "ratio to 1 rank" "1/(tp*pp)" "excess"
  base=${mib[1,1,1]:-${mib[${layouts[0]}]}}
  for layout in "${layouts[@]}"; do
    IFS=, read -r dp tp pp <<< "$layout"
    awk -v l="($layout)" -v n="$((dp * tp * pp))" -v m="${mib[$layout]}" -v b="$base" \
        -v tp="$tp" -v pp="$pp" 'BEGIN {
      ideal = 1 / (tp * pp); r = m / b
      printf "  %-10s %5d %12.1f %16.3f %10.3f %7.1f%%\n", l, n, m, r, ideal, 100 * (r / ideal - 1) }'
  done
  echo "# excess = ratio / (1/(tp*pp)) - 1. Data parallelism replicates everything (no ZeRO), so dp"
  echo "# alone leaves the ratio at 1. It tracks 1/(tp*pp) but stays a bit above it: tensor"
  echo "# parallelism splits the matrices and the (vocab-parallel) token embedding but replicates the"
  echo "# position embedding, the LayerNorms and the row-parallel output biases on every tp rank; with"
  echo "# pipeline stages the first stage holds the token and position embeddings besides its blocks"
  echo "# and the last the final LayerNorm and a copy of the tied token embedding (the LM head). The"
  echo "# figure is the largest rank's (here a first or last stage)."
  echo "#"
  echo "# == 2. Exposed communication, -np 2 --dp 2 (data parallelism only) =="
  echo "# model: ${dp_model_line:-?}"
  echo "# trainer ${dp_model[*]} --global-batch-size 8 --micro-batch-size 2 --threads 1;"
  echo "# each configuration run $dp_repeats times (alternating), step 1 of each run skipped, medians over"
  echo "# the pooled steps. exposed_comm_ms = time blocked on communication not hidden by compute."
  echo "# --bucket-mb 1 (${buckets[overlap]:-?} buckets for this small model) is the overlapped case: its buckets"
  echo "# start during backward; the default 25 gives only ${buckets[default]:-?} buckets here (shown for reference);"
  echo "# --bucket-mb 100000 is one bucket, summed after backward: no overlap."
  printf '# %-22s %8s %6s %11s %15s %16s\n' configuration buckets steps "step_ms" "exposed_comm_ms" \
    "exposed/step"
  for config in "${dp_configs[@]}"; do
    awk -v c="--bucket-mb ${bucket_mb[$config]}" -v b="${buckets[$config]:-?}" \
        -v n="${nsteps[$config]}" -v s="${step_med[$config]}" -v cm="${comm_med[$config]}" \
        -v f="${frac_med[$config]}" 'BEGIN {
      printf "  %-22s %8s %6d %11.1f %15.1f %16.3f\n", c, b, n, s, cm, f }'
  done
  awk -v a="${frac_med[overlap]}" -v b="${frac_med[one-bucket]}" \
      -v ca="${comm_med[overlap]}" -v cb="${comm_med[one-bucket]}" \
      -v sa="${step_med[overlap]}" -v sb="${step_med[one-bucket]}" 'BEGIN {
    printf "# --bucket-mb 1 vs one bucket: exposed_comm_ms/step_ms %.3f vs %.3f; exposed_comm_ms %.1f vs %.1f;\n",
           a, b, ca, cb
    printf "#   step_ms ratio (buckets / one bucket) %.3f, i.e. %.1f ms per step less\n",
           (sb > 0 ? sa / sb : 0), sb - sa }'
  echo "# Note: each rank owns one of the 2 cores, so nothing moves data while backward computes except"
  echo "# the ranks themselves: Open MPI's shared-memory transport progresses non-blocking collectives"
  echo "# (MPI_Iallreduce, libnbc) only inside MPI calls. Overlap therefore rests on MPI progress:"
  echo "# GradBuckets::ready_from calls progress() (MPI_Testall on the started buckets) once per layer"
  echo "# of backward, and the copying done inside those calls counts as compute, not as exposed_comm_ms."
  echo "# exposed_comm_ms measures what is left exposed; step_ms is the end-to-end effect. Both as measured."
  echo "#"
  echo "# == 3. Bus bandwidth: trainer's sync (GradBuckets, 25 MiB buckets) vs MPI_Allreduce =="
  echo "# grad-sync-bench --sizes $sync_sizes --iters $sync_iters; median of the slowest rank;"
  echo "# busbw = (bytes / t) x 2(n-1)/n GB/s (nccl-tests); ratio = trainer busbw / MPI busbw; the"
  echo "# three operations are interleaved in one run; #wrong counts wrong sums (must be 0)."
  echo "# Iallreduce (diagnostic) = one MPI_Iallreduce of the whole buffer + MPI_Wait: what GradBuckets"
  echo "# issues, without the bucketing."
  for np in "${sync_ranks[@]}"; do
    echo "#"
    echo "# -- $np ranks --"
    cat "$scratch/sync-$np.log"
  done
  echo "#"
  echo "# Reading: where the trainer column sits below MPI, compare it with the Iallreduce column: if"
  echo "# the single non-blocking call is as slow as the bucketed sync, the gap is Open MPI's non-blocking"
  echo "# all-reduce (libnbc) against its blocking tuned all-reduce, not the bucketing."
  echo "#"
  echo "# == 4. Data-parallel sync per mode: bytes per step and bandwidth =="
  echo "# grad-sync-bench --modes $modes_csv --sizes $compress_sizes --iters $sync_iters. sent = bytes"
  echo "# this rank handed to MPI for other ranks in one sync (Communicator::bytes_sent): an all-reduce"
  echo "# counts its buffer, reduce-scatter + all-gather (zero) the same, bf16/fp16 an all-to-all of"
  echo "# dp-1 chunks + an all-gather of one at 2 bytes a value, int8 1 byte a value + a 4-byte scale"
  echo "# per 512, topk 8 bytes per kept value. busbw is that of an fp32 all-reduce as fast."
  for np in "${sync_ranks[@]}"; do
    echo "#"
    echo "# -- $np ranks --"
    cat "$scratch/modes-$np.log"
  done
  echo "#"
  echo "# == 5. The trainer per mode: bytes per step and final loss =="
  echo "# model: ${mode_model_line:-?}"
  echo "# trainer ${tiny_model[*]} --global-batch-size 8 --micro-batch-size 2"
  echo "# --dp N (tp 1, pp 1). dp_bytes = rank 0's bytes handed to MPI in its data-parallel group per"
  echo "# step (metrics.jsonl, median over steps: a step that also checks the replicas sends a little"
  echo "# more). loss = the last step's training loss, val = validation loss at the end; d = minus none."
  printf '# %3s %6s %12s %8s %12s %10s %12s %10s\n' dp mode dp_bytes /none loss "d loss" val "d val"
  for np in "${sync_ranks[@]}"; do
    for mode in "${compress_modes[@]}"; do
      awk -v dp="$np" -v m="$mode" -v b="${mode_bytes[$np,$mode]}" -v b0="${mode_bytes[$np,none]}" \
          -v l="${mode_loss[$np,$mode]}" -v l0="${mode_loss[$np,none]}" \
          -v v="${mode_val[$np,$mode]}" -v v0="${mode_val[$np,none]}" 'BEGIN {
        printf "  %3d %6s %12d %8.4f %12.6f %+10.5f %12.6f %+10.5f\n", dp, m, b,
               (b0 > 0 ? b / b0 : 0), l, l - l0, v, v - v0 }'
    done
  done
  echo "# Error feedback (int8, topk) delivers every gradient eventually, but late: AdamW divides by"
  echo "# the running RMS of what arrives, so a delayed, bursty gradient moves a weight differently"
  echo "# from a steady one; the loss differences above are that, plus the run-to-run noise of"
  echo "# a $compress_steps-step tiny model (compare dp 2 with dp 4)."
  if ((sync_status)); then
    echo "# ERROR: grad-sync-bench failed or found wrong elements (see above)."
  fi
} | tee "$results"
echo "parallel: report saved to $results"
exit "$sync_status"
