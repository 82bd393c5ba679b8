#!/usr/bin/env bash
# DeepSeek-V3's MoE through the trainer: the first layer dense (--moe-first-dense 1), sigmoid
# scores (--moe-router-score sigmoid), gates scaled (--moe-route-scale 2.5), experts chosen with
# a per-expert bias moved after each step towards equal loads (--moe-expert-bias), from one of
# two groups (--moe-router-groups 2 --moe-router-group-topk 1: experts {0, 1} or {2, 3}, so both
# of a group or neither). Checked: the start-up line names the router; every token took the two
# experts of one group (the loads of a group's experts are equal); every
# layer's bias in the checkpoint is rate x the sum over the steps of sign(mean load - the
# expert's load), the loads metrics.jsonl records (summed over all ranks); tp 2 x pp 2 trains the
# same losses and the same biases as one rank (saved in the background); 3 steps + exit 85 +
# resume + 3 equal 6 steps bit for bit (losses, tokens per expert, parameters, biases);
# ckpt-inspect names the table; what does not go together is refused with exit 2 before any work.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

RATE=0.015625  # 2^-6: rate x a sum of signs is exact in float32, compared as decimals below
# shellcheck disable=SC2207
ROUTER=($(tiny_args) --arch llama --n-layer 3 --moe-first-dense 1 --n-experts 4 --top-k 2
        --moe-ff 96 --moe-aux-loss-coef 0
        --moe-router-score sigmoid --moe-route-scale 2.5 --moe-expert-bias
        --moe-expert-bias-rate "$RATE" --moe-router-groups 2 --moe-router-group-topk 1
        --steps 6 --save-interval 6)

table() {  # table CHECKPOINT.h5: /manifest/expert_bias, one value a line
  h5dump -y -w 1 -m '%.9g' -d /manifest/expert_bias "$1" |
    sed -n '/^   DATA {/,/^   }/s/^ *\([-0-9.e]*\),\{0,1\}$/\1/p'
}

run_trainer 1 "$SCRATCH/one.log" "${ROUTER[@]}" --out-dir "$SCRATCH/one"
[ "$rc" = 0 ] || { cat "$SCRATCH/one.log"; fail "the sigmoid router's run exited $rc"; }
grep -q "| MoE E4 K2 Fe96 shared 0 every 1 from layer 1 sigmoid expert-bias scale 2.5 groups 1 of 2 |" \
  "$SCRATCH/one.log" \
  || { head -3 "$SCRATCH/one.log"; fail "the start-up line does not name the router"; }
ckpt=$SCRATCH/one/checkpoints/step-00000006/checkpoint.h5
table "$ckpt" > "$SCRATCH/one.bias"
python3 - "$SCRATCH/one/metrics.jsonl" "$SCRATCH/one.bias" "$RATE" <<'PY' \
  || fail "the checkpoint's expert biases are not the sum of the steps' updates"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
stored = [float(v) for v in open(sys.argv[2])]
rate = float(sys.argv[3])
expected = []
for layer in range(2):  # n-layer 3, the first dense: MoE layers 1 and 2, the table's rows
    bias = [0.0] * 4
    for s in steps:
        assert [l["layer"] for l in s["moe_layers"]] == [1, 2], s["moe_layers"]
        tokens = s["moe_layers"][layer]["tokens"]
        assert tokens[0] == tokens[1] and tokens[2] == tokens[3], ("not by groups", tokens)
        mean = sum(tokens) / 4
        bias = [b + rate * ((mean > t) - (mean < t)) for b, t in zip(bias, tokens)]
    expected += bias
assert len(steps) == 6 and stored == expected, (stored, expected)
assert any(b != 0 for b in stored), stored  # some expert was off the mean
print("biases after 6 steps:", stored)
PY
echo "ok: each token took one group's experts; each layer's bias is rate x the sum of" \
  "sign(mean load - load) over the steps' loads"

# tp 2 x pp 2 (layers 0-1 and 2): the same losses (fp32 sums in another order: 1e-5, as layouts_within) and, the
# routing being the same, the same biases, saved in the background (the table travels with the
# manifest the writer thread copies)
run_trainer 4 "$SCRATCH/tp2pp2.log" "${ROUTER[@]}" --tp 2 --pp 2 --async-save \
  --out-dir "$SCRATCH/tp2pp2"
[ "$rc" = 0 ] || { cat "$SCRATCH/tp2pp2.log"; fail "tp 2 x pp 2 exited $rc"; }
grep -q "saved checkpoint step 6 in .* in the background" "$SCRATCH/tp2pp2.log" \
  || { cat "$SCRATCH/tp2pp2.log"; fail "tp 2 x pp 2 did not save in the background"; }
metric "$SCRATCH/one/metrics.jsonl" loss > "$SCRATCH/one.loss"
metric "$SCRATCH/tp2pp2/metrics.jsonl" loss > "$SCRATCH/tp2pp2.loss"
within one tp2pp2 loss 1e-5
cmp -s "$SCRATCH/one.bias" <(table "$SCRATCH/tp2pp2/checkpoints/step-00000006/checkpoint.h5") \
  || fail "tp 2 x pp 2 ends with other expert biases than one rank"
echo "ok: tp 2 x pp 2 trains as one rank, with the same expert biases"

run_trainer 1 "$SCRATCH/a.log" "${ROUTER[@]}" --out-dir "$SCRATCH/pieces" --exit-at-step 3
[ "$rc" = 85 ] || { cat "$SCRATCH/a.log"; fail "the first piece exited $rc, expected 85"; }
# the resume leaves out the experts, the router and the rate: the checkpoint's (a default rate of 0.001 in
# place of the recorded one fails here: "expert biases differ after the resume")
# shellcheck disable=SC2046
run_trainer 1 "$SCRATCH/b.log" $(tiny_args | sed 's/--n-layer 2/--n-layer 3/') --steps 6 \
  --save-interval 6 --out-dir "$SCRATCH/pieces" --resume "$SCRATCH/pieces"
[ "$rc" = 0 ] || { cat "$SCRATCH/b.log"; fail "the resumed piece exited $rc"; }
for key in loss moe_layers; do
  cmp -s <(metric "$SCRATCH/one/metrics.jsonl" "$key") \
    <(metric "$SCRATCH/pieces/metrics.jsonl" "$key") || fail "$key differs after the resume"
done
h5diff "$ckpt" "$SCRATCH/pieces/checkpoints/step-00000006/checkpoint.h5" /params /params \
  || fail "the parameters differ after the resume"
cmp -s "$SCRATCH/one.bias" <(table "$SCRATCH/pieces/checkpoints/step-00000006/checkpoint.h5") \
  || fail "the expert biases differ after the resume"
echo "ok: 3 + resume + 3 steps equal 6 steps bit for bit (losses, loads, parameters, biases)"

"$BUILD_DIR/ckpt-inspect" "$SCRATCH/one" > "$SCRATCH/inspect.log" 2>&1 \
  || { cat "$SCRATCH/inspect.log"; fail "ckpt-inspect failed"; }
grep -Eq '^  expert_bias +checksum 0x[0-9a-f]{16}$' "$SCRATCH/inspect.log" \
  || { cat "$SCRATCH/inspect.log"; fail "ckpt-inspect does not name the expert bias table"; }
echo "ok: ckpt-inspect names the table by its checksum"

refused() {  # refused NAME MESSAGE ARGS...
  local name=$1 message=$2; shift 2
  run_trainer 1 "$SCRATCH/$name.log" "$@" --out-dir "$SCRATCH/$name"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exited $rc, expected 2"; }
  grep -qF -- "$message" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$message'"; }
  [ ! -e "$SCRATCH/$name/run.ini" ] || fail "$name: wrote run.ini before refusing"
}
refused softmax-bias "moe-expert-bias needs moe-router-score sigmoid" "${ROUTER[@]}" \
  --moe-router-score softmax
refused top1 "set moe-norm-topk false" "${ROUTER[@]}" --top-k 1
refused rate-alone "moe-expert-bias-rate moves the bias of --moe-expert-bias" "${ROUTER[@]}" \
  --moe-expert-bias false
refused score "moe-router-score must be softmax or sigmoid, not 'tanh'" "${ROUTER[@]}" \
  --moe-router-score tanh
refused export "--moe-router-score sigmoid, --moe-expert-bias, --moe-route-scale and --moe-router-groups cannot be" \
  "${ROUTER[@]}" --export-hf "$SCRATCH/hf"
refused groups "moe-router-groups must divide n-experts (4) into equal groups, got 3" \
  "${ROUTER[@]}" --moe-router-groups 3
refused group-topk "moe-router-group-topk 1 limits the groups of moe-router-groups, which is 1" \
  "${ROUTER[@]}" --moe-router-groups 1
refused few-experts "moe-router-group-topk 1 groups of 1 experts hold fewer than top-k (2)" \
  "${ROUTER[@]}" --moe-router-groups 4
refused resume-groups "moe-router-groups = 1 disagrees with the checkpoint" "${ROUTER[@]}" \
  --moe-router-groups 1 --moe-router-group-topk 0 --resume "$SCRATCH/one"
refused resume-scale "moe-route-scale = 1 disagrees with the checkpoint" "${ROUTER[@]}" \
  --moe-route-scale 1 --resume "$SCRATCH/one"
echo "ok: a bias without the sigmoid router, sigmoid top-1 renormalised, a rate without a bias," \
  "another score, an export, groups that do not divide the experts or hold too few, a group" \
  "top-k without groups and a resume under another scale or groups refused with exit 2"
