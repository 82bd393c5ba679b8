#!/usr/bin/env bash
# The NaN guard: MPITRAIN_FAULT=nan puts a NaN into block 1's gradient in step 3.
#   --on-nan skip: the step's update is skipped on every rank and counted, the run finishes; the
#     parameters after the skipped step equal those of a run that stopped before it (h5diff, exact).
#   --on-nan stop: exit 1 with a message naming the step, block and tensor with its statistics,
#     and <out-dir>/nonfinite-step-3.json with every rank's non-finite tensors.
# At 2 ranks (dp 2) and 4 ranks (tp 2 x pp 2).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
set -- $(tiny_args) --lr-schedule constant
for layout in "2:--dp 2" "4:--tp 2 --pp 2"; do
  np=${layout%%:*}
  # shellcheck disable=SC2206
  grid=(${layout#*:})
  name="np$np"
  run_trainer "$np" "$SCRATCH/$name-ref.log" "$@" "${grid[@]}" --steps 2 --out-dir "$SCRATCH/$name-ref" \
    --export-params "$SCRATCH/$name-ref.h5"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-ref.log"; fail "$name: reference run exited $rc"; }

  MPITRAIN_FAULT=nan:layer=1:step=3 run_trainer "$np" "$SCRATCH/$name-skip.log" "$@" "${grid[@]}" \
    --steps 3 --on-nan skip --out-dir "$SCRATCH/$name-skip" --export-params "$SCRATCH/$name-skip.h5"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-skip.log"; fail "$name: --on-nan skip exited $rc"; }
  grep "update skipped" "$SCRATCH/$name-skip.log" || fail "$name: no skip reported"
  grep -q "step 3: non-finite gradient: first in h.1.attn.proj.weight (block 1) on rank [0-9]*: shape \[.*\] f32, 1 NaN, 0 inf of [0-9]*; finite min .* max .* mean .* std " \
    "$SCRATCH/$name-skip.log" || fail "$name: the skip message does not name the tensor and its statistics"
  grep -q '"skipped_steps": 1' "$SCRATCH/$name-skip/report.json" || fail "$name: report.json does not count the skip"
  h5diff "$SCRATCH/$name-ref.h5" "$SCRATCH/$name-skip.h5" > "$SCRATCH/$name.diff" 2>&1 \
    || { head -20 "$SCRATCH/$name.diff"; fail "$name: the skipped step changed the parameters"; }
  echo "ok: $name: --on-nan skip: step 3 skipped, parameters identical to the 2-step run's"

  MPITRAIN_FAULT=nan:layer=1:step=3 run_trainer "$np" "$SCRATCH/$name-stop.log" "$@" "${grid[@]}" \
    --steps 5 --on-nan stop --out-dir "$SCRATCH/$name-stop"
  [ "$rc" = 1 ] || { cat "$SCRATCH/$name-stop.log"; fail "$name: --on-nan stop exited $rc, expected 1"; }
  grep "stopping (--on-nan stop" "$SCRATCH/$name-stop.log" || fail "$name: no stop message"
  grep -q "h.1.attn.proj.weight (block 1)" "$SCRATCH/$name-stop.log" || fail "$name: the stop message does not name the tensor"
  json="$SCRATCH/$name-stop/nonfinite-step-3.json"
  [ -f "$json" ] || fail "$name: no $json"
  grep -q '"tensor": "h.1.attn.proj.weight", "layer": 1' "$json" || { cat "$json"; fail "$name: diagnostics lack the tensor"; }
  [ "$(metric "$SCRATCH/$name-stop/metrics.jsonl" loss | wc -l)" = 2 ] || fail "$name: steps logged after the stop"
  echo "ok: $name: --on-nan stop: exit 1, diagnostics in $(basename "$json")"
done
