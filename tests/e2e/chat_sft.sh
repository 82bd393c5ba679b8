#!/usr/bin/env bash
# Fine-tuning on conversations (prepare-data --messages-field): chat messages rendered by a chat
# template, tokenized, with a /loss_mask that scores the assistant's turns only. The reference is
# jinja2, which transformers' apply_chat_template renders with (tests/support/chat_turns.py):
#   - Qwen3's real tokenizer and chat_template (tokenizer_config.json) over single-turn
#     conversations from the fortunes (some with a system message, some whose answer holds a
#     <think> block, which the template re-renders): the token files, decoded stretch by stretch
#     (tokenize --show), are jinja2's renderings, and the scored stretches are the text each
#     assistant message adds after the generation prompt ("<think>...</think>\n\n", the answer,
#     <|im_end|> and its newline);
#   - Qwen3's again with --chat-template-kwargs '{"enable_thinking": false}' over the
#     conversations without a <think> block: the empty <think></think> of its generation prompt
#     is not scored, the answer is (with one that thinks: exit 2, the prompt does not lead to it);
#   - Llama 3's (the npm package's: it ends every rendering with the assistant header) likewise,
#     with <|begin_of_text|> first in each conversation: the start that --document-mask finds;
#     Qwen3's <|im_end|> ends every turn, so the token files record the conversations as not
#     marked, and the trainer refuses --document-mask on them (exit 2);
#   - a template of this test's with {% generation %} blocks (--chat-template), over multi-turn
#     conversations in another field: the scored stretches are the blocks'; the template is kept
#     with the tokenizer beside the token files, and a model trained on them is exported with it
#     (chat_template.jinja);
#   - exit 2, naming the line: multi-turn conversations under Qwen3's template (it drops the
#     <think> blocks of earlier turns, so a turn's tokens cannot be told apart), a template's
#     raise_exception, a message without a role (ShareGPT's from/value), --prompt-field with
#     --messages-field, a template that does not parse.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/tokenizer_lib.sh"
require_hf_tokenizers
/usr/bin/python3 -c 'import jinja2' 2>/dev/null ||
  fail "/usr/bin/python3 has no jinja2 (python3-jinja2): make test installs it (tools/install-deps.sh)"
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}
[[ -d $fortunes ]] || fail "the sample corpus $fortunes is missing (apt-get install fortunes)"
qwen3=$HF_TOKENIZERS/qwen3 llama3=$HF_TOKENIZERS/llama3

# single.jsonl: 40 question/answer pairs (a fortune's first line, then the rest); every third
# with a system message, every fourth answer with a <think> block. multi.jsonl: 20 conversations
# of two turns, under "conversation". own.jinja: ChatML with {% generation %} around the answers.
/usr/bin/python3 - "$SOURCE_DIR/tests/support" "$fortunes" "$SCRATCH" <<'PY'
import json, os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[1])
from fortunes import fortunes
out = sys.argv[3]
pairs = [d.split("\n", 1) for d in fortunes(sys.argv[2]) if "\n" in d][:80]
def chat(i, q, a):
    m = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    if i % 4 == 1:
        m[1]["content"] = "<think>\nA fortune, then.\n</think>\n\n" + a
    return ([{"role": "system", "content": "You tell fortunes."}] if i % 3 == 0 else []) + m
with open(os.path.join(out, "single.jsonl"), "w") as f:
    for i, (q, a) in enumerate(pairs[:40]):
        f.write(json.dumps({"messages": chat(i, q, a)}) + "\n")
with open(os.path.join(out, "multi.jsonl"), "w") as f:
    for i in range(20):
        (q1, a1), (q2, a2) = pairs[40 + 2 * i], pairs[41 + 2 * i]
        f.write(json.dumps({"id": i, "conversation": [
            {"role": "user", "content": q1}, {"role": "assistant", "content": a1},
            {"role": "user", "content": q2}, {"role": "assistant", "content": a2}]}) + "\n")
with open(os.path.join(out, "own.jinja"), "w") as f:
    f.write("{% for m in messages %}\n"
            "{% if m.role not in ['system', 'user', 'assistant'] %}"
            "{{ raise_exception('Unknown role: ' + m.role) }}{% endif %}\n"
            "<|im_start|>{{ m.role }}\n"
            "{% if m.role == 'assistant' %}{% generation %}{{ m.content | trim }}<|im_end|>"
            "{% endgeneration %}{% else %}{{ m.content | trim }}<|im_end|>{% endif %}\n\n"
            "{% endfor %}\n"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PY

prepare() {  # prepare NAME TOKENIZER JSONL ARGS...: $SCRATCH/NAME/{train,val}.h5, log NAME.log
  local name=$1 tokenizer=$2 input=$3
  shift 3
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/$name" --tokenizer "$tokenizer" \
    --val-fraction 0.001 "$@" "$SCRATCH/$input" > "$SCRATCH/$name.log" 2>&1 ||
    { cat "$SCRATCH/$name.log"; fail "prepare-data $name failed"; }
}
said() {  # said NAME TEXT: prepare-data NAME's log says TEXT
  grep -qF -- "$2" "$SCRATCH/$1.log" || { cat "$SCRATCH/$1.log"; fail "prepare-data $1 does not say: $2"; }
}
# The train then val file decoded (the split seed's hash chose no conversation for val, so val is
# the last tokens: the two files are the conversations in order) against chat_turns.py.
check() {  # check NAME TEMPLATE_SOURCE JSONL FIELD [KWARGS]
  local name=$1 f
  for f in train val; do
    "$BUILD_DIR/tokenize" --show "$SCRATCH/$name/$f.h5" --count 1000000 "$SCRATCH/$name" ||
      fail "tokenize --show $name/$f.h5 failed"
  done > "$SCRATCH/$name.show"
  /usr/bin/python3 "$SOURCE_DIR/tests/support/chat_turns.py" "$2" "$SCRATCH/$3" "$4" "${5:-"{}"}" \
    > "$SCRATCH/$name.expected" || fail "chat_turns.py $name failed"
  /usr/bin/python3 - "$SCRATCH/$name.show" "$SCRATCH/$name.expected" <<'PY' || fail "$name: see above"
import json, sys
shown = []
for line in open(sys.argv[1], encoding="utf-8"):
    s = json.loads(line)
    if shown and shown[-1]["scored"] == s["scored"]:
        shown[-1]["text"] += s["text"]  # a stretch cut by the end of train.h5
    else:
        shown.append({"scored": s["scored"], "text": s["text"]})
expected = [json.loads(line) for line in open(sys.argv[2], encoding="utf-8")]
for i, (got, want) in enumerate(zip(shown, expected)):
    if got != want:
        sys.exit(f"stretch {i}: the token files hold {got!r}, jinja2 renders {want!r}")
if len(shown) != len(expected):
    sys.exit(f"{len(shown)} stretches, jinja2's renderings have {len(expected)}")
print(f"{len(shown)} stretches as jinja2 renders them, "
      f"{sum(s['scored'] for s in shown)} scored")
PY
}

prepare qwen "$qwen3" single.jsonl --messages-field messages
said qwen "loss mask: /loss_mask scores the assistant's turns of 'messages' as '$qwen3/tokenizer_config.json' chat_template renders them (what each assistant message adds after the generation prompt), nothing else"
said qwen "documents: 40 of the 40 conversations are not marked by the tokenizer's boundary (a document starts after each token 151645 (<|im_end|>)"
check qwen "$qwen3/tokenizer_config.json" single.jsonl messages
grep -qF '"scored":true,"text":"<think>\nA fortune, then.\n</think>\n\n' "$SCRATCH/qwen.show" ||
  fail "no scored <think> block in the Qwen3 renderings"
# shellcheck disable=SC2046  # tiny_model_args is words
run_trainer 1 "$SCRATCH/mask.log" $(tiny_model_args) --steps 1 --train-data "$SCRATCH/qwen/train.h5" \
  --document-mask --out-dir "$SCRATCH/run"
if [[ $rc -ne 2 ]] ||
  ! grep -qF "qwen/train.h5' holds conversations that the document boundary does not mark" "$SCRATCH/mask.log"; then
  cat "$SCRATCH/mask.log"
  fail "--document-mask on Qwen3 conversations: exit $rc, expected 2 naming the file"
fi

no_thinking='{"enable_thinking": false}'
grep -vF '<think>' "$SCRATCH/single.jsonl" > "$SCRATCH/plain.jsonl"
prepare nothink "$qwen3" plain.jsonl --messages-field messages --chat-template-kwargs "$no_thinking"
check nothink "$qwen3/tokenizer_config.json" plain.jsonl messages "$no_thinking"
grep -qE '"scored":false,"text":".*assistant\\n<think>\\n\\n</think>\\n\\n"}$' "$SCRATCH/nothink.show" ||
  fail "enable_thinking false: the generation prompt's empty <think> block is not left unscored"

prepare llama "$llama3" single.jsonl --messages-field messages
said llama "documents: a document starts at each token 128000 (<|begin_of_text|>): each conversation is one"
check llama "$llama3/tokenizer_config.json" single.jsonl messages

prepare own "$qwen3" multi.jsonl --messages-field conversation --chat-template "$SCRATCH/own.jinja"
said own "loss mask: /loss_mask scores the assistant's turns of 'conversation' as --chat-template '$SCRATCH/own.jinja' renders them (its {% generation %} blocks), nothing else"
check own "$SCRATCH/own.jinja" multi.jsonl conversation
# The template the conversations were rendered by travels with the tokenizer: beside the token
# files, and into an --export-hf as chat_template.jinja (which transformers reads before
# tokenizer_config.json's chat_template); Qwen3's own is its tokenizer_config.json's, no file.
cmp -s "$SCRATCH/own.jinja" "$SCRATCH/own/chat_template.jinja" &&
  grep -qF '"chat_template": "chat_template.jinja"' "$SCRATCH/own/tokenizer.json" ||
  fail "prepare-data did not keep --chat-template's file with the tokenizer"
[[ ! -e $SCRATCH/qwen/chat_template.jinja ]] || fail "a chat_template.jinja beside Qwen3's own"
# shellcheck disable=SC2046  # tiny_model_args is words
run_trainer 1 "$SCRATCH/export.log" $(tiny_model_args) --arch llama --steps 1 \
  --train-data "$SCRATCH/own/train.h5" --out-dir "$SCRATCH/export-run" --export-hf "$SCRATCH/hf"
[[ $rc -eq 0 ]] || { cat "$SCRATCH/export.log"; fail "training on the conversations exited $rc"; }
cmp -s "$SCRATCH/own.jinja" "$SCRATCH/hf/chat_template.jinja" && [[ -f $SCRATCH/hf/tokenizer_config.json ]] ||
  { ls "$SCRATCH/hf"; fail "the export does not carry the chat template the data were rendered by"; }
echo "ok: --chat-template's file kept beside the token files and in the --export-hf"

refused() {  # refused WHAT EXPECTED_TEXT ARGS...: prepare-data exits 2 saying EXPECTED_TEXT
  local what=$1 text=$2 rc=0
  shift 2
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/refused" --tokenizer "$qwen3" "$@" \
    > "$SCRATCH/refused.log" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || { cat "$SCRATCH/refused.log"; fail "$what: exit $rc, expected 2"; }
  grep -qF -- "$text" "$SCRATCH/refused.log" ||
    { cat "$SCRATCH/refused.log"; fail "$what: the message does not say '$text'"; }
  [[ ! -e $SCRATCH/refused/train.h5 ]] || fail "$what: a train.h5 was written"
}
refused "multi-turn under Qwen3's template" \
  "multi.jsonl:1: '$qwen3/tokenizer_config.json' chat_template renders message 2 (assistant) differently once later messages follow" \
  --messages-field conversation "$SCRATCH/multi.jsonl"
refused "enable_thinking false before an answer that thinks" \
  "single.jsonl:2: the generation prompt that '$qwen3/tokenizer_config.json' chat_template renders before message 2 (assistant) is not how the conversation goes on" \
  --messages-field messages --chat-template-kwargs "$no_thinking" "$SCRATCH/single.jsonl"
sed 's/"role": "user"/"role": "tool"/' "$SCRATCH/multi.jsonl" > "$SCRATCH/tool.jsonl"
refused "raise_exception" "tool.jsonl:1: --chat-template '$SCRATCH/own.jinja' line 2: raise_exception: Unknown role: tool" \
  --messages-field conversation --chat-template "$SCRATCH/own.jinja" "$SCRATCH/tool.jsonl"
echo '{"messages": [{"from": "human", "value": "hi"}]}' > "$SCRATCH/sharegpt.jsonl"
refused "ShareGPT's from/value" "sharegpt.jsonl:1: message 1 of 'messages' is not an object with a string \"role\"" \
  --messages-field messages "$SCRATCH/sharegpt.jsonl"
refused "--prompt-field too" "leave out --prompt-field and --jsonl-field" \
  --messages-field messages --prompt-field prompt "$SCRATCH/single.jsonl"
echo '{% for m in messages %}{{ m.content | shout }}{% endfor %}' > "$SCRATCH/bad.jinja"
refused "an unknown filter" "--chat-template '$SCRATCH/bad.jinja' line 1: unknown filter 'shout'" \
  --messages-field messages --chat-template "$SCRATCH/bad.jinja" "$SCRATCH/single.jsonl"
echo "ok: conversations rendered as jinja2 renders them, the assistant's turns scored; refusals exit 2"
