#!/usr/bin/env bash
# The layout planner (build/plan) against the real trainer: for each CPU layout, the planner's
# memory per rank and step time next to the trainer's measured peak RSS and step time.
#
#   bash bench/plan_validate.sh [BUILD_DIR]      (BUILD_DIR defaults to build/; needs trainer,
#                                                 plan, prepare-data, comm-bench and sgemm-rate)
#
# Model: GPT-2 L8 H8 C512 T128 on the byte-level sample corpus (V256, 25.4M parameters), global
# batch 16, STEPS steps (the first, warm-up, left out). Layouts
# ("np:dp,tp,pp:micro-batch[:recompute[:zero]]", zero 0..3, default 0)
# from LAYOUTS; each runs REPEATS times, in alternating order, with max(1, cores / np) threads
# per rank (more ranks than cores time-share them, --oversubscribe).
#   measured memory: the largest peak RSS over the ranks (GNU time's %M around each rank)
#   measured step:   the fastest step_ms of metrics.jsonl over the repeats' steps (the one
#                    least slowed by whatever else the machine runs; the estimate is for an
#                    otherwise idle machine), and the median for reference
#   estimated:       plan --cpu with this machine's cores and RAM, the node's peak (cores x
#                    one core's sgemm rate) and the all-reduce bus bandwidth at -np 2
#                    (comm-bench, 16 MiB); everything else the planner's defaults
# Goals (informational): every memory estimate within 15% of the measurement; the ranking by
# estimated step time the same as by measured (Spearman's rho and the pairs in the other order;
# also counted over the pairs whose measured times differ by more than 5%, beyond the noise).
# The machine is a shared, noisy 2-core VM: the load average is in the header; compare within
# one report. Exit code 0 unless a program fails (1); 2 = usage.
# Environment: LAYOUTS, STEPS (5), REPEATS (2). Writes BUILD_DIR/plan-validate-results.txt.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"

read -r -a layouts <<< "${LAYOUTS:-1:1,1,1:4 1:1,1,1:1 2:2,1,1:4 2:1,2,1:4 2:1,1,2:4 2:1,1,2:1 2:1,1,2:8 2:2,1,1:1 4:2,1,2:2 4:1,2,2:4 4:4,1,1:4 4:1,1,4:4 2:1,1,2:4:full 1:1,1,1:8:selective}"
steps=${STEPS:-5}
repeats=${REPEATS:-2}
if (( steps < 2 || repeats < 1 )); then
  echo "plan_validate: STEPS >= 2 and REPEATS >= 1" >&2
  exit 2
fi

bench_needs trainer plan prepare-data comm-bench sgemm-rate
if [[ ! -x /usr/bin/time ]]; then
  echo "plan_validate: GNU time (/usr/bin/time) is needed for each rank's peak RSS:" \
       "apt-get install time" >&2
  exit 2
fi
bench_sample_data

cores=$(nproc)
host_gib=$(awk '/^MemTotal:/ {printf "%.2f", $2 / 1048576}' /proc/meminfo)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

model=(--arch gpt2 --n-layer 8 --n-head 8 --d-model 512 --seq-len 128 --global-batch-size 16)
cat > "$scratch/model.ini" <<'EOF'
arch = gpt2
n-layer = 8
n-head = 8
d-model = 512
vocab-size = 256
seq-len = 128
global-batch-size = 16
EOF

# The machine: the node's peak (its cores x one core's sgemm rate), the all-reduce bus bandwidth
# at -np 2.
peak=$(awk -v r="$("$build/sgemm-rate" --threads 1)" -v c="$cores" 'BEGIN {print r * c}')
OMP_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/comm-bench" --op all_reduce --min-bytes 16M \
  --max-bytes 16M --iters 10 > "$scratch/comm.txt"
busbw=$(awk '$1 == 16777216 {print $12}' "$scratch/comm.txt")
[[ $busbw =~ ^[0-9.]+$ ]] || { cat "$scratch/comm.txt" >&2; echo "plan_validate: no busbw from comm-bench" >&2; exit 1; }

recompute_of() { local f; IFS=: read -r -a f <<< "$1"; echo "${f[3]:-none}"; }

# run_layout SPEC REPEAT: the trainer on this layout; peak RSS per rank and metrics kept.
run_layout() {
  local spec=$1 rep=$2 np grid mb rc zero dp tp pp threads name
  IFS=: read -r np grid mb rc zero <<< "$spec"
  IFS=, read -r dp tp pp <<< "$grid"
  rc=${rc:-none} zero=${zero:-0}
  threads=$(( cores / np > 0 ? cores / np : 1 ))
  name="$np-$dp-$tp-$pp-$mb-$rc-$zero-$rep"
  # shellcheck disable=SC2016  # expanded by each rank's shell: its own rank in the file name
  if ! OMP_NUM_THREADS=$threads "${mpirun[@]}" -np "$np" sh -c \
       '/usr/bin/time -f %M -o "$0.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" "$@"' "$scratch/$name.rss" \
       "$build/trainer" "${model[@]}" --dp "$dp" --tp "$tp" --pp "$pp" --micro-batch-size "$mb" \
       --recompute "$rc" --zero "$zero" --steps "$steps" --threads "$threads" --train-data "$data/train.h5" \
       --val-data '' --eval-interval 0 --sample-tokens 0 --peak-gflops 100 --overwrite \
       --out-dir "$scratch/$name" > "$scratch/$name.log" 2>&1; then
    cat "$scratch/$name.log" >&2
    echo "plan_validate: the trainer failed ($spec)" >&2
    exit 1
  fi
}

for ((rep = 0; rep < repeats; rep++)); do
  order=("${layouts[@]}")
  if (( rep % 2 == 1 )); then  # alternate the order: drift in the machine's load evens out
    order=()
    for ((i = ${#layouts[@]} - 1; i >= 0; i--)); do order+=("${layouts[i]}"); done
  fi
  for spec in "${order[@]}"; do run_layout "$spec" "$rep"; done
done

# One line per layout: spec est_mib meas_mib est_s meas_s
for spec in "${layouts[@]}"; do
  IFS=: read -r np grid mb rc zero <<< "$spec"
  IFS=, read -r dp tp pp <<< "$grid"
  rc=${rc:-none} zero=${zero:-0}
  row=$("$build/plan" --config "$scratch/model.ini" --cpu --cores-per-node "$cores" \
        --ranks-per-node "$np" --host-mem "$host_gib" --peak-gflops "$peak" --intra-bw "$busbw" \
        --dp "$dp" --tp "$tp" --pp "$pp" --micro-batch-size "$mb" --zero "$zero" --recompute "$rc" \
        --cp 1 --sequence-parallel false \
        --top 1 | awk '$1 == 1 && $2 ~ /^dp/ {print $9 * 1024, $10}')
  [[ -n $row ]] || { echo "plan_validate: the planner has no row for $spec" >&2; exit 1; }
  meas_mib=$(cat "$scratch/$np-$dp-$tp-$pp-$mb-$rc-$zero-"*.rss.* | sort -n | tail -1 | awk '{print $1 / 1024}')
  meas_s=$(for ((rep = 0; rep < repeats; rep++)); do
             sed -n 's/.*"step_ms": \([^,}]*\).*/\1/p' "$scratch/$np-$dp-$tp-$pp-$mb-$rc-$zero-$rep/metrics.jsonl" | tail -n +2
           done | sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print v[1] / 1000, m / 1000}')
  echo "$spec $row $meas_mib $meas_s"
done > "$scratch/rows.txt"

{
  echo "# plan_validate: the planner's estimates against the trainer, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# GPT-2 L8 H8 C512 T128 V256, global batch 16; $steps steps x $repeats runs per layout"
  echo "# machine: $cores cores, $host_gib GiB, peak $peak GFLOP/s (cores x sgemm), all-reduce busbw" \
       "$busbw GB/s (-np 2, 16 MiB); load average $load_start at the start," \
       "$(cut -d' ' -f1-3 /proc/loadavg) at the end"
  echo "# layout = np:dp,tp,pp:micro-batch[:recompute[:zero]]; memory = largest rank's peak RSS"
  awk '
    { spec[NR] = $1; em[NR] = $2; es[NR] = $3; mm[NR] = $4; ms[NR] = $5; med[NR] = $6; n = NR }
    function ranks(v, r,   i, j, c) {  # rank 1 = smallest; ties share the lower rank
      for (i = 1; i <= n; i++) { c = 1; for (j = 1; j <= n; j++) if (v[j] < v[i]) c++; r[i] = c }
    }
    END {
      ranks(es, re); ranks(ms, rm)
      printf "%-24s %9s %9s %6s %8s %8s %6s %8s %6s %6s\n", "layout", "est MiB", "meas MiB",
             "ratio", "est s", "meas s", "ratio", "median s", "rank e", "rank m"
      worst = 0; d2 = 0; bad = 0
      for (i = 1; i <= n; i++) {
        ratio = mm[i] / em[i]; dev = ratio > 1 ? ratio - 1 : 1 - ratio; if (dev > worst) worst = dev
        d2 += (re[i] - rm[i]) ^ 2
        printf "%-24s %9.1f %9.1f %6.3f %8.3f %8.3f %6.3f %8.3f %6d %6d\n", spec[i], em[i], mm[i],
               ratio, es[i], ms[i], ms[i] / es[i], med[i], re[i], rm[i]
      }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
        if ((es[i] - es[j]) * (ms[i] - ms[j]) < 0) bad++
        if (ms[i] > 1.05 * ms[j] || ms[j] > 1.05 * ms[i]) {  # apart by more than the noise
          clear++
          if ((es[i] - es[j]) * (ms[i] - ms[j]) < 0) clear_bad++
        }
      }
      rho = n > 1 ? 1 - 6 * d2 / (n * (n * n - 1)) : 1
      printf "memory: largest deviation %.1f%% (goal <= 15%%): %s\n", 100 * worst, worst <= 0.15 ? "PASS" : "MISS"
      printf "time ranking: Spearman rho %.3f, %d of %d pairs in the other order (goal: same order): %s\n",
             rho, bad, n * (n - 1) / 2, bad == 0 ? "PASS" : "MISS"
      printf "  of the %d pairs measured more than 5%% apart, %d in the other order: %s\n", clear,
             clear_bad, clear_bad == 0 ? "PASS" : "MISS"
    }' "$scratch/rows.txt"
} | tee "$results"
echo "(written to $results)"
