#!/usr/bin/env bash
# Replica drift: MPITRAIN_FAULT=drift moves one parameter of one rank by one ulp after step 3;
# with --check-replicas 2 the check after step 4 stops the run (exit 1) naming the tensor, both
# versions' ranks and statistics, and the differing element. Replicas are bit-identical in a run
# without the fault even when checked after every step. At 2 ranks (dp 2) and 4 (tp 2 x dp 2).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 6
for layout in "2:1:--dp 2" "4:3:--tp 2 --dp 2"; do
  np=${layout%%:*}
  rest=${layout#*:}
  late=${rest%%:*}
  # shellcheck disable=SC2206
  grid=(${rest#*:})
  name="np$np"
  run_trainer "$np" "$SCRATCH/$name-clean.log" "$@" "${grid[@]}" --check-replicas 1 --out-dir "$SCRATCH/$name-clean"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-clean.log"; fail "$name: replicas checked every step: exit $rc"; }

  MPITRAIN_FAULT="drift:rank=$late:step=3" run_trainer "$np" "$SCRATCH/$name.log" "$@" "${grid[@]}" \
    --check-replicas 2 --out-dir "$SCRATCH/$name"
  grep "trainer:" "$SCRATCH/$name.log" || true
  [ "$rc" = 1 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 1"; }
  grep -q "fault injection: rank $late moves .* by one ulp after step 3" "$SCRATCH/$name.log" || fail "$name: no drift injected"
  grep -Eq "step 4: replica drift: the data-parallel copies of h\.[0-9]+\.[a-z0-9_.]+ \(global tensor [0-9]+, shape \[[0-9, ]+\] f32\) differ" \
    "$SCRATCH/$name.log" || fail "$name: no drift message naming the tensor"
  grep -Eq "version [12] on world rank\(s\) $late: hash [0-9a-f]{16}, 0 NaN, 0 inf of [0-9]+; finite min .* max .* mean .* std .*; differs from rank [0-9]+'s copy in 1 element\(s\), first at index 0" \
    "$SCRATCH/$name.log" || fail "$name: the message does not name rank $late's version and the differing element"
  grep -Eq "version 1 on world rank\(s\) [0-9]+: hash [0-9a-f]{16}" "$SCRATCH/$name.log" || fail "$name: the other version is not named"
  echo "ok: $name: drift on rank $late found after step 4; clean run checked every step"
done
