#!/usr/bin/env bash
# The promise: a kill -9 at any moment of a save never loses the last good checkpoint.
# For each phase of the commit (write, close, rename), at 2 and 4 ranks, one rank SIGKILLs itself
# while the step-4 checkpoint is saved; afterwards --resume auto finds a valid checkpoint and the
# run completes with the same final loss as an uninterrupted run. Then a truncated file and a
# flipped byte are each detected, named, and skipped for the previous checkpoint.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 6 --save-interval 2 --keep-last 0
for np in 2 4; do
  run_trainer "$np" "$SCRATCH/full$np.log" "$@" --out-dir "$SCRATCH/full$np"
  [ "$rc" = 0 ] || { cat "$SCRATCH/full$np.log"; fail "np=$np: uninterrupted run exited $rc"; }
  want=$(metric "$SCRATCH/full$np/metrics.jsonl" loss | tail -1)
  for phase in write close rename; do
    name="np$np-$phase"
    MPITRAIN_FAULT="kill:phase=$phase:rank=$((np - 1)):step=4" \
      run_trainer "$np" "$SCRATCH/$name-a.log" "$@" --out-dir "$SCRATCH/$name"
    [ "$rc" != 0 ] || fail "$name: the killed run exited 0"
    grep -q "fault injection" "$SCRATCH/$name-a.log" || { cat "$SCRATCH/$name-a.log"; fail "$name: no fault injected"; }
    run_trainer "$np" "$SCRATCH/$name-b.log" "$@" --out-dir "$SCRATCH/$name" --resume auto
    [ "$rc" = 0 ] || { cat "$SCRATCH/$name-b.log"; fail "$name: resume exited $rc"; }
    from=$(sed -n 's/^resumed from step \([0-9]*\).*/\1/p' "$SCRATCH/$name-b.log")
    got=$(metric "$SCRATCH/$name/metrics.jsonl" loss | tail -1)
    echo "ok: $name: killed during the save of step 4, resumed from step ${from:-?}, final loss $got (uninterrupted $want)"
    [ -n "$from" ] || fail "$name: did not resume from a checkpoint"
    [ "$got" = "$want" ] || fail "$name: final loss $got differs from $want"
  done
done

# Damaged checkpoints: truncate the newest, flip one byte of the next one's data; resume must
# name both and fall back to step 2.
dir="$SCRATCH/full2/checkpoints"
ls "$dir"
newest=$(ls -d "$dir"/step-* | sort | tail -1)
second=$(ls -d "$dir"/step-* | sort | tail -2 | head -1)
truncate -s "$(( $(stat -c %s "$newest/checkpoint.h5") / 2 ))" "$newest/checkpoint.h5"
offset=$(h5dump -p -H -d /params/h.1.mlp.fc.weight "$second/checkpoint.h5" | sed -n 's/ *OFFSET \([0-9]*\)/\1/p')
[ -n "$offset" ] || fail "could not find the data offset of a dataset"
printf '\xff' | dd of="$second/checkpoint.h5" bs=1 seek="$((offset + 7))" conv=notrunc status=none
run_trainer 2 "$SCRATCH/damaged.log" "$@" --out-dir "$SCRATCH/full2" --resume auto --steps 8
[ "$rc" = 0 ] || { cat "$SCRATCH/damaged.log"; fail "resume over damaged checkpoints exited $rc"; }
grep -E "checkpoint:|resumed" "$SCRATCH/damaged.log" || true
grep -q "$(basename "$newest")" "$SCRATCH/damaged.log" || fail "the truncated checkpoint was not named"
grep -q "h.1.mlp.fc.weight" "$SCRATCH/damaged.log" || fail "the corrupted dataset was not named"
grep -q "resumed from step 2" "$SCRATCH/damaged.log" || fail "did not fall back to step 2"
