#!/usr/bin/env bash
# The figures of a run in three segments (1 rank, 8 steps, synchronous checkpoints every 3): killed at the
# start of step 6 (steps 4-5 logged, then lost: the checkpoint is step 3's), resumed and stopped
# at step 6 (exit 85), resumed to the end. TensorBoard shows each step once (the event files read
# with its loader's restart purge), metrics.jsonl numbers the segments, report.json's rates are
# its own tokens over its own wall times (of the segment and of the run), and tools/plot draws
# the run over tokens, smoothed, with both resumes marked.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
PY=/usr/bin/python3
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 8 --save-interval 3 --async-save false --out-dir "$SCRATCH/run" --tensorboard "$SCRATCH/run/tb"

MPITRAIN_FAULT=kill:phase=step:rank=0:step=6 run_trainer 1 "$SCRATCH/one.log" "$@"
[ "$rc" != 0 ] && [ "$(metric "$SCRATCH/run/metrics.jsonl" step | tail -1)" = 5 ] ||
  { cat "$SCRATCH/one.log"; fail "segment 1: exit $rc, expected a kill after step 5"; }
run_trainer 1 "$SCRATCH/two.log" "$@" --resume auto --exit-at-step 6
[ "$rc" = 85 ] && grep -q "resumed from step 3" "$SCRATCH/two.log" ||
  { cat "$SCRATCH/two.log"; fail "segment 2: exit $rc, expected 85 after resuming from step 3"; }
cp "$SCRATCH/run/report.json" "$SCRATCH/report-2.json"
run_trainer 1 "$SCRATCH/three.log" "$@" --resume auto
[ "$rc" = 0 ] && grep -q "resumed from step 6" "$SCRATCH/three.log" ||
  { cat "$SCRATCH/three.log"; fail "segment 3: exit $rc, expected 0 after resuming from step 6"; }
grep "tokens seen" "$SCRATCH/three.log"

$PY - "$SCRATCH/run" "$SCRATCH/report-2.json" <<'PYEOF' || fail "segments, report, TensorBoard"
import glob, json, os, struct, sys
run = sys.argv[1]
records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
steps = [r for r in records if "loss" in r]
assert [r["step"] for r in steps] == list(range(1, 9)), [r["step"] for r in steps]
assert [r["segment"] for r in steps] == [1, 1, 1, 2, 2, 2, 3, 3], [r["segment"] for r in steps]
assert [r["tokens_seen"] for r in steps] == [256 * s for s in range(1, 9)], steps
times = [r["run_time_s"] for r in steps]
assert times == sorted(times) and times[0] > 0, times  # the time carried on across segments

# report.json: each rate is its own tokens over its own wall time. The segment's tokens are
# its steps' (tokens_per_s x step time of each record); the run's go back to step 1, and its
# time is step 6's run_time_s (segments 1 and 2) and segment 3's own.
def check(rep, number, first, last, carried):
    seg, whole = rep["segment"], rep["run"]
    assert seg["number"] == number and whole["segments"] == number, rep
    mine = [r for r in steps if first <= r["step"] <= last]
    tokens = round(sum(r["tokens_per_s"] * r["step_ms"] / 1e3 for r in mine))
    assert (seg["first_step"], seg["last_step"], seg["tokens"]) == (first, last, tokens), seg
    assert whole["first_step"] == 1 and whole["last_step"] == last, whole
    assert whole["tokens"] == rep["tokens_seen"] == steps[last - 1]["tokens_seen"], rep
    for block in (seg, whole):  # 6 significant digits in the file
        assert abs(block["tokens_per_s"] - block["tokens"] / block["wall_time_s"]) <= 1e-5 * block["tokens_per_s"], block
    assert abs(whole["wall_time_s"] - (carried + seg["wall_time_s"])) <= 1e-5 * whole["wall_time_s"], (carried, rep)
    assert seg["wall_time_s"] >= sum(r["step_ms"] for r in mine) / 1e3, (seg, mine)
    return seg["tokens_per_s"]
check(json.load(open(sys.argv[2])), 2, 4, 6, steps[2]["run_time_s"])
rate = check(json.load(open(os.path.join(run, "report.json"))), 3, 7, 8, steps[5]["run_time_s"])
print("ok: segments 1-3 in metrics.jsonl; report: segment 3 %d tokens at %.0f tok/s, the run %d"
      % (json.load(open(os.path.join(run, "report.json")))["segment"]["tokens"], rate, 2048))

# TensorBoard: every file opens with file_version and a SessionLog START at the step it writes
# first. Read as TensorBoard's EventAccumulator reads a run (files in name order; after a
# file_version >= 2, a START at step s drops every value kept at a step >= s), the loss is the
# 8 steps of metrics.jsonl once each; the files hold 10 (steps 4-5 logged twice).
def varint(b, at):
    v = shift = 0
    while True:
        v |= (b[at] & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not b[at - 1] & 0x80:
            return v, at

def fields(b):  # (field number, value): varint as int, fixed64/32 as bytes, bytes as bytes
    at = 0
    while at < len(b):
        key, at = varint(b, at)
        kind = key & 7
        if kind == 0:
            v, at = varint(b, at)
        elif kind in (1, 5):
            n = 8 if kind == 1 else 4
            v, at = b[at:at + n], at + n
        else:
            n, at = varint(b, at)
            v, at = b[at:at + n], at + n
        yield key >> 3, v

def events(path):
    data, at = open(path, "rb").read(), 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        yield data[at + 12:at + 12 + n]
        at += 12 + n + 4

files = sorted(glob.glob(os.path.join(run, "tb", "*tfevents*")))
assert len(files) == 3, files
kept, raw, version2 = [], 0, False
for i, path in enumerate(files):
    for k, ev in enumerate(events(path)):
        e = dict(fields(ev))
        step = e.get(2, 0)
        if k == 0:
            assert e.get(3) == b"brain.Event:2", (path, e)
        if k == 1:  # SessionLog { status: START }
            assert dict(fields(e[7])) == {1: 1} and step == [1, 4, 7][i], (path, e)
        version2 |= e.get(3) == b"brain.Event:2"
        if version2 and 7 in e and dict(fields(e[7])).get(1) == 1:
            kept = [(s, v) for s, v in kept if s < step]
        for f, value in fields(e.get(5, b"")):
            v = dict(fields(value))
            if v[1] == b"train/loss":
                kept.append((step, struct.unpack("<f", v[2])[0]))
                raw += 1
# TensorBoard holds each loss as a float, metrics.jsonl 9 significant digits of the double: the 9
# digits rounded to a float again can land a float away (double rounding), so each value is the
# step's within half a float's spacing (2^-24 relative) plus the 9 digits' rounding (5e-9).
assert raw == 10, raw
assert [s for s, _ in kept] == [r["step"] for r in steps], (kept, steps)
assert all(abs(v - r["loss"]) <= 6.5e-8 * abs(r["loss"]) for (_, v), r in zip(kept, steps)), (kept, steps)
print("ok: TensorBoard: 3 event files, 10 loss values written, 8 after the restart purge, "
      "equal to metrics.jsonl's")
PYEOF

# ---- tools/plot: tokens on the x axis, smoothed, the resumes marked --------------------------
"$SOURCE_DIR/tools/plot" --out "$SCRATCH/png" --x tokens --smooth 0.6 "$SCRATCH/run" > "$SCRATCH/plot.log" 2>&1 ||
  { cat "$SCRATCH/plot.log"; fail "tools/plot --x tokens --smooth 0.6 failed"; }
grep -q "x: tokens, smoothing 0.6, 2 resumes marked" "$SCRATCH/plot.log" ||
  { cat "$SCRATCH/plot.log"; fail "tools/plot did not mark the 2 resumes"; }
for f in loss lr tokens_per_s time_breakdown; do
  [ "$(head -c 8 "$SCRATCH/png/$f.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "$f.png is not a PNG"
done
$PY - "$SOURCE_DIR/tools/plot" "$SCRATCH/run" <<'PYEOF' || fail "tools/plot's axes, smoothing, resumes"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("plot", sys.argv[1])
plot = importlib.util.module_from_spec(importlib.util.spec_from_loader("plot", loader))
loader.exec_module(plot)
_, steps, evals = plot.read_run(sys.argv[2])
steps, evals = plot.with_x(sys.argv[2], steps, evals, "tokens")
assert plot.resumes(steps) == [768, 1536], plot.resumes(steps)  # after steps 3 and 6
assert [r["x"] for r in evals] == [2048], evals  # the evaluation after step 8
# TensorBoard's debiased EMA, by hand: 1; (0.25 + 1) / 0.75; (0.625 + 1.5) / 0.875.
s = plot.smoothed([1.0, 2.0, 3.0], 0.5)
assert all(abs(a - b) < 1e-12 for a, b in zip(s, [1.0, 5 / 3, 17 / 7])), s
assert plot.smoothed([2.0, float("nan"), 4.0], 0.5)[1] != plot.smoothed([2.0, float("nan"), 4.0], 0.5)[1]
assert plot.smoothed([3.0, 3.0], 0.9) == [3.0, 3.0] and plot.smoothed([1.0, 5.0], 0) == [1.0, 5.0]
print("ok: tools/plot: resumes at tokens 768 and 1536, TensorBoard's smoothing")
PYEOF
sed 's/, "tokens_seen": [0-9]*//' "$SCRATCH/run/metrics.jsonl" > "$SCRATCH/old.jsonl"  # an older record
for bad in "--smooth 1" "--smooth x" "--x time" "--x tokens $SCRATCH/old.jsonl"; do
  set +e
  # shellcheck disable=SC2086
  "$SOURCE_DIR/tools/plot" --out "$SCRATCH/bad" $bad "$SCRATCH/run" 2> "$SCRATCH/plot.err"
  code=$?
  set -e
  if [ "$code" != 2 ] || [ "$(wc -l < "$SCRATCH/plot.err")" != 1 ]; then
    cat "$SCRATCH/plot.err"; fail "plot $bad: exit $code, expected 2 and one line"
  fi
done
echo "ok: tools/plot refuses bad options and --x tokens on records without tokens: $(cat "$SCRATCH/plot.err")"
