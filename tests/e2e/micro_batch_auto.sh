#!/usr/bin/env bash
# --micro-batch-size auto on the CPU, where --device-memory-gib stands in for a GPU's free memory:
#   - with room for everything it takes global batch / dp (8 at tp 2);
#   - with a budget whose 90% lies just below that plan's figure it takes the next divisor (4),
#     and trains exactly as --micro-batch-size 4 does (losses string-equal);
#   - a budget that fits not even a micro-batch of 1 stops before any work: exit 2, the plan in
#     the message, no out-dir written; a micro-batch that is neither a number nor auto: exit 2.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 3 --tp 2
tiny=("$@")

run_trainer 2 "$SCRATCH/all.log" "${tiny[@]}" --micro-batch-size auto --device-memory-gib 1 \
  --out-dir "$SCRATCH/all"
[ "$rc" = 0 ] || { cat "$SCRATCH/all.log"; fail "auto with 1 GiB exited $rc"; }
line=$(grep '^micro-batch auto:' "$SCRATCH/all.log") || fail "no plan printed"
echo "$line"
[[ $line == *"-> micro-batch 8" ]] || fail "1 GiB should fit micro-batch 8"
grep -q 'global batch 8 = dp 1 x 1 micro-batch x 8' "$SCRATCH/all.log" || fail "not run at 8"

# The plan's figure for mb 8, in MiB: "mb 8: 12.34 MiB (" -> a budget whose 90% is 1% below it.
mib=$(sed -n 's/.*mb 8: \([0-9.]*\) MiB (.*/\1/p' <<<"$line")
[ -n "$mib" ] || fail "no MiB figure for mb 8 in: $line"
budget=$(awk -v m="$mib" 'BEGIN{printf "%.9f", m * 0.99 / 0.9 / 1024}')
run_trainer 2 "$SCRATCH/four.log" "${tiny[@]}" --micro-batch-size auto --device-memory-gib "$budget" \
  --out-dir "$SCRATCH/four"
[ "$rc" = 0 ] || { cat "$SCRATCH/four.log"; fail "auto with $budget GiB exited $rc"; }
grep '^micro-batch auto:' "$SCRATCH/four.log"
grep -q -- '-> micro-batch 4$' "$SCRATCH/four.log" || fail "$budget GiB should fit micro-batch 4"
run_trainer 2 "$SCRATCH/fixed.log" "${tiny[@]}" --micro-batch-size 4 --out-dir "$SCRATCH/fixed"
[ "$rc" = 0 ] || { cat "$SCRATCH/fixed.log"; fail "micro-batch 4 exited $rc"; }
diff <(metric "$SCRATCH/four/metrics.jsonl" loss) <(metric "$SCRATCH/fixed/metrics.jsonl" loss) ||
  fail "auto (4) and --micro-batch-size 4 train differently"

run_trainer 2 "$SCRATCH/none.log" "${tiny[@]}" --micro-batch-size auto --device-memory-gib 1e-6 \
  --out-dir "$SCRATCH/none"
[ "$rc" = 2 ] || { cat "$SCRATCH/none.log"; fail "an impossible budget exited $rc, expected 2"; }
grep -q 'none fits' "$SCRATCH/none.log" || { cat "$SCRATCH/none.log"; fail "no plan in the message"; }
[ ! -e "$SCRATCH/none" ] || fail "the out-dir was written although nothing fits"
run_trainer 1 "$SCRATCH/bad.log" "${tiny[@]}" --tp 1 --micro-batch-size some --out-dir "$SCRATCH/bad"
[ "$rc" = 2 ] || fail "--micro-batch-size some exited $rc, expected 2"
grep -q "micro-batch-size must be a positive integer or auto (got 'some')" "$SCRATCH/bad.log" ||
  { cat "$SCRATCH/bad.log"; fail "unclear message for a bad micro-batch"; }
echo "ok: micro-batch auto picks the largest that fits and trains as the fixed one"
