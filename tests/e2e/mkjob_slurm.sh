#!/usr/bin/env bash
# shellcheck shell=bash
# A tools/mkjob script with sharded data on a real (single-node, localhost) SLURM: the shards
# given once as a quoted glob in --args (as a user writes it), checked when the script is made,
# reach the trainer once (no "--train-data is given twice" after the queue wait); the job
# completes, trained on both shards. SKIPs (exit 77) only where this machine cannot have SLURM
# (tests/support/slurm_cluster.sh, as slurm_requeue.sh).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/slurm_cluster.sh"
slurm_ensure_installed  # first, so that a SKIP costs nothing

# Two shards: the sample's training file twice (a list is one corpus, concatenated).
mkdir -p "$SCRATCH/shards"
cp "$DATA_DIR/train.h5" "$SCRATCH/shards/train_0.h5"
cp "$DATA_DIR/train.h5" "$SCRATCH/shards/train_1.h5"
cd "$SCRATCH" || fail "no scratch directory"
printf 'scheduler = slurm\nnodes = 1\ncores_per_node = 2\nranks_per_node = 2\ntime_limit = 00:10:00\n' \
  > cluster.ini
"$SOURCE_DIR/tools/mkjob" --cluster cluster.ini --config "$SOURCE_DIR/input/tiny-gpt2.ini" \
  --build "$BUILD_DIR" --out "$SCRATCH/run" \
  --args "$(tiny_model_args) $(val_args) --steps 4 --train-data 'shards/train_*.h5' --val-data $DATA_DIR/val.h5" \
  > job.slurm || fail "tools/mkjob failed"

slurm_cluster_start
LOG=$SCRATCH/job.out
jobid=
die() {
  { echo "----- job script -----"; sed '/^set -uo pipefail/,$d' job.slurm
    echo "----- job output -----"; cat "$LOG"
    for f in slurmctld.log slurmd.log; do echo "----- $f -----"; tail -20 "$SLURM_TMP/$f"; done
  } >&2
  fail "$*"
}
job_field() {  # job_field NAME: JobState, ExitCode ... of the job
  timeout 5 scontrol show job "$jobid" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1
}
jobid=$(sbatch --parsable --output="$LOG" --export="ALL,OMP_NUM_THREADS=1" job.slurm) || die "sbatch failed"
jobid=${jobid%%;*}
deadline=$((SECONDS + 150))  # 4 steps: seconds on an idle machine
until case $(job_field JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) true ;; *) false ;; esac; do
  [ "$SECONDS" -lt "$deadline" ] || die "job $jobid not done after 150 s (state $(job_field JobState))"
  sleep 0.2
done
if [ "$(job_field JobState)" != COMPLETED ] || [ "$(job_field ExitCode)" != 0:0 ]; then
  die "job $jobid: $(job_field JobState), exit $(job_field ExitCode)"
fi
grep -q "tokens of training data in 2 files" "$LOG" || die "the trainer did not train on both shards"
[ "$(metric "$SCRATCH/run/metrics.jsonl" loss | wc -l)" = 4 ] || die "metrics.jsonl does not hold 4 steps"
echo "ok: a mkjob script with sharded data ran through SLURM: $(grep -o '[0-9]* tokens of training data in 2 files' "$LOG")"
