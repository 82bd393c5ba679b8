#!/usr/bin/env bash
# prepare-data on a multi-file corpus in parallel equals the serial result, byte for byte: for
# each tokenizer (bytes, gpt2, a sentencepiece model), --threads 2 --shard-tokens N and
# --threads 1 --shard-tokens N write identical files (cmp), and the shards concatenated are the
# unsharded train file. GPT-2 data has an <|endoftext|> before each document. A rerun with larger
# shards removes the shards it no longer writes.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_gpt2_vocab
prepare=$BUILD_DIR/prepare-data
mapfile -t docs < <(corpus_files "$SCRATCH/docs" 6 30000)
"$prepare" --out-dir "$SCRATCH/spm" --tokenizer sentencepiece --vocab-size 400 "${docs[@]}" >/dev/null

tokenizer_args() {  # the prepare-data flags of tokenizer $1
  case $1 in
    bytes) echo --tokenizer bytes ;;
    gpt2) echo --tokenizer gpt2 --gpt2-vocab "$GPT2_VOCAB" ;;
    sentencepiece) echo --tokenizer sentencepiece --tokenizer-model "$SCRATCH/spm/tokenizer.model" ;;
  esac
}

for tok in bytes gpt2 sentencepiece; do
  read -ra args < <(tokenizer_args $tok)
  for run in serial parallel whole; do
    case $run in
      serial) extra=(--threads 1 --shard-tokens 10000) ;;
      parallel) extra=(--threads 2 --shard-tokens 10000) ;;
      whole) extra=(--threads 2) ;;
    esac
    "$prepare" --out-dir "$SCRATCH/$tok/$run" --format nanogpt "${args[@]}" "${extra[@]}" "${docs[@]}" \
      >"$SCRATCH/out" 2>&1 || fail "$tok $run: $(cat "$SCRATCH/out")"
  done
  shards=$(find "$SCRATCH/$tok/serial" -name 'train_*.bin' | wc -l)
  [[ $shards -ge 3 ]] || fail "$tok: $shards train shards, expected several"
  [[ ! -e $SCRATCH/$tok/serial/train.bin ]] || fail "$tok: train.bin beside the shards"
  diff <(cd "$SCRATCH/$tok/serial" && ls) <(cd "$SCRATCH/$tok/parallel" && ls) >/dev/null ||
    fail "$tok: serial and parallel wrote different files"
  for f in "$SCRATCH/$tok/serial"/*; do
    cmp "$f" "$SCRATCH/$tok/parallel/${f##*/}" || fail "$tok: ${f##*/} differs between --threads 1 and 2"
  done
  cat "$SCRATCH/$tok/parallel"/train_*.bin | cmp - "$SCRATCH/$tok/whole/train.bin" ||
    fail "$tok: the shards concatenated are not the unsharded train.bin"
  cmp "$SCRATCH/$tok/parallel/val.bin" "$SCRATCH/$tok/whole/val.bin" || fail "$tok: val.bin differs"
done

# GPT-2: <|endoftext|> (50256) first and before each of the documents, as llm.c's fineweb shards.
first=$(od -An -tu2 -N2 "$SCRATCH/gpt2/whole/train.bin" | tr -d ' ')
[[ $first == 50256 ]] || fail "gpt2: the first token is $first, not <|endoftext|>"
eot=$(cat "$SCRATCH/gpt2/whole/train.bin" "$SCRATCH/gpt2/whole/val.bin" | od -An -v -tu2 -w2 | grep -cx ' *50256')
[[ $eot -eq ${#docs[@]} ]] || fail "gpt2: $eot <|endoftext|> tokens for ${#docs[@]} documents"

# A rerun with larger shards (--overwrite) leaves no shard of the earlier run behind.
"$prepare" --out-dir "$SCRATCH/bytes/serial" --format nanogpt --overwrite --shard-tokens 100000 \
  "${docs[@]}" >/dev/null
left=$(find "$SCRATCH/bytes/serial" -name 'train_*.bin' | wc -l)
[[ $left -eq 2 ]] || fail "$left shards after the rerun with --shard-tokens 100000, expected 2"
cat "$SCRATCH/bytes/serial"/train_*.bin | cmp - "$SCRATCH/bytes/whole/train.bin" ||
  fail "the rerun's shards are not the train tokens"
[[ ! -e $SCRATCH/bytes/serial/prepare-data.replacing ]] || fail "the marker outlived the rerun"
echo "prepare_parallel: OK"
