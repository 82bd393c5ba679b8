#!/usr/bin/env bash
# shellcheck shell=bash
# The job scripts without a batch system: all of jobs/ parse (bash -n); jobs/run-until-done.sh
# reruns a command while it exits 85 (a fake command, then the real trainer stopping on its time
# limit until 400 steps are done, bit-exact with an uninterrupted run); jobs/train.pbs runs its
# mpiexec line with the environment PBS would give it, and on exit 85 resubmits itself with the
# same output directory (qsub replaced by a recorder), and that resubmission completes the run.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
JOBS=$SOURCE_DIR/jobs

for f in "$JOBS/train.slurm" "$JOBS/train.pbs" "$JOBS/run-until-done.sh"; do
  bash -n "$f" || fail "bash -n $f"
done
echo "ok: bash -n of the job scripts"

# --- run-until-done.sh with a fake command: 85, 85, 0.
cat > "$SCRATCH/fake.sh" <<'EOF'
n=$(( $(cat "$1" 2> /dev/null || echo 0) + 1 )); echo "$n" > "$1"
[ "$n" -ge 3 ] && exit 0
exit 85
EOF
set +e
bash "$JOBS/run-until-done.sh" -- bash "$SCRATCH/fake.sh" "$SCRATCH/count1" > "$SCRATCH/rud1.log" 2>&1; rc=$?
set -e
if [ "$rc" != 0 ] || [ "$(cat "$SCRATCH/count1")" != 3 ]; then cat "$SCRATCH/rud1.log"; fail "run-until-done: rc $rc after $(cat "$SCRATCH/count1") tries, expected 0 after 3"; fi
set +e
bash "$JOBS/run-until-done.sh" 2 -- bash "$SCRATCH/fake.sh" "$SCRATCH/count2" > "$SCRATCH/rud2.log" 2>&1; rc=$?
set -e
if [ "$rc" != 85 ] || [ "$(cat "$SCRATCH/count2")" != 2 ]; then cat "$SCRATCH/rud2.log"; fail "run-until-done 2: rc $rc after $(cat "$SCRATCH/count2") tries, expected 85 after 2"; fi
set +e
bash "$JOBS/run-until-done.sh" 5 -- bash -c 'exit 3' > "$SCRATCH/rud3.log" 2>&1; rc=$?
bash "$JOBS/run-until-done.sh" 5 bash -c 'exit 0' > "$SCRATCH/rud4.log" 2>&1; rc4=$?
set -e
[ "$rc" = 3 ] || { cat "$SCRATCH/rud3.log"; fail "run-until-done: a failing command gave $rc, expected 3"; }
[ "$rc4" = 2 ] || fail "run-until-done without -- gave $rc4, expected 2 (usage)"
echo "ok: run-until-done reruns on 85 (3 tries), stops at max tries (85), passes failures through"

# --- run-until-done.sh around the real trainer, stopping on its time limit each try.
STEPS=400
# shellcheck disable=SC2046
set -- $(tiny_args) --steps "$STEPS" --save-interval 100
run_trainer 2 "$SCRATCH/full.log" "$@" --out-dir "$SCRATCH/full"
[ "$rc" = 0 ] || { cat "$SCRATCH/full.log"; fail "uninterrupted run exited $rc"; }
want=$(metric "$SCRATCH/full/metrics.jsonl" loss | tail -1)
# 0.005 min = 0.3 s a try: at most ~150-300 steps, so 2 tries or more (8-20 on a busy machine).
# shellcheck disable=SC2086
timeout 300 bash "$JOBS/run-until-done.sh" 60 -- $MPIRUN -np 2 "$TRAINER" "$@" \
  --exit-after-minutes 0.005 --resume auto --out-dir "$SCRATCH/rud" > "$SCRATCH/rud.log" 2>&1 \
  || { tail -30 "$SCRATCH/rud.log"; fail "run-until-done around the trainer did not end with 0"; }
tries=$(grep -c "^run-until-done: try" "$SCRATCH/rud.log")
got=$(metric "$SCRATCH/rud/metrics.jsonl" loss | tail -1)
echo "ok: run-until-done + trainer: $tries tries, final loss $got (uninterrupted $want)"
[ "$tries" -ge 2 ] || fail "the trainer finished in one try: the time limit did not stop it"
grep -q "resumed from step" "$SCRATCH/rud.log" || fail "no try resumed from a checkpoint"
[ "$got" = "$want" ] || fail "final loss $got differs from the uninterrupted run's $want"
[ "$(metric "$SCRATCH/rud/metrics.jsonl" loss | wc -l)" = "$STEPS" ] || fail "metrics.jsonl does not hold $STEPS steps once each"

# --- train.pbs: its mpiexec line with a PBS-like environment; qsub replaced by a recorder.
printf 'localhost\nlocalhost\n' > "$SCRATCH/nodefile"
cat > "$SCRATCH/qsub" <<'EOF'
#!/bin/bash
echo "args: $*" > "$QSUB_RECORD"; echo "MPITRAIN_OUT=$MPITRAIN_OUT" >> "$QSUB_RECORD"; echo 2.test
EOF
chmod +x "$SCRATCH/qsub"
pbs_run() {  # pbs_run LOG JOBID EXTRA-ARGS: the job script as PBS would start it
  set +e
  (cd / && env PBS_O_WORKDIR="$SCRATCH" PBS_JOBID="$2" PBS_NODEFILE="$SCRATCH/nodefile" \
     OMP_NUM_THREADS=1 MPITRAIN_BUILD="$BUILD_DIR" MPITRAIN_CONFIG= MPITRAIN_DATA="$DATA_DIR" \
     MPITRAIN_ARGS="$PBS_ARGS $3" MPITRAIN_MPIEXEC="$MPIRUN" MPITRAIN_QSUB="$SCRATCH/qsub" \
     QSUB_RECORD="$SCRATCH/qsub.rec" bash "$JOBS/train.pbs") > "$1" 2>&1
  rc=$?
  set -e
}
PBS_ARGS=$(tiny_model_args)
PBS_ARGS="$PBS_ARGS --steps 60 --save-interval 100"
pbs_run "$SCRATCH/pbs1.log" 1.test "--exit-at-step 20"
[ "$rc" = 0 ] || { cat "$SCRATCH/pbs1.log"; fail "train.pbs: exit $rc after the trainer's 85, expected 0 (resubmitted)"; }
grep -q "stopping after step 20" "$SCRATCH/pbs1.log" || { cat "$SCRATCH/pbs1.log"; fail "train.pbs: the trainer did not stop at step 20"; }
[ -f "$SCRATCH/qsub.rec" ] || { cat "$SCRATCH/pbs1.log"; fail "train.pbs did not resubmit itself on exit 85"; }
grep -q "^args: -V -W depend=afterany:1.test .*train.pbs$" "$SCRATCH/qsub.rec" || { cat "$SCRATCH/qsub.rec"; fail "train.pbs: unexpected qsub arguments"; }
grep -qx "MPITRAIN_OUT=$SCRATCH/runs/pbs-1.test" "$SCRATCH/qsub.rec" || { cat "$SCRATCH/qsub.rec"; fail "train.pbs: the resubmission does not keep the output directory"; }
# The resubmitted job: a new job id, MPITRAIN_OUT as recorded.
rm -f "$SCRATCH/qsub.rec"
export MPITRAIN_OUT=$SCRATCH/runs/pbs-1.test
pbs_run "$SCRATCH/pbs2.log" 2.test ""
unset MPITRAIN_OUT
[ "$rc" = 0 ] || { cat "$SCRATCH/pbs2.log"; fail "train.pbs resubmission exited $rc"; }
grep -q "resumed from step 20" "$SCRATCH/pbs2.log" || { cat "$SCRATCH/pbs2.log"; fail "train.pbs resubmission did not resume from step 20"; }
[ ! -f "$SCRATCH/qsub.rec" ] || fail "train.pbs resubmitted a finished run"
[ "$(metric "$SCRATCH/runs/pbs-1.test/metrics.jsonl" loss | wc -l)" = 60 ] || fail "train.pbs: metrics.jsonl does not hold 60 steps"
echo "ok: train.pbs: mpiexec -np 2 -machinefile \$PBS_NODEFILE, exit 85 -> qsub -V -W depend=afterany -> resumed and done"
