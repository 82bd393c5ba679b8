#!/usr/bin/env bash
# bf16 and fp16 against fp32 as whole training steps, in pairs of runs at once: fp32 on one half
# of this process's CPUs and the other precision on the other half, then again with the halves
# swapped. Both runs of a pair meet the same load from other work, which on a shared VM moves the
# step time by more than 2-byte storage costs (alternating GPT-2 small runs on 2 cores: +-15%
# between runs, against 1-10% for the products), so a pair's ratio holds where alternating runs'
# do not. The price: each run has half the CPUs and as many threads, the two share the memory
# bandwidth and the last-level cache, and one half may be slower than the other (hence the swap).
# Per pair: the median step time of each run (steps after the first) and their ratio; per
# precision: the step speed against fp32, the geometric mean of its pairs' time ratios, inverted.
#
#   bash bench/precision_pairs.sh [BUILD_DIR]   (default build/; needs trainer and the sample data)
#
# Environment: CONFIG (gpt2-small, the default: L12 H12 C768 V50304 T256, batch 4; or tiny),
# PRECISIONS ("fp16 bf16"), STEPS (4; tiny: 21), PAIRS (1: one pair and its swap). Writes
# BUILD_DIR/precision-pairs-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
config=${CONFIG:-gpt2-small} pairs=${PAIRS:-1}
bench_gpt2_config "$config"
bench_needs trainer
command -v taskset > /dev/null || { echo "$name: needs taskset (util-linux)" >&2; exit 2; }
bench_sample_data

# The CPUs this process may use, in two halves.
cpus=()
IFS=, read -ra ranges <<< "$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)"
for r in "${ranges[@]}"; do
  if [[ $r == *-* ]]; then mapfile -t -O "${#cpus[@]}" cpus < <(seq "${r%-*}" "${r#*-}"); else cpus+=("$r"); fi
done
threads=$((${#cpus[@]} / 2))
((threads >= 1)) || { echo "$name: needs at least 2 CPUs, this process may use ${#cpus[@]}" >&2; exit 2; }
half=("$(IFS=,; echo "${cpus[*]:0:threads}")" "$(IFS=,; echo "${cpus[*]:threads:threads}")")

run() {  # run PRECISION CPUS NAME: the trainer on those CPUs (each pair runs two at once)
  taskset -c "$2" "$build/trainer" "${gpt2_run[@]}" --threads "$threads" --precision "$1" \
    --out-dir "$scratch/$3" > "$scratch/$3.log" 2>&1 ||
    { cat "$scratch/$3.log" >&2; echo "$name: the trainer failed ($1 on CPUs $2)" >&2; return 1; }
}
step_ms() { step_times "$scratch/$1/metrics.jsonl" | awk '{ print $1 }' | median; }

{
echo "# precision pairs, $config, $steps steps (median after the first), $threads thread(s) a run," \
     "CPUs ${half[0]} | ${half[1]}; $(cpu_field "model name")," \
     "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '# %-9s %-8s %14s %14s %16s\n' precision pair "fp32 ms" "its ms" "time / fp32's"
for prec in ${PRECISIONS:-fp16 bf16}; do
  ratios=()
  for ((p = 1; p <= pairs; p++)); do
    for side in 0 1; do  # side 0: fp32 on the first half; 1: on the second
      label=$prec-$p-$side
      run fp32 "${half[side]}" "$label-fp32" & fp32_job=$!
      run "$prec" "${half[1 - side]}" "$label-$prec" & prec_job=$!
      failed=0
      wait "$fp32_job" || failed=1
      wait "$prec_job" || failed=1
      ((failed == 0)) || exit 1
      a=$(step_ms "$label-fp32") b=$(step_ms "$label-$prec")
      ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
      ratios+=("$ratio")
      tag=$p
      if ((side == 1)); then tag+=", swap"; fi
      printf '  %-9s %-8s %14.1f %14.1f %16s\n' "$prec" "$tag" "$a" "$b" "$ratio"
    done
  done
  printf '%s\n' "${ratios[@]}" | awk -v p="$prec" -v n="${#ratios[@]}" '{ s += log($1) } END {
    printf "# %s: step speed %.3fx fp32 (geometric mean of %d pairs'"'"' time ratios)\n", p, exp(-s / n), n }'
done
} | tee "$results"
