# Sourced by bench/gpu/run.sh and bench/gpu/preflight.sh: the build's libraries from the Debian
# packages tools/fetch-debs.sh put in third_party/debs, unpacked with dpkg -x (or ar + tar) into
# a private prefix (nothing is installed), the environment that finds them, cuDNN and NCCL, and
# the one CMake configure line that uses the prefix and nothing of /usr or /usr/local.
# Needs: SRC (the source tree), WORK (the build area).

MA=x86_64-linux-gnu
PREFIX=$WORK/prefix
LIB=$PREFIX/usr/lib/$MA

# gpu_unpack DEBS: the packages into PREFIX (once; a later call finds it done)
gpu_unpack() {
  local debs=$1 deb member
  [[ -d $PREFIX/usr ]] && return 0
  ls "$debs"/*.deb >/dev/null 2>&1 || { echo "no packages in $debs: run tools/fetch-debs.sh first"; return 1; }
  mkdir -p "$PREFIX"
  for deb in "$debs"/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$deb" "$PREFIX" || return 1
    else  # a .deb is an ar archive holding data.tar.*
      member=$(ar t "$deb" | grep '^data\.tar')
      (cd "$WORK" && ar x "$deb" "$member" && tar -xf "$member" -C "$PREFIX" && rm -f "$member") || return 1
    fi
  done
  # Debian names them mpirun.openmpi etc. behind alternatives links, which dpkg -x does not make.
  local tool
  for tool in mpirun mpiexec; do
    [[ -e $PREFIX/usr/bin/orterun && ! -e $PREFIX/usr/bin/$tool ]] && ln -s orterun "$PREFIX/usr/bin/$tool"
  done
  return 0
}

# gpu_environment: the prefix's libraries and programs first; cuDNN and NCCL found (CUDNN_ROOT,
# NCCL_ROOT: the toolkit's, else PyTorch's wheels through links in WORK; NCCL also /usr's).
gpu_environment() {
  export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib:$LIB/hdf5/openmpi:$LIB/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # Open MPI from the prefix: its components are found through OPAL_PREFIX; a program run without
  # mpirun is a singleton that must not look for an orted to start.
  export OPAL_PREFIX=$PREFIX/usr OMPI_MCA_ess_singleton_isolated=1
  export MPITRAIN_FORTUNES=$PREFIX/usr/share/games/fortunes PATH=$PREFIX/usr/bin:$PATH
  # Open MPI's shared-memory transport without cross-process memory copies (CMA), which a
  # sandbox may refuse: the messages go through the shared segment instead.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  # cuDNN compiles its runtime-fused engines with NVRTC, which it loads by name: without it on
  # the library path every such attention graph falls back to the CUDA kernel (gpu_nvrtc says).
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDA_HOME/lib64
  local wheel nccl nccl_inc so
  local -a main nccl_libs
  if [[ -z ${CUDNN_ROOT:-} ]]; then  # a wheel has no libcudnn.so link: made here
    if [[ -e $CUDA_HOME/include/cudnn_graph.h ]]; then
      CUDNN_ROOT=$CUDA_HOME
    elif wheel=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null); then
      CUDNN_ROOT=$WORK/cudnn
      mkdir -p "$CUDNN_ROOT/lib"
      ln -sfn "$wheel/include" "$CUDNN_ROOT/include"
      for so in "$wheel"/lib/libcudnn*.so.*; do ln -sf "$so" "$CUDNN_ROOT/lib/"; done
      main=("$wheel"/lib/libcudnn.so.*)
      ln -sf "${main[0]}" "$CUDNN_ROOT/lib/libcudnn.so"
      export LD_LIBRARY_PATH=$CUDNN_ROOT/lib:$LD_LIBRARY_PATH
    fi
  fi
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
      export LD_LIBRARY_PATH=$(dirname "${nccl_libs[0]}"):$LD_LIBRARY_PATH
    fi
  fi
}

# gpu_nvrtc: where libnvrtc.so.<CUDA major> (the name cuDNN loads) lies on LD_LIBRARY_PATH, else
# in PyTorch's wheels (then added to the path), said in NVRTC_FOUND; status 1 if nowhere
gpu_nvrtc() {
  local major dir wheels
  major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  local IFS=:
  for dir in $LD_LIBRARY_PATH; do
    [[ -n $dir && -e $dir/libnvrtc.so.$major ]] &&
      { NVRTC_FOUND="NVRTC for cuDNN's runtime-compiled engines: $dir/libnvrtc.so.$major"; return 0; }
  done
  if wheels=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null) &&
     dir=$(dirname "$(find "$wheels" -name "libnvrtc.so.$major" | head -1)") && [[ $dir != . ]]; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir
    NVRTC_FOUND="NVRTC for cuDNN's runtime-compiled engines: $dir/libnvrtc.so.$major (PyTorch's wheel)"
    return 0
  fi
  NVRTC_FOUND="no libnvrtc.so.$major on LD_LIBRARY_PATH nor in PyTorch's wheels: cuDNN's runtime-compiled engines fall back"
  return 1
}

# gpu_configure BUILD ARCH [CMAKE ARGS...]: CMake for a CUDA build against the prefix only.
# FindHDF5 asks the h5cc it finds on PATH first (a node's serial /usr/bin/h5cc, or the prefix's
# h5pcc, which names /usr): a wrapper that answers nothing sends it to the prefix's paths below.
gpu_configure() {
  local build=$1 arch=$2
  shift 2
  cmake -S "$SRC" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMPITRAIN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
    -DCUDNN_ROOT="${CUDNN_ROOT:-}" -DNCCL_ROOT="${NCCL_ROOT:-}" \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" \
    -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_SKIP_GUESSING=ON \
    -DMPI_C_HEADER_DIR="$LIB/openmpi/include" -DMPI_CXX_HEADER_DIR="$LIB/openmpi/include" \
    -DMPI_CXX_SKIP_MPICXX=ON -DMPI_C_LIB_NAMES=mpi -DMPI_CXX_LIB_NAMES=mpi \
    -DMPI_mpi_LIBRARY="$LIB/openmpi/lib/libmpi.so" -DMPIEXEC_EXECUTABLE="$PREFIX/usr/bin/mpiexec" \
    -DHDF5_PREFER_PARALLEL=ON -DHDF5_C_INCLUDE_DIR="$PREFIX/usr/include/hdf5/openmpi" \
    -DHDF5_C_COMPILER_EXECUTABLE=/bin/false \
    -DHDF5_hdf5_LIBRARY_RELEASE="$LIB/hdf5/openmpi/libhdf5.so" \
    -DOPENBLAS_LIBRARY="$LIB/openblas-openmp/libopenblas.so" \
    -DOPENBLAS_INCLUDE_DIR="$PREFIX/usr/include/$MA/openblas-openmp" \
    -DDNNL_INCLUDE_DIR="$PREFIX/usr/include" -DDNNL_LIBRARY="$LIB/libdnnl.so" \
    -DPKG_CONFIG_EXECUTABLE=/bin/false "$@"
}

# gpu_targets BUILD: what the gpu-labelled tests run (from ctest), op-bench, and nccl-bench
# where CMake found NCCL
gpu_targets() {
  local build=$1
  cmake -DBUILD="$build" -DLABEL=gpu -P "$SRC/bench/gpu/test-targets.cmake" || return 1
  echo op-bench
  grep -E '^NCCL_LIBRARY:FILEPATH=' "$build/CMakeCache.txt" | grep -qv NOTFOUND && echo nccl-bench
  return 0
}
