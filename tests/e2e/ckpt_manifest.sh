#!/usr/bin/env bash
# The manifest is checked like the data: one flipped bit in adam_steps (6 -> 2) and
# consumed_samples = -7 (its uint64 holding -7's bits) are each named as damage, --resume auto
# falls back to the next older checkpoint, and ckpt-inspect --verify fails on both.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
EDIT="$BUILD_DIR/h5-edit"
INSPECT="$BUILD_DIR/ckpt-inspect"
# shellcheck disable=SC2046
set -- $(tiny_args) --save-interval 2 --keep-last 0
run_trainer 2 "$SCRATCH/a.log" "$@" --steps 6 --out-dir "$SCRATCH/run"
[ "$rc" = 0 ] || { cat "$SCRATCH/a.log"; fail "first run exited $rc"; }
ckpts="$SCRATCH/run/checkpoints"
six="$ckpts/step-00000006/checkpoint.h5" four="$ckpts/step-00000004/checkpoint.h5"
"$INSPECT" "$ckpts/step-00000006" --verify > "$SCRATCH/six-ok.out" ||
  { cat "$SCRATCH/six-ok.out"; fail "step 6 does not verify before the damage"; }
grep -Eq '^  adam_steps +6$' "$SCRATCH/six-ok.out" || fail "adam_steps of step 6 is not 6"

"$EDIT" flip-bit "$six" /manifest adam_steps 2            # 6 = 0b110 -> 2 = 0b010
"$EDIT" set-int "$four" /manifest consumed_samples -7

expect_verify_fails() {  # expect_verify_fails NAME DIR EXPECTED_TEXT
  local rc=0
  "$INSPECT" "$2" --verify > "$SCRATCH/$1.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$SCRATCH/$1.out"; fail "$1: ckpt-inspect --verify exited $rc, expected 1"; }
  grep -qF "manifest: BAD: $3" "$SCRATCH/$1.out" || { cat "$SCRATCH/$1.out"; fail "$1: no 'manifest: BAD: $3'"; }
  grep -q '^verify: FAILED$' "$SCRATCH/$1.out" || fail "$1: no verify: FAILED"
  echo "ok: ckpt-inspect --verify $1: $(grep 'manifest: BAD' "$SCRATCH/$1.out")"
}
expect_verify_fails flipped "$ckpts/step-00000006" "manifest checksum mismatch"
expect_verify_fails negative "$ckpts/step-00000004" \
  "manifest consumed_samples 18446744073709551609 (-7 as a signed number) is out of range"

run_trainer 2 "$SCRATCH/b.log" "$@" --steps 8 --out-dir "$SCRATCH/run" --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/b.log"; fail "resume over the damaged manifests exited $rc"; }
grep -E "checkpoint:|resumed" "$SCRATCH/b.log"
grep -qF "$six: manifest checksum mismatch" "$SCRATCH/b.log" || fail "the flipped bit was not named"
grep -qF "$four: manifest consumed_samples 18446744073709551609 (-7 as a signed number) is out of range" \
  "$SCRATCH/b.log" || fail "consumed_samples -7 was not named"
grep -q "^resumed from step 2 (16 samples consumed" "$SCRATCH/b.log" || fail "did not fall back to step 2"
echo "ckpt_manifest: OK"
