#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that building and running mpitrain needs on a
# machine that has a compiler, CMake and CUDA but no package registry and no MPI — a GPU node:
# Open MPI, parallel HDF5, Boost.Program_options, GoogleTest, OpenBLAS, oneDNN, and the libraries
# they load, minus what every Linux system has (C and C++ runtimes, zlib, OpenSSL, ...).
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
     libgtest-dev libopenblas-openmp-dev libdnnl-dev openmpi-bin openmpi-common fortunes
     fortunes-min)
# The runtime libraries behind them; their dependencies are added below.
RUNTIME=(libopenmpi3 libhdf5-openmpi-103-1 libboost-program-options1.74.0 libopenblas0-openmp
         libdnnl2)
# Present on any system that can run a compiler, or unsafe to shadow (the C library and the
# compiler's runtimes must stay the system's own).
BASE='^(libc6|libc-bin|libgcc-s1|libstdc\+\+6|libgomp1|libatomic1|libquadmath0|gcc-[0-9]+-base|'\
'zlib1g|libzstd1|liblzma5|libbz2-1\.0|libssl3|libcrypt1|libselinux1|libpcre2-.*|libudev1|'\
'libtinfo6|libcap-ng0|libcap2|libaudit1|libaudit-common|libpam.*|libsystemd0|libgpg-error0|'\
'libgcrypt20|liblz4-1|libdb5\.3|libuuid1|libblkid1|libmount1|libacl1|libattr1|libmd0|libbsd0|'\
'libffi8|libgmp10|libtasn1-6|libp11-kit0|libunistring2|libidn2-0|libnettle8|libhogweed6|'\
'libgnutls30|libkeyutils1|libcom-err2|libsemanage.*|libsepol2|libxml2|libicu72|'\
'libsqlite3-0|libreadline8|libncursesw6|libedit2|'\
'libdebian-installer4|libnewt0\.52|libslang2|libtextwrap1)$'  # the last four: debconf's front end

# Depends (not Recommends) of the runtime packages, recursively, that are shared libraries.
mapfile -t deps < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                      --no-breaks --no-replaces --no-enhances "${RUNTIME[@]}" 2>/dev/null |
                    grep -E '^lib[a-z0-9.+-]+$' | grep -Ev "$BASE" | sort -u)

mkdir -p "$DIR"
cd "$DIR"
rm -f ./*.deb
apt-get download "${DEV[@]}" "${RUNTIME[@]}" "${deps[@]}" >/dev/null
for f in ./*%3a*.deb; do [[ -e $f ]] && mv "$f" "${f//%3a/_}"; done  # epochs: plain file names
debs=(./*.deb)
echo "fetch-debs: ${#debs[@]} packages ($(du -sh . | cut -f1)) in $DIR"
