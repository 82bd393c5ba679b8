#!/usr/bin/env bash
# --init-from DIR of Hugging Face checkpoints as users have them: small random ones whose
# config.json has exactly the keys of the real gpt2, Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B and
# Mistral-7B-v0.1 (tests/support/hf_configs, shrunk; written by tests/support/hf_checkpoint.py,
# not by mpitrain).
#   - each family's validation loss is the float64 PyTorch reference's written from
#     transformers' modeling code (tests/support/hf_reference.py): Llama 3.2 (tied head, llama3
#     RoPE scaling), Qwen2.5 (q/k/v biases, tied), Qwen3 (q/k norms, head_dim 2 x hidden / heads),
#     Mistral (its window longer than the sequence, and a window of 16 of the 32 positions that
#     masks), llama with attention_bias, mlp_bias and its own head_dim, gpt2 with its own head and
#     both attention-scale switches;
#   - the same weights as model.safetensors, as shards with model.safetensors.index.json, and
#     (gpt2) under the original upload's bare names evaluate to the same validation loss, exactly;
#   - a BF16 file evaluates as the F32 file of the same (BF16-exact) values;
#   - --export-hf writes the epsilon as given (1e-05) and reads back to the same loss;
#   - a value of a feature the model lacks (a sliding window of 0; the others:
#     tests/unit/test_hf_config.cpp), an unknown key and a missing shard are refused with exit 2
#     naming them, before any step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_import_lib.sh"

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
# The window (64 in the shrunk config) is kept: a llama config.json has none, so the export is a
# mistral one with it.
grep -q '"model_type": "mistral"' "$SCRATCH/mistral-export/config.json" &&
  grep -q '"sliding_window": 64' "$SCRATCH/mistral-export/config.json" ||
  { cat "$SCRATCH/mistral-export/config.json"; fail "the export does not write the sliding window"; }
same "mistral re-exported" "$a" "$(val_loss mistral-export)"
echo "mistral: val loss $a; exported (rms_norm_eps 1e-05) and read back the same"

# A window shorter than the sequence masks: each query sees its 16 latest positions.
make_ckpt window16 Mistral-7B-v0.1 --set sliding_window=16
b=$(val_loss window16)
[ "$b" != "$a" ] || fail "a window of 16 of 32 positions changed nothing (val loss $b)"
matches_reference window16 "$b"
refused "a sliding window of 0" "config.json: sliding_window = 0: outside \[1, 2^28\]" window \
  Mistral-7B-v0.1 --set sliding_window=0
refused "an unknown key" "config.json: rope_type = \"dynamic\": a key the trainer does not know" \
  unknown gpt2 --set rope_type='"dynamic"'
# config.json records the epsilon and RoPE's theta: a flag that disagrees is refused, not replaced.
for option in norm-eps:0.5 rope-theta:3; do
  run_trainer 1 "$SCRATCH/disagree.log" "${eval_args[@]}" --init-from "$SCRATCH/mistral" \
    "--${option%:*}" "${option#*:}" --out-dir "$SCRATCH/r"
  [ "$rc" = 2 ] && grep -q "${option%:*} = ${option#*:} disagrees with the init-from model" \
    "$SCRATCH/disagree.log" || { cat "$SCRATCH/disagree.log"; fail "--$option against config.json: exit $rc"; }
done
make_ckpt lost gpt2 --shard-bytes 60000
rm "$SCRATCH/lost/model-00002-of-"*
run_trainer 1 "$SCRATCH/refused.log" "${eval_args[@]}" --init-from "$SCRATCH/lost" --out-dir "$SCRATCH/r"
[ "$rc" = 2 ] && grep -q "model-00002-of-.*: cannot open" "$SCRATCH/refused.log" ||
  { cat "$SCRATCH/refused.log"; fail "a missing shard: exit $rc"; }
echo "ok: Hugging Face import (five families against the reference, shards, Hub names, BF16, refusals)"
