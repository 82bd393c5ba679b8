#!/usr/bin/env bash
# Checks that mpitrain's build and run dependencies are present; installs the missing ones where it
# can (Debian/Ubuntu as root or with passwordless sudo), otherwise prints what is missing and how to
# get it (environment modules, Spack, CMake hints) and exits 1. Runs before every `make` build, so
# the all-present path is one line and well under a second.
#
# Environment:
#   CXX                           the C++ compiler to check (default: g++, then clang++)
#   HDF5_ROOT, OPENBLAS_ROOT,     install prefixes searched besides the system paths
#   DNNL_ROOT, BOOST_ROOT, GTEST_ROOT, CMAKE_PREFIX_PATH
#   MPITRAIN_DEPS_NO_INSTALL=1    never install, only report
#   MPITRAIN_DEPS_ASSUME_MISSING  comma/space-separated dependency names treated as missing, to
#                                 test the report (e.g. "hdf5,gtest"); never installs anything
set -euo pipefail

readonly DEPS=(compiler cmake make mpi hdf5 boost gtest openblas dnnl json sentencepiece pcre2 icu fortunes
                matplotlib torch jinja2 node)

# Per dependency: what it is, its Debian packages, a typical module name, a Spack spec.
declare -A WHAT=(
  [compiler]="C++20 compiler (g++ >= 11 or clang++ >= 14)"
  [cmake]="CMake >= 3.25"
  [make]="GNU make"
  [mpi]="Open MPI (mpicxx, mpirun)"
  [hdf5]="parallel HDF5 (H5_HAVE_PARALLEL)"
  [boost]="Boost.Program_options"
  [gtest]="GoogleTest"
  [openblas]="OpenBLAS, OpenMP build"
  [dnnl]="oneDNN (bf16 GEMMs on the CPU)"
  [json]="nlohmann-json (Hugging Face export)"
  [sentencepiece]="SentencePiece + spm_encode (tokenizers)"
  [pcre2]="PCRE2 (GPT-2 tokenizer's pre-tokenizer)"
  [icu]="ICU (NFC of Hugging Face tokenizers)"
  [fortunes]="fortunes text (the sample data)"
  [matplotlib]="matplotlib for Python 3 (tools/plot)"
  [torch]="PyTorch for Python 3 (tests: the HF export's reference)"
  [jinja2]="Jinja2 for Python 3 (tests: chat templates)"
  [node]="Node.js + npm (tests: GPT-2 vocabulary)"
)
declare -A APT=(
  [compiler]="g++"
  [cmake]="cmake"
  [make]="make"
  [mpi]="openmpi-bin libopenmpi-dev"
  [hdf5]="libhdf5-openmpi-dev hdf5-tools"
  [boost]="libboost-program-options-dev"
  [gtest]="libgtest-dev"
  [openblas]="libopenblas-openmp-dev"
  [dnnl]="libdnnl-dev"
  [json]="nlohmann-json3-dev"
  [sentencepiece]="libsentencepiece-dev sentencepiece"
  [pcre2]="libpcre2-dev"
  [icu]="libicu-dev"
  [fortunes]="fortunes"
  [matplotlib]="python3-matplotlib"
  [torch]="python3-torch"
  [jinja2]="python3-jinja2"
  [node]="nodejs npm"
)
declare -A MODULE=(
  [compiler]="gcc"
  [cmake]="cmake"
  [make]="-"
  [mpi]="openmpi"
  [hdf5]="hdf5/parallel"
  [boost]="boost"
  [gtest]="googletest"
  [openblas]="openblas"
  [dnnl]="onednn"
  [json]="-"
  [sentencepiece]="sentencepiece"
  [pcre2]="pcre2"
  [icu]="icu"
  [fortunes]="-"
  [matplotlib]="python"
  [torch]="pytorch"
  [jinja2]="python"
  [node]="nodejs"
)
declare -A SPACK=(
  [compiler]="gcc@12"
  [cmake]="cmake@3.25:"
  [make]="gmake"
  [mpi]="openmpi"
  [hdf5]="hdf5+mpi"
  [boost]="boost+program_options"
  [gtest]="googletest"
  [openblas]="openblas threads=openmp"
  [dnnl]="onednn"
  [json]="nlohmann-json"
  [sentencepiece]="sentencepiece"
  [pcre2]="pcre2"
  [icu]="icu4c"
  [fortunes]="-"
  [matplotlib]="py-matplotlib"
  [torch]="py-torch"
  [jinja2]="py-jinja2"
  [node]="node-js"
)
FOUND_CXX=""    # "g++ 12.2.0", for the all-present line
FOUND_CMAKE=""  # "3.25.1"

FORTUNES_FILE=/usr/share/games/fortunes/fortunes

multiarch() {
  local ma
  if ma=$(gcc -print-multiarch 2>/dev/null) && [[ -n $ma ]]; then
    echo "$ma"
  else
    echo "$(uname -m)-linux-gnu"
  fi
}
MULTIARCH=$(multiarch)

# Install prefixes to search: the *_ROOT variables given, CMAKE_PREFIX_PATH (':' or ';'), system.
prefixes() {
  local p
  for p in "$@"; do [[ -n $p ]] && echo "$p"; done
  tr ':;' '\n' <<<"${CMAKE_PREFIX_PATH:-}" | sed '/^$/d'
  printf '%s\n' /usr /usr/local
}

# Prints the first of the given paths that exists; fails if none does.
first_existing() {
  local p
  for p in "$@"; do
    if [[ -e $p ]]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# "major.minor..." >= "major.minor"?
version_at_least() {
  local have=$1 want=$2 lowest
  lowest=$(printf '%s\n%s\n' "$want" "$have" | sort -V)
  [[ ${lowest%%$'\n'*} == "$want" ]]
}

check_compiler() {
  local cxx version
  for cxx in ${CXX:-g++ clang++}; do
    command -v "$cxx" >/dev/null 2>&1 || continue
    if [[ $("$cxx" --version 2>/dev/null) == *clang* ]]; then
      version=$("$cxx" -dumpversion 2>/dev/null) || continue
      version_at_least "$version" 14 || continue
    else
      version=$("$cxx" -dumpfullversion -dumpversion 2>/dev/null) || continue
      version_at_least "$version" 11 || continue
    fi
    FOUND_CXX="$cxx $version"
    return 0
  done
  return 1
}

check_cmake() {
  local version
  command -v cmake >/dev/null 2>&1 || return 1
  version=$(cmake --version 2>/dev/null) || return 1
  version=${version%%$'\n'*}        # "cmake version 3.25.1"
  version=${version##* }
  version_at_least "$version" 3.25 || return 1
  FOUND_CMAKE=$version
}

check_make() {
  command -v make >/dev/null 2>&1
}

check_mpi() {
  command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 || return 1
  [[ $(mpirun --version 2>&1) == *"Open MPI"* ]]
}

check_hdf5() {
  local conf dir
  local -a candidates=() dirs
  [[ -n ${HDF5_ROOT:-} ]] && candidates+=("$HDF5_ROOT/include/H5pubconf.h")
  candidates+=(/usr/include/hdf5/openmpi/H5pubconf.h)
  mapfile -t dirs < <(prefixes)
  for dir in "${dirs[@]}"; do candidates+=("$dir/include/H5pubconf.h"); done
  for conf in "${candidates[@]}"; do
    if [[ -f $conf ]] && grep -q '^#define H5_HAVE_PARALLEL 1' "$conf"; then
      command -v h5diff >/dev/null 2>&1 && return 0  # tests compare HDF5 files (hdf5-tools)
    fi
  done
  return 1
}

check_boost() {
  local prefix
  local -a dirs
  mapfile -t dirs < <(prefixes "${BOOST_ROOT:-}")
  for prefix in "${dirs[@]}"; do
    [[ -f $prefix/include/boost/program_options.hpp ]] || continue
    if first_existing "$prefix"/lib{,64,/"$MULTIARCH"}/libboost_program_options{.so,.a} \
        >/dev/null; then
      return 0
    fi
  done
  return 1
}

check_gtest() {
  local prefix
  local -a dirs
  mapfile -t dirs < <(prefixes "${GTEST_ROOT:-}")
  for prefix in "${dirs[@]}"; do
    if first_existing "$prefix"/lib{,64,/"$MULTIARCH"}/cmake/GTest/GTestConfig.cmake >/dev/null; then
      return 0
    fi
  done
  [[ -d /usr/src/googletest ]]
}

check_openblas() {
  local -a candidates=()
  [[ -n ${OPENBLAS_ROOT:-} ]] && candidates+=("$OPENBLAS_ROOT"/lib{,64}/libopenblas.so)
  candidates+=("/usr/lib/$MULTIARCH/openblas-openmp/libopenblas.so")
  first_existing "${candidates[@]}" >/dev/null
}

check_dnnl() {
  local prefix
  local -a dirs
  mapfile -t dirs < <(prefixes "${DNNL_ROOT:-}")
  for prefix in "${dirs[@]}"; do
    [[ -f $prefix/include/oneapi/dnnl/dnnl.hpp ]] || continue
    first_existing "$prefix"/lib{,64,/"$MULTIARCH"}/libdnnl.so >/dev/null && return 0
  done
  return 1
}

check_json() {
  local prefix
  local -a dirs
  mapfile -t dirs < <(prefixes)
  for prefix in "${dirs[@]}"; do
    [[ -f $prefix/include/nlohmann/json.hpp ]] && return 0
  done
  return 1
}

# A header and a shared library under one prefix, as CMake's find_path / find_library look.
check_header_and_library() {  # check_header_and_library HEADER LIBRARY...
  local prefix header=$1 lib
  shift
  local -a dirs
  mapfile -t dirs < <(prefixes)
  for prefix in "${dirs[@]}"; do
    [[ -f $prefix/include/$header ]] || continue
    for lib in "$@"; do
      first_existing "$prefix"/lib{,64,/"$MULTIARCH"}/"$lib" >/dev/null || continue 2
    done
    return 0
  done
  return 1
}

check_sentencepiece() {
  check_header_and_library sentencepiece_processor.h libsentencepiece.so libsentencepiece_train.so &&
    command -v spm_encode >/dev/null 2>&1
}

check_pcre2() {
  check_header_and_library pcre2.h libpcre2-8.so
}

check_icu() {
  check_header_and_library unicode/normalizer2.h libicuuc.so
}

# tools/fetch-gpt2-vocab.sh runs npm; the GPT-2 known-answer test runs the reference on node.
check_node() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1
}

check_fortunes() {
  [[ -f $FORTUNES_FILE ]]
}

# tools/plot runs on python3 from PATH, or on /usr/bin/python3 (Debian's python3-matplotlib).
check_matplotlib() {
  local py find='import importlib.util, sys; sys.exit(importlib.util.find_spec("matplotlib") is None)'
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 && "$py" -c "$find" 2>/dev/null && return 0
  done
  return 1
}

# The tests' PyTorch reference (tests/support/hf_reference.py) runs on Debian's /usr/bin/python3
# (found, not imported: an import takes seconds).
check_torch() {
  /usr/bin/python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' \
    >/dev/null 2>&1
}

# The tests' chat-template reference (tests/support/chat_template_reference.py) runs jinja2, as
# transformers does, on Debian's /usr/bin/python3.
check_jinja2() {
  /usr/bin/python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("jinja2") is None)' \
    >/dev/null 2>&1
}

assumed_missing() {
  local list=${MPITRAIN_DEPS_ASSUME_MISSING:-}
  [[ ",${list// /,}," == *",$1,"* ]]
}

# Fills MISSING with the dependencies not found.
MISSING=()
check_all() {
  local dep
  MISSING=()
  for dep in "${DEPS[@]}"; do
    if assumed_missing "$dep" || ! "check_$dep"; then
      MISSING+=("$dep")
    fi
  done
}

# Sets BLOCKER to why this script cannot install here (empty if it can) and SUDO to the prefix that
# runs apt-get.
BLOCKER=""
SUDO=""
find_blocker() {
  if [[ ${MPITRAIN_DEPS_NO_INSTALL:-0} == 1 ]]; then
    BLOCKER="MPITRAIN_DEPS_NO_INSTALL=1"
  elif [[ ! -f /etc/debian_version ]] || ! command -v apt-get >/dev/null 2>&1; then
    BLOCKER="not Debian/Ubuntu"
  elif [[ $EUID -ne 0 ]] && ! { command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; }; then
    BLOCKER="not root and no passwordless sudo"
  elif [[ -n ${MPITRAIN_DEPS_ASSUME_MISSING:-} ]]; then
    BLOCKER="MPITRAIN_DEPS_ASSUME_MISSING is set: test mode, nothing is installed"
  elif [[ $EUID -ne 0 ]]; then
    SUDO="sudo"
  fi
}

packages_for() {
  local dep
  local -a out=()
  for dep in "$@"; do out+=("${APT[$dep]}"); done
  echo "${out[*]}"
}

apt_install() {
  local -a pkgs
  read -r -a pkgs <<<"$(packages_for "${MISSING[@]}")"
  echo "install-deps: installing ${pkgs[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends \
    -o Dpkg::Use-Pty=0 "${pkgs[@]}" >/dev/null
}

print_report() {
  local blocker=$1 dep modules="" specs=""
  echo "install-deps: missing ${#MISSING[@]} of ${#DEPS[@]} dependencies; cannot install them here ($blocker)."
  echo
  printf '  %-13s %-41s %-14s %-24s %s\n' DEPENDENCY WHAT MODULE SPACK DEBIAN/UBUNTU
  for dep in "${MISSING[@]}"; do
    printf '  %-13s %-41s %-14s %-24s %s\n' "$dep" "${WHAT[$dep]}" "${MODULE[$dep]}" \
      "${SPACK[$dep]}" "${APT[$dep]}"
    [[ ${MODULE[$dep]} != - ]] && modules+=" ${MODULE[$dep]}"
    [[ ${SPACK[$dep]} != - ]] && specs+=" ${SPACK[$dep]}"
  done
  echo
  if [[ -n $modules ]]; then
    echo "Environment modules (names vary by site: \`module avail\` or \`module spider <name>\` to look):"
    echo "  module load$modules"
  fi
  if [[ -n $specs ]]; then
    echo "Spack (then \`spack load\` them, which also sets CMAKE_PREFIX_PATH):"
    echo "  spack install$specs"
  fi
  if [[ " ${MISSING[*]} " == *" fortunes "* ]]; then
    echo "fortunes: the sample data is built from $FORTUNES_FILE (Debian 'fortunes', Fedora"
    echo "  'fortune-mod'); copy that file from any machine that has it."
  fi
  echo "Debian/Ubuntu (as root):"
  echo "  apt-get install $(packages_for "${MISSING[@]}")"
  echo "Point CMake at installs outside the system paths:"
  echo "  export HDF5_ROOT=<parallel hdf5 prefix> OPENBLAS_ROOT=<openblas prefix>"
  echo "  export DNNL_ROOT=<onednn prefix>"
  echo "  export CMAKE_PREFIX_PATH=<boost prefix>:<googletest prefix>:\$CMAKE_PREFIX_PATH"
  echo "  export CXX=<C++20 compiler>   # if the default one is too old"
}

main() {
  check_all
  if [[ ${#MISSING[@]} -eq 0 ]]; then
    echo "install-deps: all present ($FOUND_CXX, cmake $FOUND_CMAKE, Open MPI, parallel HDF5," \
      "Boost.Program_options, GoogleTest, OpenBLAS, oneDNN, nlohmann-json, SentencePiece, PCRE2," \
      "ICU, fortunes, matplotlib, PyTorch, Jinja2, Node.js)"
    return 0
  fi

  find_blocker
  if [[ -n $BLOCKER ]]; then
    print_report "$BLOCKER"
    return 1
  fi

  apt_install
  check_all
  if [[ ${#MISSING[@]} -ne 0 ]]; then
    echo "install-deps: still missing after apt-get install: ${MISSING[*]}" >&2
    return 1
  fi
  echo "install-deps: installed; all dependencies present"
}

main "$@"
