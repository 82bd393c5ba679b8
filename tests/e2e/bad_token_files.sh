#!/usr/bin/env bash
# Token files that hold the wrong thing: a /tokens that is a group, a vocab_size of 2^40 and a
# file of a pair that prepare-data was stopped between renaming. Each is one clear message from
# rank 0 and exit 2 before any work (no HDF5 error stack, no MPI_Abort).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
EDIT="$BUILD_DIR/h5-edit"
# shellcheck disable=SC2046
set -- $(tiny_model_args) --steps 2
tiny=("$@")

expect_refused() {  # expect_refused NAME EXPECTED_TEXT TRAIN_FILE
  local name=$1 expected=$2
  run_trainer 2 "$SCRATCH/$name.log" "${tiny[@]}" --train-data "$3" --out-dir "$SCRATCH/$name-out"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.log")" = 1 ] || { cat "$SCRATCH/$name.log"; fail "$name: not one message"; }
  grep -Eq 'MPI_ABORT|H5Dopen' "$SCRATCH/$name.log" && { cat "$SCRATCH/$name.log"; fail "$name: a raw failure"; }
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}

cp "$DATA_DIR/train.h5" "$SCRATCH/group.h5"
"$EDIT" to-group "$SCRATCH/group.h5" /tokens
expect_refused tokens_group "$SCRATCH/group.h5': /tokens is a group, not a dataset" "$SCRATCH/group.h5"

cp "$DATA_DIR/train.h5" "$SCRATCH/vocab.h5"
"$EDIT" set-int "$SCRATCH/vocab.h5" /tokens vocab_size $((1 << 40))
expect_refused vocab_2_40 \
  "/tokens attribute vocab_size is 1099511627776, out of range: expected 1 to 2147483520" \
  "$SCRATCH/vocab.h5"

mkdir "$SCRATCH/pair"
cp "$DATA_DIR/train.h5" "$SCRATCH/pair/train.h5"
printf 'train.h5\nval.h5\n' > "$SCRATCH/pair/prepare-data.replacing"
expect_refused half_replaced "prepare-data was stopped while it replaced them" "$SCRATCH/pair/train.h5"
echo "bad_token_files: OK"
