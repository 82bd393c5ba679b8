#!/usr/bin/env bash
# shellcheck shell=bash
# srun on a real (single-node, localhost) SLURM, signalled itself as a user or `timeout` would.
# srun kills the step on its own SIGTERM/SIGINT ("forcing job termination", tasks SIGKILLed, exit
# 137, nothing saved) and forwards SIGUSR2; so SIGUSR2 to srun, and SIGTERM and SIGINT (Ctrl-C) to
# jobs/save-on-stop around srun, must each end in srun's exit 85, a committed, verified checkpoint
# of a step no earlier than the steps logged at the signal, no .tmp, and a resume from it. SKIPs
# (exit 77) as tests/e2e/slurm_requeue.sh does, only where this machine cannot have SLURM.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/slurm_cluster.sh"
slurm_ensure_installed  # first, so that a SKIP costs nothing
slurm_cluster_start

# Steps for half an hour: the signal ends the run. With 100000 (3 min) a loaded CI machine once
# let the run finish before the poll that waits for its third step saw it (stop_launcher).
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 1000000
stop_args=("$@")
SRUN=(srun --mpi=pmix --nodes=1 --ntasks=2 --cpus-per-task=1 --time=5:00)

stop_launcher srun_usr2 USR2 "${SRUN[@]}"
stop_launcher save_on_stop_srun_term TERM "$SOURCE_DIR/jobs/save-on-stop" "${SRUN[@]}"
stop_launcher save_on_stop_srun_int INT "$SOURCE_DIR/jobs/save-on-stop" "${SRUN[@]}"
grep -q "scancel --signal=USR2 [0-9]" "$SCRATCH/srun_usr2.log" || fail "srun: no 'scancel --signal=USR2 <jobid>' hint"
! grep -q "scancel --signal=USR2" "$SCRATCH/save_on_stop_srun_int.log" || fail "the hint under jobs/save-on-stop"
echo "ok: the hint under srun names the job, and not under jobs/save-on-stop"
