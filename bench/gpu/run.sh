#!/usr/bin/env bash
# The GPU check, for a node with nvcc and CMake (and maybe Python with PyTorch) but no package
# registry and no MPI: builds the CUDA backend's tests and benchmark from this source tree, runs
# the `gpu` tests, then bench/gpu/op_bench.cpp, then bench/gpu/trainer_vs_pytorch.sh (the trainer's
# tokens/s and MFU against PyTorch) and, with more than one GPU and an mpirun, nccl-bench; writes
# a summary table and the logs to OUT_DIR.
# The libraries the build needs (MPI, HDF5, Boost, GoogleTest, OpenBLAS, oneDNN) travel as Debian
# packages fetched beforehand by tools/fetch-debs.sh into third_party/debs; they are unpacked
# here with dpkg -x into a private prefix (nothing is installed). Whole run: under 9.5 minutes
# (a device command may run 10).
#
# Usage: bench/gpu/run.sh OUT_DIR
# Environment: MPITRAIN_DEBS (default third_party/debs), MPITRAIN_GPU_WORK (build area, default
#   /tmp/mpitrain-gpu), CUDA_ARCH (default: the device's, else 90), CUDNN_ROOT (default: the
#   toolkit's cuDNN, else PyTorch's nvidia-cudnn wheel), JOBS (default nproc),
#   MPITRAIN_CONFIGURE_ONLY=1 (stop after CMake: for checking the script without a GPU),
#   MPITRAIN_CMAKE_EXTRA (more CMake arguments), NCCL_ROOT (default: the toolkit's NCCL, else
#   PyTorch's nvidia-nccl wheel, else /usr's), MPITRAIN_GPU_STEPS (which of "tests bench compare
#   nccl" to run after the build; default all), TVP_BUDGET (seconds for the comparison, 230),
#   PEAK_TFLOPS and PYTHON (for the comparison, see trainer_vs_pytorch.sh).
set -uo pipefail

OUT=${1:?usage: bench/gpu/run.sh OUT_DIR}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEBS=${MPITRAIN_DEBS:-$SRC/third_party/debs}
WORK=${MPITRAIN_GPU_WORK:-/tmp/mpitrain-gpu}
JOBS=${JOBS:-$(nproc)}
BUDGET=570  # seconds for everything: 9.5 minutes (470 before the trainer-vs-PyTorch comparison)
START=$(date +%s)
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.md
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# run_step NAME LOG SECONDS COMMAND...: the command under a timeout, output to LOG; status kept
run_step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local t0 rc
  t0=$(date +%s)
  if ((limit <= 5)); then
    say "- $name: not run (time budget spent)"
    return 124
  fi
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  say "- $name: exit $rc in $(($(date +%s) - t0)) s (log: $(basename "$log"))"
  return $rc
}

say "# mpitrain GPU run, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null ||
    echo "no nvidia-smi"
  nvcc --version 2>&1 | grep release; cmake --version | head -1; } | sed 's/^/    /' | tee -a "$SUMMARY"

# ---- the libraries: unpack the packages into a prefix ---------------------------------------
PREFIX=$WORK/prefix
[[ -d $DEBS ]] && DEBS=$(cd "$DEBS" && pwd)
if [[ ! -d $PREFIX/usr ]]; then
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { say "no packages in $DEBS: run tools/fetch-debs.sh first"; exit 1; }
  mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$deb" "$PREFIX"
    else  # a .deb is an ar archive holding data.tar.*
      member=$(ar t "$deb" | grep '^data\.tar')
      (cd "$WORK" && ar x "$deb" "$member" && tar -xf "$member" -C "$PREFIX" && rm -f "$member")
    fi
  done
fi
# Debian names them mpirun.openmpi etc. behind alternatives links, which dpkg -x does not make.
for tool in mpirun mpiexec; do
  [[ -e $PREFIX/usr/bin/orterun && ! -e $PREFIX/usr/bin/$tool ]] && ln -s orterun "$PREFIX/usr/bin/$tool"
done
MA=x86_64-linux-gnu
LIB=$PREFIX/usr/lib/$MA
export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib:$LIB/hdf5/openmpi:$LIB/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Open MPI from the prefix: its components are found through OPAL_PREFIX; a program run without
# mpirun (the packages have none) is a singleton that must not look for an orted to start.
export OPAL_PREFIX=$PREFIX/usr OMPI_MCA_ess_singleton_isolated=1
export MPITRAIN_FORTUNES=$PREFIX/usr/share/games/fortunes PATH=$PREFIX/usr/bin:$PATH

# ---- cuDNN: the toolkit's, else the one PyTorch brought (a wheel has no libcudnn.so link) ----
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
if [[ -z ${CUDNN_ROOT:-} ]]; then
  if [[ -e $CUDA_HOME/include/cudnn_graph.h ]]; then
    CUDNN_ROOT=$CUDA_HOME
  elif wheel=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null) ||
       wheel=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null); then
    CUDNN_ROOT=$WORK/cudnn
    mkdir -p "$CUDNN_ROOT/lib"
    ln -sfn "$wheel/include" "$CUDNN_ROOT/include"
    for so in "$wheel"/lib/libcudnn*.so.*; do ln -sf "$so" "$CUDNN_ROOT/lib/"; done
    main=("$wheel"/lib/libcudnn.so.*)
    ln -sf "${main[0]}" "$CUDNN_ROOT/lib/libcudnn.so"
    export LD_LIBRARY_PATH=$CUDNN_ROOT/lib:$LD_LIBRARY_PATH
  fi
fi
say "    cuDNN from ${CUDNN_ROOT:-nowhere}"

# ---- NCCL (for nccl-bench): the toolkit's, else PyTorch's wheel, else /usr's (which CMake is told
# to ignore), the last two through links in the work area ------------------------------------
if [[ -z ${NCCL_ROOT:-} && ! -e $CUDA_HOME/include/nccl.h ]]; then
  if nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); then
    nccl_inc=$nccl/include nccl_libs=("$nccl"/lib/libnccl.so*)
  else
    nccl_inc=/usr/include nccl_libs=("/usr/lib/$MA"/libnccl.so*)
  fi
  if [[ -e $nccl_inc/nccl.h && -e ${nccl_libs[0]} ]]; then
    NCCL_ROOT=$WORK/nccl
    mkdir -p "$NCCL_ROOT/include" "$NCCL_ROOT/lib"
    ln -sf "$nccl_inc/nccl.h" "$NCCL_ROOT/include/"
    ln -sf "${nccl_libs[0]}" "$NCCL_ROOT/lib/libnccl.so"
    LD_LIBRARY_PATH=$(dirname "${nccl_libs[0]}"):$LD_LIBRARY_PATH
  fi
fi
say "    NCCL from ${NCCL_ROOT:-the toolkit, if it has one}"

ARCH=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
ARCH=${ARCH:-90}
BUILD=$WORK/build
read -r -a extra <<<"${MPITRAIN_CMAKE_EXTRA:-}"
say ""
say "## steps"
run_step "configure (CUDA arch $ARCH)" "$OUT/configure.log" "$(left)" \
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPITRAIN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
  -DCUDNN_ROOT="${CUDNN_ROOT:-}" -DNCCL_ROOT="${NCCL_ROOT:-}" \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" \
  -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_SKIP_GUESSING=ON \
  -DMPI_C_HEADER_DIR="$LIB/openmpi/include" -DMPI_CXX_HEADER_DIR="$LIB/openmpi/include" \
  -DMPI_CXX_SKIP_MPICXX=ON -DMPI_C_LIB_NAMES=mpi -DMPI_CXX_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$LIB/openmpi/lib/libmpi.so" \
  -DMPIEXEC_EXECUTABLE="$PREFIX/usr/bin/mpiexec" \
  -DHDF5_PREFER_PARALLEL=ON -DHDF5_C_INCLUDE_DIR="$PREFIX/usr/include/hdf5/openmpi" \
  -DHDF5_hdf5_LIBRARY_RELEASE="$LIB/hdf5/openmpi/libhdf5.so" \
  -DOPENBLAS_LIBRARY="$LIB/openblas-openmp/libopenblas.so" \
  -DOPENBLAS_INCLUDE_DIR="$PREFIX/usr/include/$MA/openblas-openmp" \
  -DDNNL_INCLUDE_DIR="$PREFIX/usr/include" -DDNNL_LIBRARY="$LIB/libdnnl.so" \
  -DPKG_CONFIG_EXECUTABLE=/bin/false "${extra[@]}" ||
  { tail -30 "$OUT/configure.log"; exit 1; }
[[ ${MPITRAIN_CONFIGURE_ONLY:-0} == 1 ]] && { say "configure only: done"; exit 0; }

# nccl-bench exists where CMake found NCCL
targets=(gpu_tests gpu_graphs op-bench trainer prepare-data)
grep -E '^NCCL_LIBRARY:FILEPATH=' "$BUILD/CMakeCache.txt" | grep -qv NOTFOUND && targets+=(nccl-bench)
run_step "build (${targets[*]}, -j$JOBS)" "$OUT/build.log" "$(left)" \
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" ||
  { grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; }

STEPS=" ${MPITRAIN_GPU_STEPS:-tests bench compare nccl} "
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
TVP_BUDGET=${TVP_BUDGET:-230}
# what the comparison and nccl-bench keep back; tests get at most half of the rest, op-bench
# what the tests leave of it
reserve=0
[[ $STEPS == *" compare "* ]] && reserve=$((TVP_BUDGET + 20))
[[ $STEPS == *" nccl "* ]] && ((GPUS > 1)) && reserve=$((reserve + 60))
tests_rc=0 bench_rc=0 tvp_rc=0 nccl_rc=0
if [[ $STEPS == *" tests "* ]]; then
  run_step "gpu tests (ctest -L gpu)" "$OUT/tests.log" "$((($(left) - reserve) / 2))" \
    ctest --test-dir "$BUILD" -L gpu --output-on-failure
  tests_rc=$?
fi
if [[ $STEPS == *" bench "* ]]; then
  run_step "benchmark (op-bench)" "$OUT/bench.log" "$(($(left) - reserve - 5))" "$BUILD/op-bench"
  bench_rc=$?
fi
if [[ $STEPS == *" compare "* ]]; then
  reserve=$((reserve - TVP_BUDGET - 20))
  tvp=$(($(left) - reserve - 20))
  tvp=$((tvp < TVP_BUDGET ? tvp : TVP_BUDGET))
  run_step "trainer vs PyTorch (budget $tvp s)" "$OUT/trainer_vs_pytorch.log" "$((tvp + 15))" \
    env TVP_BUDGET="$tvp" bash "$SRC/bench/gpu/trainer_vs_pytorch.sh" "$BUILD" "$OUT"
  tvp_rc=$?
fi
if [[ $STEPS == *" nccl "* ]]; then
  mpirun=$(command -v "$PREFIX/usr/bin/mpirun" mpirun | head -1)
  if ((GPUS < 2)); then
    echo "SKIP: $GPUS GPU: the collectives need two or more" >"$OUT/nccl_bench.log"
  elif [[ ! -x $BUILD/nccl-bench ]]; then
    echo "SKIP: no nccl-bench (CMake found no NCCL; set NCCL_ROOT)" >"$OUT/nccl_bench.log"
  elif [[ -z $mpirun ]]; then
    echo "SKIP: no mpirun (the unpacked packages have none: openmpi-bin)" >"$OUT/nccl_bench.log"
  else
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 run_step "nccl-bench ($GPUS GPUs)" \
      "$OUT/nccl_bench.log" "$(($(left) - 5))" "$mpirun" --oversubscribe --bind-to none \
      -x LD_LIBRARY_PATH -np "$GPUS" "$BUILD/nccl-bench" 256M 20
    nccl_rc=$?
  fi
  grep -q '^SKIP' "$OUT/nccl_bench.log" && say "- nccl-bench: $(cat "$OUT/nccl_bench.log")"
fi

say ""
say "## tests"
grep -E "tests passed|tests failed|Passed|Failed|Skipped|\*\*\*" "$OUT/tests.log" | sed 's/^/    /' | tee -a "$SUMMARY"
say ""
say "## benchmark"
sed 's/^/    /' "$OUT/bench.log" | tee -a "$SUMMARY" >/dev/null
tail -40 "$OUT/bench.log"
if [[ -f $OUT/trainer-vs-pytorch.md ]]; then
  say ""
  tee -a "$SUMMARY" <"$OUT/trainer-vs-pytorch.md"
fi
if [[ -f $OUT/nccl_bench.log ]] && ! grep -q '^SKIP' "$OUT/nccl_bench.log"; then
  say ""
  say "## nccl-bench"
  sed 's/^/    /' "$OUT/nccl_bench.log" | tee -a "$SUMMARY"
fi
say ""
say "total $(($(date +%s) - START)) s"
exit $((tests_rc != 0 || bench_rc != 0 || tvp_rc != 0 || nccl_rc != 0))
