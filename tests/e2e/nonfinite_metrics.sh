#!/usr/bin/env bash
# Non-finite numbers stay valid JSON: a run whose step 2 gradient holds a NaN (MPITRAIN_FAULT,
# --on-nan skip) writes its grad_norm as null; metrics.jsonl and report.json parse with a strict
# JSON parser (NaN / Infinity refused), tools/plot draws the run (and null losses as gaps), the
# `metric` helper reads it.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
MPITRAIN_FAULT=nan:layer=1:step=2 run_trainer 2 "$SCRATCH/run.log" $(tiny_args) --steps 3 \
  --on-nan skip --eval-interval 1 --out-dir "$SCRATCH/run"
[ "$rc" = 0 ] || { cat "$SCRATCH/run.log"; fail "the NaN run exited $rc"; }
grep -q "update skipped" "$SCRATCH/run.log" || { cat "$SCRATCH/run.log"; fail "no NaN was injected"; }

/usr/bin/python3 - "$SCRATCH/run/metrics.jsonl" "$SCRATCH/run/report.json" <<'PYEOF'
import json, sys

def refuse(word):
    raise ValueError("non-JSON constant " + word)

with open(sys.argv[1]) as f:
    records = [json.loads(line, parse_constant=refuse) for line in f]
with open(sys.argv[2]) as f:
    json.load(f, parse_constant=refuse)
steps = [r for r in records if "loss" in r]
assert [r["step"] for r in steps] == [1, 2, 3], steps
assert steps[1]["grad_norm"] is None, steps[1]
assert all(isinstance(r["grad_norm"], float) for r in (steps[0], steps[2])), steps
print("ok: metrics.jsonl (%d records) and report.json are strict JSON; step 2 grad_norm null"
      % len(records))
PYEOF
[ "$(metric "$SCRATCH/run/metrics.jsonl" grad_norm | sed -n 2p)" = null ] || fail "metric: step 2's grad_norm is not null"

"$SOURCE_DIR/tools/plot" --out "$SCRATCH/png" "$SCRATCH/run" > "$SCRATCH/plot.log" 2>&1 \
  || { cat "$SCRATCH/plot.log"; fail "tools/plot refused the run"; }
for f in loss lr tokens_per_s time_breakdown; do
  [ "$(head -c 8 "$SCRATCH/png/$f.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    || fail "$f.png is not a PNG"
done
# A null loss and val_loss (what MetricsLog writes for a NaN loss: test_metrics.cpp) are gaps.
mkdir "$SCRATCH/lossless"
sed -e '/"step": 2, "loss"/s/"loss": [^,]*/"loss": null/' -e 's/"val_loss": [^}]*/"val_loss": null/' \
  "$SCRATCH/run/metrics.jsonl" > "$SCRATCH/lossless/metrics.jsonl"
grep -q '"loss": null' "$SCRATCH/lossless/metrics.jsonl" || fail "no null loss to plot"
"$SOURCE_DIR/tools/plot" --out "$SCRATCH/png2" "$SCRATCH/lossless" > "$SCRATCH/plot2.log" 2>&1 \
  || { cat "$SCRATCH/plot2.log"; fail "tools/plot refused a null loss"; }
echo "ok: tools/plot drew the run with a null grad_norm, and one with null losses"
