#!/usr/bin/env bash
# The trainer's end-of-run sample decodes with the data's tokenizer: a few steps on GPT-2-tokenized
# nanoGPT data (the .bin format that records nothing itself: tokenizer.json beside it does, and
# sets the model's vocabulary, 50257, with no --vocab-size; the banner says V50257) and on
# SentencePiece HDF5 data; the sample starts with --sample-prompt and is text, not ids. The
# --export-hf directory holds the tokenizer in transformers' names (GPT2Tokenizer's vocab.json +
# merges.txt, LlamaTokenizer's tokenizer.model).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_gpt2_vocab
prepare=$BUILD_DIR/prepare-data
mapfile -t docs < <(corpus_files "$SCRATCH/docs" 2 30000)
"$prepare" --out-dir "$SCRATCH/gpt2" --format nanogpt --tokenizer gpt2 --gpt2-vocab "$GPT2_VOCAB" \
  "${docs[@]}" >/dev/null
"$prepare" --out-dir "$SCRATCH/spm" --tokenizer sentencepiece --vocab-size 400 "${docs[@]}" >/dev/null

prompt="The meaning of life is"
for data in gpt2/train.bin spm/train.h5; do
  dir=$SCRATCH/${data%%/*}
  read -ra args < <(tiny_args)
  args=("${args[@]:4}")  # not the sample data: tiny_args starts with --train-data X --val-data Y
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $MPIRUN -np 1 "$TRAINER" "${args[@]}" \
    --train-data "$SCRATCH/$data" --val-data "$dir/val.${data##*.}" --steps 3 \
    --sample-tokens 12 --sample-prompt "$prompt" --export-hf "$dir/hf" --out-dir "$dir/run" \
    >"$dir/log" 2>&1 ||
    fail "training on $data: $(tail -n 20 "$dir/log")"
  [[ $data != *.bin ]] || grep -q ' V50257 ' "$dir/log" ||
    fail "$data: the vocabulary is not the recorded tokenizer's 50257: $(grep mpitrain "$dir/log")"
  sample=$(sed -n '/^---- sample/,/^----$/p' "$dir/log" | sed '1d;$d')
  [[ -n $sample ]] || fail "$data: no sample printed: $(tail -n 20 "$dir/log")"
  [[ $sample == "$prompt"* ]] || fail "$data: the sample does not start with the prompt: $sample"
  [[ ! $sample =~ ^[0-9\ ]+$ ]] || fail "$data: the sample is raw ids: $sample"
  echo "$data: $sample"
done
cmp "$SCRATCH/gpt2/hf/vocab.json" "$GPT2_VOCAB/encoder.json" &&
  cmp "$SCRATCH/gpt2/hf/merges.txt" "$GPT2_VOCAB/vocab.bpe" || fail "gpt2 export: no vocab.json/merges.txt"
cmp "$SCRATCH/spm/hf/tokenizer.model" "$SCRATCH/spm/tokenizer.model" || fail "sentencepiece export: no tokenizer.model"
[[ ! -e $SCRATCH/gpt2/hf/tokenizer.model && ! -e $SCRATCH/spm/hf/vocab.json ]] ||
  fail "the export holds another tokenizer's files"
echo "tokenizers: OK"
