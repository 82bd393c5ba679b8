#!/usr/bin/env bash
# --init-from DIR of Hugging Face checkpoints as users have them: small random ones whose
# config.json has exactly the keys of the real gpt2, Llama-3.2-1B and Mistral-7B-v0.1
# (tests/support/hf_configs, shrunk; written by tests/support/hf_checkpoint.py, not by mpitrain).
#   - the same weights as model.safetensors, as shards with model.safetensors.index.json, and
#     (gpt2) under the original upload's bare names evaluate to the same validation loss, exactly;
#   - a BF16 file evaluates as the F32 file of the same (BF16-exact) values;
#   - --export-hf writes the epsilon as given (1e-05) and reads back to the same loss;
#   - values that would change the model silently (llama attention_bias, gpt2's own lm_head; the
#     others: tests/unit/test_hf_config.cpp), Qwen2.5's own config, an unknown key and a missing
#     shard are refused with exit 2 naming them, before any step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
/usr/bin/python3 -c "import numpy" 2>/dev/null ||
  fail "/usr/bin/python3 has no numpy (python3-numpy): make test installs it (tools/install-deps.sh)"
configs="$SOURCE_DIR/tests/support/hf_configs"
make_ckpt() {  # make_ckpt NAME CONFIG ARGS...: $SCRATCH/NAME
  local name=$1 config=$2; shift 2
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_checkpoint.py" "$configs/$config.json" \
    "$SCRATCH/$name" "$@" || fail "$name: the checkpoint writer failed"
}
eval_args=(--train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5" --seq-len 32
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

llama_set=(--set tie_word_embeddings=false --set rope_scaling=null)  # the features not yet there
make_ckpt gpt2 gpt2
make_ckpt gpt2-sharded gpt2 --shard-bytes 60000
make_ckpt gpt2-hub gpt2 --bare-names
a=$(val_loss gpt2); same "gpt2 sharded" "$a" "$(val_loss gpt2-sharded)"
same "gpt2 Hub-style names" "$a" "$(val_loss gpt2-hub)"
echo "gpt2: one file, $(ls "$SCRATCH/gpt2-sharded" | grep -c '^model-') shards + index, bare names: val loss $a"
make_ckpt llama Llama-3.2-1B "${llama_set[@]}" --round-to BF16
make_ckpt llama-bf16 Llama-3.2-1B "${llama_set[@]}" --dtype BF16 --shard-bytes 60000
a=$(val_loss llama); same "llama BF16 shards" "$a" "$(val_loss llama-bf16)"
echo "llama: F32 file and BF16 shards: val loss $a"
make_ckpt mistral Mistral-7B-v0.1
a=$(val_loss mistral --export-hf "$SCRATCH/mistral-export")
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
refused "llama attention_bias" "config.json: attention_bias = true: " bias Llama-3.2-1B \
  "${llama_set[@]}" --set attention_bias=true
refused "gpt2 untied head" "config.json: tie_word_embeddings = false: " untied gpt2 --lm-head \
  --set tie_word_embeddings=false
refused "Qwen2.5's own config" "tie_word_embeddings = true: " qwen25 Qwen2.5-0.5B
refused "an unknown key" "config.json: rope_type = \"dynamic\": a key the trainer does not know" \
  unknown gpt2 --set rope_type='"dynamic"'
make_ckpt lost gpt2 --shard-bytes 60000
rm "$SCRATCH/lost/model-00002-of-"*
run_trainer 1 "$SCRATCH/refused.log" "${eval_args[@]}" --init-from "$SCRATCH/lost" --out-dir "$SCRATCH/r"
[ "$rc" = 2 ] && grep -q "model-00002-of-.*: cannot open" "$SCRATCH/refused.log" ||
  { cat "$SCRATCH/refused.log"; fail "a missing shard: exit $rc"; }
echo "ok: Hugging Face import (shards, Hub names, BF16, refusals)"
