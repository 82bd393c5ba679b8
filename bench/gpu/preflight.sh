#!/usr/bin/env bash
# Everything a GPU run (bench/gpu/run.sh on a lent machine) needs, checked here without a GPU, so
# that the run's minutes are not spent on what could be found beforehand:
#   0. the scripts it runs parse: the gpu-labelled e2e scripts (read back from BUILD_DIR's ctest)
#      and what they source, bench/gpu's scripts and Python files, with every inline awk and
#      Python program in them (bench/gpu/check_scripts.py; needs no nvcc);
#   1. the packages it carries: third_party/debs (fetched anew with tools/fetch-debs.sh where
#      apt-get works) unpack, and CMake configures a CUDA build against that prefix alone (as
#      run.sh does);
#   2. the targets the gpu-labelled tests run, read back from that configure's ctest, plus
#      op-bench, are all built in BUILD_DIR (a CUDA build of this tree; PREFLIGHT_BUILD=1 builds
#      them against the prefix instead: several minutes here);
#   3. every shared library those programs load resolves, with the prefix first on the library
#      path, to the prefix, the CUDA toolkit, or a package tools/debs-base.txt says a node has;
#   4. the working tree plus third_party/debs fit the 64 MiB a device command may carry;
#   5. NVRTC, which cuDNN's runtime-compiled engines load, is found as run.sh will look for it;
#   6. the commands of the plan, run dry (bench/gpu/run.sh --dry-run against the configure of 1):
#      each exits 0 and leaves at most 8 files (16 MiB each, 2 folders deep at most, plain names)
#      in its OUT, what a lent machine returns of a command, and no file but summary.md and the
#      logs' archive (what a step writes itself, a dry run does not write); the plan's budget,
#      the machine's start included, within its limit (run.sh --plan).
# Prints one line per check; exits 1 when one fails, 77 when this machine cannot check (no nvcc,
# no apt-get to fetch the packages with).
#
# Usage: bench/gpu/preflight.sh [BUILD_DIR]        (default build/)
# Environment: PREFLIGHT_WORK (scratch area, default a new directory under /tmp), PREFLIGHT_BUILD,
#   PREFLIGHT_FETCH=0 (check the packages already in third_party/debs, fetch nothing).
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=$(cd "${1:-$SRC/build}" 2>/dev/null && pwd) || { echo "preflight: no build directory ${1:-$SRC/build}"; exit 1; }
DEBS=$SRC/third_party/debs
CARRY_LIMIT=$((64 << 20))
WORK=${PREFLIGHT_WORK:-$(mktemp -d /tmp/mpitrain-preflight-XXXXXX)}
mkdir -p "$WORK"
failed=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; failed=1; }

# 0. the scripts parse (no GPU, no nvcc needed)
if python3 "$SRC/bench/gpu/check_scripts.py" --ctest "$BUILD_DIR" gpu "$SRC"/bench/gpu/*.sh \
     "$SRC"/bench/gpu/*.py "$SRC/tests/support/hf_reference.py" >"$WORK/scripts.log" 2>&1; then
  ok "$(grep -c '^ok' "$WORK/scripts.log") scripts and Python files the GPU run executes parse, their awk and Python programs too"
else
  grep -v '^ok' "$WORK/scripts.log"
  bad "a script the GPU run executes does not parse (bench/gpu/check_scripts.py)"
fi

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "SKIP: no nvcc here"; exit 77; }
command -v nvcc >/dev/null || PATH=/usr/local/cuda/bin:$PATH

# 1. the packages, unpacked; a configure against them alone
# Fetched anew where apt-get works, so that the set follows tools/fetch-debs.sh's list (a
# package added to the build is carried too); else the set already there is checked.
if command -v apt-get >/dev/null && [[ ${PREFLIGHT_FETCH:-1} == 1 ]]; then
  bash "$SRC/tools/fetch-debs.sh" >"$WORK/fetch.log" 2>&1 || { cat "$WORK/fetch.log"; bad "tools/fetch-debs.sh failed"; exit 1; }
elif ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
  echo "SKIP: no $DEBS and no apt-get to fetch it"
  exit 77
fi
# shellcheck source=bench/gpu/prefix.sh
source "$SRC/bench/gpu/prefix.sh"
gpu_unpack "$DEBS" >"$WORK/unpack.log" 2>&1 || { cat "$WORK/unpack.log"; bad "unpacking $DEBS"; exit 1; }
ok "$(ls "$DEBS"/*.deb | wc -l) packages in third_party/debs unpack into $PREFIX"
gpu_environment
PREFIX_BUILD=$WORK/build
if gpu_configure "$PREFIX_BUILD" 90 >"$WORK/configure.log" 2>&1; then
  ok "CMake configures a CUDA build against the prefix alone (log: $WORK/configure.log)"
else
  tail -20 "$WORK/configure.log"
  bad "CMake does not configure against the prefix alone"
  exit 1
fi
for found in MPI_mpi_LIBRARY HDF5_hdf5_LIBRARY_RELEASE OPENBLAS_LIBRARY DNNL_LIBRARY; do
  path=$(sed -n "s/^$found:[A-Z]*=//p" "$PREFIX_BUILD/CMakeCache.txt")
  [[ $path == "$PREFIX"/* && -e $path ]] || bad "$found is '$path', not a file of the prefix"
done
# What FindHDF5 reports is what the targets link: an h5cc on PATH can override the paths above
# (the first GPU node's serial /usr/bin/h5cc did).
hdf5=$(sed -n 's/^-- Found HDF5: \([^ ]*\).*/\1/p' "$WORK/configure.log")
[[ $hdf5 == "$PREFIX"/* ]] || bad "CMake's HDF5 is '$hdf5', not the prefix's"

# 2. what the gpu tests run, all built
mapfile -t targets < <(gpu_targets "$PREFIX_BUILD")
((${#targets[@]} > 1)) || { bad "no targets read back from ctest -L gpu"; exit 1; }
ok "the gpu tests and benchmarks need: ${targets[*]}"
if [[ ${PREFLIGHT_BUILD:-0} == 1 ]]; then
  t0=$(date +%s)
  if cmake --build "$PREFIX_BUILD" -j "$(nproc)" --target "${targets[@]}" >"$WORK/build.log" 2>&1; then
    ok "built against the prefix in $(($(date +%s) - t0)) s on $(nproc) cores"
    BUILD_DIR=$PREFIX_BUILD
  else
    grep -E 'error' "$WORK/build.log" | head -20
    bad "the build against the prefix fails (log: $WORK/build.log)"
  fi
fi
grep -q '^MPITRAIN_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" ||
  bad "$BUILD_DIR is not a CUDA build (MPITRAIN_CUDA=ON)"
for t in "${targets[@]}"; do
  [[ -x $BUILD_DIR/$t ]] || bad "$t is not built in $BUILD_DIR"
done

# 3. every library they load: from the prefix, the toolkit, or a package every node has
BASE="^($(grep -v '^#' "$SRC/tools/debs-base.txt" | paste -sd'|'))$"
CUDA_HOME=$(cd "$CUDA_HOME" && pwd -P)
declare -A seen=() owner=()
outside=()  # "target name path real": each library found outside the prefix and the toolkit
for t in "${targets[@]}"; do
  [[ -x $BUILD_DIR/$t ]] || continue
  while read -r name path; do
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    if [[ $path == "not found" ]]; then
      bad "$t needs $name: not found with the prefix first on the library path"
      continue
    fi
    real=$(readlink -f "$path")
    [[ $real == "$PREFIX"/* || $real == "$CUDA_HOME"/* ]] && continue
    [[ $name == libcuda.so* ]] && { bad "$t links the driver library $name (never link libcuda)"; continue; }
    outside+=("$t $name $path $real")
  done < <(ldd "$BUILD_DIR/$t" | awk '$2 == "=>" { print $1, ($3 == "not" ? "not found" : $3) }')
done
# Their packages, from one dpkg -S (~0.3 s a call): each library as ldd found it, its real path,
# and that path under /lib (the /usr merge); lines "package:arch: path".
usr_merged() { echo "${1/#\/usr\/lib/\/lib}"; }
while IFS= read -r line; do owner[${line#*: }]=${line%%:*}; done < <(
  for entry in "${outside[@]}"; do
    read -r _ _ path real <<<"$entry"
    printf '%s\n' "$path" "$real" "$(usr_merged "$real")"
  done | sort -u | xargs -r dpkg -S 2>/dev/null)
for entry in "${outside[@]}"; do
  read -r t name path real <<<"$entry"
  pkg=${owner[$path]:-${owner[$real]:-${owner[$(usr_merged "$real")]:-}}}
  [[ -n $pkg && $pkg =~ $BASE ]] && continue
  bad "$t loads $name from $real (package ${pkg:-none}), which neither the prefix nor a GPU node has"
done
((failed)) || ok "${#seen[@]} shared libraries resolve to the prefix, the CUDA toolkit ($CUDA_HOME) or the base packages"

# 4. the carried set: the working tree as the device tool copies it, plus the packages
tree=$(cd "$SRC" && git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null |
       awk '{ s += $1 } END { print s + 0 }')
debs=$(du -sb "$DEBS" | cut -f1)
total=$((tree + debs))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
if ((total <= CARRY_LIMIT)); then
  ok "carried: work tree $(mib "$tree") + third_party/debs $(mib "$debs") = $(mib "$total") of $(mib "$CARRY_LIMIT")"
else
  bad "carried: work tree $(mib "$tree") + third_party/debs $(mib "$debs") = $(mib "$total"), over $(mib "$CARRY_LIMIT")"
fi

# 5. NVRTC for cuDNN, as run.sh finds it
if gpu_nvrtc; then ok "$NVRTC_FOUND"; else bad "$NVRTC_FOUND"; fi

# 6. the plan's commands, dry, against the configure of 1; what each leaves for the lent machine
OUT_FILES_LIMIT=8 OUT_FILE_LIMIT=$((16 << 20))
n=0
while read -r steps; do
  n=$((n + 1))
  out=$WORK/out-$n
  read -r -a list <<<"$steps"
  if ! MPITRAIN_GPU_WORK=$WORK MPITRAIN_DEBS=$DEBS bash "$SRC/bench/gpu/run.sh" --dry-run "$out" "${list[@]}" \
       >"$WORK/dry-$n.log" 2>&1; then
    tail -20 "$WORK/dry-$n.log"
    bad "command $n ($steps) fails dry (log: $WORK/dry-$n.log)"
    continue
  fi
  mapfile -t files < <(cd "$out" && find . -mindepth 1 ! -type d | sed 's|^\./||' | sort)
  problems=$(cd "$out" && for f in "${files[@]}"; do
    [[ -f $f && ! -L $f ]] || echo "$f is not a plain file"
    [[ $(tr -cd / <<<"$f" | wc -c) -le 2 ]] || echo "$f lies more than 2 folders down"
    [[ $f =~ ^[A-Za-z0-9._/-]+$ ]] || echo "$f has a name of other characters"
    (($(stat -c %s "$f") <= OUT_FILE_LIMIT)) || echo "$f is over 16 MiB"
  done)
  # a dry run writes placeholders for the steps' own files: any but these two would multiply
  [[ "${files[*]}" == "logs-$(IFS=-; echo "${list[*]}").tar.gz summary.md" ]] ||
    problems+="${problems:+; }OUT should hold summary.md and the logs' archive only: a step's files beside them are not counted here"
  if ((${#files[@]} > OUT_FILES_LIMIT)) || [[ -n $problems ]]; then
    bad "command $n ($steps) leaves ${#files[@]} files in OUT (a lent machine returns $OUT_FILES_LIMIT): ${files[*]}${problems:+; $problems}"
  else
    ok "command $n ($steps), dry: OUT gets ${#files[@]} files of $OUT_FILES_LIMIT: ${files[*]}"
  fi
done < <(bash "$SRC/bench/gpu/run.sh" --plan-steps)
((n > 0)) || bad "no commands read from run.sh --plan"
if bash "$SRC/bench/gpu/run.sh" --plan; then
  ok "the plan fits its device time (above)"
else
  bad "the plan does not fit its device time (above)"
fi
echo "  each with carry [\"third_party/debs\"] and the build area build-gpu/ kept on the warm machine"
((failed)) && { echo "preflight: FAILED"; exit 1; }
echo "preflight: ready for a GPU"
