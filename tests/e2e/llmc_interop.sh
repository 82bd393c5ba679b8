#!/usr/bin/env bash
# llm.c / nanoGPT interoperability through the trainer:
# - a gpt2 model exported in llm.c's format and loaded back with init-from evaluates to exactly
#   the same validation loss (fp32 export is lossless);
# - a resume of a run begun from it takes the checkpoint's parameters, not the file's again;
# - llm.c token shards and nanoGPT .bin files train like the HDF5 data.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
$MPIRUN -np 2 "$TRAINER" $(tiny_args) --steps 3 --export-llmc "$SCRATCH/model.bin" \
  --out-dir "$SCRATCH/a" > "$SCRATCH/a.log" 2>&1 || { cat "$SCRATCH/a.log"; fail "training failed"; }
[ -s "$SCRATCH/model.bin" ] || fail "no exported model"
# shellcheck disable=SC2046
$MPIRUN -np 2 "$TRAINER" $(tiny_args) --steps 0 --init-from "$SCRATCH/model.bin" \
  --out-dir "$SCRATCH/b" > "$SCRATCH/b.log" 2>&1 || { cat "$SCRATCH/b.log"; fail "init-from failed"; }
a=$(metric "$SCRATCH/a/metrics.jsonl" val_loss)
b=$(metric "$SCRATCH/b/metrics.jsonl" val_loss)
echo "val loss after training $a, after export + init-from $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "val loss changed through export/import: $a vs $b"

# A resume takes every parameter from its checkpoint: --init-from is not read again (the run says
# so) and the run goes on as one never stopped, loss for loss.
# shellcheck disable=SC2046
set -- $(tiny_args) --init-from "$SCRATCH/model.bin" --steps 4 --save-interval 2
run_trainer 2 "$SCRATCH/whole.log" "$@" --out-dir "$SCRATCH/whole"
[ "$rc" = 0 ] || { cat "$SCRATCH/whole.log"; fail "init-from, 4 steps: exit $rc"; }
run_trainer 2 "$SCRATCH/cut.log" "$@" --out-dir "$SCRATCH/cut" --exit-at-step 2
[ "$rc" = 85 ] || { cat "$SCRATCH/cut.log"; fail "init-from, stopped at step 2: exit $rc"; }
grep -q "is not read" "$SCRATCH/cut.log" && fail "a fresh run said --init-from is not read"
run_trainer 2 "$SCRATCH/resumed.log" "$@" --out-dir "$SCRATCH/cut" --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/resumed.log"; fail "init-from, resumed: exit $rc"; }
grep -qF -- "resume: --init-from $SCRATCH/model.bin is not read: the checkpoint holds every parameter" \
  "$SCRATCH/resumed.log" || { cat "$SCRATCH/resumed.log"; fail "the resume did not say --init-from is not read"; }
[ "$(metric "$SCRATCH/whole/metrics.jsonl" loss)" = "$(metric "$SCRATCH/cut/metrics.jsonl" loss)" ] ||
  fail "the resumed run's losses differ from the whole run's"
echo "ok: a resume over --init-from reads the checkpoint only and repeats the whole run's losses"

# The init-from model's shape wins; a disagreeing explicit option is refused.
set +e
# shellcheck disable=SC2046
$MPIRUN -np 1 "$TRAINER" $(tiny_args) --init-from "$SCRATCH/model.bin" --n-layer 3 \
  --out-dir "$SCRATCH/c" > /dev/null 2> "$SCRATCH/c.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "n-layer = 3 disagrees" "$SCRATCH/c.err" || { cat "$SCRATCH/c.err"; fail "mismatch not refused"; }

for format in llmc nanogpt; do
  head -c 200000 "$SOURCE_DIR/README.md" > "$SCRATCH/text.txt"
  cat /usr/share/games/fortunes/fortunes >> "$SCRATCH/text.txt"
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/$format" --format $format "$SCRATCH/text.txt" > /dev/null
  # shellcheck disable=SC2046
  $MPIRUN -np 2 "$TRAINER" $(tiny_model_args) $(val_args) --train-data "$SCRATCH/$format/train.bin" \
    --val-data "$SCRATCH/$format/val.bin" --data-format $format --vocab-size 256 --steps 3 \
    --out-dir "$SCRATCH/run-$format" > "$SCRATCH/$format.log" 2>&1 \
    || { cat "$SCRATCH/$format.log"; fail "training on $format data failed"; }
  [ "$(metric "$SCRATCH/run-$format/metrics.jsonl" loss | wc -l)" = 3 ] || fail "$format: no losses"
  echo "ok: trained on $format tokens"
done
