#!/usr/bin/env bash
# ckpt-inspect on a trainer's checkpoints: the manifest and every dataset, --verify OK (exit 0);
# a truncated file or a missing path exit 2; bad arguments exit 2; a FIFO (also as `latest` or
# checkpoint.h5), /dev/null, a text file exit 2 saying what they are, without hanging; a float64
# dataset is BAD (exit 1) as the trainer refuses it; an absolute `latest` into another run is
# BAD and not followed, as the trainer does not follow it. (A flipped data byte, exit 1,
# is tested in tests/mpi/test_checkpoint.cpp, where the dataset's offset is known.)
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
INSPECT="$BUILD_DIR/ckpt-inspect"
CKPTS="$SCRATCH/run/checkpoints"
# shellcheck disable=SC2046
$MPIRUN -np 4 "$TRAINER" $(tiny_args) --tp 2 --pp 2 --steps 4 --save-interval 2 \
  --out-dir "$SCRATCH/run" > "$SCRATCH/log" 2>&1 || { cat "$SCRATCH/log"; fail "trainer failed"; }

expect_exit() {  # expect_exit CODE NAME ARGS...
  local code=$1 name=$2 rc=0; shift 2
  "$INSPECT" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" || rc=$?
  [ $rc = "$code" ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit $rc, expected $code"; }
  echo "ok: $name exits $code"
}

expect_exit 0 verify_latest "$CKPTS" --verify
out="$SCRATCH/verify_latest.out"
grep -q "^checkpoint $CKPTS/step-00000004/checkpoint.h5$" "$out" || fail "latest is not step 4"
grep -Eq '^  step +4$' "$out" || fail "manifest step"
grep -Eq '^  tp +2$' "$out" && grep -Eq '^  pp +2$' "$out" || fail "manifest layout"
grep -Eq '^/params/h.1.attn.qkv.weight +192x64 +0x[0-9a-f]{16} OK$' "$out" || { cat "$out"; fail "qkv row"; }
rows=$(grep -c '^/.* OK$' "$out")
[ "$rows" = 84 ] || fail "$rows datasets verified, expected 3 x 28"
grep -q '^verify: all checksums OK$' "$out" || fail "no verify summary"

expect_exit 0 no_verify "$CKPTS/step-00000002"
grep -q ' OK$' "$SCRATCH/no_verify.out" && fail "verified without --verify"

truncate -s 4096 "$CKPTS/step-00000002/checkpoint.h5"
expect_exit 2 truncated "$CKPTS/step-00000002/checkpoint.h5" --verify
grep -q "no readable checkpoint at" "$SCRATCH/truncated.err" || fail "truncated: no message"
expect_exit 2 missing "$SCRATCH/nowhere"
expect_exit 2 no_path --verify
expect_exit 2 bad_option "$CKPTS" --bogus

# Paths that are not checkpoint files, each exit 2 with what it is, and none may hang (a FIFO
# would block an open until a writer comes: timeout 20 s, a run takes < 0.1 s here).
expect_exit_quick() {  # expect_exit_quick CODE NAME EXPECTED_TEXT ARGS...
  local code=$1 name=$2 expected=$3 rc=0; shift 3
  timeout 20 "$INSPECT" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" || rc=$?
  [ $rc = "$code" ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit $rc, expected $code"; }
  grep -qF -- "$expected" "$SCRATCH/$name.out" "$SCRATCH/$name.err" ||
    { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  echo "ok: $name exits $code: $(grep -hF -- "$expected" "$SCRATCH/$name.out" "$SCRATCH/$name.err" | head -1)"
}
mkfifo "$SCRATCH/fifo"
expect_exit_quick 2 fifo "it is a FIFO, not a regular file" "$SCRATCH/fifo" --verify
expect_exit_quick 2 dev_null "it is a character device, not a regular file" /dev/null
expect_exit_quick 2 missing_words "it does not exist" "$SCRATCH/nowhere"
echo "not HDF5" > "$SCRATCH/text.h5"
expect_exit_quick 2 not_hdf5 "is not an HDF5 file" "$SCRATCH/text.h5"
mkdir -p "$SCRATCH/fifo-store/step-00000002" && mkfifo "$SCRATCH/fifo-store/latest"
expect_exit_quick 2 fifo_latest "fifo-store/latest is a FIFO, not a regular file" "$SCRATCH/fifo-store"
mkfifo "$SCRATCH/fifo-store/step-00000002/checkpoint.h5"
expect_exit_quick 2 fifo_file "it is a FIFO, not a regular file" "$SCRATCH/fifo-store/step-00000002"

# A float64 dataset (values and checksum kept): ckpt-inspect and the trainer refuse it alike.
cp -r "$CKPTS/step-00000004" "$SCRATCH/f64"
"$BUILD_DIR/h5-edit" to-float64 "$SCRATCH/f64/checkpoint.h5" /params/wte
expect_exit_quick 1 float64 "BAD: dataset /params/wte is not float32" "$SCRATCH/f64" --verify
# shellcheck disable=SC2046
run_trainer 2 "$SCRATCH/f64-resume.log" $(tiny_args) --steps 6 --out-dir "$SCRATCH/f64-run" \
  --resume "$SCRATCH/f64"
[ "$rc" = 2 ] || { cat "$SCRATCH/f64-resume.log"; fail "the trainer resumed a float64 dataset: exit $rc"; }
grep -qF "dataset /params/wte is not float32" "$SCRATCH/f64-resume.log" ||
  { cat "$SCRATCH/f64-resume.log"; fail "the trainer's refusal does not name the float64 dataset"; }
echo "ok: the trainer refuses it too"

# An absolute `latest` into another run: the trainer scans its own directory instead (newest
# first), and so does ckpt-inspect, which names the bad `latest` (exit 1).
mkdir -p "$SCRATCH/other" "$SCRATCH/mine"
cp -r "$CKPTS/step-00000004" "$SCRATCH/other/"
cp -r "$CKPTS/step-00000004" "$SCRATCH/mine/"
echo "$SCRATCH/other/step-00000004" > "$SCRATCH/mine/latest"
expect_exit_quick 1 absolute_latest "latest: BAD: $SCRATCH/mine/latest names '$SCRATCH/other/step-00000004', which is not a checkpoint in $SCRATCH/mine" "$SCRATCH/mine"
grep -q "^checkpoint $SCRATCH/mine/step-00000004/checkpoint.h5$" "$SCRATCH/absolute_latest.out" ||
  { cat "$SCRATCH/absolute_latest.out"; fail "absolute latest: not this run's newest checkpoint"; }
