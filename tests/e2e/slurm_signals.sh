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

# shellcheck disable=SC2046
set -- $(tiny_args) --steps 100000
args=("$@")
SRUN=(srun --mpi=pmix --nodes=1 --ntasks=2 --cpus-per-task=1 --time=5:00)

# srun_case NAME SIGNAL [WRAPPER...]: as launcher_signals.sh's stop_case, with srun.
srun_case() {
  local name=$1 sig=$2; shift 2
  local out=$SCRATCH/$name log=$SCRATCH/$name.log
  set +e
  env --default-signal=INT "$@" "${SRUN[@]}" "$TRAINER" "${args[@]}" --out-dir "$out" > "$log" 2>&1 &
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

srun_case srun_usr2 USR2
srun_case save_on_stop_srun_term TERM "$SOURCE_DIR/jobs/save-on-stop"
srun_case save_on_stop_srun_int INT "$SOURCE_DIR/jobs/save-on-stop"
