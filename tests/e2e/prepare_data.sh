#!/usr/bin/env bash
# prepare-data end to end: each output format on a small text file, and the exit-code-2 cases
# (missing input, existing output without --overwrite leaves the old file unchanged).
set -euo pipefail

prepare=${BUILD_DIR:?BUILD_DIR is not set}/prepare-data
work=$(mktemp -d /tmp/mpitrain-prepare-data-XXXXXX)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# Runs prepare-data, expecting exit code $1; its stderr is kept in $work/stderr.
expect_rc() {
  local want=$1 rc=0
  shift
  "$prepare" "$@" >"$work/stdout" 2>"$work/stderr" || rc=$?
  [[ $rc -eq $want ]] || fail "prepare-data $* exited $rc, expected $want: $(cat "$work/stderr")"
}

for i in $(seq 1 200); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$work/a.txt"
printf 'a second file\n' >"$work/b.txt"
total=$(( $(stat -c %s "$work/a.txt") + 1 + $(stat -c %s "$work/b.txt") ))  # '\n' between files

for format in hdf5 llmc nanogpt; do
  ext=bin; [[ $format == hdf5 ]] && ext=h5
  out=$work/$format
  expect_rc 0 --out-dir "$out" --format "$format" "$work/a.txt" "$work/b.txt"
  [[ -s $out/train.$ext && -s $out/val.$ext ]] || fail "$format: train.$ext/val.$ext missing"
  grep -q "train: " "$work/stdout" || fail "$format: no token counts printed"
  counted=$(awk '{s += $2} END {print s}' "$work/stdout")
  [[ $counted -eq $total ]] || fail "$format: $counted tokens written, expected $total"
done
[[ $(stat -c %s "$work/nanogpt/val.bin") -eq $(( $(stat -c %s "$work/llmc/val.bin") - 1024 )) ]] ||
  fail "llm.c and nanoGPT val files differ by more than the 1024-byte header"

# Missing input: exit 2, a message naming it, nothing written.
expect_rc 2 --out-dir "$work/none" "$work/missing.txt"
grep -q "missing.txt" "$work/stderr" || fail "the message does not name the missing file"
[[ ! -e $work/none ]] || fail "output written for a missing input"

# Existing output without --overwrite: exit 2, old files unchanged; with --overwrite: replaced.
before=$(md5sum "$work/hdf5/train.h5" "$work/hdf5/val.h5")
expect_rc 2 --out-dir "$work/hdf5" "$work/b.txt"
grep -q -- "--overwrite" "$work/stderr" || fail "the message does not mention --overwrite"
[[ $(md5sum "$work/hdf5/train.h5" "$work/hdf5/val.h5") == "$before" ]] ||
  fail "existing output changed without --overwrite"
expect_rc 0 --out-dir "$work/hdf5" --overwrite "$work/b.txt"
[[ $(md5sum "$work/hdf5/train.h5" "$work/hdf5/val.h5") != "$before" ]] ||
  fail "--overwrite did not replace the output"

# Other bad input: empty input, bad fraction, bad format.
: >"$work/empty.txt"
expect_rc 2 --out-dir "$work/x" "$work/empty.txt"
expect_rc 2 --out-dir "$work/x" --val-fraction 0 "$work/a.txt"
expect_rc 2 --out-dir "$work/x" --format parquet "$work/a.txt"
[[ ! -e $work/x ]] || fail "output written for bad input"
echo "prepare_data: OK"
