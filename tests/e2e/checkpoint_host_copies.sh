#!/usr/bin/env bash
# Checkpoints through a device's host copies (train/checkpoint_mirror.hpp), taken on the CPU by
# MPITRAIN_CHECKPOINT_MIRROR=1, in bf16 (a master of its own) at ZeRO-0 and ZeRO-1, dp 2:
#   - 5 steps + exit 85 + resume + 5 through the copies equal 10 steps without them: the losses
#     and the step-10 checkpoint bit for bit;
#   - the start-up says when the save's copies are made (now: saves are planned) and how many
#     floats rank 0's hold: ZeRO-0's writer its master, m and v of all, ZeRO-1's of its half;
#     the resume loads through copies it frees;
#   - without planned saves the copies wait for a stop's save: SIGTERM makes them, commits, 85.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 10 --save-interval 100 --precision bf16
common=("$@")

floats() {  # floats LOG: rank 0's floats on the save's start-up line
  local line="^checkpoints: host copies of the writers' state, .*(rank 0: \([0-9]*\) floats)"
  sed -n "s/$line, made now$/\1/p" "$1"
}
for zero in 0 1; do
  name=zero$zero
  args=("${common[@]}" --zero "$zero")
  run_trainer 2 "$SCRATCH/$name-full.log" "${args[@]}" --out-dir "$SCRATCH/$name-full"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-full.log"; fail "$name: uninterrupted run exited $rc"; }
  ! grep -q "host copies" "$SCRATCH/$name-full.log" || fail "$name: host copies unasked for"
  export MPITRAIN_CHECKPOINT_MIRROR=1
  run_trainer 2 "$SCRATCH/$name-a.log" "${args[@]}" --out-dir "$SCRATCH/$name" --exit-at-step 5
  [ "$rc" = 85 ] || { cat "$SCRATCH/$name-a.log"; fail "$name: first part exited $rc, not 85"; }
  run_trainer 2 "$SCRATCH/$name-b.log" "${args[@]}" --out-dir "$SCRATCH/$name" --resume auto
  unset MPITRAIN_CHECKPOINT_MIRROR
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-b.log"; fail "$name: resumed run exited $rc"; }
  grep "^checkpoints: host copies\|^resume: through host copies" "$SCRATCH/$name-b.log"
  grep -q "^resume: through host copies, .* freed once loaded$" "$SCRATCH/$name-b.log" ||
    fail "$name: no line of the resume's host copies"
  [ -n "$(floats "$SCRATCH/$name-a.log")" ] ||
    { cat "$SCRATCH/$name-a.log"; fail "$name: no line of the save's copies"; }
  metric "$SCRATCH/$name-full/metrics.jsonl" loss > "$SCRATCH/$name-full.loss"
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  [ "$(wc -l < "$SCRATCH/$name.loss")" = 10 ] || fail "$name: expected 10 losses"
  cmp -s "$SCRATCH/$name-full.loss" "$SCRATCH/$name.loss" ||
    { paste "$SCRATCH/$name-full.loss" "$SCRATCH/$name.loss"; fail "$name: losses differ"; }
  h5diff "$SCRATCH/$name-full/checkpoints/step-00000010/checkpoint.h5" \
    "$SCRATCH/$name/checkpoints/step-00000010/checkpoint.h5" /params /params ||
    fail "$name: the parameters differ after the resume through host copies"
  for g in adam_m adam_v; do
    h5diff "$SCRATCH/$name-full/checkpoints/step-00000010/checkpoint.h5" \
      "$SCRATCH/$name/checkpoints/step-00000010/checkpoint.h5" "/$g" "/$g" ||
      fail "$name: /$g differs after the resume through host copies"
  done
  echo "ok: $name: 5 + resume + 5 steps through host copies equal 10 steps bit for bit"
done
# ZeRO-0: rank 0 writes all (3 x N floats); ZeRO-1: its half (3 x ceil(N / 2)).
whole=$(floats "$SCRATCH/zero0-a.log") half=$(floats "$SCRATCH/zero1-a.log")
echo "rank 0's copies: ZeRO-0 $whole floats, ZeRO-1 $half"
excess=$((2 * half - whole))  # 0, or up to 3 x 2 for an odd N
if [ $((whole % 3)) != 0 ] || [ "$excess" -lt 0 ] || [ "$excess" -gt 6 ]; then
  fail "rank 0's save copies: ZeRO-0 $whole floats, ZeRO-1 $half: not all and half of 3 x N"
fi

# No planned save: the copies are made at the stop's save.
export MPITRAIN_CHECKPOINT_MIRROR=1
# shellcheck disable=SC2046
run_trainer_signalled 2 "$SCRATCH/stop.log" \
  '[ "$(metric "$SCRATCH/stop/metrics.jsonl" loss 2>/dev/null | wc -l)" -ge 2 ]' \
  $(tiny_args) --steps 100000 --precision bf16 --out-dir "$SCRATCH/stop"
unset MPITRAIN_CHECKPOINT_MIRROR
[ "$ready_seen" = 1 ] || { cat "$SCRATCH/stop.log"; fail "no 2 steps logged before the signal"; }
[ "$rc" = 85 ] || { cat "$SCRATCH/stop.log"; fail "SIGTERM: exit code $rc, expected 85"; }
grep -q "^checkpoints: host copies of the writers' state, .*, made at a stop's save$" \
  "$SCRATCH/stop.log" || { cat "$SCRATCH/stop.log"; fail "no line: the copies wait for a stop"; }
[ -s "$SCRATCH/stop/checkpoints/latest" ] || fail "SIGTERM: no checkpoint committed"
echo "ok: without planned saves the host copies are made by the stop's save, which commits"
