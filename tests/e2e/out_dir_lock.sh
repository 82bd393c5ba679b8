#!/usr/bin/env bash
# Nothing a user does by mistake loses a run:
# - a second run in an out-dir that a run holds (--overwrite or --resume auto) is refused with
#   exit 2 naming the holder, and the first goes on unharmed (stopped by SIGTERM afterwards: exit
#   85, metrics.jsonl strict JSON with every step once, its checkpoint verified);
# - a run killed by kill -9 of mpirun leaves its lock to the next run, started at once with
#   --resume auto, which takes it over and finishes;
# - --resume of a directory that does not exist, an unwritable --trace or --tensorboard, export
#   files that cannot be written, a --config that is a directory or missing (trainer and plan),
#   and a changed --seed on resume: exit 2 before any work, the out-dir exactly as it was (or not
#   created); --allow-seed-change resumes under the new seed.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args)
tiny=("$@")
# A failing check must not leave a background run behind.
trap 'if [ -n "${background:-}" ]; then pkill -KILL -P "$background" || true; fi; rm -rf "$SCRATCH"' EXIT

# Every line of metrics.jsonl strict JSON (no NaN/Infinity), the steps 1..N once each.
check_metrics() {  # check_metrics FILE N
  python3 - "$1" "$2" <<'PYEOF' || fail "$1 is not N steps of strict JSON"
import json, sys
def refuse(name): raise ValueError("not JSON: " + name)
steps = [r["step"] for r in (json.loads(l, parse_constant=refuse) for l in open(sys.argv[1]))
         if "loss" in r]
want = list(range(1, int(sys.argv[2]) + 1))
if steps != want: sys.exit(f"steps {steps[:5]}... ({len(steps)}) are not 1..{want[-1]} once each")
PYEOF
}

refused() {  # refused NAME EXPECTED_TEXT: after run_trainer, exit 2 with one message naming it
  [ "$rc" = 2 ] || { cat "$SCRATCH/$1.log"; fail "$1: exit code $rc, expected 2"; }
  grep -qF -- "$2" "$SCRATCH/$1.log" || { cat "$SCRATCH/$1.log"; fail "$1: no '$2'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$1.log")" = 1 ] || { cat "$SCRATCH/$1.log"; fail "$1: not one message"; }
  grep -q '^step ' "$SCRATCH/$1.log" && fail "$1: training started"
  echo "ok: $1 -> $(grep 'trainer: error:' "$SCRATCH/$1.log")"
}

# 1. Two runs, one out-dir. The first runs until it is stopped, after the refusals.
busy="$SCRATCH/busy"
$MPIRUN -np 2 "$TRAINER" "${tiny[@]}" --steps 100000 --save-interval 20 --out-dir "$busy" \
  > "$SCRATCH/first.log" 2>&1 &
first=$! background=$first
for _ in $(seq 1 500); do [ -s "$busy/run.lock" ] && break; sleep 0.02; done
holder=$(cat "$busy/run.lock")  # "host H pid P since T"
[[ $holder == host*pid*since* ]] || fail "run.lock holds '$holder', not its holder"
for mode in --overwrite "--resume auto"; do
  # shellcheck disable=SC2086
  run_trainer 2 "$SCRATCH/second.log" "${tiny[@]}" --steps 3 --out-dir "$busy" $mode --lock-wait 0.5
  refused second "is in use by another run: $holder holds $busy/run.lock (waited 0.5 s"
done
pkill -TERM -P "$first"  # every rank, as SLURM signals every task
set +e; wait "$first"; rc=$?; set -e
background=
[ "$rc" = 85 ] || { cat "$SCRATCH/first.log"; fail "the first run exited $rc, expected 85"; }
steps=$(metric "$busy/metrics.jsonl" loss | wc -l)
check_metrics "$busy/metrics.jsonl" "$steps"
"$BUILD_DIR/ckpt-inspect" "$busy/checkpoints/step-$(printf %08d "$steps")" --verify > "$SCRATCH/inspect.log" ||
  { cat "$SCRATCH/inspect.log"; fail "the first run's last checkpoint does not verify"; }
[ ! -e "$busy/run.lock" ] || fail "the lock file outlived the run"
echo "ok: the first run went on unharmed: $steps steps once each, its checkpoint verified, the lock released"

# 2. kill -9 of mpirun: its ranks go on for ~2 s (measured 2.2 s) holding the lock; the next run,
# started at once, waits for them (--lock-wait, default 10 s) and takes the lock over.
killed="$SCRATCH/killed"
# Both runs are long and the second is stopped once it has resumed: a short first run could
# finish its steps in the ranks' last seconds and release the lock itself.
$MPIRUN -np 2 "$TRAINER" "${tiny[@]}" --steps 100000 --save-interval 5 --out-dir "$killed" \
  > "$SCRATCH/killed.log" 2>&1 &
launcher=$! background=$launcher
for _ in $(seq 1 500); do [ -s "$killed/checkpoints/latest" ] && break; sleep 0.02; done
holder=$(cat "$killed/run.lock")
kill -9 "$launcher"
wait "$launcher" 2> /dev/null || true  # mpirun is gone; its ranks are not
$MPIRUN -np 2 "$TRAINER" "${tiny[@]}" --steps 100000 --out-dir "$killed" --resume auto \
  > "$SCRATCH/requeued.log" 2>&1 &
requeued=$! background=$requeued
for _ in $(seq 1 1500); do grep -q 'resumed from step' "$SCRATCH/requeued.log" && break; sleep 0.02; done
from=$(sed -n 's/^resumed from step \([0-9]*\).*/\1/p' "$SCRATCH/requeued.log")
for _ in $(seq 1 1500); do  # a step of its own, then stop it
  [ "$(metric "$killed/metrics.jsonl" loss 2> /dev/null | wc -l)" -gt "${from:-0}" ] && break
  sleep 0.02
done
pkill -TERM -P "$requeued"
set +e; wait "$requeued"; rc=$?; set -e
background=
[ "$rc" = 85 ] || { cat "$SCRATCH/requeued.log"; fail "the run after kill -9 exited $rc, expected 85"; }
grep -qF "taking over $killed/run.lock from $holder" "$SCRATCH/requeued.log" ||
  { cat "$SCRATCH/requeued.log"; fail "no takeover of the killed run's lock"; }
check_metrics "$killed/metrics.jsonl" "$(metric "$killed/metrics.jsonl" loss | wc -l)"
echo "ok: after kill -9 the requeued run took the lock over: $(grep -m1 'resumed from' "$SCRATCH/requeued.log")"

# 3. Refused before anything is written: the stopped run's out-dir (with --resume auto) stays as
# it is, and a new out-dir is not created. One rank: a refusal at one is a refusal at all.
fresh="$SCRATCH/fresh"
before=$(dir_state "$busy")
refuse_untouched() {  # refuse_untouched NAME EXPECTED_TEXT ARGS...
  local name=$1 expected=$2; shift 2
  run_trainer 1 "$SCRATCH/$name.log" "${tiny[@]}" --steps 2 --out-dir "$fresh" "$@"
  refused "$name" "$expected"
  [ "$(dir_state "$fresh")" = absent ] || fail "$name: created the out-dir $fresh"
  run_trainer 1 "$SCRATCH/$name.log" "${tiny[@]}" --steps 2 --out-dir "$busy" --resume auto "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name (resuming): exit code $rc, expected 2"; }
  [ "$(dir_state "$busy")" = "$before" ] || fail "$name: changed the out-dir $busy"
}
refuse_untouched resume_missing "checkpoint directory '/nonexistent' does not exist" --resume /nonexistent
refuse_untouched trace_proc "trace /proc/mpitrain-trace: cannot write in /proc" --trace /proc/mpitrain-trace
refuse_untouched tensorboard_proc "tensorboard /proc/mpitrain-tb: cannot write in /proc" \
  --tensorboard /proc/mpitrain-tb
# (a missing parent is created at the end, as save_pretrained does: tests/e2e/cli_friction.sh)
refuse_untouched export_llmc "export-llmc /proc/mpitrain-x/x.bin: cannot write in /proc" \
  --export-llmc /proc/mpitrain-x/x.bin
refuse_untouched export_params "export-params /proc/mpitrain-x/x.h5: cannot write in /proc" \
  --export-params /proc/mpitrain-x/x.h5
refuse_untouched export_dir "export-params $SCRATCH is a directory" --export-params "$SCRATCH"
run_trainer 1 "$SCRATCH/corrected.log" "${tiny[@]}" --steps 2 --out-dir "$fresh"
[ "$rc" = 0 ] || { cat "$SCRATCH/corrected.log"; fail "the corrected command exited $rc"; }
echo "ok: the corrected command runs in the out-dir the refused ones left alone"

# 4. --config that is a directory or missing: trainer and plan.
run_trainer 1 "$SCRATCH/config_dir.log" --config "$SCRATCH" --out-dir "$SCRATCH/c1"
refused config_dir "cannot read config file '$SCRATCH': it is a directory"
run_trainer 1 "$SCRATCH/config_missing.log" --config "$SCRATCH/none.ini" --out-dir "$SCRATCH/c1"
refused config_missing "cannot read config file '$SCRATCH/none.ini': No such file or directory"
set +e
"$BUILD_DIR/plan" --config "$SCRATCH" --cpu > "$SCRATCH/plan.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -qF "cannot read config file '$SCRATCH': it is a directory" "$SCRATCH/plan.log" ||
  { cat "$SCRATCH/plan.log"; fail "plan --config DIR: exit $rc"; }
echo "ok: plan --config DIR -> $(cat "$SCRATCH/plan.log")"

# 5. Another --seed on resume: refused, the run as it was; --allow-seed-change takes it. (Left
# out, the resume takes the checkpoint's: e2e_cli_friction.)
seeded="$SCRATCH/seeded"
run_trainer 2 "$SCRATCH/seeded.log" "${tiny[@]}" --steps 4 --save-interval 2 --seed 7 --out-dir "$seeded"
[ "$rc" = 0 ] || { cat "$SCRATCH/seeded.log"; fail "the seeded run exited $rc"; }
before=$(dir_state "$seeded")
run_trainer 2 "$SCRATCH/reseed.log" "${tiny[@]}" --steps 6 --seed 1337 --out-dir "$seeded" --resume auto
refused reseed "was written with seed 7, this run has seed 1337: pass --seed 7"
[ "$(dir_state "$seeded")" = "$before" ] || fail "reseed: changed the out-dir"
run_trainer 2 "$SCRATCH/reseed.log" "${tiny[@]}" --steps 6 --seed 1337 --out-dir "$seeded" \
  --resume auto --allow-seed-change
[ "$rc" = 0 ] || { cat "$SCRATCH/reseed.log"; fail "--allow-seed-change exited $rc"; }
check_metrics "$seeded/metrics.jsonl" 6
echo "ok: --allow-seed-change resumed under the new seed"
