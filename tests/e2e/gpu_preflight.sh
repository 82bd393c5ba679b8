#!/usr/bin/env bash
# What a GPU run needs, checked without a GPU (bench/gpu/preflight.sh): the carried packages
# configure a CUDA build on their own, every library the gpu tests' programs load comes from them,
# the toolkit or a base package, the carried set fits, the plan prints. Also the device plan's
# own guards: the targets read back from ctest include every kind of gpu test's program, an
# unknown step and a command whose budgets exceed one device command are refused (exit 2), and a
# package missing from the carried set is found. SKIP without nvcc or a CUDA build, or where the
# packages can be neither found nor fetched.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
grep -q '^MPITRAIN_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" ||
  { echo "SKIP: this build has no CUDA backend (MPITRAIN_CUDA=OFF)"; exit 77; }
run=$SOURCE_DIR/bench/gpu/run.sh
set +e
PREFLIGHT_WORK=$SCRATCH/work bash "$SOURCE_DIR/bench/gpu/preflight.sh" "$BUILD_DIR" >"$SCRATCH/preflight.log" 2>&1
rc=$?
set -e
cat "$SCRATCH/preflight.log"
[ "$rc" = 77 ] && exit 77
[ "$rc" = 0 ] || fail "preflight exited $rc"
grep -q '^preflight: ready for a GPU' "$SCRATCH/preflight.log" || fail "no verdict"
targets=$(sed -n 's/^ok    the gpu tests and benchmarks need: //p' "$SCRATCH/preflight.log")
for t in gpu_tests gpu_graphs test_staged_comm trainer prepare-data op-bench; do
  [[ " $targets " == *" $t "* ]] || fail "the targets read back from ctest lack $t: $targets"
done
grep -q 'bash bench/gpu/run.sh "$OUT" build tests ' "$SCRATCH/preflight.log" || fail "no plan printed"

set +e
bash "$run" "$SCRATCH/out" build bogus >"$SCRATCH/bogus.log" 2>&1
[ $? = 2 ] || { cat "$SCRATCH/bogus.log"; fail "an unknown step is not refused with exit 2"; }
bash "$run" "$SCRATCH/out" build tests e2e >"$SCRATCH/long.log" 2>&1
[ $? = 2 ] || { cat "$SCRATCH/long.log"; fail "a command over the device limit is not refused"; }
set -e
grep -q 'split them' "$SCRATCH/long.log" || fail "no advice to split: $(cat "$SCRATCH/long.log")"

# A carried set without oneDNN's OpenCL loader (what tools/fetch-debs.sh once missed) fails.
mkdir -p "$SCRATCH/tree"
git -C "$SOURCE_DIR" ls-files -z -co --exclude-standard | (cd "$SOURCE_DIR" && xargs -0 cp --parents -t "$SCRATCH/tree")
mkdir -p "$SCRATCH/tree/third_party/debs"
find "$SOURCE_DIR/third_party/debs" -name '*.deb' ! -name 'ocl-icd-libopencl1_*' \
  -exec cp -t "$SCRATCH/tree/third_party/debs" {} +
set +e
PREFLIGHT_FETCH=0 PREFLIGHT_WORK=$SCRATCH/work2 bash "$SCRATCH/tree/bench/gpu/preflight.sh" "$BUILD_DIR" >"$SCRATCH/missing.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$SCRATCH/missing.log"; fail "a missing package is not found (exit $rc)"; }
grep -q 'libOpenCL.so.1.*neither the prefix nor a GPU node has' "$SCRATCH/missing.log" ||
  { cat "$SCRATCH/missing.log"; fail "the missing library is not named"; }
echo "ok: the GPU run's packages, programs and plan are ready"
