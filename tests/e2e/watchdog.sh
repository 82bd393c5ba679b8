#!/usr/bin/env bash
# The collective watchdog: one rank hangs inside a step (MPITRAIN_FAULT=hang); with a 3 s
# --comm-timeout the job ends within timeout + 30 s with exit code 3 (kExitHang), and the report
# names the op that hung and the rank that did not arrive, at 2 and 4 ranks and under data,
# tensor and pipeline parallelism (a send/receive names its peer). Without a fault the same
# timeout raises no false alarm; --comm-timeout-startup covers the first step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
timeout=3
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 6 --comm-timeout "$timeout"

run_trainer 2 "$SCRATCH/clean.log" "$@" --out-dir "$SCRATCH/clean"
[ "$rc" = 0 ] || { cat "$SCRATCH/clean.log"; fail "a run without fault exited $rc"; }
echo "ok: no hang, no report, exit 0 with --comm-timeout $timeout"

# hang_case NAME NP LATE_RANK STEP OP LATE ARGS...: the job hangs; check time, code and the
# report: a line matching OP (the call) and one matching LATE (where the late rank is).
hang_case() {
  local name=$1 np=$2 late=$3 step=$4 op=$5 where=$6; shift 6
  local start=$SECONDS
  MPITRAIN_FAULT="hang:rank=$late:step=$step" \
    run_trainer "$np" "$SCRATCH/$name.log" "$@" --out-dir "$SCRATCH/$name"
  local took=$((SECONDS - start))
  grep "^watchdog:" "$SCRATCH/$name.log" | sed "s/^/  $name | /"
  [ "$rc" = 3 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit code $rc, expected 3 (kExitHang)"; }
  [ "$took" -le $((timeout + 30)) ] || fail "$name: the job took $took s, more than $timeout + 30 s"
  grep -q "fault injection: rank $late hangs in step $step" "$SCRATCH/$name.log" \
    || fail "$name: no hang injected"
  grep -Eq "^watchdog: rank [0-9]+ \(host [^)]*\): .* has not completed after" "$SCRATCH/$name.log" \
    || fail "$name: no watchdog report"
  grep -Eq "^watchdog: .*$op" "$SCRATCH/$name.log" || fail "$name: no report of the call '$op'"
  grep -Eq "$where" "$SCRATCH/$name.log" || fail "$name: the report does not say '$where'"
  echo "ok: $name: exit 3 after $took s; the report names the op and rank $late"
}

hang_case dp2 2 1 3 "dp all_reduce seq [0-9]+ \([0-9]+ bytes\) has not completed" \
  "not arrived: rank 1 \(host [^)]*\): in step 3, not in a communication call; last: " "$@"
hang_case startup 2 0 1 "has not completed after [0-9.]+ s \(timeout $timeout s\)" \
  "not arrived: rank 0 .*: in step 1, not in a communication call" \
  "$@" --comm-timeout 100 --comm-timeout-startup "$timeout"
# Rank 2 waits for 3 in a tp all-reduce, ranks 0 and 1 in dp all-reduces for 2 and 3: whoever
# reports first, rank 3 is named where it is (by rank 2 or 1; rank 0 names 2, blocked in tp).
hang_case tp2dp2 4 3 3 "(tp|dp) all_reduce seq [0-9]+ .* has not completed" \
  "not arrived: rank 3 \(host [^)]*\): in step 3, not in a communication call" "$@" --tp 2 --dp 2
hang_case pp2dp2 4 3 2 "(pp (send to|recv from) rank 3|dp all_reduce) seq [0-9]+ .* has not completed" \
  "(peer|not arrived:) rank 3 \(host [^)]*\): in step 2, not in a communication call" "$@" --pp 2 --dp 2
# dp 4, rank 0 late: the lowest member that arrived (rank 1) reports for all.
hang_case dp4 4 0 3 "dp all_reduce seq [0-9]+ .* has not completed" \
  "dp = world ranks 0-3; arrived at seq [0-9]+: 1-3; not arrived: 0" "$@" --dp 4
grep -q "rank 1 reports which ranks arrived" "$SCRATCH/dp4.log" || fail "dp4: no rank deferred to rank 1"
