#!/usr/bin/env bash
# Checkpoint performance numbers for mpitrain: parallel-HDF5 save/load bandwidth against a plain
# sequential write of the same bytes, and the time from launch to the first training step when
# resuming, next to a fresh start.
#
#   bash bench/ckpt.sh [BUILD_DIR]    (needs ckpt-bench, trainer and prepare-data built there)
#
# 1. ckpt-bench (bench/ckpt_bench.cpp) at 1, 2 and 4 ranks (data parallel), and at 4 ranks as
#    dp 1 x tp 2 x pp 2, with a GPT-2 whose params + adam_m + adam_v come to ~CKPT_GIB GiB:
#    write = CheckpointStore::save (the whole commit), read = load + checksum verification,
#    dd = rank 0 writing the same bytes with write() + fsync() (what dd bs=16M conv=fsync does),
#    medians of CKPT_REPEATS repeats in one run; goal write/dd >= 0.70 (informational). The
#    scratch directory is under BUILD_DIR (the same disk as the repo) and removed afterwards.
#    Caches cannot be dropped: reads come from the page cache.
# 2. Time to first step, -np 2 (dp 2): the trainer on L8 H8 C512 V512 T64 (global batch 4 =
#    dp 2 x micro-batch 2; --micro-batch-size 4 does not divide over dp 2). A run with --steps 3
#    --save-interval 2 --exit-at-step 2 leaves a step-2 checkpoint (exit 85); then, RESUME_REPEATS
#    times in alternating order, a fresh run (--steps 3) and a resume (--resume auto --steps 3,
#    in a copy of that out-dir) are timed from launching mpirun to the arrival of the first
#    "step " line on stdout (each line is timestamped as it arrives). The resume's
#    "resumed from step" line is timestamped too (checkpoint loaded). Both include MPI start-up,
#    model set-up and the whole of the first step, whose line is printed when it ends.
#
# All numbers come from this one run on a shared, noisy 2-core VM: compare ratios within the
# report, not times between reports. Exit code: 0 unless a program fails (1); 2 = usage.
# Environment: CKPT_GIB (1.0), CKPT_REPEATS (5), RESUME_REPEATS (3).
# Writes the report to BUILD_DIR/ckpt-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
gib=${CKPT_GIB:-1.0}
repeats=${CKPT_REPEATS:-5}
resume_repeats=${RESUME_REPEATS:-3}
if ! [[ $repeats =~ ^[1-9][0-9]*$ && $resume_repeats =~ ^[1-9][0-9]*$ ]]; then
  echo "ckpt: CKPT_REPEATS and RESUME_REPEATS must be positive integers" >&2
  exit 2
fi

bench_needs ckpt-bench trainer prepare-data

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 1. checkpoint write / read bandwidth ---------------------------------------------------------
# "np tp pp yield" per configuration; yield 1 = a diagnostic row with --mca mpi_yield_when_idle 1
# (waiting ranks yield the CPU instead of spinning; see the report's notes).
configs=("1 1 1 0" "2 1 1 0" "4 1 1 0" "4 2 2 0" "2 1 1 1")
declare -A result
for config in "${configs[@]}"; do
  read -r np tp pp yield <<< "$config"
  name=bench-$np-$tp-$pp-$yield
  mca=()
  if ((yield)); then mca=(--mca mpi_yield_when_idle 1); fi
  echo "ckpt: ckpt-bench, $np ranks, tp $tp pp $pp, ~$gib GiB, $repeats repeats ${mca[*]}"
  if ! "${mpirun[@]}" "${mca[@]}" -np "$np" "$build/ckpt-bench" --dir "$scratch/$name" \
       --gib "$gib" --tp "$tp" --pp "$pp" --repeats "$repeats" > "$scratch/$name.log" 2>&1; then
    cat "$scratch/$name.log" >&2
    echo "ckpt: ckpt-bench failed ($np ranks, tp $tp pp $pp ${mca[*]})" >&2
    exit 1
  fi
  result[$config]=$(grep -m1 '^RESULT ' "$scratch/$name.log" || true)
  if [[ -z ${result[$config]} ]]; then
    cat "$scratch/$name.log" >&2
    echo "ckpt: no RESULT line from ckpt-bench ($np ranks, tp $tp pp $pp ${mca[*]})" >&2
    exit 1
  fi
done
bench_model=$(sed -n 's/^# ckpt-bench: [^,]*, \(GPT-2 [^;]*\);.*/\1/p' "$scratch/bench-1-1-1-0.log")

# ---- 2. time to first step: fresh start vs resume -------------------------------------------------
bench_sample_data
model=(--arch gpt2 --n-layer 8 --n-head 8 --d-model 512 --vocab-size 512 --seq-len 64
       --global-batch-size 4 --micro-batch-size 2 --threads 1 --sample-tokens 0
       --eval-interval 0 --val-data '' --train-data "$data/train.h5")

# timed LOG ARGS...: runs mpirun -np 2 trainer ARGS, writing each output line to LOG prefixed by
# the seconds since launch at which it arrived. Returns the trainer's exit code.
timed() {
  local log=$1 start
  shift
  start=$EPOCHREALTIME
  "${mpirun[@]}" -np 2 "$build/trainer" "${model[@]}" "$@" 2>&1 |
    while IFS= read -r line; do
      printf '%s %s\n' "$EPOCHREALTIME" "$line"
    done | awk -v s="$start" '{ t = $1; $1 = ""; printf "%.3f%s\n", t - s, $0; fflush() }' > "$log"
}

# since LOG REGEX: seconds from launch to the first line matching REGEX ("" if none).
since() {
  awk -v re="$2" '{ t = $1; sub(/^[^ ]* /, "") } $0 ~ re { print t; exit }' "$1"
}

median() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit 1
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "ckpt: trainer -np 2, a run interrupted after step 2 (--exit-at-step 2)"
status=0
timed "$scratch/interrupted.log" --steps 3 --save-interval 2 --exit-at-step 2 \
  --out-dir "$scratch/interrupted" || status=$?
if ((status != 85)) || [[ ! -d $scratch/interrupted/checkpoints/step-00000002 ]]; then
  cat "$scratch/interrupted.log" >&2
  echo "ckpt: expected exit 85 and a step-2 checkpoint from --exit-at-step 2 (exit $status)" >&2
  exit 1
fi
ckpt_bytes=$(stat -c %s "$scratch/interrupted/checkpoints/step-00000002/checkpoint.h5")
save_line=$(sed -n 's/^[0-9.]* \(saved checkpoint step 2 in .*\)/\1/p' "$scratch/interrupted.log")
train_model=$(sed -n 's/^[0-9.]* mpitrain [^|]*| \([^|]*|[^|]*\)|.*/\1/p' \
                "$scratch/interrupted.log" | head -n 1)

declare -a fresh_first resume_first resume_loaded
for ((rep = 1; rep <= resume_repeats; rep++)); do
  if ((rep % 2)); then order=(fresh resume); else order=(resume fresh); fi
  for kind in "${order[@]}"; do
    echo "ckpt: trainer -np 2, $kind start, run $rep of $resume_repeats"
    log=$scratch/$kind-$rep.log
    if [[ $kind == fresh ]]; then
      if ! timed "$log" --steps 3 --out-dir "$scratch/fresh-$rep"; then
        cat "$log" >&2
        echo "ckpt: the fresh trainer run failed" >&2
        exit 1
      fi
    else
      cp -a "$scratch/interrupted" "$scratch/resume-$rep"
      if ! timed "$log" --steps 3 --save-interval 2 --resume auto \
           --out-dir "$scratch/resume-$rep"; then
        cat "$log" >&2
        echo "ckpt: the resumed trainer run failed" >&2
        exit 1
      fi
      resume_loaded+=("$(since "$log" '^resumed from step 2 ')")
    fi
    first=$(since "$log" '^step ')
    if [[ -z $first ]] || [[ $kind == resume && -z ${resume_loaded[-1]} ]]; then
      cat "$log" >&2
      echo "ckpt: no 'step ' (or 'resumed from step 2') line from the $kind run" >&2
      exit 1
    fi
    if [[ $kind == fresh ]]; then fresh_first+=("$first"); else resume_first+=("$first"); fi
  done
done
fresh_med=$(printf '%s\n' "${fresh_first[@]}" | median)
resume_med=$(printf '%s\n' "${resume_first[@]}" | median)
loaded_med=$(printf '%s\n' "${resume_loaded[@]}" | median)

# ---- the report ------------------------------------------------------------------------------------
{
  echo "# mpitrain checkpoint benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
  echo "# CPU: $(cpu_field "model name"), $(nproc) cores;" \
       "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# disk: $(df -h --output=source,fstype,size "$build" | tail -n 1 | tr -s ' ');" \
       "$(mpirun --version 2>/dev/null | head -n 1); mpirun --oversubscribe --bind-to none"
  echo "# Everything below was measured in this one run; the machine is shared and noisy: compare"
  echo "# ratios within a table."
  echo "#"
  echo "# == 1. Checkpoint write / read bandwidth (ckpt-bench, median of $repeats repeats) =="
  echo "# model: ${bench_model:-?}"
  echo "# write = CheckpointStore::save: collective HDF5 write + close, fsync of file and directory,"
  echo "#   rename, 'latest' written durably (pruning excluded); slowest rank, from a barrier."
  echo "# read  = CheckpointStore::load: collective read of each rank's pieces + checksum verification;"
  echo "#   FROM THE PAGE CACHE (the file was just written; dropping caches is not possible here)."
  echo "# dd    = rank 0 alone (the others asleep) writes the same bytes as dd if=/dev/zero bs=16M"
  echo "#   conv=fsync does: open, write() 16 MiB blocks, fsync, close (in-process, not the dd program)."
  echo "# GB/s = checkpoint file bytes / s / 1e9; write/dd of the medians; goal write/dd >= 0.70."
  printf '# %5s  %-13s %6s %10s %10s %10s %9s %6s %11s\n' ranks "layout" GiB "write GB/s" \
    "read GB/s" "dd GB/s" "write/dd" goal "(best w/dd)"
  for config in "${configs[@]}"; do
    awk -v line="${result[$config]}" -v yield="${config##* }" 'BEGIN {
      n = split(line, kv, " ")
      for (i = 2; i <= n; i++) { split(kv[i], p, "="); r[p[1]] = p[2] }
      layout = sprintf("dp%d tp%d pp%d%s", r["dp"], r["tp"], r["pp"], (yield ? " Y" : ""))
      printf "  %5d  %-13s %6.3f %10.3f %10.3f %10.3f %9.3f %6s %11.3f\n", r["ranks"], layout,
             r["gib"], r["write_gbs"], r["read_gbs"], r["dd_gbs"], r["ratio"],
             (r["ratio"] >= 0.70 ? "PASS" : "MISS"), r["ratio_best"] }'
  done
  echo "# Y = the same with --mca mpi_yield_when_idle 1 (diagnostic). Open MPI turns yielding on by"
  echo "# itself only when it sees more ranks than cores (4 ranks here); at 2 ranks on 2 cores its"
  echo "# waiting ranks spin, and when other work shares the cores (see the load average) every"
  echo "# collective step of the checkpoint waits for the scheduler to run the spinning peer off the"
  echo "# core. 1 rank has no peer; 4 ranks yield. Compare the 2-rank rows with and without Y."
  echo "# Per configuration, the repeats (seconds) and best/median GB/s as ckpt-bench printed them:"
  for config in "${configs[@]}"; do
    read -r np tp pp yield <<< "$config"
    echo "# -- $np ranks, tp $tp pp $pp$( ((yield)) && echo ', --mca mpi_yield_when_idle 1') --"
    grep -E '^#   repeat|^  (write|read|dd)|wrong elements' "$scratch/bench-$np-$tp-$pp-$yield.log" |
      sed 's/^# //; s/^/# /'
  done
  echo "#"
  echo "# == 2. Time from launch to the first training step, -np 2 (dp 2) =="
  echo "# trainer: ${train_model:-?}; ${model[*]:0:22} --val-data '' (data: $data/train.h5)"
  echo "# fresh:  --steps 3;   resume: --resume auto --steps 3 from the step-2 checkpoint"
  echo "#   ($ckpt_bytes bytes) of a run stopped by --exit-at-step 2 (that run: $save_line)."
  echo "# Seconds from launching mpirun to the first 'step ' line on stdout (the first step included);"
  echo "# 'loaded' = to the 'resumed from step 2' line. $resume_repeats runs each, alternating order."
  printf '# %-8s %10s %10s   %s\n' run "median s" "loaded s" "each run (s)"
  printf '  %-8s %10.2f %10s   %s\n' fresh "$fresh_med" "-" "${fresh_first[*]}"
  printf '  %-8s %10.2f %10.2f   %s\n' resume "$resume_med" "$loaded_med" "${resume_first[*]}"
  awk -v f="$fresh_med" -v r="$resume_med" 'BEGIN {
    printf "# resume - fresh: %+.2f s (resume / fresh %.2f)\n", r - f, (f > 0 ? r / f : 0) }'
  echo "# The checkpoint was written moments before: resume reads it from the page cache."
} | tee "$results"
echo "ckpt: report saved to $results"
