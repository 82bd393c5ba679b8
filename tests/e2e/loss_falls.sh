#!/usr/bin/env bash
# A tiny model learns the sample corpus: the loss falls from ln(256) = 5.55 (uniform over bytes)
# in 80 steps to a mean below 3.6 over the last 10 steps, the validation loss below 3.4 (measured
# here: ~3.4 and ~3.2), and a text sample is printed.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
$MPIRUN -np 2 "$TRAINER" $(tiny_args) --steps 80 --eval-interval 40 --sample-tokens 40 \
  --out-dir "$SCRATCH/run" > "$SCRATCH/log" 2>&1 || { cat "$SCRATCH/log"; fail "trainer failed"; }
cat "$SCRATCH/log"
first=$(metric "$SCRATCH/run/metrics.jsonl" loss | head -1)
last=$(metric "$SCRATCH/run/metrics.jsonl" loss | tail -10 | awk '{s+=$1} END{printf "%.6f", s/NR}')
val=$(metric "$SCRATCH/run/metrics.jsonl" val_loss | tail -1)
echo "first loss $first, mean of the last 10 losses $last, last val loss $val"
awk -v a="$first" 'BEGIN{exit !(a > 5.3 && a < 5.8)}' || fail "first loss $first is not ~ln(256)"
awk -v a="$last" 'BEGIN{exit !(a < 3.6)}' || fail "loss did not fall below 3.6: $last"
awk -v a="$val" 'BEGIN{exit !(a < 3.4)}' || fail "val loss did not fall below 3.4: $val"
[ "$(metric "$SCRATCH/run/metrics.jsonl" val_loss | wc -l)" = 2 ] || fail "expected 2 evaluations"
grep -q -- "---- sample" "$SCRATCH/log" || fail "no text sample printed"
for key in step loss lr grad_norm tokens_per_s step_ms mfu; do
  grep -q "\"$key\":" "$SCRATCH/run/metrics.jsonl" || fail "metrics.jsonl lacks $key"
done
