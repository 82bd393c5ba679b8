#!/usr/bin/env bash
# Fine-tuning data (prepare-data --prompt-field): prompt/completion JSON Lines become HDF5 token
# files with a /loss_mask that scores the completions only, and the trainer's loss is the mean
# over those. The data: fortunes, each cut into a prompt (its first line) and a completion (the
# rest), tokenized with GPT-2's BPE (<|endoftext|> before each document).
#   - prepare-data reports each file's scored tokens, which the mask's bytes sum to;
#   - tokenize --show decodes the file as stretches the mask scores or not: <|endoftext|> and
#     the prompt unscored, the completion scored, alternating;
#   - one SGD step at lr 1e-9 over the first 8 validation windows, on 2 data-parallel ranks
#     (whose scored counts differ), gives the float64 PyTorch reference's mean over the targets
#     the mask scores and its gradient norm within 1e-6, and the validation loss likewise;
#   - a step whose windows score nothing (prompts with empty completions first) logs no loss
#     (null; "-" on the console, left out of the final loss) and a gradient norm of 0, and the
#     steps after it train; validation windows that score nothing give a val loss of null and
#     no --save-best checkpoint;
#   - a mask byte other than 0 or 1, or a training set whose mask is all 0, exit 2 before any
#     step; so do --prompt-field with a text input or with --format nanogpt.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_gpt2_vocab
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  fail "/usr/bin/python3 has no torch (python3-torch): make test installs it (tools/install-deps.sh)"
command -v h5dump > /dev/null || fail "h5dump is missing (hdf5-tools): make test installs it"
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}
[[ -d $fortunes ]] || fail "the sample corpus $fortunes is missing (apt-get install fortunes)"
# sft.jsonl: 1500 fortunes of two lines or more; silent.jsonl: 40 prompts with empty completions
# (nothing scored), then the same.
/usr/bin/python3 - "$SOURCE_DIR/tests/support" "$fortunes" "$SCRATCH" <<'PY'
import json, os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[1])
from fortunes import fortunes
out = sys.argv[3]
docs = [d for d in fortunes(sys.argv[2]) if "\n" in d]
pairs = [("Q: " + d.split("\n", 1)[0] + "\nA:", " " + d.split("\n", 1)[1]) for d in docs[:1500]]
def write(name, rows):
    with open(os.path.join(out, name), "w") as f:
        f.writelines(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows)
write("sft.jsonl", pairs)
write("silent.jsonl", [(p, "") for p, _ in pairs[:40]] + pairs)
PY
prepare() {  # prepare NAME JSONL ARGS...: $SCRATCH/NAME/{train,val}.h5
  local name=$1 input=$2
  shift 2
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/$name" --tokenizer gpt2 --gpt2-vocab "$GPT2_VOCAB" \
    --prompt-field prompt --jsonl-field completion "$@" "$SCRATCH/$input" > "$SCRATCH/$name.log" 2>&1 ||
    { cat "$SCRATCH/$name.log"; fail "prepare-data $name failed"; }
}
prepare sft sft.jsonl
grep -q "^loss mask: /loss_mask scores the 'completion' tokens" "$SCRATCH/sft.log" ||
  { cat "$SCRATCH/sft.log"; fail "prepare-data does not name the loss mask"; }
# The validation file's tokens and mask as raw files (what the reference reads)
h5dump -d /tokens -b LE -o "$SCRATCH/val.bin" "$SCRATCH/sft/val.h5" > /dev/null &&
  h5dump -d /loss_mask -b LE -o "$SCRATCH/val.mask" "$SCRATCH/sft/val.h5" > /dev/null ||
  fail "h5dump could not read $SCRATCH/sft/val.h5"
reported=$(sed -n 's/^val: *[0-9]* tokens (\([0-9]*\) scored).*/\1/p' "$SCRATCH/sft.log")
summed=$(od -An -v -tu1 "$SCRATCH/val.mask" | tr -s ' ' '\n' | grep -c '^1$')
[ -n "$reported" ] && [ "$reported" = "$summed" ] && [ "$summed" -gt 0 ] &&
  [ "$summed" -lt "$(($(stat -c %s "$SCRATCH/val.mask")))" ] ||
  fail "prepare-data reports '$reported' scored val tokens; the mask's bytes sum to $summed"
echo "prepare-data: $summed of $(stat -c %s "$SCRATCH/val.mask") val tokens scored"
# What the mask scores, decoded (tokenize --show): unscored <|endoftext|> + prompt, then the
# scored completion, alternating, each prompt ending where its completion begins
"$BUILD_DIR/tokenize" --show "$SCRATCH/sft/val.h5" --count 400 "$SCRATCH/sft" > "$SCRATCH/show.jsonl" ||
  fail "tokenize --show failed"
/usr/bin/python3 - "$SCRATCH/show.jsonl" <<'PY' || fail "tokenize --show: the stretches are not prompt, completion, ..."
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) > 4, rows
for i, r in enumerate(rows[:-1]):  # the last one may be cut by --count
    assert r["scored"] == (i % 2 == 1), r
    if r["scored"]:
        assert r["text"].startswith(" ") and "<|endoftext|>" not in r["text"], r
    else:
        assert r["text"].startswith("<|endoftext|>Q: ") and r["text"].endswith("\nA:"), r
print("tokenize --show: %d stretches, the first unscored: %r" % (len(rows), rows[0]["text"][:40]))
PY

T=64
args=(--arch llama --n-kv-head 2 --n-layer 2 --n-head 4 --d-model 64 --seq-len "$T"
      --global-batch-size 8 --warmup-steps 0 --sample-tokens 0 --peak-gflops 100 --threads 1
      --shuffle false)
# One step on the first 8 validation windows (SGD at lr 1e-9: the exported weights are the
# initial ones to ~1e-9) on 2 data-parallel ranks, against the reference's mean over the targets
# the mask scores and the gradient norm of that mean.
run_trainer 2 "$SCRATCH/step.log" "${args[@]}" --micro-batch-size 4 --optimizer sgd --lr 1e-9 \
  --steps 1 --train-data "$SCRATCH/sft/val.h5" --val-data "$SCRATCH/sft/val.h5" \
  --eval-interval 0 --eval-samples 8 --out-dir "$SCRATCH/step" --export-hf "$SCRATCH/step-hf"
[ "$rc" = 0 ] || { cat "$SCRATCH/step.log"; fail "the one-step run exited $rc"; }
grep -q "^loss mask: 1 of the 1 training files score only the targets their /loss_mask marks 1" \
  "$SCRATCH/step.log" || { cat "$SCRATCH/step.log"; fail "the start-up lines do not name the data's loss mask"; }
read -r ref_loss ref_norm < <(/usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" \
  "$SCRATCH/step-hf" --scored "$SCRATCH/val.bin" "$T" 8 -1 "$SCRATCH/val.mask") ||
  fail "the PyTorch reference failed"
# measured 2e-9 (loss) and 2e-8 (grad_norm); every target scored lies 2e-1 away
scored_reference "the data's loss mask, dp 2" "$SCRATCH/step/metrics.jsonl" "$ref_loss" "$ref_norm" 1e-6

# A first step of prompts alone: no loss, no gradient; the steps after it train.
prepare silent silent.jsonl
# Its first windows as validation too: a val loss of nothing (null), never a best checkpoint.
run_trainer 1 "$SCRATCH/silent-run.log" "${args[@]}" --micro-batch-size 8 --lr 3e-3 --steps 3 \
  --train-data "$SCRATCH/silent/train.h5" --val-data "$SCRATCH/silent/train.h5" \
  --eval-samples 4 --eval-interval 1 --save-best --out-dir "$SCRATCH/silent-run"
[ "$rc" = 0 ] || { cat "$SCRATCH/silent-run.log"; fail "the run whose first step scores nothing exited $rc"; }
losses=$(metric "$SCRATCH/silent-run/metrics.jsonl" loss | tr '\n' ' ')
norms=$(metric "$SCRATCH/silent-run/metrics.jsonl" grad_norm | tr '\n' ' ')
[[ $losses =~ ^null\ [0-9.]+\ [0-9.]+\ $ && $norms =~ ^0\ [0-9.]+\ [0-9.]+\ $ ]] ||
  fail "a first step that scores nothing: losses $losses, gradient norms $norms; expected null and 0 first"
grep -q "^step 1/3 | loss - (no target scored)" "$SCRATCH/silent-run.log" &&
  grep -q "final train [0-9.]* (mean of steps 2-3)" "$SCRATCH/silent-run.log" ||
  { cat "$SCRATCH/silent-run.log"; fail "the console does not leave the step without a loss out"; }
[ "$(metric "$SCRATCH/silent-run/metrics.jsonl" val_loss | tr '\n' ' ')" = "null null null " ] &&
  [ ! -e "$SCRATCH/silent-run/checkpoints" ] && grep -q "checkpoints written 0" "$SCRATCH/silent-run.log" ||
  { cat "$SCRATCH/silent-run.log"; fail "validation windows that score nothing: a val loss, or a best checkpoint"; }
echo "a step of prompts alone: losses $losses gradient norms $norms"

refused() {  # refused NAME PATTERN COMMAND...: exit 2 naming it, nothing written
  local name=$1 pattern=$2
  shift 2
  set +e
  "$@" > "$SCRATCH/$name.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" != 2 ] || ! grep -q -- "$pattern" "$SCRATCH/$name.log"; then
    cat "$SCRATCH/$name.log"
    fail "$name: exit $rc, expected 2 with '$pattern'"
  fi
  echo "$name: exit 2, $(grep -o -- "$pattern.*" "$SCRATCH/$name.log" | head -1)"
}
trainer_refused() {  # trainer_refused NAME PATTERN TRAIN_FILE: exit 2, no step
  run_trainer 1 "$SCRATCH/$1.log" "${args[@]}" --micro-batch-size 8 --steps 1 --train-data "$3" \
    --out-dir "$SCRATCH/$1"
  if [ "$rc" != 2 ] || ! grep -q -- "$2" "$SCRATCH/$1.log"; then
    cat "$SCRATCH/$1.log"
    fail "$1: exit $rc, expected 2 with '$2'"
  fi
  [ ! -e "$SCRATCH/$1/metrics.jsonl" ] || fail "$1: a step was taken"
  echo "$1: exit 2, $(grep -o -- "$2.*" "$SCRATCH/$1.log" | head -1)"
}
# A mask byte set to 2 in the file (the mask is contiguous: h5dump names its offset)
cp "$SCRATCH/sft/val.h5" "$SCRATCH/two.h5"
offset=$(h5dump -p -H -d /loss_mask "$SCRATCH/two.h5" | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p')
[ -n "$offset" ] || fail "h5dump names no offset of /loss_mask"
printf '\x02' | dd of="$SCRATCH/two.h5" bs=1 seek=$((offset + 100)) conv=notrunc status=none
trainer_refused two-byte "/loss_mask holds 2; a loss mask holds 1" "$SCRATCH/two.h5"
cp "$SCRATCH/sft/val.h5" "$SCRATCH/zeros.h5"
head -c "$(stat -c %s "$SCRATCH/val.mask")" /dev/zero |
  dd of="$SCRATCH/zeros.h5" bs=1M seek="$offset" oflag=seek_bytes conv=notrunc status=none
trainer_refused all-zero "the /loss_mask of every file is 0 throughout" "$SCRATCH/zeros.h5"
echo "not text" > "$SCRATCH/plain.txt"
refused text-input "and input '$SCRATCH/plain.txt' is text" "$BUILD_DIR/prepare-data" \
  --out-dir "$SCRATCH/r1" --prompt-field prompt "$SCRATCH/plain.txt"
refused nanogpt "only an HDF5 token file holds" "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/r2" \
  --format nanogpt --prompt-field prompt "$SCRATCH/sft.jsonl"
[ ! -e "$SCRATCH/r1" ] && [ ! -e "$SCRATCH/r2" ] || fail "a refused prepare-data left its out-dir"
echo "ok: fine-tuning data's loss mask"
