#!/usr/bin/env bash
# tokenizer.json options read as Hugging Face's JavaScript tokenizers (@huggingface/tokenizers,
# run with node) read them, on Qwen3's and Llama 3's real files edited:
#  - added tokens with lstrip / rstrip take the white space before / after them along (Qwen3:
#    <|im_start|> lstrip and <|im_end|> rstrip, matched before the NFC normalizer; <think>
#    lstrip and </think> rstrip, both normalized: true, matched after it);
#  - a Split pre-tokenizer with invert: true and behavior Removed keeps its regex's matches
#    alone (Llama 3 with a regex of letter, digit and symbol runs: white space dropped).
# Each gives the reference's ids on texts with white space runs (tabs, newlines, U+3000, NBSP)
# around the tokens. Invert with another behavior is refused (exit 2): the Rust and JavaScript
# libraries split it differently.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_hf_tokenizers
command -v node >/dev/null || fail "node not found (tools/install-deps.sh installs it)"
tokenize=$BUILD_DIR/tokenize

edit() {  # edit MODEL NAME JS: $SCRATCH/NAME, MODEL's files with JS applied to t (tokenizer.json)
  mkdir -p "$SCRATCH/$2"
  cp "$HF_TOKENIZERS/$1/tokenizer_config.json" "$SCRATCH/$2/"
  node -e '
    const fs = require("fs");
    const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const added = c => t.added_tokens.find(a => a.content === c);
    eval(process.argv[3]);
    fs.writeFileSync(process.argv[2], JSON.stringify(t));' \
    "$HF_TOKENIZERS/$1/tokenizer.json" "$SCRATCH/$2/tokenizer.json" "$3"
}
edit qwen3 strip '
  Object.assign(added("<|im_start|>"), { lstrip: true });
  Object.assign(added("<|im_end|>"), { rstrip: true });
  Object.assign(added("<think>"), { lstrip: true, normalized: true });
  Object.assign(added("</think>"), { rstrip: true, normalized: true });'
edit llama3 invert '
  Object.assign(t.pre_tokenizer.pretokenizers[0], { behavior: "Removed", invert: true,
    pattern: { Regex: "[\\p{L}\\p{N}]+|[^\\s\\p{L}\\p{N}]+" } });'

cat >"$SCRATCH/strings.jsonl" <<'JSON'
"a  <|im_start|>  b"
"x\t\n<|im_end|> \t y<|im_end|>"
"  <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
"one \u3000<think>\u00a0 two\u2028</think>\u3000 three"
"<think></think>  <think>x</think>"
"caf\u00e9 cafe\u0301  <think>  \u65e5\u672c  </think>\n\n"
"Hello world,  it's 12345   done!\n\ttabs\u3000and\u00a0spaces"
"   leading and trailing   "
"def f(x):\n    return x**2  # comment\n"
JSON
# The reference's ids, one line per string (no post-processor: the text alone).
for m in strip invert; do
  node -e '
    const { Tokenizer } = require(process.argv[1]);
    const fs = require("fs");
    const strings = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
    const read = f => JSON.parse(fs.readFileSync(`${process.argv[3]}/${f}`, "utf8"));
    const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
    fs.writeFileSync(process.argv[4],
      strings.map(s => tok.encode(s, { add_special_tokens: false }).ids.join(" ")).join("\n") + "\n");
  ' "$HF_TOKENIZERS/tokenizers-js/dist/tokenizers.cjs" "$SCRATCH/strings.jsonl" "$SCRATCH/$m" \
    "$SCRATCH/$m.ref" || fail "the reference failed on $m"
  "$tokenize" --jsonl "$SCRATCH/$m" <"$SCRATCH/strings.jsonl" >"$SCRATCH/$m.ours" ||
    fail "tokenize --jsonl with $m failed"
  same_ids "$m" "$SCRATCH/strings.jsonl" "$SCRATCH/$m.ours" "$SCRATCH/$m.ref"
done
# The options change the ids (else the check above would prove nothing): against the files as shipped.
"$tokenize" --jsonl "$HF_TOKENIZERS/qwen3" <"$SCRATCH/strings.jsonl" >"$SCRATCH/qwen3.ours"
"$tokenize" --jsonl "$HF_TOKENIZERS/llama3" <"$SCRATCH/strings.jsonl" >"$SCRATCH/llama3.ours"
[[ $(paste -d '|' "$SCRATCH/strip.ours" "$SCRATCH/qwen3.ours" | awk -F'|' '$1 != $2' | wc -l) -ge 5 ]] ||
  fail "lstrip / rstrip change fewer than 5 of the strings' ids"
[[ $(paste -d '|' "$SCRATCH/invert.ours" "$SCRATCH/llama3.ours" | awk -F'|' '$1 != $2' | wc -l) -ge 5 ]] ||
  fail "the inverted Split changes fewer than 5 of the strings' ids"

edit llama3 isolated 't.pre_tokenizer.pretokenizers[0].invert = true;'
rc=0
echo hi | "$tokenize" "$SCRATCH/isolated" >/dev/null 2>"$SCRATCH/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q 'pretokenizers\[0\].invert = true with behavior "Isolated" is not supported' "$SCRATCH/err" ||
  fail "invert with Isolated: exit $rc: $(cat "$SCRATCH/err")"
echo "hf_tokenizer_options: OK ($(wc -l <"$SCRATCH/strings.jsonl") strings x lstrip/rstrip, inverted Split equal the reference's ids)"
