#!/usr/bin/env bash
# --init-from and --export-hf of mixtures of experts: small random Mixtral, Qwen3-MoE and
# Qwen2-MoE checkpoints whose config.json has exactly the keys of the real Mixtral-8x7B-v0.1,
# Qwen3-30B-A3B and Qwen1.5-MoE-A2.7B-Chat (tests/support/hf_configs, shrunk to 4 experts, top 2;
# written by tests/support/hf_checkpoint.py, not by mpitrain):
#   - the validation loss is the float64 PyTorch reference's written from transformers'
#     MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock (tests/support/hf_reference.py): Mixtral, and
#     Qwen3-MoE with decoder_sparse_step 2 (a dense layer, then an MoE one; q/k norms), and so
#     with norm_topk_prob false (the chosen experts' softmax probabilities as gates) on 3 layers
#     of which mlp_only_layers [0] keeps the first dense (--moe-first-dense 1); Qwen2-MoE: q, k, v
#     biases, unnormalised gates and a shared expert of twice the experts' width whose output a
#     per-token sigmoid gate scales (--moe-shared-expert-gate);
#   - the first step's load-balancing loss (moe_aux_loss) is the reference's
#     load_balancing_loss_func of all layers' router logits concatenated, as transformers' forward
#     takes it (--moe-aux-loss-form auto: all-layers for a Hugging Face model), and with
#     --moe-aux-loss-form per-layer that of each layer's, summed over the layers; the run takes
#     config.json's router_aux_loss_coef (0.02) as --moe-aux-loss-coef, says so with the form,
#     and the export writes it;
#   - router jitter is refused with exit 2 naming it, before any step;
#   - Mixtral and Qwen2-MoE (also under sequence parallelism, where the gate's gradient is summed
#     over the tp ranks' rows) train 3 steps at dp 2, tp 2 and pp 2 with one rank's losses, and
#     their exports, read back and exported again, give the same files byte for byte
#     (tests/support/hf_layouts_lib.sh).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_import_lib.sh"

make_ckpt mixtral Mixtral-8x7B-v0.1
matches_reference mixtral "$(val_loss mixtral)"
# The load-balancing loss of the first step (one micro-batch of 4 windows, before the update):
# load_balancing_loss_func's of all layers' router logits concatenated (the default form for a
# Hugging Face model), and per layer, summed.
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([c, 0]) for c in sys.stdin.buffer.read(129)))' \
  < "$SOURCE_DIR/README.md" > "$SCRATCH/step.bin"
aux_step() {  # aux_step NAME REFERENCE-FLAG [ARGS...]: step 1's aux loss against the reference's
  local name=$1 flag=$2; shift 2
  run_trainer 1 "$SCRATCH/$name.log" --train-data "$SCRATCH/step.bin" --val-data "$SCRATCH/val.bin" \
    --seq-len 32 --global-batch-size 4 --micro-batch-size 4 --eval-interval 0 --sample-tokens 0 \
    --peak-gflops 100 --threads 1 --steps 1 --init-from "$SCRATCH/mixtral" --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "mixtral: one step ($name) exited $rc"; }
  ours=$(metric "$SCRATCH/$name/metrics.jsonl" moe_aux_loss)
  theirs=$(/usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/mixtral" "$flag" \
    "$SCRATCH/step.bin" 32 4) || fail "mixtral: the PyTorch reference's aux loss ($flag) failed"
  # measured 5e-9 relative (fp32 vs float64) in both forms; one token routed elsewhere moves it by
  # about 1e-3, and the pooled counts' weights off by 1e-4 (x 1.0001) by 1e-4
  close_to "$ours" "$theirs" 1e-6 ||
    fail "mixtral: aux loss ($name) $ours, PyTorch's float64 reference $theirs"
  echo "mixtral: step 1's aux loss ($name) $ours, PyTorch's float64 reference $theirs"
}
aux_step aux --aux
grep -qF "moe-aux-loss-coef 0.02 from config.json's router_aux_loss_coef, weighting one load-balancing loss over the routing of all 2 MoE layers, as transformers does (moe-aux-loss-form all-layers); its output_router_logits is false" \
  "$SCRATCH/aux.log" || { head -5 "$SCRATCH/aux.log"; fail "mixtral: no aux-loss coefficient taken"; }
aux_step aux-per-layer --aux-per-layer --moe-aux-loss-form per-layer
grep -qF "moe-aux-loss-coef 0.02 from config.json's router_aux_loss_coef, weighting each of the 2 MoE layers' load-balancing losses, summed (moe-aux-loss-form per-layer, as given), where transformers weights one loss over all layers' routing" \
  "$SCRATCH/aux-per-layer.log" || { head -5 "$SCRATCH/aux-per-layer.log"; fail "mixtral: the per-layer form not said"; }
make_ckpt qwen3-moe Qwen3-30B-A3B --set decoder_sparse_step=2
matches_reference qwen3-moe "$(val_loss qwen3-moe)"
refused "router jitter" "config.json: router_jitter_noise = 0.1: " jitter Mixtral-8x7B-v0.1 \
  --set router_jitter_noise=0.1
make_ckpt unnormalised Qwen3-30B-A3B --set norm_topk_prob=false --set num_hidden_layers=3 \
  --set 'mlp_only_layers=[0]'
matches_reference unnormalised "$(val_loss unnormalised)"
grep -q "every 1 from layer 1 gates unnormalised |" "$SCRATCH/unnormalised.log" ||
  { head -3 "$SCRATCH/unnormalised.log"; fail "mlp_only_layers [0] did not read as the first dense"; }
make_ckpt qwen2-moe Qwen1.5-MoE-A2.7B-Chat
matches_reference qwen2-moe "$(val_loss qwen2-moe)"
grep -q "| MoE E4 K2 Fe32 shared 2 gated every 1 gates unnormalised |" "$SCRATCH/qwen2-moe.log" ||
  { head -3 "$SCRATCH/qwen2-moe.log"; fail "qwen2_moe did not read as 2 shared experts, gated"; }

source "$SOURCE_DIR/tests/support/hf_layouts_lib.sh"
layouts_and_round_trip Mixtral-8x7B-v0.1
if ! grep -q '"MixtralForCausalLM"' "$ckpt-export/config.json" ||
  ! grep -q '"router_aux_loss_coef": 0.02,' "$ckpt-export/config.json"; then
  cat "$ckpt-export/config.json"; fail "the export is not a MixtralForCausalLM of coefficient 0.02"
fi
layouts_and_round_trip Qwen1.5-MoE-A2.7B-Chat "--tp 2 --sequence-parallel"
if ! grep -q '"Qwen2MoeForCausalLM"' "$ckpt-export/config.json" ||
  ! grep -q '"shared_expert_intermediate_size": 64,' "$ckpt-export/config.json"; then
  cat "$ckpt-export/config.json"; fail "the export is not a Qwen2MoeForCausalLM of shared width 64"
fi
echo "ok: Mixtral, Qwen3-MoE and Qwen2-MoE imports against the float64 reference, refusals," \
  "layouts, round trips"
