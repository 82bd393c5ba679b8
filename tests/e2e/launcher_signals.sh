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
# Steps for half an hour: the signal ends the run. With 100000 (3 min) a loaded CI machine once
# let the run finish before the poll that waits for its third step saw it (stop_launcher).
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 1000000
stop_args=("$@")

# shellcheck disable=SC2086
{
  stop_launcher save_on_stop_int INT "$JOBS/save-on-stop" $MPIRUN -np 2
  stop_launcher save_on_stop_term TERM "$JOBS/save-on-stop" $MPIRUN -np 2
  stop_launcher mpirun_usr2 USR2 $MPIRUN -np 2
  stop_launcher run_until_done_int INT "$JOBS/run-until-done.sh" 3 -- $MPIRUN -np 2
  stop_launcher run_until_done_term TERM "$JOBS/run-until-done.sh" 3 -- $MPIRUN -np 2
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
  $MPIRUN -np 2 "$TRAINER" "${stop_args[@]}" --out-dir "$SCRATCH/storm$trial" > "$log" 2>&1 &
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
