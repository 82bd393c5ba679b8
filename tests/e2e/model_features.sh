#!/usr/bin/env bash
# The model features of other families, trained from scratch (--tie-embeddings, --attention-bias,
# --qkv-bias, --mlp-bias, --head-dim):
#  - a llama with a tied head, q/k/v/o and MLP biases and heads of 12 (d-model 64 / 4 heads = 16)
#    trains 4 steps with the single-rank run's losses (within LOSS_TOL relative, the bound of
#    parallel_equivalence.sh) at dp 2, tp 2 (biases split with their rows, the o and down biases
#    replicated), pp 2 (the tied head's copy of wte on the last stage) and ZeRO-3 at dp 2 (units
#    that hold the biases), and string-equal ones with --recompute full;
#  - exported (--export-hf) after 10 steps at lr 1e-2 (biases well off 0),
#    tests/support/hf_reference.py (float64, from transformers' conventions) gives the trainer's
#    validation loss (HF_TOL relative) and greedy continuation, for that llama (model_type llama,
#    attention_bias, mlp_bias, head_dim, tie_word_embeddings true), a Qwen2 one (q/k/v biases
#    only: model_type qwen2, own head) and a gpt2 with its own head (lm_head.weight). A tied
#    head's early continuation repeats the last byte: the loss is the discriminating check (the
#    q bias exported without its RoPE permutation moves it by 2.3e-6).
#  - what no model or format holds is refused with exit 2 before any step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  fail "/usr/bin/python3 has no torch (python3-torch): make test installs it (tools/install-deps.sh)"
LOSS_TOL=2e-6
# The trainer's fp32 validation loss vs the float64 reference: measured 7.8e-10 to 3.4e-9 on AMD
# EPYC Zen 5; on Zen 3 (AVX2: attention's tiles on OpenBLAS, not our AVX-512 ones) gpt2 3.4e-8,
# and 2.3e-8 with OpenBLAS's SSE3 kernels (OPENBLAS_CORETYPE=Prescott): fp32's rounding, which
# moves with the kernels. A q bias exported without its RoPE permutation moves it by 2.3e-6.
HF_TOL=1e-7
features=(--arch llama --n-kv-head 2 --tie-embeddings --attention-bias --mlp-bias --head-dim 12)
run() {  # run NAME NP ARGS...: 4 steps of the llama with every feature
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/$name.log" $(tiny_args) "${features[@]}" --steps 4 \
    --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  [ "$(wc -l < "$SCRATCH/$name.loss")" = 4 ] || fail "$name: expected 4 losses"
}
run base 1
grep -q "^tie-embeddings = true" "$SCRATCH/base/run.ini" && grep -q "^head-dim = 12" "$SCRATCH/base/run.ini" ||
  fail "run.ini does not record the model's features"
for layout in "2 --dp 2" "2 --tp 2" "2 --pp 2" "2 --dp 2 --zero 3"; do
  name=$(echo "$layout" | cut -d' ' -f2- | tr -d ' -')
  # shellcheck disable=SC2086
  run "$name" $layout
  d=$(max_rel_diff "$SCRATCH/base.loss" "$SCRATCH/$name.loss")
  echo "$name: losses within $d of one rank's"
  awk -v d="$d" -v t=$LOSS_TOL 'BEGIN{exit !(d < t)}' || fail "$name: losses differ by $d"
done
run recompute 1 --recompute full
cmp -s "$SCRATCH/base.loss" "$SCRATCH/recompute.loss" ||
  { paste "$SCRATCH/base.loss" "$SCRATCH/recompute.loss"; fail "--recompute full changes the losses"; }

# Validation tokens both sides read alike: 16 windows of 32 + 1 bytes of text, nanoGPT's uint16.
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([c, 0]) for c in sys.stdin.buffer.read(513)))' \
  < "$SOURCE_DIR/README.md" > "$SCRATCH/val.bin"
[ "$(stat -c %s "$SCRATCH/val.bin")" = 1026 ] || fail "val.bin: expected 513 tokens"
prompt="The "
sample() { sed -n '/^---- sample (/,/^----$/p' "$1" | sed '1d;$d'; }
exported() {  # exported NAME MODEL_TYPE KEYS ARGS...: trains, exports, PyTorch computes alike
  local name=$1 type=$2 keys=$3; shift 3
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/$name.log" --train-data "$DATA_DIR/train.h5" --val-data "$SCRATCH/val.bin" \
    $(tiny_model_args) "$@" --lr 1e-2 --steps 10 --sample-tokens 24 --sample-temperature 0 \
    --sample-prompt "$prompt" --export-hf "$SCRATCH/$name-hf" --out-dir "$SCRATCH/$name"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name: training with --export-hf exited $rc"; }
  # --eval-samples' default 64 of val.bin's 16 sequences: all 16 (as PyTorch's below), said
  grep -qx "eval-samples 64: the val-data hold 16 sequences of seq-len 32; each evaluation reads them all" \
    "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: the evaluation's 16 sequences not said"; }
  /usr/bin/python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
want = dict(kv.split("=") for kv in sys.argv[3].split())
got = {k: json.dumps(c.get(k)) for k in want}
assert c["model_type"] == sys.argv[2] and got == want, (c["model_type"], got, want)' \
    "$SCRATCH/$name-hf/config.json" "$type" "$keys" || fail "$name: config.json"
  ours=$(metric "$SCRATCH/$name/metrics.jsonl" val_loss | tail -1)
  theirs=$(/usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/$name-hf" --loss \
    "$SCRATCH/val.bin" 32 16) || fail "$name: the PyTorch reference failed"
  d=$(awk -v a="$ours" -v b="$theirs" 'BEGIN{d = (a - b) / b; print (d < 0 ? -d : d)}')
  awk -v d="$d" -v t=$HF_TOL 'BEGIN{exit !(d < t)}' ||
    fail "$name: val loss $ours, PyTorch's float64 $theirs (relative $d)"
  sample "$SCRATCH/$name.log" > "$SCRATCH/$name.ours"
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/$name-hf" "$prompt" 24 32 \
    > "$SCRATCH/$name.torch" || fail "$name: the PyTorch reference failed"
  cmp -s "$SCRATCH/$name.ours" "$SCRATCH/$name.torch" ||
    { diff "$SCRATCH/$name.ours" "$SCRATCH/$name.torch"; fail "$name: PyTorch's continuation differs"; }
  echo "$name ($type): val loss $ours, PyTorch's float64 $theirs (relative $d); the same continuation"
}
exported llama llama "tie_word_embeddings=true attention_bias=true mlp_bias=true head_dim=12" \
  "${features[@]}"
exported qwen2 qwen2 "tie_word_embeddings=false head_dim=16" --arch llama --n-kv-head 2 --qkv-bias
exported gpt2 gpt2 "tie_word_embeddings=false" --arch gpt2 --tie-embeddings=false

refused() {  # refused WHAT PATTERN ARGS...: exit 2, the message, no step taken
  local what=$1 pattern=$2; shift 2
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/refused.log" $(tiny_args) --steps 5 --out-dir "$SCRATCH/r" "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/refused.log"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "$what: no '$pattern'"; }
  ! grep -q '"step": 1' "$SCRATCH/r/metrics.jsonl" 2>/dev/null || fail "$what: trained before refusing"
  rm -rf "$SCRATCH/r"
}
refused "gpt2 without biases" "gpt2 has every bias" --arch gpt2 --qkv-bias=false
refused "an o_proj bias alone" "without q/k/v biases" --arch llama --attention-bias --qkv-bias=false
refused "gpt2 with a head-dim" "head-dim 12 is llama's only" --arch gpt2 --head-dim 12
refused "an odd llama head" "even head size" --arch llama --head-dim 7
refused "Qwen2 with MLP biases" "mlp-bias cannot be exported" --arch llama --qkv-bias --mlp-bias \
  --export-hf "$SCRATCH/q-hf"
refused "llm.c without a tied head" "tie-embeddings false cannot be written" --tie-embeddings=false \
  --export-llmc "$SCRATCH/u.bin"
echo "ok: model features train alike in every layout and leave the program as transformers reads them"
