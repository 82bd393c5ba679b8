#!/usr/bin/env bash
# OpenBLAS's kernels on this CPU, ratios in one run (issue 33): the library's own choice, the one
# chosen for the CPU's flags (src/backend/blas_kernel.hpp) and the other ISAs' that the CPU runs
# (SkylakeX, Haswell), each forced by OPENBLAS_CORETYPE: sgemm-rate at 1 and 2 threads (n=2048,
# best of 5) and one training configuration's step time (1 rank, 2 threads, median of the steps
# after the first). The rounds interleave the kernels, so that load from other work falls on all
# alike; the best sgemm and the median step of all rounds count.
#
#   bash bench/blas_kernel.sh [BUILD_DIR]
#
# Environment: CONFIG (tiny, the default, or gpt2-small), STEPS (default 21; gpt2-small: 4),
# ROUNDS (default 3).
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
config=${CONFIG:-tiny} rounds=${ROUNDS:-3}
bench_gpt2_config "$config"
bench_needs trainer sgemm-rate prepare-data
bench_sample_data

unset OPENBLAS_CORETYPE MPITRAIN_OPENBLAS_OWN_CORE  # set per run below
chosen_line=$("$build/sgemm-rate" --kernel)
chosen=$(awk '{ print $2 }' <<< "$chosen_line")
own=$(sed -n "s/.*the library's own choice was \([A-Za-z0-9]*\).*/\1/p" <<< "$chosen_line")
own=${own:-$chosen}
# The other ISA's kernels, where this CPU has their instructions (a kernel it lacks dies of SIGILL;
# the rule is runnable_blas_kernels', src/backend/blas_kernel.hpp).
read -r -a others <<< "$("$build/sgemm-rate" --runnable-kernels)"
kernels=("$own")
for k in "$chosen" "${others[@]}"; do [[ " ${kernels[*]} " == *" $k "* ]] || kernels+=("$k"); done
echo "bench: $chosen_line; kernels: ${kernels[*]}; $config, $steps steps, $rounds rounds"

declare -A s1 s2 times
for ((round = 1; round <= rounds; round++)); do
  for k in "${kernels[@]}"; do
    for t in 1 2; do
      r=$(OPENBLAS_CORETYPE=$k "$build/sgemm-rate" --threads "$t" --n 2048 --repeats 5)
      if [[ $t == 1 ]]; then best=${s1[$k]:-0}; else best=${s2[$k]:-0}; fi
      if awk -v a="$r" -v b="$best" 'BEGIN { exit !(a > b) }'; then
        if [[ $t == 1 ]]; then s1[$k]=$r; else s2[$k]=$r; fi
      fi
    done
    out=$scratch/$k-$round
    OPENBLAS_CORETYPE=$k "${mpirun[@]}" -np 1 "$build/trainer" "${gpt2_run[@]}" --threads 2 \
      --out-dir "$out" > "$out.log" 2>&1 ||
      { cat "$out.log" >&2; echo "bench: the trainer failed ($k)" >&2; exit 1; }
    grep -q "^fp32 products on rank 0: OpenBLAS $k " "$out.log" ||
      { echo "bench: the trainer did not run $k: $(grep '^fp32 products' "$out.log")" >&2; exit 1; }
    times[$k]+="$(step_times "$out/metrics.jsonl" | awk '{ print $1 }')"$'\n'
    echo "bench: round $round, $k: sgemm ${s1[$k]} / ${s2[$k]} GFLOP/s (best so far)"
  done
done

echo "# OpenBLAS kernels, $(cpu_field "model name")," \
     "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $chosen_line"
printf '# %-12s %10s %10s %12s | %s\n' kernel "sgemm 1t" "sgemm 2t" "$config ms" "x the library's own ($own): sgemm 1t, 2t, step speed"
for k in "${kernels[@]}"; do
  ms=$(grep -v '^$' <<< "${times[$k]}" | median)
  own_ms=$(grep -v '^$' <<< "${times[$own]}" | median)
  awk -v k="$k" -v a="${s1[$k]}" -v b="${s2[$k]}" -v m="$ms" -v oa="${s1[$own]}" -v ob="${s2[$own]}" \
      -v om="$own_ms" 'BEGIN { printf "  %-12s %10.1f %10.1f %12.1f | %.2f %.2f %.2f\n",
      k, a, b, m, a / oa, b / ob, om / m }'
done
