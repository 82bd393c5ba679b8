#!/usr/bin/env bash
# --init-from and --export-hf of mixtures of experts: small random Mixtral and Qwen3-MoE
# checkpoints whose config.json has exactly the keys of the real Mixtral-8x7B-v0.1 and
# Qwen3-30B-A3B (tests/support/hf_configs, shrunk to 4 experts, top 2; written by
# tests/support/hf_checkpoint.py, not by mpitrain):
#   - the validation loss is the float64 PyTorch reference's written from transformers'
#     MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock (tests/support/hf_reference.py): Mixtral, and
#     Qwen3-MoE with decoder_sparse_step 2 (a dense layer, then an MoE one; q/k norms);
#   - router jitter and norm_topk_prob false are refused with exit 2 naming them, before any step;
#   - Mixtral trains 3 steps at dp 2, tp 2 and pp 2 with one rank's losses, and its export, read
#     back and exported again, gives the same files byte for byte (tests/support/hf_layouts_lib.sh).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_import_lib.sh"

make_ckpt mixtral Mixtral-8x7B-v0.1
matches_reference mixtral "$(val_loss mixtral)"
make_ckpt qwen3-moe Qwen3-30B-A3B --set decoder_sparse_step=2
matches_reference qwen3-moe "$(val_loss qwen3-moe)"
refused "router jitter" "config.json: router_jitter_noise = 0.1: " jitter Mixtral-8x7B-v0.1 \
  --set router_jitter_noise=0.1
refused "unnormalised gates" "config.json: norm_topk_prob = false: " unnormalised Qwen3-30B-A3B \
  --set norm_topk_prob=false

source "$SOURCE_DIR/tests/support/hf_layouts_lib.sh"
layouts_and_round_trip Mixtral-8x7B-v0.1
grep -q '"MixtralForCausalLM"' "$ckpt-export/config.json" ||
  { cat "$ckpt-export/config.json"; fail "the export is not a MixtralForCausalLM"; }
echo "ok: Mixtral and Qwen3-MoE imports against the float64 reference, refusals, layouts, round trip"
