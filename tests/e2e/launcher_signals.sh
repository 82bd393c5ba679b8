#!/usr/bin/env bash
# A stop sent to the launcher, not the ranks, ends in a committed checkpoint and exit 85 from the
# launcher, on every documented route (README "Stopping a run"): Ctrl-C (SIGINT) and SIGTERM to
# jobs/save-on-stop and to jobs/run-until-done.sh around mpirun, SIGUSR2 to bare mpirun. Open
# MPI's mpirun itself kills the ranks unsaved on SIGINT/SIGTERM (exit 1) and passes on only
# SIGUSR1/2, hence the wrappers. Each case: exit 85, checkpoints/latest of a step no earlier than
# the steps logged at the signal, verified, no .tmp, and the run resumes from it. Then a storm of
# SIGTERMs at the ranks until they have exited: the handlers stay until the process ends, so a
# signal after the summary cannot turn the exit 85 into 143. (srun: tests/e2e/slurm_signals.sh.)
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
JOBS=$SOURCE_DIR/jobs
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 100000
args=("$@")

# stop_case NAME SIGNAL LAUNCHER...: runs the trainer under LAUNCHER, signals the launcher's pid
# once 3 steps are logged, checks the stop. env --default-signal: a job started with & from a
# script ignores SIGINT, and a signal ignored at entry cannot be trapped; a shell does not do
# that to a command in the foreground.
stop_case() {
  local name=$1 sig=$2; shift 2
  local out=$SCRATCH/$name log=$SCRATCH/$name.log
  set +e
  env --default-signal=INT "$@" "$TRAINER" "${args[@]}" --out-dir "$out" > "$log" 2>&1 &
  local pid=$!
  set -e
  wait_for_steps "$pid" "$out" 3 "$log"
  kill -s "$sig" "$pid"
  set +e
  wait "$pid"
  local code=$?
  set -e
  expect_stop_saved "$name" "$code" "$out" "$log" "$steps_seen" "${args[@]}"
}

# shellcheck disable=SC2086
{
  stop_case save_on_stop_int INT "$JOBS/save-on-stop" $MPIRUN -np 2
  stop_case save_on_stop_term TERM "$JOBS/save-on-stop" $MPIRUN -np 2
  stop_case mpirun_usr2 USR2 $MPIRUN -np 2
  stop_case run_until_done_int INT "$JOBS/run-until-done.sh" 3 -- $MPIRUN -np 2
  stop_case run_until_done_term TERM "$JOBS/run-until-done.sh" 3 -- $MPIRUN -np 2
}
grep -q "^run-until-done: stopped by a signal" "$SCRATCH/run_until_done_int.log" \
  || fail "run-until-done did not end its loop on SIGINT"
[ "$(grep -c '^run-until-done: try' "$SCRATCH/run_until_done_term.log")" = 1 ] \
  || fail "run-until-done started another try after SIGTERM"
grep -q "kill -USR2 [0-9]" "$SCRATCH/mpirun_usr2.log" || fail "bare mpirun: no 'kill -USR2 <pid>' hint"
! grep -q "kill -USR2" "$SCRATCH/save_on_stop_int.log" || fail "the hint under jobs/save-on-stop"
echo "ok: the hint names mpirun's pid, and not under jobs/save-on-stop"

# The storm: SIGTERM to both ranks in a tight loop from their first step until mpirun has
# ended (through the stop, the save, the summary, MPI_Finalize and the exit of each rank).
for trial in 1 2 3; do
  log=$SCRATCH/storm$trial.log
  set +e
  $MPIRUN -np 2 "$TRAINER" "${args[@]}" --out-dir "$SCRATCH/storm$trial" > "$log" 2>&1 &
  launcher=$!
  wait_for_steps "$launcher" "$SCRATCH/storm$trial" 1 "$log"
  ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
  sent=0
  while kill -0 "$launcher" 2> /dev/null; do
    # shellcheck disable=SC2086
    kill -TERM $ranks 2> /dev/null
    sent=$((sent + 1))
  done
  wait "$launcher"
  code=$?
  set -e
  [ "$code" = 85 ] || { cat "$log"; fail "storm $trial: exit code $code after $sent SIGTERMs, expected 85"; }
  echo "ok: storm $trial: $sent SIGTERMs to the ranks until they exited, exit 85"
done
