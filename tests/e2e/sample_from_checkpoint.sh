#!/usr/bin/env bash
# Sampling and evaluation from a saved model: `--resume <run dir | checkpoints/ | step-N/ |
# checkpoint.h5> --steps 0` takes the model's shape and the run's settings from the checkpoint,
# needs no training data, and gives the training run's own end-of-run sample (greedy) and its
# last evaluation, reported at the step it loaded; the run it reads is left as it was. The
# sample's tokenizer is the one the run kept in <run dir>/tokenizer/ (or --tokenizer); top-k 1 is
# greedy; a model option that disagrees with the checkpoint is refused naming both values.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

data="$SCRATCH/data"
mkdir -p "$data"
cp "$DATA_DIR/train.h5" "$DATA_DIR/val.h5" "$data/"
echo '{"name": "bytes", "vocab_size": 256, "files": {}}' > "$data/tokenizer.json"
run="$SCRATCH/run"
sample_args=(--sample-tokens 24 --sample-temperature 0 --sample-prompt "The ")
# shellcheck disable=SC2046
run_trainer 2 "$SCRATCH/train.log" $(tiny_model_args) $(val_args) --train-data "$data/train.h5" \
  --val-data "$data/val.h5" --steps 4 --save-interval 4 "${sample_args[@]}" --out-dir "$run"
[ "$rc" = 0 ] || { cat "$SCRATCH/train.log"; fail "training exited $rc"; }
[ -f "$run/tokenizer/tokenizer.json" ] || fail "the run did not keep its data's tokenizer"
sample() { sed -n '/^---- sample (/,/^----$/p' "$1" | sed '1d;$d'; }
eval_line() { grep -m1 '^eval at step' "$1"; }
want_sample=$(sample "$SCRATCH/train.log")
want_eval=$(eval_line "$SCRATCH/train.log")
want_val=$(metric "$run/metrics.jsonl" val_loss | tail -1)
[ -n "$want_sample" ] && [ "$want_eval" != "" ] || { cat "$SCRATCH/train.log"; fail "no sample or eval"; }
[[ $want_eval == "eval at step 4 "* ]] || fail "the training run's eval: $want_eval"
grep -q -- "^---- sample (24 tokens, greedy: temperature 0) ----$" "$SCRATCH/train.log" ||
  { cat "$SCRATCH/train.log"; fail "the greedy sample's header does not say greedy"; }
before=$(dir_state "$run")

# Each form of --resume, no model options, no training data: on the training run's 2 ranks the
# same evaluation bit for bit; on 1 rank the same greedy sample, the loss within 1e-6 (a sum in
# another order; measured 0 to 3e-8).
ckpt="$run/checkpoints/step-00000004"
i=0
for form in "$run" "$run/checkpoints" "$ckpt" "$ckpt/checkpoint.h5" "$ckpt/"; do
  i=$((i + 1))
  np=$([ "$i" = 5 ] && echo 1 || echo 2)
  out="$SCRATCH/eval$i"
  run_trainer "$np" "$out.log" --resume "$form" --steps 0 --val-data "$data/val.h5" \
    --eval-samples 16 "${sample_args[@]}" --peak-gflops 100 --threads 1 --out-dir "$out"
  [ "$rc" = 0 ] || { cat "$out.log"; fail "--resume $form --steps 0 exited $rc"; }
  grep -q '^resumed from step 4 ' "$out.log" || { cat "$out.log"; fail "$form: no 'resumed from step 4'"; }
  [ "$(sample "$out.log")" = "$want_sample" ] ||
    { cat "$out.log"; fail "$form: the sample differs from the training run's: $want_sample"; }
  got_val=$(metric "$out/metrics.jsonl" val_loss)
  grep -q '"step": 4' "$out/metrics.jsonl" || { cat "$out/metrics.jsonl"; fail "$form: the record's step is not 4"; }
  if [ "$np" = 2 ]; then
    [ "$(eval_line "$out.log")" = "$want_eval" ] || { cat "$out.log"; fail "$form: not '$want_eval'"; }
    [ "$got_val" = "$want_val" ] || fail "$form: val_loss $got_val, the training run's $want_val"
  else
    d=$(max_rel_diff <(echo "$want_val") <(echo "$got_val"))
    awk -v d="$d" 'BEGIN { exit !(d <= 1e-6) }' || fail "$form on 1 rank: val_loss $got_val vs $want_val ($d)"
    echo "1 rank: val_loss relative difference $d"
  fi
  [ ! -e "$out/checkpoints" ] || fail "$form: the evaluation wrote a checkpoint"
  echo "ok: --resume $form (np $np): $(eval_line "$out.log"), the training run's sample"
done
[ "$(dir_state "$run")" = "$before" ] || fail "the evaluations changed the run they read"

# Top-k 1 is greedy whatever the temperature; a model option that agrees is accepted.
run_trainer 2 "$SCRATCH/topk.log" --resume "$run" --steps 0 "${sample_args[@]}" \
  --sample-temperature 0.8 --sample-top-k 1 --n-layer 2 --threads 1 --out-dir "$SCRATCH/topk"
[ "$rc" = 0 ] || { cat "$SCRATCH/topk.log"; fail "top-k 1 exited $rc"; }
[ "$(sample "$SCRATCH/topk.log")" = "$want_sample" ] || { cat "$SCRATCH/topk.log"; fail "top-k 1 is not greedy"; }
echo "ok: top-k 1 at temperature 0.8 is the greedy sample"

# Without the run's tokenizer/ the prompt cannot be encoded (refused); --tokenizer gives it.
cp -r "$run" "$SCRATCH/bare" && rm -r "$SCRATCH/bare/tokenizer"
refused() {  # refused NAME EXPECTED_TEXT ARGS...
  local name=$1 expected=$2; shift 2
  run_trainer 2 "$SCRATCH/$name.log" "$@" --threads 1 --out-dir "$SCRATCH/$name"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  [ ! -e "$SCRATCH/$name" ] || fail "$name: created its out-dir"
  echo "ok: $name -> $(grep -m1 'error:' "$SCRATCH/$name.log")"
}
refused no_tokenizer "sample-prompt: no tokenizer is known for this model" \
  --resume "$SCRATCH/bare" --steps 0 "${sample_args[@]}"
run_trainer 2 "$SCRATCH/given.log" --resume "$SCRATCH/bare" --steps 0 "${sample_args[@]}" \
  --tokenizer "$data" --threads 1 --out-dir "$SCRATCH/given"
[ "$rc" = 0 ] && [ "$(sample "$SCRATCH/given.log")" = "$want_sample" ] ||
  { cat "$SCRATCH/given.log"; fail "--tokenizer: not the training run's sample"; }
[ -f "$SCRATCH/given/tokenizer/tokenizer.json" ] || fail "--tokenizer: not kept in the out-dir"
echo "ok: --tokenizer gives the sample its tokenizer"

refused disagree "n-layer = 3 disagrees with the checkpoint $run (2)" \
  --resume "$run" --steps 0 "${sample_args[@]}" --n-layer 3
refused disagree_eps "norm-eps = 0.001 disagrees with the checkpoint $run (1e-05)" \
  --resume "$run" --steps 0 "${sample_args[@]}" --norm-eps 0.001
refused no_data "no training data: set train-data" --resume "$run" --steps 6
refused behind "steps 2: the checkpoint $run is at step 4 already" \
  --resume "$run" --steps 2 --train-data "$data/train.h5"
refused not_a_checkpoint "'$data' holds no checkpoint: --resume takes auto, a run directory" \
  --resume "$data" --steps 0 --sample-tokens 4
refused missing "checkpoint directory '$SCRATCH/nowhere' does not exist: --resume takes auto" \
  --resume "$SCRATCH/nowhere" --steps 0 --sample-tokens 4
run_trainer 2 "$SCRATCH/own.log" --resume "$run" --steps 0 "${sample_args[@]}" --out-dir "$run"
[ "$rc" = 2 ] && grep -qF "out-dir $run is the run that wrote the checkpoint" "$SCRATCH/own.log" ||
  { cat "$SCRATCH/own.log"; fail "an evaluation into the run's own out-dir was not refused"; }
[ "$(dir_state "$run")" = "$before" ] || fail "the refusals changed the run"
echo "ok: an evaluation into the run's own out-dir is refused, the run untouched"

# A training resume from another run needs no model options either; it writes its own out-dir.
run_trainer 2 "$SCRATCH/more.log" --resume "$run" --steps 6 --save-interval 2 --train-data "$data/train.h5" \
  --threads 1 --peak-gflops 100 --sample-tokens 0 --out-dir "$SCRATCH/more"
[ "$rc" = 0 ] && grep -q '^step 6/6' "$SCRATCH/more.log" || { cat "$SCRATCH/more.log"; fail "training on from $run"; }
[ -d "$SCRATCH/more/checkpoints/step-00000006" ] || fail "training on: no step-6 checkpoint in its out-dir"
[ "$(dir_state "$run")" = "$before" ] || fail "training on from the run changed it"
echo "sample_from_checkpoint: OK"
