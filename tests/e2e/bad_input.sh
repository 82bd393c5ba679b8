# Bad input: one clear message from rank 0, exit code 2, before any work; nothing the user had is
# overwritten.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

expect_usage_error() {  # expect_usage_error NAME EXPECTED_TEXT TRAINER_ARGS...
  local name=$1 expected=$2; shift 2
  set +e
  $MPIRUN -np 2 "$TRAINER" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err"
  local rc=$?
  set -e
  [ $rc = 2 ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit code $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.err" || { cat "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.err")" = 1 ] || { cat "$SCRATCH/$name.err"; fail "$name: not exactly one message"; }
  grep -q '^step ' "$SCRATCH/$name.out" && fail "$name: training started"
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.err")"
}

# shellcheck disable=SC2046
set -- $(tiny_args) --steps 2
tiny=("$@")
printf 'a small text' > "$SCRATCH/short.txt"
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/short" "$SCRATCH/short.txt" > /dev/null
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/shard" --format llmc "$SOURCE_DIR/README.md" > /dev/null
head -c 4096 /dev/urandom > "$SCRATCH/garbage.bin"

expect_usage_error missing_data "$SCRATCH/nope.h5" "${tiny[@]}" --train-data "$SCRATCH/nope.h5" --out-dir "$SCRATCH/o1"
expect_usage_error heads "must be a positive multiple of n-head" "${tiny[@]}" --n-head 3 --out-dir "$SCRATCH/o2"
expect_usage_error gqa_on_gpt2 "n-kv-head must equal n-head" "${tiny[@]}" --n-kv-head 2 --out-dir "$SCRATCH/o3"
expect_usage_error batch_split "must be divisible by ranks x micro-batch-size" "${tiny[@]}" --global-batch-size 6 --out-dir "$SCRATCH/o4"
expect_usage_error token_range "holds token id" "${tiny[@]}" --train-data "$SCRATCH/shard/train.bin" --val-data "" --vocab-size 64 --out-dir "$SCRATCH/o5"
expect_usage_error declared_vocab "declares vocab_size 256" "${tiny[@]}" --vocab-size 100 --out-dir "$SCRATCH/o6"
expect_usage_error too_short "$SCRATCH/short/train.h5" "${tiny[@]}" --train-data "$SCRATCH/short/train.h5" --val-data "" --out-dir "$SCRATCH/o7"
expect_usage_error bad_init "$SCRATCH/garbage.bin" "${tiny[@]}" --init-from "$SCRATCH/garbage.bin" --out-dir "$SCRATCH/o8"
expect_usage_error bad_option "unrecognised option '--bogus'" "${tiny[@]}" --bogus 1
expect_usage_error bad_number "steps" "${tiny[@]}" --steps many

# An out-dir that already holds a run is left exactly as it was.
mkdir -p "$SCRATCH/previous"
echo '{"step": 1, "loss": 1}' > "$SCRATCH/previous/metrics.jsonl"
before=$(md5sum < "$SCRATCH/previous/metrics.jsonl")
expect_usage_error existing_out_dir "already holds files; pass --overwrite" "${tiny[@]}" --out-dir "$SCRATCH/previous"
[ "$(md5sum < "$SCRATCH/previous/metrics.jsonl")" = "$before" ] || fail "existing metrics.jsonl was changed"
[ "$(ls "$SCRATCH/previous")" = metrics.jsonl ] || fail "files were added to the existing out-dir"
# A failed run creates no out-dir.
[ ! -e "$SCRATCH/o2" ] || fail "a rejected run created its out-dir"
