#!/usr/bin/env bash
# prepare-data streams its input: a 48 MB corpus prepares with a peak resident memory far below
# its size (the tool's VmHWM; holding the corpus whole would need over 4x it), with progress
# lines on stderr; a directory (recursive, sorted, hidden names skipped), standard input and JSON
# Lines give the same tokens as the same documents in text files; the seeded validation split is
# reproducible, moves with --split-seed, and its fraction is near --val-fraction; bad JSONL and
# compressed input: exit 2 naming the file, nothing written.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
prepare=$BUILD_DIR/prepare-data

# Runs prepare-data, expecting exit code $1; stdout in $SCRATCH/out, stderr in $SCRATCH/err.
expect_rc() {
  local want=$1 rc=0
  shift
  "$prepare" "$@" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  [[ $rc -eq $want ]] || fail "prepare-data $* exited $rc, expected $want: $(cat "$SCRATCH/err")"
}
same_files() {  # same_files DIR_A DIR_B WHAT: identical token files
  local f
  for f in train.bin val.bin; do cmp -s "$1/$f" "$2/$f" || fail "$3: $f differs"; done
}

# The large corpus: 12 files of 4 MB of varied lines, in a directory tree with a hidden file.
big=$SCRATCH/big
mkdir -p "$big/sub" "$big/.hidden"
for i in $(seq 0 11); do
  d=$big; ((i % 3 == 0)) && d=$big/sub
  f=$d/doc_$(printf %02d "$i").txt
  awk -v f="$i" 'BEGIN { for (n = 0; n < 70000; n++) printf "file %d line %d: the quick brown fox jumps over the lazy dog\n", f, n }' >"$f"
  truncate -s 4000000 "$f"
done
echo "not taken" >"$big/.hidden/skip.txt"
echo "not taken" >"$big/.skip.txt"
corpus_bytes=$((12 * 4000000))

# Bounded memory and progress: the directory, --val-fraction 0.1, progress every 0.01 s.
expect_rc 0 --out-dir "$SCRATCH/p_big" --format nanogpt --val-fraction 0.1 --progress-seconds 0.01 "$big"
grep -q "$big: 12 files (48.0 MB) taken in path order; skipped 2 hidden, 0 not regular files" "$SCRATCH/err" ||
  fail "the directory's tally: $(cat "$SCRATCH/err")"
peak_mib=$(sed -n 's/^peak memory: \([0-9]*\) MiB.*/\1/p' "$SCRATCH/out")
# Measured 2026-12-03 (Zen 5, 2 cores): 20 MiB (--threads 1; 23 MiB at 2), of which most is the
# libraries. The corpus held whole would be 46 MiB of text plus its tokens (main before this
# change: 180 MiB for a 13 MB corpus).
[[ -n $peak_mib && $peak_mib -le 40 ]] || fail "peak memory ${peak_mib:-?} MiB for a $((corpus_bytes >> 20)) MiB corpus: $(cat "$SCRATCH/out")"
progress=$(grep -c '^prepare-data: read .* of 48.0 MB ([0-9]*%), [0-9]* documents, .* tokens, .*B/s$' "$SCRATCH/err" || true)
[[ $progress -ge 2 ]] || fail "$progress progress lines on a 48 MB input: $(cat "$SCRATCH/err")"
tokens=$(( ($(stat -c %s "$SCRATCH/p_big/train.bin") + $(stat -c %s "$SCRATCH/p_big/val.bin")) / 2 ))
[[ $tokens -eq $((corpus_bytes + 11)) ]] || fail "$tokens tokens for $corpus_bytes bytes in 12 documents"
read -r val_pieces pieces < <(sed -n 's/^split: seeded, \([0-9]*\) of \([0-9]*\) pieces to val.*/\1 \2/p' "$SCRATCH/out")
[[ -n $pieces ]] || fail "no seeded split: $(cat "$SCRATCH/out")"
# 0.1 +- 0.03: measured 73 of 744 pieces, 0.098 (one binomial standard deviation is 0.011).
awk -v v="$val_pieces" -v n="$pieces" 'BEGIN { exit !(v / n > 0.07 && v / n < 0.13) }' ||
  fail "$val_pieces of $pieces pieces went to val at --val-fraction 0.1"

# The directory equals its files named in path order (sub/ sorts after doc_*).
mapfile -t files < <(find "$big" -name 'doc_*' -not -path '*/.*' | LC_ALL=C sort)
[[ ${files[-1]} == */sub/doc_09.txt ]] || fail "unexpected order: ${files[*]}"
small=()  # three smaller documents for the runs below
for f in "${files[@]:0:3}"; do
  head -c 1000000 "$f" >"$SCRATCH/${f##*/}"
  small+=("$SCRATCH/${f##*/}")
done
expect_rc 0 --out-dir "$SCRATCH/p_files" --format nanogpt --val-fraction 0.1 "${small[@]}"
mkdir "$SCRATCH/three" && cp "${small[@]}" "$SCRATCH/three/"
expect_rc 0 --out-dir "$SCRATCH/p_dir" --format nanogpt --val-fraction 0.1 "$SCRATCH/three"
same_files "$SCRATCH/p_files" "$SCRATCH/p_dir" "a directory against its files"

# Reproducible: the same seed gives the same files, another seed another split.
expect_rc 0 --out-dir "$SCRATCH/p_again" --format nanogpt --val-fraction 0.1 --threads 2 "${small[@]}"
same_files "$SCRATCH/p_files" "$SCRATCH/p_again" "a second run with the same seed"
expect_rc 0 --out-dir "$SCRATCH/p_seed" --format nanogpt --val-fraction 0.1 --split-seed 7 "${small[@]}"
cmp -s "$SCRATCH/p_files/val.bin" "$SCRATCH/p_seed/val.bin" && fail "--split-seed 7 gave the split of seed 0"
[[ $(cat "$SCRATCH/p_files"/*.bin | wc -c) -eq $(cat "$SCRATCH/p_seed"/*.bin | wc -c) ]] ||
  fail "--split-seed changed the number of tokens"

# Standard input: one document, as the same text in one file.
cat "${small[@]}" >"$SCRATCH/joined.txt"
expect_rc 0 --out-dir "$SCRATCH/p_joined" --format nanogpt --val-fraction 0.1 "$SCRATCH/joined.txt"
cat "${small[@]}" | "$prepare" --out-dir "$SCRATCH/p_stdin" --format nanogpt --val-fraction 0.1 - \
  >"$SCRATCH/out" 2>"$SCRATCH/err" || fail "stdin: $(cat "$SCRATCH/err")"
same_files "$SCRATCH/p_joined" "$SCRATCH/p_stdin" "standard input against a file"

# JSON Lines: each line's "body" is a document (escapes, UTF-8, a blank line skipped); the same
# as those documents in text files, from a .jsonl file and from stdin with --input-format jsonl.
mkdir "$SCRATCH/jdocs"
: >"$SCRATCH/docs.jsonl"
for i in $(seq 0 39); do
  text="document $i: \"quoted\", caf$(printf '\xc3\xa9')"$'\n'"second line"$'\t'"tab"
  for _ in $(seq 0 $((i * 7))); do text+=" and more words $i"; done
  printf '%s' "$text" >"$SCRATCH/jdocs/d_$(printf %02d "$i").txt"
  json=${text//\\/\\\\}; json=${json//\"/\\\"}; json=${json//$'\n'/\\n}; json=${json//$'\t'/\\t}
  printf '{"id": %d, "body": "%s"}\n' "$i" "$json" >>"$SCRATCH/docs.jsonl"
  ((i == 20)) && echo >>"$SCRATCH/docs.jsonl"
done
expect_rc 0 --out-dir "$SCRATCH/p_jtext" --format nanogpt --val-fraction 0.2 "$SCRATCH/jdocs"
grep -q "^split: seeded" "$SCRATCH/out" || fail "40 documents: no seeded split: $(cat "$SCRATCH/out")"
expect_rc 0 --out-dir "$SCRATCH/p_jsonl" --format nanogpt --val-fraction 0.2 --jsonl-field body "$SCRATCH/docs.jsonl"
grep -q "40 documents, 40 pieces" "$SCRATCH/out" || fail "JSONL: $(cat "$SCRATCH/out")"
same_files "$SCRATCH/p_jtext" "$SCRATCH/p_jsonl" "JSONL against text files"
"$prepare" --out-dir "$SCRATCH/p_jstdin" --format nanogpt --val-fraction 0.2 --jsonl-field body \
  --input-format jsonl - <"$SCRATCH/docs.jsonl" >"$SCRATCH/out" 2>"$SCRATCH/err" || fail "JSONL stdin: $(cat "$SCRATCH/err")"
same_files "$SCRATCH/p_jtext" "$SCRATCH/p_jstdin" "JSONL from stdin against text files"

# GPT-2 tokens of a document cut into pieces are those of the whole document (the cuts fall
# where no pre-token spans them): 300 kB of fortunes, 5 pieces, against the tokenize tool.
if [[ -s $BUILD_DIR/gpt2-vocab/encoder.json ]]; then
  cat /usr/share/games/fortunes/{fortunes,computers,science,wisdom,literature} >"$SCRATCH/long.txt"
  truncate -s 300000 "$SCRATCH/long.txt"
  expect_rc 0 --out-dir "$SCRATCH/p_gpt2" --format nanogpt --tokenizer gpt2 --gpt2-vocab "$BUILD_DIR/gpt2-vocab" \
    --val-fraction 0.01 "$SCRATCH/long.txt"
  grep -q "^split: the last 0.01 of the tokens (--split-seed 0 chose none of 5 pieces" "$SCRATCH/out" ||
    fail "gpt2: not a split by position: $(cat "$SCRATCH/out")"
  cat "$SCRATCH/p_gpt2/train.bin" "$SCRATCH/p_gpt2/val.bin" | od -An -v -tu2 -w2 | tr -d ' ' | tail -n +2 >"$SCRATCH/ours"
  "$BUILD_DIR/tokenize" "$BUILD_DIR/gpt2-vocab" <"$SCRATCH/long.txt" | tr ' ' '\n' >"$SCRATCH/whole"
  cmp -s "$SCRATCH/ours" "$SCRATCH/whole" || fail "gpt2: the pieces' tokens differ from the whole document's"
else
  echo "prepare_stream: GPT-2 cuts not checked (no $BUILD_DIR/gpt2-vocab)"
fi

# Bad input: a line that is no JSON, a missing field, compressed input; exit 2, nothing written.
printf '{"text": "fine"}\n{"text": broken\n' >"$SCRATCH/bad.jsonl"
expect_rc 2 --out-dir "$SCRATCH/x" "$SCRATCH/bad.jsonl"
grep -q "bad.jsonl:2: not a JSON line" "$SCRATCH/err" || fail "bad JSON: $(cat "$SCRATCH/err")"
expect_rc 2 --out-dir "$SCRATCH/x" "$SCRATCH/docs.jsonl"
grep -q "docs.jsonl:1: no string field 'text'" "$SCRATCH/err" || fail "missing field: $(cat "$SCRATCH/err")"
gzip -c "$SCRATCH/docs.jsonl" >"$SCRATCH/docs.jsonl.gz"
expect_rc 2 --out-dir "$SCRATCH/x" "$SCRATCH/docs.jsonl.gz"
grep -q "is compressed.*zcat FILE | prepare-data ... -" "$SCRATCH/err" || fail "gzip: $(cat "$SCRATCH/err")"
[[ ! -e $SCRATCH/x ]] || fail "output written for bad input"
echo "prepare_stream: OK"
