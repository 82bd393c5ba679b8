#!/usr/bin/env bash
# Datasets as users have them: three llm.c shards by glob train on all three (the banner counts
# their tokens; the steps reach the third shard's samples); a glob matching nothing, a repeated
# flag, weighted and unweighted entries mixed: exit 2, nothing written; a blend resumed mid-way
# gives the uninterrupted run's losses bit for bit; a resume on other data is refused unless
# --allow-data-change; prefetch on and off give the same losses bit for bit (mapped HDF5, llm.c;
# a chunked HDF5 file is read on the main thread); dp 1 and dp 2 see the same blend.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

# Three shards of different text, 570 tokens each for training: 17 samples of seq-len 32.
shards=$SCRATCH/shards
mkdir -p "$shards"
i=0
for text in README.md docs/ARCHITECTURE.md src/data/token_source.cpp; do
  head -c 600 "$SOURCE_DIR/$text" > "$SCRATCH/text$i.txt"
  "$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/p$i" --format llmc "$SCRATCH/text$i.txt" > /dev/null
  mv "$SCRATCH/p$i/train.bin" "$shards/fw_train_00$i.bin"
  i=$((i + 1))
done
tokens_of() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }  # an llm.c shard's header count
n0=$(tokens_of "$shards/fw_train_000.bin") n1=$(tokens_of "$shards/fw_train_001.bin")
n2=$(tokens_of "$shards/fw_train_002.bin")
# shellcheck disable=SC2046
set -- $(tiny_model_args) --vocab-size 256 --shuffle false
model=("$@")
losses() { metric "$SCRATCH/$1/metrics.jsonl" loss; }
train() {  # train NAME NP ARGS...: a run that must succeed
  local name=$1 np=$2; shift 2
  run_trainer "$np" "$SCRATCH/$name.log" "${model[@]}" "$@" --out-dir "$SCRATCH/$name"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc"; }
}

# 1. A glob trains on every shard. Without shuffle, global sample k is the k-th window of the
# concatenation: 8 a step, so steps 1-4 (samples 0-31) lie in shards 0 and 1 (34 samples) and
# step 5 on reach shard 2. The glob equals the explicit list, and leaves shards 0+1 at step 5.
train glob 2 --train-data "$shards/fw_train_*.bin" --steps 7
grep -q "| $((n0 + n1 + n2)) tokens of training data in 3 files" "$SCRATCH/glob.log" ||
  { head -3 "$SCRATCH/glob.log"; fail "the banner does not count the three shards' tokens"; }
train list 2 --train-data "$shards/fw_train_000.bin, $shards/fw_train_001.bin,$shards/fw_train_002.bin" --steps 7
losses glob > "$SCRATCH/glob.loss"
losses list > "$SCRATCH/list.loss"
cmp -s "$SCRATCH/glob.loss" "$SCRATCH/list.loss" || fail "the glob and the list of its files differ"
train two 2 --train-data "$shards/fw_train_00[01].bin" --steps 7
losses two > "$SCRATCH/two.loss"
[ "$(head -4 "$SCRATCH/glob.loss")" = "$(head -4 "$SCRATCH/two.loss")" ] ||
  fail "steps 1-4 (shards 0 and 1 only) differ between 3 and 2 shards"
[ "$(tail -3 "$SCRATCH/glob.loss")" != "$(tail -3 "$SCRATCH/two.loss")" ] ||
  fail "steps 5-7 did not reach the third shard"
echo "ok: the glob trains on 3 shards ($((n0 + n1 + n2)) tokens), step 5 on in the third"

# 2. Bad specs: one message, exit 2, no out-dir made.
refused() {  # refused NAME EXPECTED ARGS...
  local name=$1 expected=$2; shift 2
  run_trainer 2 "$SCRATCH/$name.log" "${model[@]}" "$@" --steps 2 --out-dir "$SCRATCH/$name"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.log")" = 1 ] || { cat "$SCRATCH/$name.log"; fail "$name: not one message"; }
  [ ! -e "$SCRATCH/$name" ] || fail "$name: the out-dir was made"
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}
refused no_match "'$shards/fw_val_*.bin' matches no file" --train-data "$shards/fw_val_*.bin"
refused repeated "--train-data is given twice; give a list instead" \
  --train-data "$shards/fw_train_000.bin" --train-data "$shards/fw_train_001.bin"
refused mixed "1 of 2 entries have a weight" --train-data "0.5:$shards/fw_train_000.bin,$DATA_DIR/val.h5"
refused bad_weight "not a positive number" --train-data "0:$shards/fw_train_000.bin"
# Every file's ids are checked, the second one's too: digits (ids < 64), then text (ids >= 64).
seq 1000 1200 | tr '\n' ' ' > "$SCRATCH/digits.txt"
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/digits" --format llmc "$SCRATCH/digits.txt" > /dev/null
refused token_range "$shards/fw_train_001.bin holds token id" --vocab-size 64 \
  --train-data "$SCRATCH/digits/train.bin,$shards/fw_train_001.bin"

# 3. A blend (llm.c shards and HDF5, shuffled) resumed at step 5 equals 10 steps uninterrupted.
blend=(--train-data "0.7:$shards/fw_train_*.bin, 0.3:$DATA_DIR/val.h5" --shuffle true --save-interval 100)
train blend-full 2 "${blend[@]}" --steps 10
run_trainer 2 "$SCRATCH/blend-a.log" "${model[@]}" "${blend[@]}" --steps 10 --exit-at-step 5 --out-dir "$SCRATCH/blend"
[ "$rc" = 85 ] || { cat "$SCRATCH/blend-a.log"; fail "blend: first part exited $rc, expected 85"; }
cp -r "$SCRATCH/blend" "$SCRATCH/blend-copy"  # step 5, for the resumes on other data below
train blend 2 "${blend[@]}" --steps 10 --resume auto
grep -q "resumed from step 5" "$SCRATCH/blend.log" || fail "blend: did not resume from step 5"
losses blend-full > "$SCRATCH/blend-full.loss"
losses blend > "$SCRATCH/blend.loss"
[ "$(wc -l < "$SCRATCH/blend.loss")" = 10 ] || fail "blend: expected 10 losses"
cmp -s "$SCRATCH/blend-full.loss" "$SCRATCH/blend.loss" ||
  { paste "$SCRATCH/blend-full.loss" "$SCRATCH/blend.loss"; fail "blend: the resumed losses differ"; }
echo "ok: a blend resumed at step 5 gives the uninterrupted losses bit for bit"

# 4. A resume on other data (weights; a glob that gained a shard) is refused, leaving the run as
# it was; --allow-data-change lets it through.
before=$(dir_state "$SCRATCH/blend-copy")
other=(--train-data "0.5:$shards/fw_train_*.bin, 0.5:$DATA_DIR/val.h5" --shuffle true --steps 10 --resume auto)
run_trainer 2 "$SCRATCH/other.log" "${model[@]}" "${other[@]}" --out-dir "$SCRATCH/blend-copy"
[ "$rc" = 2 ] || { cat "$SCRATCH/other.log"; fail "resume on other weights: exit $rc, expected 2"; }
grep -q "trained on other data (.*fw_train_000.bin: weight 0.7 in the checkpoint, 0.5 now" "$SCRATCH/other.log" ||
  { cat "$SCRATCH/other.log"; fail "resume on other weights: the difference is not named"; }
[ "$before" = "$(dir_state "$SCRATCH/blend-copy")" ] || fail "the refused resume changed the run"
cp "$shards/fw_train_000.bin" "$shards/fw_train_003.bin"
run_trainer 2 "$SCRATCH/grown.log" "${model[@]}" "${blend[@]}" --steps 10 --resume auto --out-dir "$SCRATCH/blend-copy"
[ "$rc" = 2 ] || { cat "$SCRATCH/grown.log"; fail "resume after the glob grew: exit $rc, expected 2"; }
grep -q "fw_train_003.bin: not in the checkpoint" "$SCRATCH/grown.log" ||
  { cat "$SCRATCH/grown.log"; fail "resume after the glob grew: the new shard is not named"; }
rm "$shards/fw_train_003.bin"
run_trainer 2 "$SCRATCH/allowed.log" "${model[@]}" "${other[@]}" --allow-data-change --out-dir "$SCRATCH/blend-copy"
[ "$rc" = 0 ] || { cat "$SCRATCH/allowed.log"; fail "--allow-data-change: exit $rc"; }
grep -q "resumed from step 5" "$SCRATCH/allowed.log" || fail "--allow-data-change did not resume"
echo "ok: a resume on other data is refused, naming the difference; --allow-data-change resumes"

# 5. Prefetch on and off: the same losses bit for bit, on llm.c shards and on mapped HDF5; a
# chunked, compressed HDF5 file is read on the main thread, said in one line, same losses.
train nopf 2 --train-data "$shards/fw_train_*.bin" --steps 7 --prefetch false
losses nopf > "$SCRATCH/nopf.loss"
cmp -s "$SCRATCH/glob.loss" "$SCRATCH/nopf.loss" || fail "prefetch on and off differ (llm.c)"
h5=(--train-data "$DATA_DIR/train.h5" --shuffle true --steps 5)
train h5-pf 2 "${h5[@]}"
train h5-nopf 2 "${h5[@]}" --prefetch false
h5repack -l /tokens:CHUNK=1000 -f /tokens:GZIP=1 "$DATA_DIR/train.h5" "$SCRATCH/chunked.h5"
train h5-chunked 2 --train-data "$SCRATCH/chunked.h5" --shuffle true --steps 5
grep -q "prefetch off: $SCRATCH/chunked.h5 is a chunked or compressed HDF5 file" "$SCRATCH/h5-chunked.log" ||
  { head -5 "$SCRATCH/h5-chunked.log"; fail "no word that the chunked file is read without prefetch"; }
grep -q "prefetch off" "$SCRATCH/h5-pf.log" && fail "prefetch off for prepare-data's HDF5 file"
for run in h5-nopf h5-chunked; do
  cmp -s <(losses h5-pf) <(losses $run) || fail "$run: losses differ from the prefetched run"
done
echo "ok: prefetch on and off give the same losses (llm.c, HDF5 mapped, HDF5 chunked)"

# 6. dp 1 and dp 2 see the same blend: the same losses up to fp32 summation order (< 1e-5, as
# dp_equivalence.sh).
train blend-np1 1 "${blend[@]}" --steps 10
losses blend-np1 > "$SCRATCH/blend-np1.loss"
d=$(max_rel_diff "$SCRATCH/blend-full.loss" "$SCRATCH/blend-np1.loss")
awk -v d="$d" 'BEGIN{exit !(d < 1e-5)}' || fail "the blend at dp 1 differs from dp 2 by $d"
echo "ok: the blend at dp 1 and dp 2: max relative loss difference $d"
