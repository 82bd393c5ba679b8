#!/usr/bin/env bash
# A build run on a CPU that lacks an extension it was compiled for (runtime/build_cpu.hpp): one
# clear message naming the extension and the remedies, exit code 2, before main runs; and the
# project's real programs, built for this CPU, start. The probe is compiled for LACKED_FEATURE,
# which this CPU lacks (tests/CMakeLists.txt).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

[ -n "${LACKED_FEATURE:-}" ] || { echo "SKIP: this CPU has both AVX512-FP16 and SSE4A"; exit 77; }
set +e
"$BUILD_DIR/built-for-another-cpu" > "$SCRATCH/out" 2> "$SCRATCH/err"
rc=$?
set -e
cat "$SCRATCH/err"
[ $rc = 2 ] || fail "exit code $rc, expected 2"
[ ! -s "$SCRATCH/out" ] || fail "main ran: $(cat "$SCRATCH/out")"
[ "$(wc -l < "$SCRATCH/err")" = 1 ] || fail "not exactly one line"
grep -qE "^built-for-another-cpu: error: this CPU lacks .*\b$LACKED_FEATURE\b, which this build" \
  "$SCRATCH/err" || fail "the message does not name $LACKED_FEATURE"
grep -qF 'make CMAKE_FLAGS=-DMPITRAIN_NATIVE=OFF' "$SCRATCH/err" || fail "no remedy"
# under mpirun: every rank stops, one message (rank 0's)
set +e
$MPIRUN -np 2 "$BUILD_DIR/built-for-another-cpu" > "$SCRATCH/out2" 2> "$SCRATCH/err2"
rc=$?
set -e
[ $rc != 0 ] || { cat "$SCRATCH/err2"; fail "mpirun: exit code 0"; }
[ ! -s "$SCRATCH/out2" ] || fail "mpirun: main ran: $(cat "$SCRATCH/out2")"
[ "$(grep -c 'error: this CPU lacks' "$SCRATCH/err2")" = 1 ] || { cat "$SCRATCH/err2"; fail "mpirun: not one message"; }
# the real programs run their main
"$BUILD_DIR/plan" --help > /dev/null || fail "plan --help"
echo "ok: $LACKED_FEATURE lacked -> exit 2 before main, one message from 2 ranks (mpirun exit $rc); plan starts"
