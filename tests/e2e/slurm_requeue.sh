#!/usr/bin/env bash
# shellcheck shell=bash
# jobs/train.slurm on a real (single-node, localhost) SLURM: the job is preempted with SIGUSR2
# to its tasks, the trainer saves and exits 85, the script requeues the job, the requeued job
# resumes from the checkpoint and completes, with the same final loss as an uninterrupted run.
# SKIPs (exit 77) only where this machine cannot have SLURM (not root, no apt-get, or apt cannot
# get slurm-wlm/munge: tests/support/slurm_cluster.sh); SLURM failing to install from a reachable
# repository, or to come up once installed, is a failure like any other.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/slurm_cluster.sh"
slurm_ensure_installed  # first, so that a SKIP costs nothing

STEPS=1000  # about 2 s of training on 2 idle cores: time to preempt it after its first checkpoint
# The model: the repo's config, shrunk by the tiny test flags; the data comes from MPITRAIN_DATA.
CONFIG=$SOURCE_DIR/input/tiny-gpt2.ini
# shellcheck disable=SC2046
set -- $(tiny_model_args) $(val_args) --steps "$STEPS" --save-interval 50

run_trainer 2 "$SCRATCH/full.log" --config "$CONFIG" --train-data "$DATA_DIR/train.h5" \
  --val-data "$DATA_DIR/val.h5" "$@" --out-dir "$SCRATCH/full"
[ "$rc" = 0 ] || { cat "$SCRATCH/full.log"; fail "uninterrupted run exited $rc"; }
want=$(metric "$SCRATCH/full/metrics.jsonl" loss | tail -1)

slurm_cluster_start

OUT=$SCRATCH/slurm-run
LOG=$SCRATCH/job.out
jobid=
dump() {
  set +e
  echo "----- job output $LOG -----"; cat "$LOG"
  [ -z "$jobid" ] || { echo "----- scontrol show job -----"; timeout 5 scontrol show job "$jobid"; }
  for f in slurmctld.log slurmd.log; do echo "----- $f -----"; tail -20 "$SLURM_TMP/$f"; done
} >&2
die() { dump; fail "$*"; }
job_field() {  # job_field NAME: JobState, Restarts, ExitCode, Reason ... of the job
  timeout 5 scontrol show job "$jobid" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1
}

t0=$SECONDS
# The job script is what tools/mkjob makes for this one-node "cluster": its header, then the body
# of jobs/train.slurm.
printf 'scheduler = slurm\nnodes = 1\ncores_per_node = 2\nranks_per_node = 2\ntime_limit = 00:10:00\nsignal_seconds = 60\n' \
  > "$SCRATCH/cluster.ini"
"$SOURCE_DIR/tools/mkjob" --cluster "$SCRATCH/cluster.ini" --config "$CONFIG" > "$SCRATCH/job.slurm" \
  || die "tools/mkjob failed"
jobid=$(sbatch --parsable --job-name=mpitrain-test --nodes=1 --ntasks=2 --cpus-per-task=1 \
  --time=10:00 --output="$LOG" --chdir="$SCRATCH" \
  --export="ALL,OMP_NUM_THREADS=1,MPITRAIN_BUILD=$BUILD_DIR,MPITRAIN_CONFIG=$CONFIG,MPITRAIN_DATA=$DATA_DIR,MPITRAIN_OUT=$OUT,MPITRAIN_ARGS=$*" \
  "$SCRATCH/job.slurm") || die "sbatch failed"
jobid=${jobid%%;*}
echo "submitted job $jobid"

# Running, with a committed checkpoint: preempt it (SIGUSR2 to the tasks of its steps, not the
# batch shell: what --signal=USR2@<sec> without B: does at the time limit).
deadline=$((SECONDS + 30))
until [ -s "$OUT/checkpoints/latest" ] && [ "$(job_field JobState)" = RUNNING ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "no checkpoint of a running job after 30 s (state $(job_field JobState))"
  case $(job_field JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY)
    die "job ended ($(job_field JobState)) before it could be preempted";; esac
  sleep 0.1
done
scancel --signal=USR2 "$jobid" || die "scancel --signal=USR2 failed"
echo "sent SIGUSR2 to job $jobid after $((SECONDS - t0)) s"

# The trainer stops (85), the script requeues, the job runs again and completes.
deadline=$((SECONDS + 150))
while :; do
  state=$(job_field JobState)
  case $state in
    COMPLETED) break ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) die "job ended $state" ;;
    PENDING)  # a requeued job waits for its BeginTime; let it start sooner, but not within
      # 3 s of the requeue: slurmd refuses a launch whose credential is not newer (1 s clock)
      # than the revocation of the killed run ("Job credential revoked").
      if [ "$(job_field Reason)" = BeginTime ]; then
        pending_since=${pending_since:-$SECONDS}
        if [ $((SECONDS - pending_since)) -ge 3 ] && [ -z "${started_early:-}" ]; then
          echo "requeued job waits for its BeginTime: scontrol update StartTime=now"
          timeout 5 scontrol update JobId="$jobid" StartTime=now > /dev/null 2>&1 || true
          started_early=1
        fi
      fi ;;
  esac
  [ "$SECONDS" -lt "$deadline" ] || die "job not COMPLETED 150 s after the signal (state $state)"
  sleep 0.2
done
echo "job $jobid COMPLETED after $((SECONDS - t0)) s"

grep -q "stopping after step .*(signal).*exit 85" "$LOG" || die "no 'stopping after step' (signal) line: exit 85 path not taken"
grep -q "requeueing job $jobid" "$LOG" || die "the script did not requeue after exit 85"
grep -q "restart 1 " "$LOG" || die "no second run with SLURM_RESTART_COUNT=1"
grep -q "resumed from step" "$LOG" || die "the requeued job did not resume from the checkpoint"
[ "$(job_field Restarts)" = 1 ] || die "scontrol shows Restarts=$(job_field Restarts), expected 1"
[ "$(job_field ExitCode)" = 0:0 ] || die "job ExitCode $(job_field ExitCode), expected 0:0"
grep "stopping after step\|resumed from step\|mpitrain:" "$LOG"

got=$(metric "$OUT/metrics.jsonl" loss | tail -1)
echo "ok: SLURM USR2 -> exit 85 -> requeue -> resume -> COMPLETED: final loss $got (uninterrupted $want)"
[ "$got" = "$want" ] || die "final loss $got differs from the uninterrupted run's $want"
[ "$(metric "$OUT/metrics.jsonl" loss | wc -l)" = "$STEPS" ] || die "metrics.jsonl does not hold $STEPS steps once each"
