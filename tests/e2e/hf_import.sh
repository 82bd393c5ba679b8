#!/usr/bin/env bash
# --init-from DIR of Hugging Face checkpoints as users have them: small random ones whose
# config.json has exactly the keys of the real gpt2, Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B and
# Mistral-7B-v0.1 (tests/support/hf_configs, shrunk; written by tests/support/hf_checkpoint.py,
# not by mpitrain).
#   - each family's validation loss is the float64 PyTorch reference's written from
#     transformers' modeling code (tests/support/hf_reference.py): Llama 3.2 (tied head, llama3
#     RoPE scaling), Qwen2.5 (q/k/v biases, tied), Qwen3 (q/k norms, head_dim 2 x hidden / heads),
#     Mistral, llama with attention_bias, mlp_bias and its own head_dim, gpt2 with its own head and
#     both attention-scale switches;
#   - the same weights as model.safetensors, as shards with model.safetensors.index.json, and
#     (gpt2) under the original upload's bare names evaluate to the same validation loss, exactly;
#   - a BF16 file evaluates as the F32 file of the same (BF16-exact) values;
#   - --export-hf writes the epsilon as given (1e-05) and reads back to the same loss;
#   - a value of a feature the model lacks (sliding window shorter than the sequence; the others:
#     tests/unit/test_hf_config.cpp), an unknown key and a missing shard are refused with exit 2
#     naming them, before any step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  fail "/usr/bin/python3 has no numpy or torch: make test installs them (tools/install-deps.sh)"
configs="$SOURCE_DIR/tests/support/hf_configs"
make_ckpt() {  # make_ckpt NAME CONFIG ARGS...: $SCRATCH/NAME
  local name=$1 config=$2; shift 2
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_checkpoint.py" "$configs/$config.json" \
    "$SCRATCH/$name" "$@" || fail "$name: the checkpoint writer failed"
}
# Validation tokens both sides read alike: 16 windows of 32 + 1 bytes of text, nanoGPT's uint16.
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([c, 0]) for c in sys.stdin.buffer.read(513)))' \
  < "$SOURCE_DIR/README.md" > "$SCRATCH/val.bin"
eval_args=(--train-data "$DATA_DIR/train.h5" --val-data "$SCRATCH/val.bin" --seq-len 32
           --global-batch-size 8 --micro-batch-size 2 --eval-interval 0 --eval-samples 16
           --sample-tokens 0 --peak-gflops 100 --threads 1 --steps 0)
val_loss() {  # val_loss NAME ARGS...: the validation loss of --init-from $SCRATCH/NAME
  local name=$1; shift
  run_trainer 1 "$SCRATCH/$name.log" "${eval_args[@]}" --init-from "$SCRATCH/$name" \
    --out-dir "$SCRATCH/$name-run" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name: --init-from exited $rc"; }
  metric "$SCRATCH/$name-run/metrics.jsonl" val_loss | tail -1
}
same() {  # same WHAT A B
  [ -n "$2" ] && [ "$2" = "$3" ] || fail "$1: val loss $3, expected $2"
}
matches_reference() {  # matches_reference NAME LOSS: the float64 reference's loss of $SCRATCH/NAME
  local theirs
  theirs=$(/usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/$1" --loss \
    "$SCRATCH/val.bin" 32 16) || fail "$1: the PyTorch reference failed"
  # measured up to 3e-8 relative (fp32 vs float64, 9 printed digits); a feature left out moves
  # it by more than 1e-4
  awk -v a="$2" -v b="$theirs" 'BEGIN{d=(a-b)/b; if (d<0) d=-d; exit !(d < 1e-6)}' ||
    fail "$1: val loss $2, PyTorch's float64 reference $theirs"
  echo "$1: val loss $2, PyTorch's float64 reference $theirs"
}

make_ckpt gpt2 gpt2
make_ckpt gpt2-sharded gpt2 --shard-bytes 60000
make_ckpt gpt2-hub gpt2 --bare-names
a=$(val_loss gpt2); same "gpt2 sharded" "$a" "$(val_loss gpt2-sharded)"
same "gpt2 Hub-style names" "$a" "$(val_loss gpt2-hub)"
echo "gpt2: one file, $(ls "$SCRATCH/gpt2-sharded" | grep -c '^model-') shards + index, bare names: val loss $a"
make_ckpt llama Llama-3.2-1B --round-to BF16
make_ckpt llama-bf16 Llama-3.2-1B --dtype BF16 --shard-bytes 60000
a=$(val_loss llama); same "llama BF16 shards" "$a" "$(val_loss llama-bf16)"
echo "llama: F32 file and BF16 shards: val loss $a"
matches_reference llama "$a"
make_ckpt llama-biases Llama-3.2-1B --set attention_bias=true --set mlp_bias=true \
  --set tie_word_embeddings=false --set head_dim=32
matches_reference llama-biases "$(val_loss llama-biases)"
make_ckpt qwen2 Qwen2.5-0.5B
matches_reference qwen2 "$(val_loss qwen2)"
make_ckpt qwen3 Qwen3-0.6B
matches_reference qwen3 "$(val_loss qwen3)"
make_ckpt gpt2-untied gpt2 --lm-head --set tie_word_embeddings=false --set scale_attn_weights=false \
  --set scale_attn_by_inverse_layer_idx=true
matches_reference gpt2-untied "$(val_loss gpt2-untied)"
make_ckpt mistral Mistral-7B-v0.1
a=$(val_loss mistral --export-hf "$SCRATCH/mistral-export")
matches_reference mistral "$a"
grep -q '"rms_norm_eps": 1e-05,' "$SCRATCH/mistral-export/config.json" ||
  { cat "$SCRATCH/mistral-export/config.json"; fail "the export does not write rms_norm_eps 1e-05"; }
same "mistral re-exported" "$a" "$(val_loss mistral-export)"
echo "mistral: val loss $a; exported (rms_norm_eps 1e-05) and read back the same"

refused() {  # refused WHAT PATTERN NAME CONFIG ARGS...: exit 2 naming it, no step taken
  local what=$1 pattern=$2 name=$3 config=$4; shift 4
  make_ckpt "$name" "$config" "$@"
  run_trainer 1 "$SCRATCH/refused.log" "${eval_args[@]}" --steps 5 --init-from "$SCRATCH/$name" \
    --out-dir "$SCRATCH/r"
  [ "$rc" = 2 ] || { cat "$SCRATCH/refused.log"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "$what: no '$pattern'"; }
  ! grep -q '"step": 1' "$SCRATCH/r/metrics.jsonl" 2>/dev/null || fail "$what: trained before refusing"
  rm -rf "$SCRATCH/r"
}
refused "a short sliding window" "config.json: sliding_window = 16: " window Mistral-7B-v0.1 \
  --set sliding_window=16
refused "an unknown key" "config.json: rope_type = \"dynamic\": a key the trainer does not know" \
  unknown gpt2 --set rope_type='"dynamic"'
make_ckpt lost gpt2 --shard-bytes 60000
rm "$SCRATCH/lost/model-00002-of-"*
run_trainer 1 "$SCRATCH/refused.log" "${eval_args[@]}" --init-from "$SCRATCH/lost" --out-dir "$SCRATCH/r"
[ "$rc" = 2 ] && grep -q "model-00002-of-.*: cannot open" "$SCRATCH/refused.log" ||
  { cat "$SCRATCH/refused.log"; fail "a missing shard: exit $rc"; }
echo "ok: Hugging Face import (five families against the reference, shards, Hub names, BF16, refusals)"
