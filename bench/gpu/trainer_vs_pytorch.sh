#!/usr/bin/env bash
# Training throughput on one GPU: mpitrain's trainer against plain PyTorch, same model, same GPU.
#
#   bench/gpu/trainer_vs_pytorch.sh BUILD_DIR OUT_DIR      (bench/gpu/run.sh calls it)
#
# Models (T = 1024, bf16, AdamW, one rank):
#   gpt2-small  L12 H12 C768 F3072 V50257 (padded 50304): 124.5M parameters, N = 123.7M; batch 16
#   llama-1.1b  L22 H32 KV4 C2048 F5632 V32000 (TinyLlama's shape): 1.100B parameters,
#               N = 1.035B; batch 8
# For each: `trainer --device cuda --precision bf16 --micro-batch-size auto` (a fixed micro-batch
# equal to the batch where the trainer does not take `auto`), global batch as above, STEPS steps;
# tokens/s and MFU are the medians of metrics.jsonl over the steps after the first 2. Then
# bench/gpu/pytorch_model.py with the same shapes, micro-batch and accumulation (read from the
# trainer's "global batch G = dp 1 x M micro-batches x B" line), transformers' own GPT2LMHeadModel
# / LlamaForCausalLM where transformers imports, else the file's model of PyTorch's modules: eager
# first, then torch.compile with the time left; the faster of the two is the PyTorch column. Each
# result is printed as it is measured, the table at the end. MFU = (6 N + 12 L C T) tokens/s
# / peak for both, N as the trainer's matmul_params(), peak PEAK_TFLOPS (the trainer gets it as
# --peak-gflops). Data: BUILD_DIR/data/train.h5 if present, else this source tree's text as
# byte tokens (prepare-data): any token id is below both vocabularies.
#
# The trainer runs as a singleton MPI process (no mpirun: the one on PATH, if any, need not be
# the MPI the trainer links against); MPIRUN="mpirun ..." runs it under that launcher with -np 1.
# Environment: PEAK_TFLOPS (989.4: H100/H200 dense bf16), STEPS (12), TORCH_STEPS (10 timed),
#   TORCH_COMPILE (1; 0 = eager only), PYTHON (first of it, python3, /usr/bin/python3 that has
#   torch with CUDA), TVP_BUDGET (230 s for everything), MPIRUN.
# Writes OUT_DIR/trainer-vs-pytorch.md (the table), the logs and the trainer's metrics. Without a
# GPU prints "SKIP: no GPU (...)" and exits 0; exits 1 only if a trainer run fails.
set -uo pipefail

usage="usage: bench/gpu/trainer_vs_pytorch.sh BUILD_DIR OUT_DIR"
BUILD=$(cd "${1:?$usage}" && pwd) || exit 2
OUT=${2:?$usage}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TABLE=$OUT/trainer-vs-pytorch.md
PEAK_TFLOPS=${PEAK_TFLOPS:-989.4}
STEPS=${STEPS:-12}
TORCH_STEPS=${TORCH_STEPS:-10}
BUDGET=${TVP_BUDGET:-230}
START=$(date +%s)

smi=""
if ! command -v nvidia-smi >/dev/null; then
  reason="nvidia-smi not found"
elif ! smi=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU' <<<"$smi"; then
  reason="nvidia-smi -L: $(head -1 <<<"${smi:-no output}")"
fi
if [[ -n ${reason:-} ]]; then
  echo "SKIP: no GPU ($reason)" | tee "$TABLE"
  exit 0
fi
[[ -x $BUILD/trainer ]] || { echo "trainer_vs_pytorch: $BUILD/trainer not built" >&2; exit 1; }

left() { echo $((BUDGET - ($(date +%s) - START))); }
min() { echo $(($1 < $2 ? $1 : $2)); }
# run LIMIT LOG COMMAND...: the command under a timeout, output to LOG, exit status in rc
run() {
  local limit=$1 log=$2
  shift 2
  if ((limit < 10)); then
    echo "not run: time budget spent" >"$log"
    rc=124
    return
  fi
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
}
# median FIELD FILE: median of FIELD over the step records of metrics.jsonl after step 2
median() {
  grep '"step_ms"' "$2" | awk -v f="$1" '
    match($0, /"step": [0-9]+/) && substr($0, RSTART + 8, RLENGTH - 8) + 0 > 2 &&
    match($0, "\"" f "\": [-0-9.e+]+") { print substr($0, RSTART + length(f) + 4, RLENGTH - length(f) - 4) }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1
                                        print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

SCRATCH=$BUILD/trainer-vs-pytorch
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
export OMPI_MCA_ess_singleton_isolated=${OMPI_MCA_ess_singleton_isolated:-1}  # no orted needed
launch=()
[[ -n ${MPIRUN:-} ]] && read -r -a launch <<<"$MPIRUN -np 1"
peak_gflops=$(awk -v p="$PEAK_TFLOPS" 'BEGIN { print p * 1000 }')

data=$BUILD/data/train.h5
if [[ ! -f $data ]]; then
  mapfile -t texts < <(find "$SRC/src" "$SRC/include" "$SRC/docs" "$SRC/tests" "$SRC/bench" -type f \
                         \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.md' \) | LC_ALL=C sort)
  if ! "$BUILD/prepare-data" --out-dir "$SCRATCH/data" --val-fraction 0.05 --format hdf5 \
       --overwrite "${texts[@]}" >"$OUT/prepare-data.log" 2>&1; then
    cat "$OUT/prepare-data.log" >&2
    echo "trainer_vs_pytorch: no $data and prepare-data failed" >&2
    exit 1
  fi
  data=$SCRATCH/data/train.h5
fi

python=""
for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [[ -n $candidate ]] && "$candidate" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
torch_version="not measured: no python with torch and CUDA (set PYTHON)"
[[ -n $python ]] && torch_version=$("$python" -c 'import torch; print(torch.__version__)')

# name: arch L H KV C F V T batch
declare -A shape=([gpt2-small]="gpt2 12 12 12 768 3072 50257 1024 16"
                  [llama-1.1b]="llama 22 32 4 2048 5632 32000 1024 8")
models=(gpt2-small llama-1.1b)
declare -A t_tps t_mfu mb acc params p_tps p_mfu p_best p_note
failed=0

for name in "${models[@]}"; do
  read -r arch L H KV C F V T G <<<"${shape[$name]}"
  log=$OUT/trainer-$name.log
  for micro in auto "$G"; do
    run "$(min "$(left)" 90)" "$log" "${launch[@]}" "$BUILD/trainer" --device cuda --precision bf16 \
      --arch "$arch" --n-layer "$L" --n-head "$H" --n-kv-head "$KV" --d-model "$C" --d-ff "$F" \
      --vocab-size "$V" --seq-len "$T" --global-batch-size "$G" --micro-batch-size "$micro" \
      --steps "$STEPS" --lr 1e-4 --peak-gflops "$peak_gflops" --train-data "$data" --val-data '' \
      --eval-interval 0 --sample-tokens 0 --out-dir "$SCRATCH/$name" --overwrite
    # a trainer without --micro-batch-size auto rejects it before any work (exit 2)
    [[ $micro == auto && $rc == 2 ]] && grep -q 'micro-batch-size' "$log" && continue
    break
  done
  n_acc="" n_mb=""
  read -r n_acc n_mb < <(sed -n 's/.*global batch [0-9]* = dp 1 x \([0-9]*\) micro-batches x \([0-9]*\).*/\1 \2/p' "$log" | head -1)
  acc[$name]=${n_acc:-1} mb[$name]=${n_mb:-$G}
  params[$name]=$(sed -n 's/.* | \([0-9.]*[KMB]\{0,1\}\) parameters | .*/\1/p' "$log" | head -1)
  cp "$SCRATCH/$name/metrics.jsonl" "$OUT/trainer-$name.metrics.jsonl" 2>/dev/null
  if [[ $rc == 0 ]] && t_tps[$name]=$(median tokens_per_s "$SCRATCH/$name/metrics.jsonl") &&
     t_mfu[$name]=$(median mfu "$SCRATCH/$name/metrics.jsonl"); then
    echo "trainer $name: ${t_tps[$name]} tokens/s, MFU ${t_mfu[$name]} (batch $G = ${acc[$name]} x ${mb[$name]})"
  else
    echo "trainer_vs_pytorch: trainer $name exit $rc; last lines of $log:" >&2
    tail -5 "$log" >&2
    t_tps[$name]="" t_mfu[$name]=""
    failed=1
  fi
done

# torch_run NAME COMPILE LIMIT: one pytorch_model.py run; the faster of the runs is kept
torch_run() {
  local name=$1 compile=$2 limit=$3 arch L H KV C F V T G how line tps mfu compiled impl
  read -r arch L H KV C F V T G <<<"${shape[$name]}"
  how=$([[ $compile == 1 ]] && echo compiled || echo eager)
  local log=$OUT/pytorch-$name-$how.log
  run "$limit" "$log" "$python" "$SRC/bench/gpu/pytorch_model.py" --arch "$arch" --n-layer "$L" \
    --n-head "$H" --n-kv-head "$KV" --d-model "$C" --d-ff "$F" --vocab "$V" --seq-len "$T" \
    --batch "${mb[$name]}" --grad-accum "${acc[$name]}" --steps "$TORCH_STEPS" --compile "$compile" \
    --peak-tflops "$PEAK_TFLOPS"
  line=$(grep '^tokens_per_s ' "$log" | tail -1)
  if [[ $rc != 0 || -z $line ]]; then
    if [[ $rc == 124 || $rc == 137 ]]; then
      p_note[$name]+="; $how: not done within $limit s"
    elif grep -q 'OutOfMemoryError' "$log"; then
      p_note[$name]+="; $how: out of memory"
    else
      p_note[$name]+="; $how: exit $rc (see $(basename "$log"))"
    fi
    echo "pytorch $name $how: no result${p_note[$name]}"
    return
  fi
  read -r _ tps _ _ _ mfu _ compiled _ impl <<<"$line"
  echo "pytorch $name $how ($impl): $tps tokens/s, MFU $mfu"
  [[ $compile == 1 && $compiled == 0 ]] && p_note[$name]+="; torch.compile failed, eager (see $(basename "$log"))"
  if [[ -z ${p_tps[$name]:-} ]] || awk -v a="$tps" -v b="${p_tps[$name]}" 'BEGIN { exit !(a > b) }'; then
    p_tps[$name]=$tps p_mfu[$name]=$mfu
    p_best[$name]="$([[ $compiled == 1 ]] && echo "torch.compile" || echo "eager") of $impl"
  fi
}

if [[ -n $python ]]; then
  for name in "${models[@]}"; do torch_run "$name" 0 "$(min "$(left)" 60)"; done
  if [[ ${TORCH_COMPILE:-1} == 1 ]]; then
    torch_run gpt2-small 1 "$(min $(($(left) * 2 / 5)) 120)"
    torch_run llama-1.1b 1 "$(($(left) - 5))"
  fi
fi

fmt_tps() { [[ -n $1 ]] && awk -v x="$1" 'BEGIN { printf "%.0f", x }' || echo "-"; }
fmt_mfu() { [[ -n $1 ]] && awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }' || echo "-"; }
{
  echo "## GPU: trainer vs PyTorch"
  echo ""
  echo "$(head -1 <<<"$smi"); peak $PEAK_TFLOPS TFLOP/s (bf16 dense); T=1024, bf16, one rank;" \
       "MFU = (6 N + 12 L d T) tokens/s / peak; medians of steps 3-$STEPS (trainer) and of" \
       "$TORCH_STEPS timed steps after 3 warm-up (PyTorch $torch_version)"
  echo ""
  echo "| model | trainer tok/s | trainer MFU | pytorch tok/s | pytorch MFU | ratio | goal MFU>=45% | goal tok/s>=pytorch |"
  echo "|---|---|---|---|---|---|---|---|"
  for name in "${models[@]}"; do
    tt=${t_tps[$name]:-} tm=${t_mfu[$name]:-} pt=${p_tps[$name]:-} pm=${p_mfu[$name]:-}
    ratio="-" goal_mfu="-" goal_tps="n/a"
    [[ -n $tm ]] && goal_mfu=$(awk -v m="$tm" 'BEGIN { print (m >= 0.45 ? "PASS" : "MISS") }')
    if [[ -n $tt && -n $pt ]]; then
      ratio=$(awk -v a="$tt" -v b="$pt" 'BEGIN { printf "%.2f", a / b }')
      goal_tps=$(awk -v a="$tt" -v b="$pt" 'BEGIN { print (a >= b ? "PASS" : "MISS") }')
    fi
    echo "| $name | $(fmt_tps "$tt") | $(fmt_mfu "$tm") | $(fmt_tps "$pt") | $(fmt_mfu "$pm") | $ratio | $goal_mfu | $goal_tps |"
  done
  echo ""
  for name in "${models[@]}"; do
    read -r arch L H KV C F V T G <<<"${shape[$name]}"
    auto=$(grep -m1 'micro-batch auto:' "$OUT/trainer-$name.log" | sed 's/.*\(-> micro-batch [0-9]*\|-> none fits\).*/\1/')
    echo "- $name: $arch L$L H$H KV$KV C$C F$F V$V T$T, ${params[$name]:-?} parameters; batch $G =" \
         "${acc[$name]} x micro-batch ${mb[$name]} (${auto:-fixed micro-batch});" \
         "PyTorch: ${p_best[$name]:-no result}${p_note[$name]:-}"
  done
} >"$TABLE"
cat "$TABLE"
echo "trainer_vs_pytorch: $(($(date +%s) - START)) s"
exit $failed
