#!/usr/bin/env bash
# What a GPU run needs, checked without a GPU (bench/gpu/preflight.sh): the carried packages
# configure a CUDA build on their own, every library the gpu tests' programs load comes from them,
# the toolkit or a base package, the carried set fits, the plan prints. Also the device plan's
# own guards: the targets read back from ctest include every kind of gpu test's program, an
# unknown step and a command whose budgets exceed one device command are refused (exit 2), and a
# package missing from the carried set is found; a dry run that would leave more files than a lent
# machine returns fails, and so does a plan over its device time. First, with or without CUDA: the
# scripts the GPU run executes parse (bench/gpu/check_scripts.py), and an awk program whose comment
# swallows its closing brace (once in device_cuda_storage.sh, found only on a GPU) and a Python
# program that does not compile are found. SKIP without nvcc or a CUDA build, or where the
# packages can be neither found nor fetched.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
check=$SOURCE_DIR/bench/gpu/check_scripts.py
python3 "$check" --ctest "$BUILD_DIR" gpu >"$SCRATCH/scripts.log" 2>&1 ||
  { cat "$SCRATCH/scripts.log"; fail "the gpu e2e scripts do not all parse"; }
grep -q '^ok .*/device_cuda_storage.sh: bash -n, 3 awk' "$SCRATCH/scripts.log" ||
  { cat "$SCRATCH/scripts.log"; fail "device_cuda_storage.sh's awk programs were not all checked"; }
cat >"$SCRATCH/planted.sh" <<'EOF'
#!/usr/bin/env bash
held=$(awk -v p2="$(echo "1 MiB")" -v p4=2 '
  BEGIN {
    if (p2 / p4 < 0.73) {  # the log rounds to 0.01 MiB print "FAIL"; exit 1 }
  }')
python3 -c 'print("unclosed"' || true
EOF
set +e
python3 "$check" "$SCRATCH/planted.sh" >"$SCRATCH/planted.log" 2>&1
rc=$?
set -e
cat "$SCRATCH/planted.log"
[ "$rc" = 1 ] || fail "a script with a broken awk and Python program passes (exit $rc)"
grep -q 'planted.sh:2: the awk program does not parse' "$SCRATCH/planted.log" || fail "the awk program is not named"
grep -q 'planted.sh:6: the Python program does not compile' "$SCRATCH/planted.log" || fail "the Python program is not named"
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
for steps in "build tests" "bench hf compare nccl"; do
  grep -q "^ok    command [12] ($steps), dry: OUT gets 2 files of 8: logs-${steps// /-}.tar.gz summary.md" \
    "$SCRATCH/preflight.log" || fail "the dry run of '$steps' does not leave summary.md and one archive"
done
grep -q "^ok    NVRTC for cuDNN's runtime-compiled engines: .*libnvrtc.so" "$SCRATCH/preflight.log" ||
  fail "NVRTC not found"

# More files in OUT than a lent machine returns: the command fails, saying so.
mkdir -p "$SCRATCH/crowded"
touch "$SCRATCH/crowded/extra-"{1..7}.log
set +e
MPITRAIN_GPU_WORK=$SCRATCH/work bash "$run" --dry-run "$SCRATCH/crowded" tests >"$SCRATCH/crowded.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$SCRATCH/crowded.log"; fail "an OUT of 9 files passes (exit $rc)"; }
grep -q 'holds 9 files: a lent machine returns 8' "$SCRATCH/crowded.log" || { cat "$SCRATCH/crowded.log"; fail "no count"; }
# A plan over its device time is refused.
set +e
GPU_BUDGET_COMPARE=400 bash "$run" --plan >"$SCRATCH/over.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] && grep -q 'more than 660 s' "$SCRATCH/over.log" || { cat "$SCRATCH/over.log"; fail "a plan over 660 s passes"; }

set +e
bash "$run" "$SCRATCH/out" build bogus >"$SCRATCH/bogus.log" 2>&1
[ $? = 2 ] || { cat "$SCRATCH/bogus.log"; fail "an unknown step is not refused with exit 2"; }
bash "$run" "$SCRATCH/out" build tests e2e >"$SCRATCH/long.log" 2>&1
[ $? = 2 ] || { cat "$SCRATCH/long.log"; fail "a command over the device limit is not refused"; }
set -e
grep -q 'split them' "$SCRATCH/long.log" || fail "no advice to split: $(cat "$SCRATCH/long.log")"

# A carried set without oneDNN's OpenCL loader (what tools/fetch-debs.sh once missed) fails: the
# prefix as the set less that package unpacks (the first check's, its files removed), checked
# again on the first check's configure (a fresh unpack and CUDA configure: ~30 s more).
ocl=("$SOURCE_DIR"/third_party/debs/ocl-icd-libopencl1_*.deb)
[ -e "${ocl[0]}" ] || fail "third_party/debs holds no ocl-icd-libopencl1 package"
dpkg-deb --fsys-tarfile "${ocl[0]}" | tar -t | while read -r f; do
  [ -d "$SCRATCH/work/prefix/$f" ] || rm -f "$SCRATCH/work/prefix/$f"
done
! compgen -G "$SCRATCH/work/prefix/usr/lib/x86_64-linux-gnu/libOpenCL.so*" > /dev/null ||
  fail "the OpenCL loader is still in the prefix"
set +e
PREFLIGHT_FETCH=0 PREFLIGHT_WORK=$SCRATCH/work bash "$SOURCE_DIR/bench/gpu/preflight.sh" "$BUILD_DIR" >"$SCRATCH/missing.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$SCRATCH/missing.log"; fail "a missing package is not found (exit $rc)"; }
grep -q 'libOpenCL.so.1.*neither the prefix nor a GPU node has' "$SCRATCH/missing.log" ||
  { cat "$SCRATCH/missing.log"; fail "the missing library is not named"; }
echo "ok: the GPU run's packages, programs and plan are ready"
