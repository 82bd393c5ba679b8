#!/usr/bin/env bash
# tools/mkjob: job scripts from a cluster description (input/cluster-example.ini). The SLURM
# test submits one to a real SLURM; here: the headers for both schedulers, the body shared with
# jobs/, settings that the environment can still override, and bad input.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
mkjob="$SOURCE_DIR/tools/mkjob"
cluster="$SOURCE_DIR/input/cluster-example.ini"
"$mkjob" --cluster "$cluster" --config "$SOURCE_DIR/input/tiny-gpt2.ini" --args "--steps 9" > "$SCRATCH/job.slurm"
bash -n "$SCRATCH/job.slurm" || fail "the SLURM script does not parse"
for line in "#SBATCH --nodes=2" "#SBATCH --ntasks-per-node=8" "#SBATCH --cpus-per-task=12" \
            "#SBATCH --gpus-per-node=8" "#SBATCH --time=24:00:00" "#SBATCH --partition=gpu" \
            "#SBATCH --account=myproject" "#SBATCH --signal=USR2@300" "#SBATCH --requeue" \
            "export MPITRAIN_CONFIG=\${MPITRAIN_CONFIG-$SOURCE_DIR/input/tiny-gpt2.ini}" 'export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME-ib0}'; do
  grep -qxF -- "$line" "$SCRATCH/job.slurm" || fail "SLURM script lacks: $line"
done
cmp -s <(sed -n '/^set -uo pipefail/,$p' "$SCRATCH/job.slurm") \
       <(sed -n '/^set -uo pipefail/,$p' "$SOURCE_DIR/jobs/train.slurm") || fail "SLURM body differs from jobs/train.slurm"
# the first command comes after every #SBATCH line (sbatch stops reading them at the first command)
last_header=$(grep -n '^#SBATCH' "$SCRATCH/job.slurm" | tail -1 | cut -d: -f1)
first_command=$(grep -nv '^#' "$SCRATCH/job.slurm" | head -1 | cut -d: -f1)
[ "$last_header" -lt "$first_command" ] || fail "a command precedes an #SBATCH line"
(unset MPITRAIN_ARGS; eval "$(grep '^export MPITRAIN_ARGS' "$SCRATCH/job.slurm")"; [ "$MPITRAIN_ARGS" = "--device cuda --steps 9" ]) \
  || fail "MPITRAIN_ARGS default wrong (GPU nodes: --device cuda first)"
# CPU nodes, or arguments that name the device: the arguments as given.
sed 's/^gpus_per_node.*/gpus_per_node = 0/; s/^ranks_per_node.*/ranks_per_node = 4/' "$cluster" > "$SCRATCH/cpu.ini"
"$mkjob" --cluster "$SCRATCH/cpu.ini" --args "--steps 9" > "$SCRATCH/cpu.slurm"
grep -qxF 'export MPITRAIN_ARGS=${MPITRAIN_ARGS---steps\ 9}' "$SCRATCH/cpu.slurm" ||
  { grep MPITRAIN_ARGS "$SCRATCH/cpu.slurm"; fail "CPU nodes: the arguments changed"; }
! grep -q -- '--gpus-per-node' "$SCRATCH/cpu.slurm" || fail "CPU nodes: a GPU request"
"$mkjob" --cluster "$cluster" --args "--device cpu" > "$SCRATCH/own.slurm"
(unset MPITRAIN_ARGS; eval "$(grep '^export MPITRAIN_ARGS' "$SCRATCH/own.slurm")"; [ "$MPITRAIN_ARGS" = "--device cpu" ]) \
  || fail "an explicit --device was overridden"
(export MPITRAIN_ARGS=mine; eval "$(grep '^export MPITRAIN_ARGS' "$SCRATCH/job.slurm")"; [ "$MPITRAIN_ARGS" = mine ]) \
  || fail "the environment at submission does not override the script's settings"

"$mkjob" --cluster "$cluster" --scheduler pbs > "$SCRATCH/job.pbs"
bash -n "$SCRATCH/job.pbs" || fail "the PBS script does not parse"
for line in "#PBS -l select=2:ncpus=96:ngpus=8:mpiprocs=8:ompthreads=12" "#PBS -l walltime=24:00:00" \
            "#PBS -q gpu" "#PBS -A myproject" "#PBS -r y"; do
  grep -qxF -- "$line" "$SCRATCH/job.pbs" || fail "PBS script lacks: $line"
done

expect_2() {  # expect_2 TEXT ARGS...
  local text=$1; shift
  set +e; "$mkjob" "$@" > /dev/null 2> "$SCRATCH/err"; local rc=$?; set -e
  [ $rc = 2 ] && grep -qF -- "$text" "$SCRATCH/err" || { cat "$SCRATCH/err"; fail "expected exit 2 with '$text'"; }
}
expect_2 "cannot read cluster file" --cluster "$SCRATCH/none.ini"
expect_2 "scheduler must be slurm or pbs" --cluster "$cluster" --scheduler lsf
printf 'nodes = two\n' > "$SCRATCH/bad.ini"
expect_2 "nodes must be a whole number" --cluster "$SCRATCH/bad.ini"
echo "ok: mkjob makes SLURM and PBS scripts; bad input exits 2"
