#!/usr/bin/env bash
# Saves in the background (--async-save true): training goes on while the writer thread writes
# and commits, and nothing of the synchronous save's promises is lost.
#   1. Bit-exact: 10 steps with a save every 2, async and sync, write the same checkpoints bit
#      for bit (h5diff of every group but the manifest) and the same losses; killed (kill -9 of
#      rank 1 in its writer thread, during the write of step 6) and resumed, the run ends with
#      the uninterrupted run's losses and state.
#   2. A save in flight when SIGTERM comes commits before exit 85: rank 0's writer pauses 3 s in
#      the commit of step 2 (MPITRAIN_FAULT=delay, after the rename, before `latest`), the
#      signal is sent then; the run must report step 2 saved, then stop with exit 85 at a later
#      step whose checkpoint `latest` names, and resume to the uninterrupted result.
#   3. The metrics: checkpoint_stall_ms in the save steps' following records, checkpoint_write_ms
#      and checkpoint_bytes once per commit, the bytes = the tensor data of the file (h5py), and
#      report.json's totals.
#   4. --async-save auto (the default) on 2 ranks of 1 thread pinned to 2 CPUs, which leaves no
#      CPU to a background writer: the start-up line says so; the saves are synchronous until one
#      takes 2 s (rank 0 pauses 3 s in the write of step 4), then in the background; the losses
#      are part 1's.
# Kills at every phase of the commit, in the writer thread, are crash_safety.sh's.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 10 --save-interval 2 --keep-last 0

state_groups() {  # state_groups CHECKPOINT_H5: every group but the manifest
  h5ls "$1" | awk '$2 == "Group" && $1 != "manifest" {print $1}'
}
same_state() {  # same_state WHAT A.h5 B.h5
  for g in $(state_groups "$2"); do
    h5diff "$2" "$3" "/$g" "/$g" > "$SCRATCH/diff.log" 2>&1 ||
      { head -20 "$SCRATCH/diff.log"; fail "$1: /$g differs"; }
  done
}

# 1. Async and sync write the same checkpoints; a kill and a resume change nothing.
run_trainer 2 "$SCRATCH/async.log" "$@" --out-dir "$SCRATCH/async" --async-save true
[ "$rc" = 0 ] || { cat "$SCRATCH/async.log"; fail "async run exited $rc"; }
grep -q "saved checkpoint step 10 in .* in the background" "$SCRATCH/async.log" ||
  { cat "$SCRATCH/async.log"; fail "the async run did not save in the background"; }
run_trainer 2 "$SCRATCH/sync.log" "$@" --out-dir "$SCRATCH/sync" --async-save false
[ "$rc" = 0 ] || { cat "$SCRATCH/sync.log"; fail "sync run exited $rc"; }
grep -q "in the background" "$SCRATCH/sync.log" && fail "--async-save false saved in the background"
for step in 2 4 6 8 10; do
  dir=$(printf 'checkpoints/step-%08d' "$step")
  same_state "async vs sync, step $step" "$SCRATCH/async/$dir/checkpoint.h5" \
    "$SCRATCH/sync/$dir/checkpoint.h5"
done
metric "$SCRATCH/async/metrics.jsonl" loss > "$SCRATCH/async.loss"
metric "$SCRATCH/sync/metrics.jsonl" loss > "$SCRATCH/sync.loss"
cmp -s "$SCRATCH/async.loss" "$SCRATCH/sync.loss" || fail "async and sync runs' losses differ"
echo "ok: async and sync saves hold the same state bit for bit at steps 2-10, same losses"

fault="kill:phase=write:rank=1:step=6"
MPITRAIN_FAULT=$fault run_trainer 2 "$SCRATCH/killed.log" "$@" --out-dir "$SCRATCH/killed" \
  --async-save true
[ "$rc" != 0 ] || fail "the run killed at $fault exited 0"
grep -q "fault injection: rank 1 kills itself at phase write of step 6" "$SCRATCH/killed.log" ||
  { cat "$SCRATCH/killed.log"; fail "no kill at $fault"; }
run_trainer 2 "$SCRATCH/resumed.log" "$@" --out-dir "$SCRATCH/killed" --resume auto \
  --async-save true
[ "$rc" = 0 ] || { cat "$SCRATCH/resumed.log"; fail "resume after the kill exited $rc"; }
grep -q "resumed from step 4" "$SCRATCH/resumed.log" ||
  { grep resumed "$SCRATCH/resumed.log"; fail "did not resume from step 4, the newest committed"; }
metric "$SCRATCH/killed/metrics.jsonl" loss > "$SCRATCH/killed.loss"
cmp -s "$SCRATCH/async.loss" "$SCRATCH/killed.loss" ||
  { paste "$SCRATCH/async.loss" "$SCRATCH/killed.loss"; fail "killed + resumed losses differ"; }
same_state "killed + resumed vs uninterrupted" "$SCRATCH/async/checkpoints/step-00000010/checkpoint.h5" \
  "$SCRATCH/killed/checkpoints/step-00000010/checkpoint.h5"
echo "ok: kill -9 of rank 1 while its writer wrote step 6 -> resumed from step 4 -> the same" \
     "10 losses and final state bit for bit"

# 2. SIGTERM while a save is in flight.
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 100 --save-interval 2 --keep-last 0 --async-save true
run_trainer 2 "$SCRATCH/long.log" "$@" --out-dir "$SCRATCH/long" --save-interval 0
[ "$rc" = 0 ] || { cat "$SCRATCH/long.log"; fail "uninterrupted 100 steps exited $rc"; }
fault="delay:phase=latest:rank=0:step=2:seconds=3"
MPITRAIN_FAULT=$fault run_trainer_signalled 2 "$SCRATCH/term.log" \
  'grep -q "fault injection: rank 0 pauses 3 s at phase latest of step 2" "$SCRATCH/term.log"' \
  "$@" --out-dir "$SCRATCH/term"
[ "$ready_seen" = 1 ] || { cat "$SCRATCH/term.log"; fail "the writer never paused at step 2"; }
grep -E "saved|stopping|pauses" "$SCRATCH/term.log" || true
[ "$rc" = 85 ] || { cat "$SCRATCH/term.log"; fail "SIGTERM during a save: exit $rc, expected 85"; }
stop=$(sed -n 's/^stopping after step \([0-9]*\) .*/\1/p' "$SCRATCH/term.log")
[ -n "$stop" ] || fail "no stop message"
saved2=$(grep -n "saved checkpoint step 2 " "$SCRATCH/term.log" | cut -d: -f1)
stopped=$(grep -n "^stopping after step" "$SCRATCH/term.log" | cut -d: -f1)
[ -n "$saved2" ] && [ "$saved2" -lt "$stopped" ] || fail "step 2's save was not reported before the stop"
grep -q "saved checkpoint step $stop " "$SCRATCH/term.log" || fail "the stop's save of step $stop not reported"
ckpts=$SCRATCH/term/checkpoints
[ "$(cat "$ckpts/latest")" = "$(printf 'step-%08d' "$stop")" ] ||
  fail "latest names $(cat "$ckpts/latest"), not the stop's step $stop"
[ -f "$ckpts/step-00000002/checkpoint.h5" ] || fail "step 2, in flight at the signal, not committed"
ls "$ckpts" | grep -qE '\.tmp$|\.old$|\.pruned$' && fail "leftovers in $ckpts: $(ls "$ckpts")"
run_trainer 2 "$SCRATCH/term-b.log" "$@" --out-dir "$SCRATCH/term" --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/term-b.log"; fail "resume after SIGTERM exited $rc"; }
want=$(metric "$SCRATCH/long/metrics.jsonl" loss | tail -1)
got=$(metric "$SCRATCH/term/metrics.jsonl" loss | tail -1)
[ "$got" = "$want" ] || fail "after SIGTERM + resume the final loss is $got, uninterrupted $want"
echo "ok: SIGTERM while step 2's commit paused -> step 2 committed, stop at step $stop saved," \
     "exit 85 -> resume: final loss $got = uninterrupted"

# 3. The metrics of the async run of part 1 (saves at 2, 4, 6, 8, 10). A checkpoint's tensor
# data: 4 bytes an element of every dataset but the manifest (h5ls -r: "/params/wte Dataset
# {512, 64}").
want=$(h5ls -r "$SCRATCH/async/checkpoints/step-00000002/checkpoint.h5" |
  awk '$2 == "Dataset" { n = 4; s = $0; sub(/.*\{/, "", s); sub(/\}.*/, "", s);
                         k = split(s, d, ", "); for (i = 1; i <= k; i++) n *= d[i]; total += n }
       END { print total }')
python3 - "$SCRATCH/async" "$want" <<'EOF'
import json, sys
run, want = sys.argv[1], int(sys.argv[2])
steps = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"loss"' in l]
stalls = [r["step"] for r in steps if r["checkpoint_stall_ms"] > 0]
# A save after step s is taken after s's record: its stall is in the record of s + 1.
assert stalls == [3, 5, 7, 9], "checkpoint_stall_ms > 0 in the records of steps %s" % stalls
writes = [r for r in steps if r["checkpoint_write_ms"] > 0]
assert all(r["checkpoint_bytes"] == want for r in writes), [r["checkpoint_bytes"] for r in writes]
assert sum(r["checkpoint_bytes"] for r in steps) in (3 * want, 4 * want)  # 10's: after step 10
rep = json.load(open(run + "/report.json"))["checkpoints"]
assert rep["written"] == 5 and rep["bytes"] == 5 * want, rep
assert rep["write_seconds"] > 0 and rep["stall_seconds"] > 0, rep
print("ok: metrics: stalls after steps %s, %d commits of %d bytes each in the step records, "
      "report %s" % ([s - 1 for s in stalls], len(writes), want, rep))
EOF

# 4. --async-save auto on 2 ranks x 1 thread on 2 CPUs.
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 10 --save-interval 2 --keep-last 0
fault="delay:phase=write:rank=0:step=4:seconds=3"
MPIRUN="taskset -c 0,1 $MPIRUN" MPITRAIN_FAULT=$fault run_trainer 2 "$SCRATCH/auto.log" "$@" \
  --out-dir "$SCRATCH/auto"
[ "$rc" = 0 ] || { cat "$SCRATCH/auto.log"; fail "the --async-save auto run exited $rc"; }
grep -E "^checkpoints|saved checkpoint" "$SCRATCH/auto.log"
grep -q "^checkpoints: synchronous saves until one takes 2 s or more, then in the background" \
  "$SCRATCH/auto.log" || { cat "$SCRATCH/auto.log"; fail "auto: no start-up line for the saves"; }
grep -q "^saved checkpoint step 2 in [0-9.]* s (" "$SCRATCH/auto.log" ||
  fail "auto: the first save was not synchronous"
grep -qE "^checkpoints: that save took [0-9.]+ s \(2 s or more\): the next ones in the background" \
  "$SCRATCH/auto.log" || fail "auto: no slow save turned the next ones to the background"
grep -q "^saved checkpoint step 10 in .* in the background" "$SCRATCH/auto.log" ||
  fail "auto: the last save was not in the background"
metric "$SCRATCH/auto/metrics.jsonl" loss | cmp -s - "$SCRATCH/sync.loss" ||
  fail "auto: the losses differ from part 1's"
echo "ok: --async-save auto, 2 ranks x 1 thread on 2 CPUs: synchronous saves until a slow one," \
     "then in the background; part 1's losses"
