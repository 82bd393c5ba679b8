#!/usr/bin/env bash
# The promise: a kill -9 at any moment of a save never loses the last good checkpoint.
# Saves at steps 2, 4 and 6 with --keep-last 1, so the save of step 4 prunes step 2. At 2 and 4
# ranks, rank 0 (which alone fsyncs, renames, replaces `latest` and prunes) and rank np-1 each
# SIGKILL themselves during the save of step 4 at every fault phase of the save:
#   staged (the state copied, nothing written)   write  (data written, file open)
#   close  (file closed)                          rename (step 4 committed)
#   latest (latest.tmp durable)                   prune  (step 2 renamed to step-2.pruned, not
#                                                         yet deleted)
# The saves are asynchronous (--async-save true): from write on, the kill comes in the writer
# thread while the main thread trains step 5 or waits for the commit. At 2 ranks the whole matrix
# runs again with --async-save false, the main thread saving.
# The checkpoints directory must then be as the protocol leaves it at that phase; --resume auto
# must resume from the newest committed step (2 up to close; 4 from rename on, where step 4 is
# committed though `latest` may still name step 2, which the resume says), finish with the final loss of an uninterrupted run, and leave only
# `latest` and step 6: no .tmp, .pruned or .old leftover.
# np 4 kills rank np-1 only at write and close: at rename, latest and prune only rank 0 acts and
# every other rank waits for it at a barrier, so a second waiting rank adds nothing and np 2 has
# covered the case already.
# Then a truncated file and a flipped byte are each detected, named, and skipped for the previous
# checkpoint (a separate run with --keep-last 0, which keeps all three).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 6 --save-interval 2

# The checkpoints directory in one line: its entries, sorted, and what `latest` names.
store_state() {  # store_state DIR
  local entries=("$1"/*)
  echo "${entries[*]##*/} latest=$(cat "$1/latest" 2>/dev/null || echo none)"
}

# What a kill at each phase of step 4's save leaves, and the step a resume must start from.
declare -A left=(
  [staged]="latest step-00000002 latest=step-00000002"
  [write]="latest step-00000002 step-00000004.tmp latest=step-00000002"
  [close]="latest step-00000002 step-00000004.tmp latest=step-00000002"
  [rename]="latest step-00000002 step-00000004 latest=step-00000002"
  [latest]="latest latest.tmp step-00000002 step-00000004 latest=step-00000002"
  [prune]="latest step-00000002.pruned step-00000004 latest=step-00000004"
)
declare -A resumes=([staged]=2 [write]=2 [close]=2 [rename]=4 [latest]=4 [prune]=4)
done_state="latest step-00000006 latest=step-00000006"

# Kills `rank` at `phase` of step 4's save, checks what is left, resumes, checks the outcome.
crash_and_resume() {  # crash_and_resume NP RANK PHASE WANT_LOSS TRAINER_ARGS...
  local np=$1 rank=$2 phase=$3 want=$4
  shift 4
  local name="np$np-rank$rank-$phase-async-$ASYNC" fault="kill:phase=$phase:rank=$rank:step=4"
  local out="$SCRATCH/$name"
  MPITRAIN_FAULT=$fault run_trainer "$np" "$out-a.log" "$@" --keep-last 1 --out-dir "$out"
  [ "$rc" != 0 ] || fail "$name: the killed run exited 0"
  grep -q "WARNING: fault injection armed by MPITRAIN_FAULT='$fault'" "$out-a.log" ||
    { cat "$out-a.log"; fail "$name: no warning that fault injection is armed"; }
  grep -q "fault injection: rank $rank kills itself at phase $phase of step 4" "$out-a.log" ||
    { cat "$out-a.log"; fail "$name: no fault injected"; }
  local how="in the background"  # step 2's save, committed before the kill
  [ "$ASYNC" = true ] || how="(0.00 GB)"
  grep -q "saved checkpoint step 2 in [0-9.]* s $how" "$out-a.log" ||
    { cat "$out-a.log"; fail "$name: step 2 not saved $how"; }
  local got_left
  got_left=$(store_state "$out/checkpoints")
  [ "$got_left" = "${left[$phase]}" ] ||
    fail "$name: the kill left '$got_left', the protocol promises '${left[$phase]}'"
  run_trainer "$np" "$out-b.log" "$@" --keep-last 1 --out-dir "$out" --resume auto
  [ "$rc" = 0 ] || { cat "$out-b.log"; fail "$name: resume exited $rc"; }
  local from got got_done
  from=$(sed -n 's/^resumed from step \([0-9]*\).*/\1/p' "$out-b.log")
  got=$(metric "$out/metrics.jsonl" loss | tail -1)
  got_done=$(store_state "$out/checkpoints")
  echo "ok: $name: resumed from step ${from:-?}, final loss $got (uninterrupted $want)," \
       "left $got_done"
  [ "$from" = "${resumes[$phase]}" ] ||
    fail "$name: resumed from step '${from:-none}', the protocol promises step ${resumes[$phase]}"
  [ "$got" = "$want" ] || fail "$name: final loss $got differs from $want"
  [ "$got_done" = "$done_state" ] ||
    fail "$name: after the resumed run '$got_done', not '$done_state'"
}

args=("$@")

# The uninterrupted run at NP ranks: its final loss, which every resume at NP must reach, into
# $SCRATCH/full$NP.loss.
full_run() {  # full_run NP
  local np=$1
  run_trainer "$np" "$SCRATCH/full$np.log" "${args[@]}" --keep-last 1 --out-dir "$SCRATCH/full$np"
  [ "$rc" = 0 ] || { cat "$SCRATCH/full$np.log"; fail "np=$np: uninterrupted run exited $rc"; }
  [ "$(store_state "$SCRATCH/full$np/checkpoints")" = "$done_state" ] ||
    fail "np=$np: uninterrupted run left $(store_state "$SCRATCH/full$np/checkpoints")"
  metric "$SCRATCH/full$np/metrics.jsonl" loss | tail -1 > "$SCRATCH/full$np.loss"
}

# One kill: crash_and_resume against the uninterrupted run at NP; ASYNC true or false.
crash_case() {  # crash_case NP RANK PHASE ASYNC
  ASYNC=$4
  crash_and_resume "$1" "$2" "$3" "$(cat "$SCRATCH/full$1.loss")" "${args[@]}" \
    --async-save "$ASYNC"
}

# Damaged checkpoints: truncate the newest, flip one byte of the next one's data; resume must
# name both and fall back to step 2. The run to damage keeps all three (--keep-last 0).
keep_all_run() {
  run_trainer 2 "$SCRATCH/keep-all.log" "${args[@]}" --keep-last 0 --out-dir "$SCRATCH/keep-all"
  [ "$rc" = 0 ] || { cat "$SCRATCH/keep-all.log"; fail "--keep-last 0 run exited $rc"; }
}
damaged_case() {
  local dir="$SCRATCH/keep-all/checkpoints" newest second offset
  ls "$dir"
  newest=$(ls -d "$dir"/step-* | sort | tail -1)
  second=$(ls -d "$dir"/step-* | sort | tail -2 | head -1)
  truncate -s "$(( $(stat -c %s "$newest/checkpoint.h5") / 2 ))" "$newest/checkpoint.h5"
  offset=$(h5dump -p -H -d /params/h.1.mlp.fc.weight "$second/checkpoint.h5" | sed -n 's/ *OFFSET \([0-9]*\)/\1/p')
  [ -n "$offset" ] || fail "could not find the data offset of a dataset"
  printf '\xff' | dd of="$second/checkpoint.h5" bs=1 seek="$((offset + 7))" conv=notrunc status=none
  run_trainer 2 "$SCRATCH/damaged.log" "${args[@]}" --keep-last 0 --out-dir "$SCRATCH/keep-all" --resume auto --steps 8
  [ "$rc" = 0 ] || { cat "$SCRATCH/damaged.log"; fail "resume over damaged checkpoints exited $rc"; }
  grep -E "checkpoint:|resumed" "$SCRATCH/damaged.log" || true
  grep -q "$(basename "$newest")" "$SCRATCH/damaged.log" || fail "the truncated checkpoint was not named"
  grep -q "h.1.mlp.fc.weight" "$SCRATCH/damaged.log" || fail "the corrupted dataset was not named"
  grep -q "resumed from step 2" "$SCRATCH/damaged.log" || fail "did not fall back to step 2"
}

# The cases are independent (a directory each) and mostly wait (mpirun's start, fsync, the
# killed rank's peers): the three runs first, then the 33 cases four at a time.
run_cases 3 "full_run 2" "full_run 4" keep_all_run
cases=(damaged_case)
for np in 2 4; do
  for async in true $([ "$np" = 2 ] && echo false); do
    for phase in staged write close rename latest prune; do
      cases+=("crash_case $np 0 $phase $async")
      if [ "$np" = 2 ] || [ "$phase" = write ] || [ "$phase" = close ]; then
        cases+=("crash_case $np $((np - 1)) $phase $async")
      fi
    done
  done
done
run_cases 4 "${cases[@]}"
