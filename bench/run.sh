#!/usr/bin/env bash
# Single-rank CPU training throughput of mpitrain against this machine's sgemm rate, the CPU's
# theoretical fp32 peak, and PyTorch.
#
#   bash bench/run.sh [BUILD_DIR]        (what `make bench` runs; BUILD_DIR defaults to build/)
#
# For 1 and 2 threads and each configuration (tiny GPT-2: L4 H4 C128 V512 T64 B4, 101 steps;
# gpt2-small: L12 H12 C768 V50304 T256 B4, 5 steps):
#  - sgemm: the CPU backend's sgemm (oneDNN >= 3.11.2's on AVX-512, else OpenBLAS's; n=2048,
#    best of 5) with bench's sgemm-rate, just before the row's run, on OpenBLAS's best kernels
#    for this CPU (OPENBLAS_CORETYPE unset: src/backend/blas_kernel.hpp), "the best sgemm"; and
#    beside it OpenBLAS's (sgemm-rate --openblas), which the backend ran everywhere before;
#  - trainer: `mpirun -np 1 trainer --threads N --peak-gflops <that sgemm rate>`; step time,
#    tokens/s and the trainer's "mfu" field are medians of metrics.jsonl without the first
#    (warm-up) step. Because --peak-gflops is the sgemm rate, that field is the fraction of this
#    machine's measured sgemm rate ("of sgemm", the primary figure), not MFU of the hardware peak.
#    trainer GFLOP/s = model FLOPs (6N + 12 L d T per token) x tokens/s = "of sgemm" x sgemm rate;
#  - theoretical fp32 peak = cores used x FMA units/core x fp32 SIMD lanes x 2 x clock, where
#    they can be read: lanes from /proc/cpuinfo flags (avx512f: 16, avx2+fma: 8), clock from
#    lscpu's "CPU max MHz", else /proc/cpuinfo's "cpu MHz", else lscpu's BogoMIPS / 2 (the table
#    says which), 2 FMA units/core assumed (Zen 2+, Intel since Haswell; Zen 4 runs 512-bit FMAs
#    as two 256-bit halves, so it is counted with 8 lanes). What cannot be read prints n/a. The
#    sgemm rate and the trainer's rate are also given as fractions of it;
#  - PyTorch: bench/pytorch_gpt2.py on the same shapes, with OPENBLAS_CORETYPE set to the kernels
#    the trainer runs (Debian's torch multiplies through the system OpenBLAS, which cannot choose
#    better than by CPU model), if a python with torch is found ($PYTHON,
#    python3, /usr/bin/python3). Otherwise that column and its ratios and verdicts print n/a
#    (enable it with: apt-get install python3-torch). No stored figures are ever shown.
# Everything in the table is measured in this one run; the machine is shared and noisy, so compare
# ratios within a table.
#
# Environment: CONFIGS (default "tiny gpt2-small"; e.g. CONFIGS=tiny for a quick run), PYTHON
# (interpreter for the PyTorch column), SKIP_PYTORCH=1, TINY_STEPS (default 101), SMALL_STEPS
# (default 5), OP_PROFILE=1: after each row's timed run, one more with --profile-ops, its table
# kept as BUILD_DIR/op-profile-<config>-t<threads>.txt (the timed runs are never profiled).
# Writes the table to BUILD_DIR/bench-results.txt. The goals in the footer are informational:
# the script exits 0 whether they are met or not, non-zero only if something fails.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
results=$build/bench-results.txt  # make bench's table

# One rank, threads on every core (--bind-to none: Open MPI would bind a lone rank to one core).
mpirun+=(-np 1)

declare -A model_args=(
  [tiny]="--n-layer 4 --n-head 4 --d-model 128 --vocab-size 512 --seq-len 64"
  [gpt2-small]="--n-layer 12 --n-head 12 --d-model 768 --vocab-size 50304 --seq-len 256"
)
declare -A steps=([tiny]=${TINY_STEPS:-101} [gpt2-small]=${SMALL_STEPS:-5})
read -r -a configs <<< "${CONFIGS:-tiny gpt2-small}"
thread_counts=(1 2)
for config in "${configs[@]}"; do
  if [[ -z ${model_args[$config]:-} ]]; then
    echo "bench: unknown configuration '$config' in CONFIGS (known: ${!model_args[*]})" >&2
    exit 2
  fi
done

bench_needs trainer sgemm-rate prepare-data
bench_sample_data

# Theoretical fp32 peak: what /proc/cpuinfo and lscpu say; an empty value means "cannot be read".
lanes="" lanes_why="no avx2+fma or avx512f in /proc/cpuinfo flags"
if cpu_has avx512f; then
  lanes=16 lanes_why="avx512f"
  if [[ $(cpu_field vendor_id) == AuthenticAMD && $(cpu_field "cpu family") == 25 ]]; then
    lanes=8 lanes_why="avx512f on AMD family 25 (Zen 4: 512-bit FMAs as two 256-bit halves)"
  fi
elif cpu_has avx2 fma; then
  lanes=8 lanes_why="avx2+fma"
fi
fma_units=2
mhz=$(lscpu 2> /dev/null | awk -F': *' '/^CPU max MHz/ { print $2; exit }' || true)
mhz_why="CPU max MHz read from lscpu" mhz_note=""
if [[ -z $mhz ]]; then
  mhz=$(cpu_field "cpu MHz") mhz_why="cpu MHz read from /proc/cpuinfo; lscpu has no CPU max MHz"
  mhz_note="the current or (on a VM) nominal clock: boost clocks may be higher"
fi
if [[ -z $mhz ]]; then
  mhz=$(lscpu 2> /dev/null | awk -F': *' '/^BogoMIPS/ { print $2 / 2; exit }' || true)
  mhz_why="BogoMIPS / 2 read from lscpu; no MHz in lscpu or /proc/cpuinfo"
  mhz_note="BogoMIPS / 2 is only an estimate of the clock"
fi
[[ -n $mhz ]] || mhz_why="no clock in lscpu or /proc/cpuinfo" mhz_note=""
cores=$(lscpu -p=CORE,SOCKET 2> /dev/null | grep -v '^#' | sort -u | wc -l || true)
[[ $cores -gt 0 ]] 2> /dev/null || cores=""
# peak THREADS: GFLOP/s of min(THREADS, physical cores) cores, or n/a.
peak() {
  if [[ -z $lanes || -z $mhz || -z $cores ]]; then echo n/a; return; fi
  awk -v t="$1" -v c="$cores" -v u="$fma_units" -v l="$lanes" -v m="$mhz" \
    'BEGIN { printf "%.1f\n", (t < c ? t : c) * u * l * 2 * m / 1000 }'
}

python="" pytorch_why=""
if [[ ${SKIP_PYTORCH:-0} == 1 ]]; then
  pytorch_why="SKIP_PYTORCH=1"
else
  for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
    if [[ -n $candidate ]] && "$candidate" -c 'import torch' > /dev/null 2>&1; then
      python=$candidate
      break
    fi
  done
  [[ -n $python ]] || pytorch_why="no python with torch: tried ${PYTHON:+$PYTHON, }python3, /usr/bin/python3"
fi
if [[ -n $python ]]; then
  pytorch_label="PyTorch $("$python" -c 'import torch; print(torch.__version__)') ($python), measured here"
else
  pytorch_label="n/a, not measured ($pytorch_why); to measure it: apt-get install python3-torch or set PYTHON to a python with torch"
  echo "bench: PyTorch column: $pytorch_label"
fi

# step_median FIELD FILE: median of FIELD over the step records of metrics.jsonl, the first
# step skipped.
step_median() {
  local values
  values=$(grep '"step_ms"' "$2" | tail -n +2 | grep -o "\"$1\": [^,}]*" | awk '{print $2}' |
           sort -g)
  if [[ -z $values ]]; then
    echo "bench: no step records in $2" >&2
    return 1
  fi
  awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }' \
    <<< "$values"
}

# The trainer chooses OpenBLAS's kernels itself (respecting a user's OPENBLAS_CORETYPE); PyTorch
# gets the same by the variable; the sgemm column is the best kernels' rate whatever is set.
trainer_kernels=$("$build/sgemm-rate" --kernel)
torch_core=$(awk '{ print $2 }' <<< "$trainer_kernels")
best_sgemm=(env -u OPENBLAS_CORETYPE "$build/sgemm-rate")
echo "bench: OpenBLAS kernels: $trainer_kernels; best: $("${best_sgemm[@]}" --kernel)"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A sgemm openblas ms tps of_sgemm torch_ms
for threads in "${thread_counts[@]}"; do
  for config in "${configs[@]}"; do
    key=$config/$threads
    # Measured right before each training run: on a shared machine the rate drifts with load.
    echo "bench: sgemm rate, $threads thread(s), n=2048"
    sgemm[$key]=$("${best_sgemm[@]}" --threads "$threads" --n 2048 --repeats 5)
    openblas[$key]=$("${best_sgemm[@]}" --threads "$threads" --n 2048 --repeats 5 --openblas)
    echo "bench:   ${sgemm[$key]} GFLOP/s (OpenBLAS: ${openblas[$key]})"
    out=$scratch/$config-t$threads
    echo "bench: mpitrain $config, $threads thread(s), ${steps[$config]} steps"
    # shellcheck disable=SC2086  # model_args holds several words on purpose
    train=("${mpirun[@]}" "$build/trainer" ${model_args[$config]} --arch gpt2
           --global-batch-size 4 --micro-batch-size 4 --steps "${steps[$config]}"
           --threads "$threads" --peak-gflops "${sgemm[$key]}" --lr 1e-4
           --train-data "$data/train.h5" --val-data '' --eval-interval 0 --sample-tokens 0
           --overwrite)
    if ! "${train[@]}" --out-dir "$out" > "$out.log" 2>&1; then
      cat "$out.log" >&2
      echo "bench: the trainer failed ($config, $threads threads)" >&2
      exit 1
    fi
    ms[$key]=$(step_median step_ms "$out/metrics.jsonl")
    tps[$key]=$(step_median tokens_per_s "$out/metrics.jsonl")
    of_sgemm[$key]=$(step_median mfu "$out/metrics.jsonl")
    echo "bench:   ${ms[$key]} ms/step"
    if [[ ${OP_PROFILE:-0} == 1 ]]; then
      echo "bench: mpitrain $config, $threads thread(s), --profile-ops"
      if ! "${train[@]}" --profile-ops --out-dir "$out-profile" > "$out-profile.log" 2>&1; then
        cat "$out-profile.log" >&2
        echo "bench: the profiled trainer failed ($config, $threads threads)" >&2
        exit 1
      fi
      cp "$out-profile/op_profile.txt" "$build/op-profile-$config-t$threads.txt"
    fi
    torch_ms[$key]=""
    if [[ -n $python ]]; then
      echo "bench: PyTorch $config, $threads thread(s)"
      # The same number of timed steps as the trainer's (its first step is the warm-up too).
      torch_ms[$key]=$(OPENBLAS_CORETYPE=$torch_core "$python" "$repo/bench/pytorch_gpt2.py" --config "$config" \
                         --threads "$threads" --steps "$((${steps[$config]} - 1))" |
                       awk '/^ms_per_step/ {print $2}')
      if [[ -z ${torch_ms[$key]} ]]; then
        echo "bench: bench/pytorch_gpt2.py printed no ms_per_step ($config, $threads threads)" >&2
        exit 1
      fi
      echo "bench:   ${torch_ms[$key]} ms/step"
    fi
  done
done

# Prints "n/a" (right-aligned) for an empty or n/a value, else the value in the given format.
awk_lib='function f(v, fmt, w) { return (v == "" || v == "n/a") ? sprintf("%" w "s", "n/a") : sprintf("%" w fmt, v) }
         function q(a, b) { return (a == "" || a == "n/a" || b == "" || b == "n/a" || b == 0) ? "n/a" : a / b }'
{
  echo "# mpitrain single-rank CPU training benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
  echo "# CPU: $(cpu_field "model name"), $(nproc) logical CPUs, ${cores:-n/a} physical cores;" \
       "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ms/step, tokens/s, trainer: medians over steps 2..N of metrics.jsonl (mpirun -np 1)"
  echo "# peak: theoretical fp32 peak (n/a where it cannot be read) = min(threads, ${cores:-n/a} cores)" \
       "x $fma_units FMA units/core (assumed: Zen 2+, Intel since Haswell)"
  echo "#       x ${lanes:-n/a} fp32 lanes ($lanes_why) x 2 FLOP/FMA x ${mhz:-n/a} MHz ($mhz_why)"
  [[ -z $mhz_note ]] || echo "#       ($mhz_note)"
  echo "# sgemm: the rate of the best sgemm: the backend's ($("$build/sgemm-rate" --library) here) on"
  echo "#        $("${best_sgemm[@]}" --kernel), n=2048, same thread"
  echo "#        count, measured just before that row's run; OpenBLAS: OpenBLAS's sgemm rate, with it"
  echo "# trainer GFLOP/s: model FLOPs (6N + 12 L d T per token) x tokens/s"
  echo "# trainer of sgemm: trainer GFLOP/s / sgemm rate = the fraction of this machine's measured"
  echo "#       sgemm rate (the primary figure: the trainer's \"mfu\", run with --peak-gflops = sgemm);"
  echo "#       of peak: GFLOP/s / theoretical peak"
  echo "# PyTorch column: $pytorch_label"
  echo "# the trainer ran $trainer_kernels; PyTorch with OPENBLAS_CORETYPE=$torch_core"
  echo "#"
  printf '# %-10s %7s %5s %9s %9s | %8s %8s %7s %8s | %8s %8s %7s | %9s %10s\n' \
    config threads steps ms/step tokens/s peak sgemm sgemm OpenBLAS trainer trainer trainer PyTorch "vs PyTorch"
  printf '# %-10s %7s %5s %9s %9s | %8s %8s %7s %8s | %8s %8s %7s | %9s %10s\n' \
    "" "" "" "" "" GFLOP/s GFLOP/s "of peak" GFLOP/s GFLOP/s "of sgemm" "of peak" ms/step "x faster"
  for config in "${configs[@]}"; do
    for threads in "${thread_counts[@]}"; do
      key=$config/$threads
      awk -v c="$config" -v t="$threads" -v s="${steps[$config]}" -v ms="${ms[$key]}" \
          -v tps="${tps[$key]}" -v pk="$(peak "$threads")" -v sg="${sgemm[$key]}" \
          -v os="${of_sgemm[$key]}" -v pt="${torch_ms[$key]}" -v ob="${openblas[$key]}" "$awk_lib"'
        BEGIN {
          model = os * sg
          printf "  %-10s %7d %5d %9.1f %9.0f | %s %s %s %8.1f | %8.1f %8.3f %s | %s %s\n",
                 c, t, s, ms, tps, f(pk, ".1f", 8), f(sg, ".1f", 8), f(q(sg, pk), ".3f", 7), ob,
                 model, os, f(q(model, pk), ".3f", 7), f(pt, ".1f", 9), f(q(pt, ms), ".2f", 10)
        }'
    done
  done
  echo "#"
  echo "# Goals (informational; the machine is shared and noisy; n/a: not measured in this run):"
  # verdict VALUE LIMIT TEXT: PASS (VALUE >= LIMIT) / MISS, or n/a where VALUE was not measured
  verdict() {
    awk -v v="$1" -v lim="$2" -v text="$3" 'BEGIN {
      if (v == "" || v == "n/a") { printf "#  n/a  %s: not measured in this run\n", text; exit }
      printf "#  %-4s %s: %.3f\n", (v >= lim ? "PASS" : "MISS"), text, v }'
  }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b == "" || b == 0) ? "" : a / b }'; }
  small_torch=$(ratio "${torch_ms[gpt2-small/2]:-}" "${ms[gpt2-small/2]:-}")
  verdict "${of_sgemm[gpt2-small/2]:-}" 0.85 "GPT-2 small, 2 threads, >= 0.85 of the best 2-thread sgemm rate"
  verdict "$small_torch" 1.5 "GPT-2 small, 2 threads, >= 1.5x PyTorch (x faster)"
  tiny_best="" tiny_torch="" tiny_scaling=""
  if [[ -n ${ms[tiny/1]:-} ]]; then
    tiny_best=1
    if awk -v a="${ms[tiny/2]}" -v b="${ms[tiny/1]}" 'BEGIN { exit !(a < b) }'; then tiny_best=2; fi
    tiny_torch=$(ratio "${torch_ms[tiny/$tiny_best]:-}" "${ms[tiny/$tiny_best]}")
    tiny_scaling=$(ratio "${ms[tiny/1]}" "${ms[tiny/2]}")
  fi
  verdict "$tiny_torch" 1.5 "tiny, best thread count (${tiny_best:-n/a}), >= 1.5x PyTorch (x faster)"
  verdict "$tiny_scaling" 1.7 "tiny, 2 threads >= 1.7x 1 thread (ms at 1 / ms at 2)"
  if [[ -n $python ]]; then
    echo "# Note: PyTorch's own BLAS may use both cores even at torch.set_num_threads(1)."
  fi
  busy=$(awk -v a="$load_start" -v b="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN { split(a, s, " ");
    print (s[1] > 1.0 || b > 2.5) ? 1 : 0 }')
  over=0 above_peak=0
  for key in "${!of_sgemm[@]}"; do
    if awk -v m="${of_sgemm[$key]}" 'BEGIN { exit !(m > 1.0) }'; then over=1; fi
    threads=${key#*/}
    if awk -v s="${sgemm[$key]}" -v p="$(peak "$threads")" 'BEGIN { exit !(p != "n/a" && s > p) }'; then
      above_peak=1
    fi
  done
  if [[ $busy == 1 || $over == 1 ]]; then
    echo "# WARNING: other work was running (load average above) or a trainer \"of sgemm\" exceeds 1"
    echo "#          (the sgemm rate and the training run saw different load): multi-thread rows are"
    echo "#          unreliable; rerun on an idle machine."
  fi
  if [[ $above_peak == 1 ]]; then
    echo "# WARNING: a measured sgemm rate exceeds the theoretical peak: the clock read ($mhz MHz) is"
    echo "#          below the clock the cores ran at, or the FMA-unit assumption is wrong; the peak is"
    echo "#          understated and the \"of peak\" fractions overstated."
  fi
} | tee "$results"

# bf16 rows (BF16=0 leaves them out): the same runs with --precision bf16 where the CPU has bf16
# instructions, --peak-gflops = the bf16 gemm rate (sgemm-rate --bf16: oneDNN's bf16 matmul,
# measured just before the row), so the trainer's "mfu" is the fraction of the best bf16 gemm.
bf16_rate=$("$build/sgemm-rate" --threads 1 --n 512 --repeats 1 --bf16)
if [[ ${BF16:-1} == 1 && $bf16_rate != n/a ]]; then
  declare -A bf16 bf16_ms bf16_of
  for threads in "${thread_counts[@]}"; do
    for config in "${configs[@]}"; do
      key=$config/$threads
      bf16[$key]=$("$build/sgemm-rate" --threads "$threads" --n 2048 --repeats 5 --bf16)
      echo "bench: mpitrain $config bf16, $threads thread(s), bf16 gemm ${bf16[$key]} GFLOP/s"
      out=$scratch/$config-t$threads-bf16
      # shellcheck disable=SC2086  # model_args holds several words on purpose
      if ! "${mpirun[@]}" "$build/trainer" ${model_args[$config]} --arch gpt2 --precision bf16 \
           --global-batch-size 4 --micro-batch-size 4 --steps "${steps[$config]}" \
           --threads "$threads" --peak-gflops "${bf16[$key]}" --lr 1e-4 \
           --train-data "$data/train.h5" --val-data '' --eval-interval 0 --sample-tokens 0 \
           --overwrite --out-dir "$out" > "$out.log" 2>&1; then
        cat "$out.log" >&2
        echo "bench: the bf16 trainer failed ($config, $threads threads)" >&2
        exit 1
      fi
      bf16_ms[$key]=$(step_median step_ms "$out/metrics.jsonl")
      bf16_of[$key]=$(step_median mfu "$out/metrics.jsonl")
    done
  done
  {
    echo "#"
    echo "# bf16 rows (--precision bf16; bf16 gemm: oneDNN's bf16 matmul, n=2048, measured before the row;"
    echo "#   trainer of the best bf16 gemm: the trainer's \"mfu\" with --peak-gflops = that rate;"
    echo "#   x fp32: fp32 ms/step / bf16 ms/step of the rows above, same run)"
    printf '# %-10s %7s %9s %9s %12s %7s\n' config threads ms/step "bf16 gemm" "trainer of" "x fp32"
    printf '# %-10s %7s %9s %9s %12s %7s\n' "" "" "" GFLOP/s "best bf16 gemm" ""
    for config in "${configs[@]}"; do
      for threads in "${thread_counts[@]}"; do
        key=$config/$threads
        awk -v c="$config" -v t="$threads" -v ms="${bf16_ms[$key]}" -v r="${bf16[$key]}" \
            -v of="${bf16_of[$key]}" -v fp="${ms[$key]}" \
            'BEGIN { printf "  %-10s %7d %9.1f %9.1f %12.3f %7.2f\n", c, t, ms, r, of, fp / ms }'
      done
    done
  } | tee -a "$results"
fi
echo "bench: table saved to $results"
