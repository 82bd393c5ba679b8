#!/usr/bin/env bash
# transformers reads what the trainer trained on the GPU: for gpt2, llama (GQA 4/2), qwen3 with
# YaRN and mistral with a sliding window of 16 (of 64 positions), a small model trains STEPS steps
# on the GPU in fp32 and is exported with --export-hf; its validation loss on a fixed batch (8
# windows of 64 bytes of this tree's README, held out of the training text) is compared with the
# loss of transformers' own GPT2LMHeadModel / LlamaForCausalLM / Qwen3ForCausalLM /
# MistralForCausalLM loading the
# directory (bench/gpu/hf_transformers.py: float64 on the CPU, and tests/support/hf_reference.py's
# logits against transformers').
#
#   bench/gpu/hf_transformers.sh BUILD_DIR OUT_DIR      (bench/gpu/run.sh's step hf)
#
# Environment: HF_DEVICE (cuda; cpu runs the trainer on the CPU: the check without a GPU), STEPS
#   (100), PYTHON (first of it, python3, /usr/bin/python3 with torch; one with transformers
#   preferred). Without a GPU (HF_DEVICE=cuda): SKIP, exit 77; without transformers: the
#   reference's check only, then SKIP, exit 77. Exit 1 when a check fails.
set -uo pipefail

usage="usage: bench/gpu/hf_transformers.sh BUILD_DIR OUT_DIR"
BUILD=$(cd "${1:?$usage}" && pwd) || exit 2
OUT=${2:?$usage}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEVICE=${HF_DEVICE:-cuda}
STEPS=${STEPS:-100}
T=64 WINDOWS=8
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[[ -x $BUILD/trainer ]] || { echo "hf_transformers: $BUILD/trainer not built" >&2; exit 1; }
if [[ $DEVICE == cuda ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIP: no GPU (nvidia-smi -L lists none)"
  exit 77
fi

python="" fallback=""
for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
  [[ -n $candidate ]] && "$candidate" -c 'import torch' >/dev/null 2>&1 || continue
  fallback=${fallback:-$candidate}
  "$candidate" -c 'import transformers' >/dev/null 2>&1 && { python=$candidate; break; }
done
python=${python:-$fallback}
[[ -n $python ]] || { echo "SKIP: no python with torch (set PYTHON)"; exit 77; }

export OMPI_MCA_ess_singleton_isolated=${OMPI_MCA_ess_singleton_isolated:-1}  # no orted needed
"$python" "$SRC/bench/gpu/hf_transformers.py" data "$OUT" "$T" "$WINDOWS" "$SRC/README.md" \
  "$SRC/docs/ARCHITECTURE.md" || exit 1
status=0 pairs=()
for arch in gpt2 llama qwen3-yarn mistral-window; do
  case $arch in
    gpt2) flags=(--arch gpt2) ;;
    llama) flags=(--arch llama --n-kv-head 2) ;;
    # Qwen3's q/k norms with YaRN (betas given: of a head of 16's 8 pairs, 2 blended)
    qwen3-yarn) flags=(--arch llama --n-kv-head 2 --qk-norm
                       --rope-scaling yarn:factor=4,orig=256,beta_fast=8,beta_slow=0.5) ;;
    # Mistral's sliding window: each query sees its 16 latest positions (the CUDA kernel's tiles
    # of 32 keys cut every way)
    mistral-window) flags=(--arch llama --n-kv-head 2 --sliding-window 16) ;;
  esac
  rm -rf "$OUT/$arch-hf"  # --export-hf writes a new directory only
  "$BUILD/trainer" "${flags[@]}" --device "$DEVICE" --n-layer 2 --n-head 4 --d-model 64 \
    --vocab-size 256 --seq-len "$T" --global-batch-size 8 --micro-batch-size 8 --steps "$STEPS" --lr 3e-3 \
    --warmup-steps 5 --train-data "$OUT/train.bin" --val-data "$OUT/batch.bin" \
    --eval-interval 0 --eval-samples "$WINDOWS" --sample-tokens 0 --peak-gflops 100 --threads 2 \
    --export-hf "$OUT/$arch-hf" --out-dir "$OUT/$arch" --overwrite >"$OUT/$arch.log" 2>&1
  rc=$?
  loss=$(sed -n 's/.*"val_loss": \([^,}]*\).*/\1/p' "$OUT/$arch/metrics.jsonl" 2>/dev/null | tail -1)
  if [[ $rc != 0 || -z $loss ]]; then
    tail -5 "$OUT/$arch.log"
    echo "FAIL: $arch: the trainer (--device $DEVICE) exited $rc${loss:- without a validation loss}"
    status=1
    continue
  fi
  echo "$arch: trained $STEPS steps on --device $DEVICE, validation loss $loss on the fixed batch"
  pairs+=("$OUT/$arch-hf" "$loss")
done
((${#pairs[@]} > 0)) || exit 1
"$python" "$SRC/bench/gpu/hf_transformers.py" check "$OUT/batch.bin" "$T" "${pairs[@]}"
rc=$?
((status == 1)) && exit 1
exit $rc
