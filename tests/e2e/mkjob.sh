#!/usr/bin/env bash
# tools/mkjob: job scripts from a cluster description (input/cluster-example.ini). The SLURM
# tests submit them to a real SLURM (mkjob_slurm.sh: sharded data); here: the headers for both
# schedulers (memory, whole nodes, binding), the set-up lines, the body shared with jobs/,
# settings that the environment can still override, the data given once and checked, and bad
# input.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
mkjob="$SOURCE_DIR/tools/mkjob"
cluster="$SOURCE_DIR/input/cluster-example.ini"
"$mkjob" --cluster "$cluster" --config "$SOURCE_DIR/input/tiny-gpt2.ini" --args "--steps 9" > "$SCRATCH/job.slurm"
bash -n "$SCRATCH/job.slurm" || fail "the SLURM script does not parse"
for line in "#SBATCH --nodes=2" "#SBATCH --ntasks-per-node=8" "#SBATCH --cpus-per-task=12" \
            "#SBATCH --gpus-per-node=8" "#SBATCH --time=24:00:00" "#SBATCH --partition=gpu" \
            "#SBATCH --account=myproject" "#SBATCH --signal=USR2@300" "#SBATCH --requeue" \
            "#SBATCH --mem=1024G" "#SBATCH --exclusive" "#SBATCH --gpu-bind=closest" \
            'export SLURM_CPU_BIND=${SLURM_CPU_BIND-cores}' \
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
sed 's/^gpus_per_node.*/gpus_per_node = 0/; s/^ranks_per_node.*/ranks_per_node = 4/; /^setup/d' "$cluster" > "$SCRATCH/cpu.ini"
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
for line in "#PBS -l select=2:ncpus=96:ngpus=8:mem=1024gb:mpiprocs=8:ompthreads=12" "#PBS -l walltime=24:00:00" \
            "#PBS -q gpu" "#PBS -A myproject" "#PBS -r y" "#PBS -l place=scatter:excl" \
            'export MPITRAIN_MPIEXEC=${MPITRAIN_MPIEXEC-mpiexec\ --map-by\ ppr:8:node:PE=12\ --bind-to\ core}'; do
  grep -qxF -- "$line" "$SCRATCH/job.pbs" || fail "PBS script lacks: $line"
done

# No memory request, shared nodes, no binding where the file says so.
sed 's/^memory_gb.*/memory_gb = 0/; s/^exclusive.*/exclusive = no/; s/^cpu_bind.*/cpu_bind = none/; s/^gpu_bind.*/gpu_bind = none/; /^setup/d' \
  "$cluster" > "$SCRATCH/plain.ini"
"$mkjob" --cluster "$SCRATCH/plain.ini" > "$SCRATCH/plain.slurm" 2> /dev/null
! sed '/^set -uo pipefail/,$d' "$SCRATCH/plain.slurm" | grep -q -- '--mem\|--exclusive\|BIND' || fail "memory, exclusive or binding not left out"
"$mkjob" --cluster "$SCRATCH/plain.ini" --scheduler pbs > "$SCRATCH/plain.pbs" 2> /dev/null
! sed '/^set -uo pipefail/,$d' "$SCRATCH/plain.pbs" | grep -q 'mem=\|excl\|MPIEXEC' || fail "PBS: memory, exclusive or binding not left out"

# The set-up lines (the file's setup keys, then --setup) run before the body; one that fails ends
# the job with a message.
grep -qxF 'module load cuda/13.0 openmpi/4.1 hdf5/1.14 || { echo mpitrain:\ set-up\ failed:\ module\ load\ cuda/13.0\ openmpi/4.1\ hdf5/1.14 >&2; exit 1; }' \
  "$SCRATCH/job.slurm" || fail "the example's setup line is not in the script"
"$mkjob" --cluster "$SCRATCH/plain.ini" --setup 'echo first set-up' --setup 'false' > "$SCRATCH/setup.slurm" 2> /dev/null
set +e
(unset MPITRAIN_ARGS; sed '/^set -uo pipefail/,$d' "$SCRATCH/setup.slurm" | bash) > "$SCRATCH/setup.out" 2>&1
setup_rc=$?
set -e
[ "$setup_rc" = 1 ] && grep -qx 'first set-up' "$SCRATCH/setup.out" && grep -qx 'mpitrain: set-up failed: false' "$SCRATCH/setup.out" ||
  { cat "$SCRATCH/setup.out"; fail "a failing set-up line: exit $setup_rc"; }

# The data, given once. trainer_args SCRIPT: the trainer's arguments as the script's settings and
# its body (from BUILD= to the last ARGS+=) make them, the environment at submission the caller's.
trainer_args() {
  { sed '/^set -uo pipefail/,$d' "$1"; sed -n '/^BUILD=/,/^ARGS+=/p' "$1"; echo 'echo "${ARGS[*]}"'; } > "$SCRATCH/args.sh"
  (unset SLURM_JOB_ID MPITRAIN_OUT MPITRAIN_CONFIG; bash "$SCRATCH/args.sh")
}
tail_args="--out-dir runs/slurm-local --resume auto"
mkdir -p "$SCRATCH/work/shards" && cd "$SCRATCH/work"
touch shards/train_0.h5 shards/train_1.h5 shards/val.h5 shards/train.h5
# A sharded glob in --args, quoted as for a shell: one --train-data, absolute, the glob kept.
"$mkjob" --cluster "$SCRATCH/cpu.ini" --args "--steps 9 --train-data 'shards/train_*.h5' --val-data=shards/val.h5" > "$SCRATCH/shards.slurm"
got=$(unset MPITRAIN_DATA MPITRAIN_ARGS; trainer_args "$SCRATCH/shards.slurm")
[ "$got" = "--train-data $PWD/shards/train_*.h5 --val-data $PWD/shards/val.h5 --steps 9 $tail_args" ] ||
  fail "sharded data: $got"
# The environment at submission names its own data: the script's is not added.
got=$(unset MPITRAIN_ARGS; export MPITRAIN_DATA=/elsewhere; trainer_args "$SCRATCH/shards.slurm")
[ "$got" = "--train-data /elsewhere/train.h5 --val-data /elsewhere/val.h5 --steps 9 $tail_args" ] ||
  fail "MPITRAIN_DATA at submission: $got"
got=$(unset MPITRAIN_DATA; export MPITRAIN_ARGS="--train-data mine.h5"; trainer_args "$SCRATCH/shards.slurm")
[ "$got" = "--train-data mine.h5 $tail_args" ] || fail "--train-data at submission: $got"
# --data DIR: its train.h5 and val.h5; a blend with spaces as in an INI file.
"$mkjob" --cluster "$SCRATCH/cpu.ini" --data shards --args "--steps 9" > "$SCRATCH/dir.slurm"
got=$(unset MPITRAIN_DATA MPITRAIN_ARGS; trainer_args "$SCRATCH/dir.slurm")
[ "$got" = "--train-data $PWD/shards/train.h5 --val-data $PWD/shards/val.h5 --steps 9 $tail_args" ] || fail "--data: $got"
"$mkjob" --cluster "$SCRATCH/cpu.ini" --train-data "0.7:shards/train_*.h5, 0.3:$PWD/shards/train.h5" --args "--steps 9" > "$SCRATCH/blend.slurm"
got=$(unset MPITRAIN_DATA MPITRAIN_ARGS; trainer_args "$SCRATCH/blend.slurm")
[ "$got" = "--train-data 0.7:$PWD/shards/train_*.h5,0.3:$PWD/shards/train.h5 --steps 9 $tail_args" ] || fail "blend: $got"
# The config's own data: nothing added, and the body's default data/ not either.
printf 'steps = 9\ntrain-data = shards/train_*.h5\n' > run.ini
"$mkjob" --cluster "$SCRATCH/cpu.ini" --config run.ini > "$SCRATCH/config.slurm" 2> "$SCRATCH/config.err"
got=$(unset MPITRAIN_DATA MPITRAIN_ARGS; trainer_args "$SCRATCH/config.slurm")
[ "$got" = "--config run.ini $tail_args" ] || fail "data in the config: $got"
[ ! -s "$SCRATCH/config.err" ] || { cat "$SCRATCH/config.err"; fail "a config with steps and data: a warning"; }
# No steps anywhere: said.
"$mkjob" --cluster "$SCRATCH/cpu.ini" --data shards 2>&1 > /dev/null | grep -q "warning: no steps in --args: the trainer's default (100 steps) applies" ||
  fail "no warning without steps"
cd "$SCRATCH"

expect_2() {  # expect_2 TEXT ARGS...
  local text=$1; shift
  set +e; "$mkjob" "$@" > /dev/null 2> "$SCRATCH/err"; local rc=$?; set -e
  [ $rc = 2 ] && grep -qF -- "$text" "$SCRATCH/err" || { cat "$SCRATCH/err"; fail "expected exit 2 with '$text'"; }
}
expect_2 "cannot read cluster file" --cluster "$SCRATCH/none.ini"
expect_2 "scheduler must be slurm or pbs" --cluster "$cluster" --scheduler lsf
printf 'nodes = two\n' > "$SCRATCH/bad.ini"
expect_2 "nodes must be a whole number" --cluster "$SCRATCH/bad.ini"
printf 'nodes =\n' > "$SCRATCH/empty.ini"
expect_2 "nodes is empty: give a whole number, or leave the key out" --cluster "$SCRATCH/empty.ini"
printf 'gpus_per_nodes = 8\n' > "$SCRATCH/typo.ini"
expect_2 "unknown key 'gpus_per_nodes'" --cluster "$SCRATCH/typo.ini"
printf 'exclusive = maybe\n' > "$SCRATCH/excl.ini"
expect_2 "exclusive must be yes or no" --cluster "$SCRATCH/excl.ini"
expect_2 "--data needs a value" --cluster "$cluster" --data
expect_2 "no training data: give --data DIR" --cluster "$cluster" --data ""
cd "$SCRATCH/work"
expect_2 "'$PWD/shards/test_*.h5' matches no readable file" --cluster "$cluster" --args "--train-data 'shards/test_*.h5'"
expect_2 "'$PWD/shards/none.h5' is not a readable file" --cluster "$cluster" --train-data shards/train.h5 --val-data shards/none.h5
expect_2 "--data DIR and --train-data/--val-data name the data twice" --cluster "$cluster" --data shards --train-data shards/train.h5
expect_2 "--train-data is given twice" --cluster "$cluster" --train-data shards/train.h5 --args "--train-data shards/train_0.h5"
expect_2 "1 of 2 entries have a weight" --cluster "$cluster" --train-data "0.5:shards/train.h5,shards/train_0.h5"
expect_2 "the weight of '-1:shards/train.h5' is '-1'" --cluster "$cluster" --train-data "-1:shards/train.h5"
expect_2 "has an empty entry" --cluster "$cluster" --train-data "shards/train.h5,,shards/train_0.h5"
expect_2 "'a b' holds a space" --cluster "$cluster" --data shards --args "--name 'a b'"
expect_2 "unbalanced quotes" --cluster "$cluster" --data shards --args "--train-data 'shards"
printf 'train-data = shards/missing_*.h5\n' > bad-data.ini
expect_2 "bad-data.ini: train-data: '$PWD/shards/missing_*.h5' matches no readable file" --cluster "$cluster" --config bad-data.ini
# What the job sets itself (its out-dir, resumed after each requeue; its config) is not taken
# from --args, where the job's own flags would silently replace it.
expect_2 "--args: --out-dir is the job's" --cluster "$cluster" --data shards --args "--out-dir runs/mine"
expect_2 "--args: --resume is the job's" --cluster "$cluster" --data shards --args "--resume=none"
expect_2 "--args: --config is the job's" --cluster "$cluster" --data shards --args "--config x.ini"
printf 'out-dir = runs/a\n' > out.ini
expect_2 "--out runs/b and out.ini's out-dir = runs/a name two output directories" --cluster "$cluster" --data shards --config out.ini --out runs/b
printf 'resume = runs/old\n' > resume.ini
expect_2 "resume.ini: resume = runs/old: the job resumes its own checkpoints" --cluster "$cluster" --data shards --config resume.ini
sed 's/^ranks_per_node.*/ranks_per_node = 4/' "$cluster" > idle.ini
expect_2 "ranks_per_node (4) is below gpus_per_node (8)" --cluster idle.ini --data shards
sed 's/^time_limit.*/time_limit = two days/' "$cluster" > time.ini
expect_2 "time_limit must be [D-]HH:MM:SS" --cluster time.ini --data shards
sed 's/^gpu_bind.*/gpu_bind = bogus/' "$cluster" > bind.ini
expect_2 "gpu_bind must be closest, none" --cluster bind.ini --data shards
expect_2 "--build $PWD/none holds no trainer" --cluster "$cluster" --data shards --build "$PWD/none"
# The config's out-dir is the job's; a config's device is kept on GPU nodes.
printf 'out-dir = runs/a\ndevice = cpu\nsteps = 9\n' > own.ini
"$mkjob" --cluster "$cluster" --data shards --config own.ini > own.slurm 2> /dev/null
grep -qxF 'export MPITRAIN_OUT=${MPITRAIN_OUT-runs/a}' own.slurm || fail "the config's out-dir is not the job's"
! grep -q 'MPITRAIN_ARGS.*--device cuda' own.slurm || fail "the config's device = cpu was overridden"
# PBS has no signal before the walltime: --exit-after-minutes, signal_seconds before it.
"$mkjob" --cluster "$cluster" --data shards --scheduler pbs --args "--steps 9" > walltime.pbs 2> walltime.err
(unset MPITRAIN_ARGS; eval "$(grep '^export MPITRAIN_ARGS' walltime.pbs)"
 [ "$MPITRAIN_ARGS" = "--device cuda --steps 9 --exit-after-minutes 1435" ]) ||
  { grep MPITRAIN_ARGS walltime.pbs; fail "PBS: no --exit-after-minutes 24 h - 300 s"; }
grep -q "PBS: the trainer saves and exits 85 after 1435 minutes" walltime.err || fail "PBS: the minutes not said"
cd "$SCRATCH"
echo "ok: mkjob makes SLURM and PBS scripts with memory, binding, set-up and the data once; bad input exits 2"
