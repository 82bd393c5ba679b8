#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that building and running mpitrain needs on a
# machine that has a compiler, CMake and CUDA but no package registry and no MPI — a GPU node:
# Open MPI, parallel HDF5, Boost.Program_options, GoogleTest, OpenBLAS, oneDNN, nlohmann-json,
# SentencePiece, PCRE2's and ICU's headers, and
# the libraries they load, minus what every Linux system has (C and C++ runtimes, zlib, OpenSSL).
# bench/gpu/run.sh unpacks them with `dpkg -x` into a prefix there and points CMake at it.
#
# Usage: tools/fetch-debs.sh [DIR]      (default third_party/debs, ignored by git)
# Needs apt-get (Debian/Ubuntu); `apt-get update` first if the package lists are stale.
set -euo pipefail

cd "$(dirname "$0")/.."
DIR=${1:-third_party/debs}

# What the build compiles and links against (headers, .so links, CMake package files); mpirun
# for the tests and benchmarks over several ranks; the sample corpus the tests train on.
DEV=(libopenmpi-dev libhdf5-openmpi-dev libboost-program-options1.74-dev libboost1.74-dev
     libgtest-dev libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libsentencepiece-dev
     libpcre2-dev libicu-dev openmpi-bin openmpi-common fortunes fortunes-min)
# The runtime libraries behind them; their dependencies are added below.
RUNTIME=(libopenmpi3 libhdf5-openmpi-103-1 libboost-program-options1.74.0 libopenblas0-openmp
         libdnnl2 libsentencepiece0)
# What a GPU node already has (tools/debs-base.txt, one regular expression a line).
BASE="^($(grep -v '^#' tools/debs-base.txt | paste -sd'|'))\$"

# Depends (not Recommends) of the runtime packages, recursively, that are shared libraries: the
# lib* packages, and the ones a library package depends on under another name (oneDNN's OpenCL
# loader, ocl-icd-libopencl1, named only as one of alternatives). bench/gpu/preflight.sh checks
# that every library the programs load is in the result.
mapfile -t deps < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                      --no-breaks --no-replaces --no-enhances "${RUNTIME[@]}" 2>/dev/null |
                    grep -E '^(lib[a-z0-9.+-]+|ocl-icd-libopencl1)$' | grep -Ev "$BASE" | sort -u)

mkdir -p "$DIR"
cd "$DIR"
rm -f ./*.deb
apt-get download "${DEV[@]}" "${RUNTIME[@]}" "${deps[@]}" >/dev/null
for f in ./*%3a*.deb; do [[ -e $f ]] && mv "$f" "${f//%3a/_}"; done  # epochs: plain file names
debs=(./*.deb)
echo "fetch-debs: ${#debs[@]} packages ($(du -sh . | cut -f1)) in $DIR"
