#!/usr/bin/env bash
# llm.c / nanoGPT interoperability through the trainer:
# - a gpt2 model exported in llm.c's format and loaded back with init-from evaluates to exactly
#   the same validation loss (fp32 export is lossless);
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
  $MPIRUN -np 2 "$TRAINER" $(tiny_model_args) --train-data "$SCRATCH/$format/train.bin" \
    --val-data "$SCRATCH/$format/val.bin" --data-format $format --vocab-size 256 --steps 3 \
    --out-dir "$SCRATCH/run-$format" > "$SCRATCH/$format.log" 2>&1 \
    || { cat "$SCRATCH/$format.log"; fail "training on $format data failed"; }
  [ "$(metric "$SCRATCH/run-$format/metrics.jsonl" loss | wc -l)" = 3 ] || fail "$format: no losses"
  echo "ok: trained on $format tokens"
done
