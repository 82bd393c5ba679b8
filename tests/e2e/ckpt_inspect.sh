#!/usr/bin/env bash
# ckpt-inspect on a trainer's checkpoints: the manifest and every dataset, --verify OK (exit 0);
# a truncated file or a missing path exit 2; bad arguments exit 2. (A flipped data byte, exit 1,
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
