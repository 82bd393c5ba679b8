#!/usr/bin/env bash
# Prepares the sample corpus for `make run` and the tests: the text of the Debian `fortunes`
# package (regular files under /usr/share/games/fortunes, without *.dat, *.u8 and links, sorted
# by name) -> DATA_DIR/train.h5 and DATA_DIR/val.h5 (byte-level, --val-fraction 0.05: the seeded
# split puts 6 of its 62 pieces, 8.9% of the tokens, in val).
#
#   tools/prepare-sample-data.sh DATA_DIR      (BUILD_DIR: where prepare-data is; default build/)
#
# Idempotent: does nothing if both files exist and are newer than the prepare-data binary. It
# replaces only files it made itself (DATA_DIR/.prepare-sample-data marks them): others exit 2.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DATA_DIR" >&2
  exit 2
fi
data_dir=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
prepare=$build_dir/prepare-data
fortunes=${MPITRAIN_FORTUNES:-/usr/share/games/fortunes}  # another root: a GPU node's unpacked packages

if [[ ! -x $prepare ]]; then
  echo "prepare-sample-data: $prepare not found; build first (cmake --build $build_dir)" >&2
  exit 2
fi
if [[ -f $data_dir/train.h5 && -f $data_dir/val.h5 &&
      $data_dir/train.h5 -nt $prepare && $data_dir/val.h5 -nt $prepare ]]; then
  echo "prepare-sample-data: $data_dir/train.h5 and val.h5 are up to date"
  exit 0
fi

inputs=()
if [[ -d $fortunes ]]; then
  mapfile -t inputs < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' |
                        LC_ALL=C sort)
fi
if [[ ${#inputs[@]} -eq 0 ]]; then
  echo "prepare-sample-data: the sample corpus ($fortunes) is missing;" \
       "install it with: apt-get install fortunes" >&2
  exit 2
fi

stamp=$data_dir/.prepare-sample-data  # written after each success: the files are this script's
overwrite=()
if [[ -e $stamp ]]; then
  overwrite=(--overwrite)
else
  for name in train.h5 val.h5 tokenizer.json; do
    if [[ -e $data_dir/$name ]]; then
      echo "prepare-sample-data: $data_dir/$name exists and was not made by this script;" \
           "remove it or give another DATA_DIR" >&2
      exit 2
    fi
  done
fi
"$prepare" --out-dir "$data_dir" --val-fraction 0.05 --format hdf5 "${overwrite[@]}" "${inputs[@]}"
touch "$stamp"
