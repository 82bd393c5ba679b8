#!/usr/bin/env bash
# Where the time goes, end to end on 2 ranks (pp 2): --trace timelines merged by trace-merge (both
# ranks, the four lanes, the regions), --tensorboard events, the time breakdown in metrics.jsonl
# (its parts fit inside the step), report.json at the end (its set-up before the steps) and on an
# early stop (exit 85), and tools/plot's PNGs; bad input to the trainer's options, trace-merge and
# tools/plot exits 2.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
PY=python3
# shellcheck disable=SC2046
set -- $(tiny_args) --pp 2 --steps 6 --save-interval 3
run_trainer 2 "$SCRATCH/run.log" "$@" --out-dir "$SCRATCH/run" --trace "$SCRATCH/run/trace" \
  --tensorboard "$SCRATCH/run/tb"  # inside the out-dir, as users put them
[ "$rc" = 0 ] || { cat "$SCRATCH/run.log"; fail "trainer exited $rc"; }
cat "$SCRATCH/run.log"
grep -q "^---- summary: steps 2-6" "$SCRATCH/run.log" || fail "no console summary"
grep -q "^step time   mean" "$SCRATCH/run.log" || fail "no step-time line in the summary"

# ---- traces --------------------------------------------------------------------------------------
for r in 0 1; do [ -s "$SCRATCH/run/trace/trace-rank$r.json" ] || fail "no trace-rank$r.json"; done
"$BUILD_DIR/trace-merge" --out "$SCRATCH/merged.json" "$SCRATCH/run/trace" || fail "trace-merge failed"
$PY - "$SCRATCH/merged.json" <<'PYEOF' || fail "merged trace"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
want = {0: "compute", 1: "comm", 2: "data", 3: "io"}
for pid in (0, 1):
    for tid, name in want.items():
        assert lanes.get((pid, tid)) == name, "pid %d tid %d is %r" % (pid, tid, lanes.get((pid, tid)))
regions = {}
for e in events:
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        regions.setdefault(e["pid"], {}).setdefault(e["tid"], set()).add(e["name"])
for pid in (0, 1):
    assert set(regions[pid]) == {0, 1, 2, 3}, "pid %d lanes with events: %s" % (pid, sorted(regions[pid]))
    assert {"forward", "backward", "optimizer", "step"} <= regions[pid][0], regions[pid][0]
    assert "load batch" in regions[pid][2] and "checkpoint save" in regions[pid][3]
    assert "dp grad sync wait" in regions[pid][1], regions[pid][1]
assert "pp recv activations" in regions[1][1] and "pp recv gradients" in regions[0][1]
n = sum(1 for e in events if e["ph"] == "X")
print("ok: merged trace: %d regions, pids 0 and 1, lanes %s" % (n, sorted(want.values())))
PYEOF
echo '[{"ph": "X", "pid": 0, "ts": 1,' > "$SCRATCH/broken.json"
for bad in "$SCRATCH/broken.json" "$SCRATCH/missing.json" "$SCRATCH/run/trace $SCRATCH/run/trace/trace-rank0.json"; do
  set +e
  # shellcheck disable=SC2086
  "$BUILD_DIR/trace-merge" --out "$SCRATCH/bad.json" $bad 2> "$SCRATCH/merge.err"
  code=$?
  set -e
  if [ "$code" != 2 ] || [ "$(wc -l < "$SCRATCH/merge.err")" != 1 ]; then
    cat "$SCRATCH/merge.err"; fail "trace-merge $bad: exit $code, expected 2 and one line"
  fi
  if [ "$bad" = "$SCRATCH/broken.json" ]; then  # the JSON parser's own text, with its position
    grep -q "broken.json: not JSON: .*parse error at line 2" "$SCRATCH/merge.err" ||
      { cat "$SCRATCH/merge.err"; fail "trace-merge: unclear message on broken JSON"; }
    echo "ok: trace-merge on broken JSON: $(cat "$SCRATCH/merge.err")"
  fi
done
echo "ok: trace-merge refuses bad input: $(cat "$SCRATCH/merge.err")"

# ---- metrics.jsonl and report.json ------------------------------------------------------------------
$PY - "$SCRATCH/run/metrics.jsonl" "$SCRATCH/run/report.json" <<'PYEOF' || fail "metrics / report"
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert [r["step"] for r in steps] == list(range(1, 7)), steps
for r in steps:
    for key in ("forward_ms", "backward_ms", "optimizer_ms", "exposed_comm_ms", "data_ms",
                "checkpoint_stall_ms", "checkpoint_write_ms", "peak_rss_mib", "host_scratch_mib"):
        assert key in r and r[key] >= 0, (key, r)
    assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["optimizer_ms"] > 0, r
    assert r["peak_rss_mib"] > 10 and "comm_ms" not in r, r
    # Stage 0 (rank 0, the one that reports) cannot start its backward before stage 1 has sent
    # the gradients back: that wait is exposed communication in every step.
    assert r["exposed_comm_ms"] > 0, r
    parts = r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"] + r["exposed_comm_ms"] + r["data_ms"]
    assert parts <= r["step_ms"] * 1.02 + 0.05, "parts %.3f ms > step %.3f ms: %s" % (parts, r["step_ms"], r)
ckpt = [r["step"] for r in steps if r["checkpoint_stall_ms"] > 0]
assert ckpt == [4], "checkpoint_stall_ms > 0 in the records of steps %s, expected [4]" % ckpt
rep = json.load(open(sys.argv[2]))
assert rep["steps"] == 6 and rep["measured_steps"] == 5 and rep["warmup_steps_excluded"] == 1, rep
for key in ("mean", "p50", "p90", "p99", "max"):
    assert rep["step_ms"][key] > 0, rep["step_ms"]
assert rep["step_ms"]["p50"] <= rep["step_ms"]["max"]
assert rep["tokens_per_s"]["mean"] > 0 and rep["tokens_per_s"]["p50"] > 0 and rep["mfu"]["mean"] > 0
assert rep["peak_rss_mib"] == max(r["peak_rss_mib"] for r in steps), rep
assert rep["host_scratch_mib"] == max(r["host_scratch_mib"] for r in steps), rep
assert 0 <= rep["exposed_comm_share"] <= 1 and rep["exposed_comm_warning"] == (rep["exposed_comm_share"] > 0.3)
assert rep["skipped_steps"] == 0 and rep["checkpoints"]["written"] == 2 and rep["checkpoints"]["write_seconds"] > 0
assert rep["stopped_early"] is False and rep["exit_code"] == 0
print("ok: breakdown in every step record; report: step p50 %.1f ms, exposed comm %.1f%%, peak RSS %.0f MiB"
      % (rep["step_ms"]["p50"], 100 * rep["exposed_comm_share"], rep["peak_rss_mib"]))
PYEOF

# run.ini: the resolved run (layout, threads, model sizes), never overwrite = true; repeated from
# it into the same out-dir the run is refused (exit 2), so it cannot destroy the one it came from.
ini=$SCRATCH/run/run.ini
for want in "dp = 1" "tp = 1" "pp = 2" "threads = 1" "vocab-size = 256" "d-ff = 256" \
            "norm-eps = 1e-05" "overwrite = false"; do
  grep -qx "$want" "$ini" || { cat "$ini"; fail "run.ini has no line '$want'"; }
done
run_trainer 2 "$SCRATCH/again.log" --config "$ini"
[ "$rc" = 2 ] && grep -q "already holds files" "$SCRATCH/again.log" ||
  { cat "$SCRATCH/again.log"; fail "a run repeated from run.ini into its out-dir: exit $rc"; }
run_trainer 2 "$SCRATCH/again.log" --config "$ini" --out-dir "$SCRATCH/again" --steps 2 \
  --trace '' --tensorboard ''  # (this run's trace and events went into its out-dir)
[ "$rc" = 0 ] || { cat "$SCRATCH/again.log"; fail "a run from run.ini exited $rc"; }
echo "ok: run.ini holds the resolved run and repeats it without touching the original"

# The console: the first step, every --log-interval steps and the last; the loss averaged over
# the steps since the previous line; report.json's outcome fields.
[ "$(grep -o '^step [0-9]*/6' "$SCRATCH/run.log" | tr '\n' ' ')" = "step 1/6 step 6/6 " ] ||
  fail "the default --log-interval 10: console lines at other steps than the first and last"
run_trainer 2 "$SCRATCH/interval.log" "$@" --log-interval 4 --out-dir "$SCRATCH/interval"
[ "$rc" = 0 ] || { cat "$SCRATCH/interval.log"; fail "--log-interval 4 exited $rc"; }
[ "$(grep -o '^step [0-9]*/6' "$SCRATCH/interval.log" | tr '\n' ' ')" = "step 1/6 step 4/6 step 6/6 " ] ||
  { cat "$SCRATCH/interval.log"; fail "--log-interval 4: console lines at other steps"; }
$PY - "$SCRATCH/interval.log" "$SCRATCH/interval/metrics.jsonl" "$SCRATCH/interval/report.json" <<'PYEOF' || fail "console averages / report outcome"
import json, re, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r]
lines = {int(m.group(1)): m for m in (re.match(r"step (\d+)/6 \| loss ([0-9.]+)( \(mean of (\d+)\))?.* \| ([0-9.]+[KMB]?) tokens \| (\d+:\d\d:\d\d) elapsed, ETA (\d+:\d\d:\d\d)", l) for l in open(sys.argv[1])) if m}
assert sorted(lines) == [1, 4, 6], lines
for step, first in ((1, 1), (4, 2), (6, 5)):
    mean = sum(losses[first - 1:step]) / (step - first + 1)
    assert abs(float(lines[step].group(2)) - mean) < 1e-6, (step, lines[step].group(2), mean)
    assert (lines[step].group(4) or "1") == str(step - first + 1), lines[step].group(0)
assert lines[6].group(7) == "0:00:00", lines[6].group(0)
rep = json.load(open(sys.argv[3]))
f = rep["final_train_loss"]
assert f["first_step"] == 3 and f["last_step"] == 6 and abs(f["mean"] - sum(losses[2:6]) / 4) < 1e-5  # %.6g in the file, f
assert rep["val_loss"]["last_step"] == 6 and rep["val_loss"]["best"] <= rep["val_loss"]["last"], rep["val_loss"]
assert rep["tokens_seen"] == 6 * 8 * 32 and rep["segment"]["wall_time_s"] > 0, rep
assert 0 < rep["setup_s"] < rep["segment"]["wall_time_s"], rep  # the set-up, then the steps
print("ok: console every 4 steps with interval means; report: final train loss %.4f (steps 3-6), val %.4f"
      % (f["mean"], rep["val_loss"]["last"]))
PYEOF

run_trainer 2 "$SCRATCH/stop.log" "$@" --exit-at-step 3 --out-dir "$SCRATCH/stop"
[ "$rc" = 85 ] || { cat "$SCRATCH/stop.log"; fail "--exit-at-step: exit $rc, expected 85"; }
$PY -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["stopped_early"] is True and r["exit_code"] == 85 and r["steps"] == 3, r' \
  "$SCRATCH/stop/report.json" || fail "report.json of the early stop"
grep -q "^---- summary" "$SCRATCH/stop.log" || fail "no console summary on the early stop"
echo "ok: early stop (exit 85) writes report.json"

# A --trace or --tensorboard path that cannot be a directory: exit 2, one message, before the
# out-dir is written (so the corrected command runs without --overwrite).
touch "$SCRATCH/plain"
for opt in --trace --tensorboard; do
  run_trainer 2 "$SCRATCH/opt.log" "$@" --out-dir "$SCRATCH/opt" "$opt" "$SCRATCH/plain/sub"
  if [ "$rc" != 2 ] || [ "$(grep -c 'trainer: error:' "$SCRATCH/opt.log")" != 1 ] || [ -e "$SCRATCH/opt" ]; then
    cat "$SCRATCH/opt.log"; fail "$opt under a file: exit $rc, expected 2, one message, no out-dir"
  fi
  echo "ok: $(grep 'trainer: error:' "$SCRATCH/opt.log")"
done

# ---- TensorBoard -------------------------------------------------------------------------------------
events=$(find "$SCRATCH/run/tb" -name "events.out.tfevents.*.$(hostname)")
if [ "$(echo "$events" | wc -l)" != 1 ] || [ ! -s "$events" ]; then fail "no single event file in $SCRATCH/run/tb"; fi
$PY - "$events" <<'PYEOF' || fail "event file"
import struct, sys
data, at, records = open(sys.argv[1], "rb").read(), 0, []
while at < len(data):
    (n,) = struct.unpack_from("<Q", data, at)
    records.append(data[at + 12:at + 12 + n])
    at += 12 + n + 4
assert at == len(data) and b"brain.Event:2" in records[0], "framing"
assert len(records) == 2 + 6 + 1, len(records)  # version, session start, 6 steps, 1 evaluation
assert all(b"train/loss" in r and b"time/forward_ms" in r for r in records[2:8])
assert b"train/val_loss" in records[8]
print("ok: TensorBoard event file with %d records" % len(records))
PYEOF

# ---- tools/plot -------------------------------------------------------------------------------------
"$SOURCE_DIR/tools/plot" --out "$SCRATCH/png" "$SCRATCH/run/metrics.jsonl" "$SCRATCH/stop/metrics.jsonl" \
  || fail "tools/plot failed"
for f in loss lr tokens_per_s time_breakdown; do
  [ "$(head -c 8 "$SCRATCH/png/$f.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    || fail "$f.png is not a PNG"
done
echo '{"step": 1, "loss": "high"}' > "$SCRATCH/bad.jsonl"
set +e
"$SOURCE_DIR/tools/plot" --out "$SCRATCH/png2" "$SCRATCH/bad.jsonl" 2> "$SCRATCH/plot.err"
code=$?
set -e
if [ "$code" != 2 ] || [ "$(wc -l < "$SCRATCH/plot.err")" != 1 ]; then
  cat "$SCRATCH/plot.err"; fail "plot: exit $code on bad input"
fi
echo "ok: tools/plot wrote 4 PNGs; bad input: $(cat "$SCRATCH/plot.err")"
