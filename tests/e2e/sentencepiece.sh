#!/usr/bin/env bash
# SentencePiece in prepare-data: a BPE model of 400 pieces (256 byte pieces, the text's characters,
# merges) trained on the sample text, saved beside the data as tokenizer.model; strings round-trip
# exactly and the ids equal those of the library's own CLI (spm_encode); a unigram model also trains; a given --tokenizer-model gives the same
# tokens as the run that trained it; options that do not go together, a vocabulary the text
# cannot give, or one that nanoGPT's uint16 cannot hold: exit 2, nothing written.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
command -v spm_encode >/dev/null || fail "spm_encode not found (Debian sentencepiece; tools/install-deps.sh)"
prepare=$BUILD_DIR/prepare-data
tokenize=$BUILD_DIR/tokenize
mapfile -t docs < <(corpus_files "$SCRATCH/docs" 4)

expect_exit() {  # expect_exit CODE ARGS...: prepare-data's stderr in $SCRATCH/err
  local want=$1 rc=0
  shift
  "$prepare" "$@" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  [[ $rc -eq $want ]] || fail "prepare-data $* exited $rc, expected $want: $(cat "$SCRATCH/err")"
}

expect_exit 0 --out-dir "$SCRATCH/bpe" --format nanogpt --tokenizer sentencepiece --vocab-size 400 "${docs[@]}"
[[ -s $SCRATCH/bpe/tokenizer.model ]] || fail "no tokenizer.model beside the data"
grep -q '"name": "sentencepiece"' "$SCRATCH/bpe/tokenizer.json" &&
  grep -q '"model": "tokenizer.model"' "$SCRATCH/bpe/tokenizer.json" &&
  grep -q '"vocab_size": 400' "$SCRATCH/bpe/tokenizer.json" ||
  fail "tokenizer.json: $(cat "$SCRATCH/bpe/tokenizer.json")"

# Round trips and the CLI's ids, one string per line (spm_encode encodes each line).
printf '%s\n' "Hello world" "  two  spaces and	a tab  " "caf$(printf '\xc3\xa9') $(printf '\xe6\x97\xa5\xe6\x9c\xac') unseen" \
  "I'm, you'll, they'd" "12345 678.9" "Q: What's the difference?  A: ..." >"$SCRATCH/lines.txt"
spm_encode --model="$SCRATCH/bpe/tokenizer.model" --output_format=id <"$SCRATCH/lines.txt" >"$SCRATCH/spm_ids"
line_no=0
while IFS= read -r line; do
  line_no=$((line_no + 1))
  printf '%s' "$line" >"$SCRATCH/line"
  ours=$("$tokenize" "$SCRATCH/bpe" <"$SCRATCH/line")
  ref=$(sed -n "${line_no}p" "$SCRATCH/spm_ids")
  [[ $ours == "$ref" ]] || fail "ids for '$line': ours $ours, spm_encode $ref"
  "$tokenize" "$SCRATCH/bpe" <"$SCRATCH/line" | "$tokenize" --decode "$SCRATCH/bpe" >"$SCRATCH/back"
  cmp -s "$SCRATCH/back" "$SCRATCH/line" || fail "decode(encode(s)) != s for '$line': '$(cat "$SCRATCH/back")'"
done <"$SCRATCH/lines.txt"
# A whole multi-line file with runs of blank lines round-trips too.
"$tokenize" "$SCRATCH/bpe" <"${docs[1]}" | "$tokenize" --decode "$SCRATCH/bpe" >"$SCRATCH/back"
cmp -s "$SCRATCH/back" "${docs[1]}" || fail "a corpus file does not round-trip"

# BOS before each document (Llama's convention): as many BOS tokens as input files.
bos=$(od -An -v -tu2 -w2 "$SCRATCH/bpe/train.bin" "$SCRATCH/bpe/val.bin" | grep -cx ' *1')
[[ $bos -eq ${#docs[@]} ]] || fail "$bos BOS tokens for ${#docs[@]} documents"

# A given model: the same tokens as the run that trained it.
expect_exit 0 --out-dir "$SCRATCH/given" --format nanogpt --tokenizer sentencepiece \
  --tokenizer-model "$SCRATCH/bpe/tokenizer.model" "${docs[@]}"
cmp "$SCRATCH/bpe/train.bin" "$SCRATCH/given/train.bin" || fail "--tokenizer-model gives other tokens"
cmp "$SCRATCH/bpe/tokenizer.model" "$SCRATCH/given/tokenizer.model" || fail "the model copy differs"

# Unigram trains and round-trips.
expect_exit 0 --out-dir "$SCRATCH/uni" --tokenizer sentencepiece --vocab-size 400 --sp-model-type unigram "${docs[@]}"
"$tokenize" "$SCRATCH/uni" <"${docs[0]}" | "$tokenize" --decode "$SCRATCH/uni" >"$SCRATCH/back"
cmp -s "$SCRATCH/back" "${docs[0]}" || fail "unigram: a corpus file does not round-trip"

# Bad combinations: exit 2 with the reason, nothing written.
expect_exit 2 --out-dir "$SCRATCH/x" --tokenizer sentencepiece "${docs[@]}"
grep -q "needs either --tokenizer-model FILE .* or --vocab-size N" "$SCRATCH/err" || fail "$(cat "$SCRATCH/err")"
expect_exit 2 --out-dir "$SCRATCH/x" --tokenizer sentencepiece --vocab-size 400 \
  --tokenizer-model "$SCRATCH/bpe/tokenizer.model" "${docs[@]}"
expect_exit 2 --out-dir "$SCRATCH/x" --vocab-size 400 "${docs[@]}"
grep -q "are for --tokenizer sentencepiece" "$SCRATCH/err" || fail "$(cat "$SCRATCH/err")"
expect_exit 2 --out-dir "$SCRATCH/x" --tokenizer sentencepiece --tokenizer-model "$SCRATCH/none.model" "${docs[@]}"
grep -q "cannot load SentencePiece model '$SCRATCH/none.model'" "$SCRATCH/err" || fail "$(cat "$SCRATCH/err")"
expect_exit 2 --out-dir "$SCRATCH/x" --tokenizer sentencepiece --vocab-size 70000 --format nanogpt "${docs[@]}"
grep -q "nanogpt stores uint16 tokens" "$SCRATCH/err" || fail "$(cat "$SCRATCH/err")"
expect_exit 2 --out-dir "$SCRATCH/x" --tokenizer sentencepiece --vocab-size 60000 "${docs[@]}"
grep -q "SentencePiece cannot train a bpe model of 60000 pieces on this text: " "$SCRATCH/err" ||
  fail "a vocabulary too large for the text: $(cat "$SCRATCH/err")"
[[ ! -e $SCRATCH/x ]] || fail "output written for bad input"
echo "sentencepiece: OK"
