#!/usr/bin/env bash
# The watchdog's device path (DeviceWork: how it watches NCCL) with a stand-in that runs here
# (tests/support/device_work_probe.cpp), 2 s timeout, 2 ranks:
#   hang  rank 1 never starts the device operation: exit 3 within 30 s; rank 0's report names
#         the operation on dp/nccl and rank 1 as not arrived, while its host was in no call
#   fail  rank 1's stand-in reports an asynchronous error: its text, the stand-in aborted before
#         the job ends, exit 3
#   ok    the operation completes everywhere: no report, exit 0
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
probe="$BUILD_DIR/device-work-probe"
[ -x "$probe" ] || fail "device-work-probe is not built"

run_probe() {  # run_probe MODE: sets rc, output in $SCRATCH/MODE.log
  set +e
  $MPIRUN -np 2 "$probe" "$1" > "$SCRATCH/$1.log" 2>&1
  rc=$?
  set -e
}

start=$SECONDS
run_probe hang
took=$((SECONDS - start))
grep '^watchdog:' "$SCRATCH/hang.log" | sed 's/^/  hang | /'
[ "$rc" = 3 ] || { cat "$SCRATCH/hang.log"; fail "hang: exit $rc, expected 3"; }
[ "$took" -le 30 ] || fail "hang: took $took s"
grep -Eq '^watchdog: rank 0 .*dp/nccl all_reduce seq 1 \(4 bytes\) has not completed after' \
  "$SCRATCH/hang.log" || { cat "$SCRATCH/hang.log"; fail "hang: no report of the device operation"; }
grep -Eq 'not arrived: rank 1 \(host [^)]*\): in step 2, not in a communication call' \
  "$SCRATCH/hang.log" || { cat "$SCRATCH/hang.log"; fail "hang: rank 1 not named"; }
echo "ok: hang: exit 3 after $took s, rank 1 named"

run_probe fail
[ "$rc" = 3 ] || { cat "$SCRATCH/fail.log"; fail "fail: exit $rc, expected 3"; }
grep -q "^watchdog: rank 1 (host [^)]*): NCCL communicator 'dp/nccl': unhandled system error" \
  "$SCRATCH/fail.log" || { cat "$SCRATCH/fail.log"; fail "fail: the error is not reported"; }
grep -q '^stand-in: aborted by the watchdog' "$SCRATCH/fail.log" || fail "fail: not aborted"
echo "ok: fail: exit 3 with the error, the device work aborted"

run_probe ok
[ "$rc" = 0 ] || { cat "$SCRATCH/ok.log"; fail "ok: exit $rc"; }
grep -q 'device-work-probe ok: no report' "$SCRATCH/ok.log" || fail "ok: no end line"
! grep -q '^watchdog:' "$SCRATCH/ok.log" || fail "ok: a false report"
echo "ok: a completed device operation raises no report"
