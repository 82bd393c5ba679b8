#!/usr/bin/env bash
# The build id (runtime/build_id.hpp) names the source the programs were built from: the
# checkout's commit, with "-dirty" where tracked files differ from it. It is taken at every
# build, so an incremental build after a commit, a pull or an edit does not keep the commit the
# build directory was configured at. Run after editing without building, this test fails, and
# rightly: the programs are not of the source beside them.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

[ "$(git -C "$SOURCE_DIR" rev-parse --show-toplevel 2> /dev/null)" = "$(realpath "$SOURCE_DIR")" ] ||
  { echo "SKIP: $SOURCE_DIR is not the top of a git checkout, so the build id says unknown"; exit 77; }
commit=$(git -C "$SOURCE_DIR" rev-parse --short=12 HEAD)
[ -z "$(git -C "$SOURCE_DIR" status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
first=$("$BUILD_DIR/trainer" --version | head -n 1)
[[ "$first" =~ ^trainer\ [0-9]+\.[0-9]+\.[0-9]+\+(.*)$ ]] || fail "--version's first line: $first"
[ "${BASH_REMATCH[1]}" = "$commit" ] ||
  fail "the trainer says it was built from ${BASH_REMATCH[1]}, the source is at $commit"
echo "ok: $first"
