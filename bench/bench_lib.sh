# shellcheck shell=bash
# Helpers the bench scripts source: the start they share, medians, and the per-step figures of a
# trainer's metrics.jsonl.

# bench_start ARGS...: the start of the bench script that sources this file, called with its
# arguments: at most one, BUILD_DIR (default: build/ of this checkout); -h, --help or more print
# the usage and exit 2. Sets
#   name     the script's name (bench/NAME.sh), which starts its messages
#   repo     this checkout
#   build    BUILD_DIR, absolute
#   data     BUILD_DIR/data, the sample corpus
#   results  BUILD_DIR/NAME-results.txt (NAME's '_' as '-'), where the script writes its table
#   scratch  a new folder on the build directory's disk, removed however the script exits
#   mpirun   mpirun with --oversubscribe --bind-to none (more ranks than cores, threads unpinned)
# and exports LC_ALL=C (a '.' decimal point in $EPOCHREALTIME and awk) and, as root, the variables
# Open MPI needs to run.
bench_start() {
  name=$(basename "${BASH_SOURCE[1]}" .sh)
  if [[ $# -gt 1 || ${1:-} == -h || ${1:-} == --help ]]; then
    echo "usage: bash bench/$name.sh [BUILD_DIR]" >&2
    exit 2
  fi
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=$(cd "${1:-$repo/build}" && pwd)
  data=$build/data
  # shellcheck disable=SC2034  # results and mpirun: for the scripts that source this file
  results=$build/${name//_/-}-results.txt
  scratch=$(mktemp -d "$build/${name//_/-}-scratch.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  # shellcheck disable=SC2034
  mpirun=(mpirun --oversubscribe --bind-to none)
  export LC_ALL=C
  if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}

# bench_needs PROGRAM...: exit 2, naming the first of them not built in $build.
bench_needs() {
  local program
  for program in "$@"; do
    if [[ ! -x $build/$program ]]; then
      echo "$name: $build/$program not found; build it first (cmake --build $build --target $*)" >&2
      exit 2
    fi
  done
}

# bench_sample_data: the sample corpus in $data, prepared where it is missing.
bench_sample_data() {
  if [[ ! -f $data/train.h5 ]]; then
    BUILD_DIR=$build bash "$repo/tools/prepare-sample-data.sh" "$data"
  fi
}

# cpu_field NAME: the value of the first "NAME" line of /proc/cpuinfo ("model name", "flags"); empty
# where there is none.
cpu_field() { awk -F': *' -v f="$1" '$1 ~ "^" f "[ \t]*$" { print $2; exit }' /proc/cpuinfo; }

# cpu_has FLAG...: true when the first "flags" line of /proc/cpuinfo has every FLAG as a word.
cpu_has() {
  local flags f
  flags=" $(cpu_field flags) "
  for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done
}

# bench_gpt2_config CONFIG: sets gpt2_run, the trainer's options for one GPT-2 configuration on
# the sample corpus, all but --threads and --out-dir (global and micro-batch 4, no evaluation or
# sampling, --peak-gflops 100), and steps: STEPS, else the configuration's default. CONFIG is tiny
# (L4 H4 C128 V512 T64; 21 steps) or gpt2-small (L12 H12 C768 V50304 T256; 4 steps); exit 2
# otherwise.
bench_gpt2_config() {
  local shape
  case $1 in
    tiny) shape=(--n-layer 4 --n-head 4 --d-model 128 --vocab-size 512 --seq-len 64) steps=${STEPS:-21} ;;
    gpt2-small) shape=(--n-layer 12 --n-head 12 --d-model 768 --vocab-size 50304 --seq-len 256)
                steps=${STEPS:-4} ;;
    *) echo "$name: CONFIG must be tiny or gpt2-small, not '$1'" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2034  # gpt2_run: for the scripts that source this file
  gpt2_run=(--arch gpt2 "${shape[@]}" --global-batch-size 4 --micro-batch-size 4 --steps "$steps"
            --peak-gflops 100 --lr 1e-4 --train-data "$data/train.h5" --val-data ''
            --eval-interval 0 --sample-tokens 0)
}

# median: of the numbers on stdin, one a line.
median() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit 1
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# step_times FILE: "step_ms exposed_comm_ms" of each step record of metrics.jsonl but the first
# (warm-up).
step_times() {
  awk 'match($0, /"step_ms": [^,}]*/) {
         s = substr($0, RSTART + 11, RLENGTH - 11)
         if (match($0, /"exposed_comm_ms": [^,}]*/)) print s, substr($0, RSTART + 19, RLENGTH - 19) }' \
      "$1" | tail -n +2
}
