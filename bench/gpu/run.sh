#!/usr/bin/env bash
# The GPU check, for a node with nvcc and CMake (and maybe Python with PyTorch) but no package
# registry and no MPI: builds the CUDA backend's tests and benchmark from this source tree, runs
# the `gpu` tests, then bench/gpu/op_bench.cpp, and writes a summary table and the logs to OUT_DIR.
# The libraries the build needs (MPI, HDF5, Boost, GoogleTest, OpenBLAS, oneDNN) travel as Debian
# packages fetched beforehand by tools/fetch-debs.sh into third_party/debs; they are unpacked
# here with dpkg -x into a private prefix (nothing is installed). Whole run: under 8 minutes.
#
# Usage: bench/gpu/run.sh OUT_DIR
# Environment: MPITRAIN_DEBS (default third_party/debs), MPITRAIN_GPU_WORK (build area, default
#   /tmp/mpitrain-gpu), CUDA_ARCH (default: the device's, else 90), CUDNN_ROOT (default: the
#   toolkit's cuDNN, else PyTorch's nvidia-cudnn wheel), JOBS (default nproc),
#   MPITRAIN_CONFIGURE_ONLY=1 (stop after CMake: for checking the script without a GPU),
#   MPITRAIN_CMAKE_EXTRA (more CMake arguments).
set -uo pipefail

OUT=${1:?usage: bench/gpu/run.sh OUT_DIR}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEBS=${MPITRAIN_DEBS:-$SRC/third_party/debs}
WORK=${MPITRAIN_GPU_WORK:-/tmp/mpitrain-gpu}
JOBS=${JOBS:-$(nproc)}
BUDGET=470  # seconds for everything: 8 minutes less a margin
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
MA=x86_64-linux-gnu
LIB=$PREFIX/usr/lib/$MA
export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib:$LIB/hdf5/openmpi:$LIB/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

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

ARCH=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
ARCH=${ARCH:-90}
BUILD=$WORK/build
read -r -a extra <<<"${MPITRAIN_CMAKE_EXTRA:-}"
say ""
say "## steps"
run_step "configure (CUDA arch $ARCH)" "$OUT/configure.log" "$(left)" \
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPITRAIN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
  -DCUDNN_ROOT="${CUDNN_ROOT:-}" \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" \
  -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_SKIP_GUESSING=ON \
  -DMPI_C_HEADER_DIR="$LIB/openmpi/include" -DMPI_CXX_HEADER_DIR="$LIB/openmpi/include" \
  -DMPI_CXX_SKIP_MPICXX=ON -DMPI_C_LIB_NAMES=mpi -DMPI_CXX_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$LIB/openmpi/lib/libmpi.so" \
  -DHDF5_PREFER_PARALLEL=ON -DHDF5_C_INCLUDE_DIR="$PREFIX/usr/include/hdf5/openmpi" \
  -DHDF5_hdf5_LIBRARY_RELEASE="$LIB/hdf5/openmpi/libhdf5.so" \
  -DOPENBLAS_LIBRARY="$LIB/openblas-openmp/libopenblas.so" \
  -DOPENBLAS_INCLUDE_DIR="$PREFIX/usr/include/$MA/openblas-openmp" \
  -DDNNL_INCLUDE_DIR="$PREFIX/usr/include" -DDNNL_LIBRARY="$LIB/libdnnl.so" \
  -DPKG_CONFIG_EXECUTABLE=/bin/false "${extra[@]}" ||
  { tail -30 "$OUT/configure.log"; exit 1; }
[[ ${MPITRAIN_CONFIGURE_ONLY:-0} == 1 ]] && { say "configure only: done"; exit 0; }

run_step "build (gpu_tests gpu_graphs op-bench, -j$JOBS)" "$OUT/build.log" "$(left)" \
  cmake --build "$BUILD" -j "$JOBS" --target gpu_tests gpu_graphs op-bench ||
  { grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; }

# tests get at most half of what is left, the benchmark the rest
run_step "gpu tests (ctest -L gpu)" "$OUT/tests.log" "$(($(left) / 2))" \
  ctest --test-dir "$BUILD" -L gpu --output-on-failure
tests_rc=$?
run_step "benchmark (op-bench)" "$OUT/bench.log" "$(($(left) - 5))" "$BUILD/op-bench"
bench_rc=$?

say ""
say "## tests"
grep -E "tests passed|tests failed|Passed|Failed|Skipped|\*\*\*" "$OUT/tests.log" | sed 's/^/    /' | tee -a "$SUMMARY"
say ""
say "## benchmark"
sed 's/^/    /' "$OUT/bench.log" | tee -a "$SUMMARY" >/dev/null
tail -40 "$OUT/bench.log"
say ""
say "total $(($(date +%s) - START)) s"
exit $((tests_rc != 0 || bench_rc != 0))
