#!/usr/bin/env bash
# Input files made to mislead the trainer (issue 32): a data set's tokenizer.json naming files
# outside its directory, JSON fields of the wrong type, a /tokens that is a dangling or external
# link, and a /tokens that declares far more tokens than the file stores. Each is one clear
# message and exit 2 before any work, and nothing outside what the user named is read or copied.
# (Unit tests hold the variants: a "../" or an unknown role in tokenizer.json, the other JSON
# types, safetensors headers.)
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
EDIT="$BUILD_DIR/h5-edit"
# shellcheck disable=SC2046
set -- $(tiny_model_args) --steps 2
tiny=("$@")

expect_refused() {  # expect_refused NAME EXPECTED_TEXT TRAINER_ARGS...
  local name=$1 expected=$2; shift 2
  run_trainer 2 "$SCRATCH/$name.log" "${tiny[@]}" "$@" --out-dir "$SCRATCH/$name-out"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.log")" = 1 ] || { cat "$SCRATCH/$name.log"; fail "$name: not one message"; }
  grep -Eq 'MPI_ABORT|json.exception|H5Dopen' "$SCRATCH/$name.log" && { cat "$SCRATCH/$name.log"; fail "$name: a raw failure"; }
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}

# ---- a tokenizer.json beside the token file that names a file outside its directory ----
echo "SECRET-7f3a" > "$SCRATCH/secret.model"
tokenizer_case() {  # tokenizer_case NAME DESCRIPTOR EXPECTED_TEXT
  mkdir -p "$SCRATCH/$1"
  cp "$DATA_DIR/train.h5" "$SCRATCH/$1/"
  echo "$2" > "$SCRATCH/$1/tokenizer.json"
  expect_refused "$1" "$3" --train-data "$SCRATCH/$1/train.h5"
  ! grep -rqF SECRET-7f3a "$SCRATCH/$1-out" 2>/dev/null || fail "$1: the secret was copied"
}
tokenizer_case tok_absolute "{\"name\": \"sentencepiece\", \"files\": {\"model\": \"$SCRATCH/secret.model\"}}" \
  "tokenizer.json': files.model = '$SCRATCH/secret.model' is not a plain file name"
mkdir -p "$SCRATCH/tok_link" && ln -s ../secret.model "$SCRATCH/tok_link/link.model"
tokenizer_case tok_link '{"name": "sentencepiece", "files": {"model": "link.model"}}' \
  "tokenizer.json': files.model = 'link.model' is a link to '$(realpath "$SCRATCH/secret.model")', outside the tokenizer's directory"

# ---- a config.json field of the wrong type (the others, and safetensors headers: unit tests) ----
mkdir "$SCRATCH/hf"
: > "$SCRATCH/hf/model.safetensors"
echo '{"model_type": 5, "vocab_size": 256}' > "$SCRATCH/hf/config.json"
expect_refused hf_model_type "$SCRATCH/hf/config.json: model_type must be a string, got a number" \
  --train-data "$DATA_DIR/train.h5" --init-from "$SCRATCH/hf"

# ---- /tokens as a link: dangling, or to another file ----
h5_case() {  # h5_case NAME EXPECTED_TEXT EDIT_ARGS... (the edit applies to NAME/train.h5, a copy)
  local name=$1 expected=$2; shift 2
  mkdir -p "$SCRATCH/$name"
  [ -e "$SCRATCH/$name/train.h5" ] || cp "$DATA_DIR/train.h5" "$SCRATCH/$name/train.h5"
  "$EDIT" "$1" "$SCRATCH/$name/train.h5" "${@:2}"
  expect_refused "$name" "'$SCRATCH/$name/train.h5': $expected" --train-data "$SCRATCH/$name/train.h5"
}
cp "$DATA_DIR/train.h5" "$SCRATCH/other.h5"
h5_case dangling_soft "/tokens is a soft link to '/missing', which names no object in this file" \
  soft-link /tokens /missing
h5_case external "/tokens is an external link to '/tokens' in '$SCRATCH/other.h5'; a token file holds its own tokens" \
  external-link /tokens "$SCRATCH/other.h5" /tokens
mkdir -p "$SCRATCH/soft_via_external"
cp "$DATA_DIR/train.h5" "$SCRATCH/soft_via_external/train.h5"
"$EDIT" external-link "$SCRATCH/soft_via_external/train.h5" /ext "$SCRATCH/other.h5" /
h5_case soft_via_external "/tokens is a soft link to '/ext/tokens', which names no object in this file" \
  soft-link /tokens /ext/tokens
h5_case external_raw "/tokens declares 6 tokens but keeps them in external raw files; a token file holds its own tokens" \
  external-raw /tokens "$SCRATCH/secret.model" 6

# ---- /tokens declaring tokens it does not store ----
h5_case contiguous_unwritten "/tokens declares 68719476736 tokens but stores none (its data was never written)" \
  unwritten /tokens $((1 << 36)) 0 0
mkdir -p "$SCRATCH/chunked_2_40"  # 2^30 chunks: more than the file has bytes, refused uncounted
cp "$DATA_DIR/train.h5" "$SCRATCH/chunked_2_40/train.h5"
"$EDIT" unwritten "$SCRATCH/chunked_2_40/train.h5" /tokens $((1 << 40)) 1024 0
expect_refused chunked_2_40 "'$SCRATCH/chunked_2_40/train.h5': /tokens declares 1099511627776 tokens but the file ($(stat -c %s "$SCRATCH/chunked_2_40/train.h5") bytes) cannot hold its 1073741824 chunks: most were never written" \
  --train-data "$SCRATCH/chunked_2_40/train.h5"
h5_case chunked_partial "/tokens declares 4096 tokens but stores only 1 of its 4 chunks (the others were never written)" \
  unwritten /tokens 4096 1024 1
echo "hostile_files: OK"
