#!/usr/bin/env bash
# Never a fallback kernel (issue 33): with OPENBLAS_CORETYPE unset, what multiplies runs the
# OpenBLAS kernels that this CPU's flags call for, whatever the library chose itself: SkylakeX's
# (or a newer library's SapphireRapids) with AVX-512 F, BW, VL and DQ; Haswell's (or Zen's) with
# AVX2 and FMA. Checked in sgemm-rate, the trainer's --version, and a 2-rank trainer under mpirun
# (started again before MPI_Init: the launcher's environment must survive it), whose start-up line
# names the kernel and whose MFU peak is cached under it. A user's OPENBLAS_CORETYPE is respected,
# and the line says what would be faster.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ $flags == *" $1 "* ]]; }
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  best='SkylakeX|SapphireRapids' isa=AVX-512
elif has avx2 && has fma; then
  best='Haswell|Zen' isa=AVX2
else
  echo "SKIP: this CPU has neither AVX-512 nor AVX2 with FMA: the library's own kernels are its best"
  exit 77
fi
unset MPITRAIN_OPENBLAS_OWN_CORE

# A setting of the machine's own (some images set OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE because
# older OpenBLAS builds compute wrong results or crash on their CPUs): never overridden here, as
# the trainer never overrides it. It is respected and named, and the choice is left to the unit
# tests (test_blas_kernel: recorded CPUs).
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  line=$("$BUILD_DIR/sgemm-rate" --kernel)
  echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by this machine): $line"
  [[ ${line,,} =~ ^openblas\ ${OPENBLAS_CORETYPE,,}\ \(set\ by\ openblas_coretype ]] ||
    fail "the machine's OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is not respected: '$line'"
  version=$("$TRAINER" --version | grep 'BLAS ')
  [[ ${version,,} == *"kernels: openblas ${OPENBLAS_CORETYPE,,} (set by openblas_coretype"* ]] ||
    fail "the trainer's --version does not name the machine's setting: '$version'"
  echo "ok: the machine's OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is respected and named"
  exit 0
fi

line=$("$BUILD_DIR/sgemm-rate" --kernel)
echo "sgemm-rate: $line"
[[ $line =~ ^OpenBLAS\ ($best)\ \( ]] || fail "sgemm-rate runs '$line'; this CPU's $isa calls for $best"
version=$("$TRAINER" --version | grep 'BLAS ')
echo "trainer --version: $version"
[[ $version =~ kernels:\ OpenBLAS\ ($best)\ \( ]] || fail "the trainer runs '$version', not $best"

# Started again, a program keeps its process and its name (pgrep -x, top; exec of /proc/self/exe
# itself would rename it "exe").
"$BUILD_DIR/sgemm-rate" --threads 1 --n 2048 --repeats 100000 > /dev/null &
pid=$!
for _ in $(seq 1 500); do
  tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -q '^MPITRAIN_OPENBLAS_OWN_CORE=' && break
  sleep 0.02
done
name=$(cat "/proc/$pid/comm")
started_again=$(tr '\0' '\n' < "/proc/$pid/environ" | grep -c '^MPITRAIN_OPENBLAS_OWN_CORE=' || true)
kill "$pid"
wait "$pid" 2> /dev/null || true
[ "$name" = sgemm-rate ] || fail "started again, sgemm-rate is called '$name'"
echo "sgemm-rate: name '$name'$([ "$started_again" = 1 ] && echo ", started again")"

# 2 ranks, the MFU peak measured: both ranks start, each started again where the library chose
# another kernel; rank 0's line and the cache entry name the kernel.
# shellcheck disable=SC2046
MPITRAIN_PEAK_CACHE="$SCRATCH/peak.jsonl" run_trainer 2 "$SCRATCH/run.log" $(tiny_args) \
  --steps 1 --peak-gflops 0 --out-dir "$SCRATCH/run"
cat "$SCRATCH/run.log"
[ "$rc" = 0 ] || fail "2-rank run: exit $rc"
grep -q "^2 ranks = dp 2 " "$SCRATCH/run.log" || fail "the 2 ranks did not make one world"
grep -Eq "^fp32 products on rank 0: OpenBLAS ($best) \(" "$SCRATCH/run.log" ||
  fail "rank 0's products do not run $best"
if [ -e "$SCRATCH/peak.jsonl" ]; then
  cat "$SCRATCH/peak.jsonl"
  grep -Eq "\"gemm\":\"OpenBLAS sgemm ($best)\"" "$SCRATCH/peak.jsonl" ||
    fail "the peak is not cached under the kernel that measured it"
else
  echo "note: the peak was measured under contention, so not cached: its key not checked"
fi

# A user's setting: respected, with what would be faster where it is slower.
line=$(OPENBLAS_CORETYPE=Sandybridge "$BUILD_DIR/sgemm-rate" --kernel)
echo "OPENBLAS_CORETYPE=Sandybridge: $line"
[[ $line =~ ^OpenBLAS\ Sandybridge\ \(set\ by\ OPENBLAS_CORETYPE\;\ ($best)\ would\ be\ faster ]] ||
  fail "OPENBLAS_CORETYPE=Sandybridge not respected, or not said to be slower: '$line'"
echo "ok: the kernels of this CPU's $isa run; a user's OPENBLAS_CORETYPE is respected"
