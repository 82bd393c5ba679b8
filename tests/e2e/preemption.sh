#!/usr/bin/env bash
# Preemption: SIGTERM to every rank during a run (what SLURM and PBS send) -> the step finishes,
# a checkpoint is written, exit code 85; resuming completes with the same final loss as an
# uninterrupted run. Also --save-best keeps best/ and --exit-after-minutes stops in time.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 150
run_trainer 2 "$SCRATCH/full.log" "$@" --out-dir "$SCRATCH/full"
want=$(metric "$SCRATCH/full/metrics.jsonl" loss | tail -1)

# SIGTERM once a few steps are logged.
run_trainer_signalled 2 "$SCRATCH/a.log" \
  '[ "$(metric "$SCRATCH/run/metrics.jsonl" loss 2>/dev/null | wc -l)" -ge 3 ]' \
  "$@" --out-dir "$SCRATCH/run"
[ "$ready_seen" = 1 ] || { cat "$SCRATCH/a.log"; fail "no 3 steps logged before the signal"; }
grep -E "stopping|saved" "$SCRATCH/a.log" || true
[ "$rc" = 85 ] || { cat "$SCRATCH/a.log"; fail "SIGTERM: exit code $rc, expected 85"; }
[ -s "$SCRATCH/run/checkpoints/latest" ] || fail "SIGTERM: no checkpoint committed"
run_trainer 2 "$SCRATCH/b.log" "$@" --out-dir "$SCRATCH/run" --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/b.log"; fail "resume after SIGTERM exited $rc"; }
got=$(metric "$SCRATCH/run/metrics.jsonl" loss | tail -1)
echo "ok: SIGTERM -> exit 85 -> resume: final loss $got (uninterrupted $want)"
[ "$got" = "$want" ] || fail "final loss $got differs from $want"
[ "$(metric "$SCRATCH/run/metrics.jsonl" loss | wc -l)" = 150 ] || fail "metrics.jsonl does not hold 150 steps once each"

run_trainer 2 "$SCRATCH/best.log" "$@" --steps 6 --eval-interval 2 --save-best --out-dir "$SCRATCH/best"
[ "$rc" = 0 ] && [ -f "$SCRATCH/best/checkpoints/best/checkpoint.h5" ] || { cat "$SCRATCH/best.log"; fail "no best/ checkpoint"; }
"$BUILD_DIR/ckpt-inspect" "$SCRATCH/best/checkpoints/best" --verify > "$SCRATCH/inspect.log" \
  || { cat "$SCRATCH/inspect.log"; fail "ckpt-inspect --verify failed on best/"; }
echo "ok: best/ written and verified"

run_trainer 2 "$SCRATCH/limit.log" "$@" --steps 100000 --exit-after-minutes 0.05 --out-dir "$SCRATCH/limit"
[ "$rc" = 85 ] || { cat "$SCRATCH/limit.log"; fail "exit-after-minutes: exit code $rc, expected 85"; }
grep -q "time limit" "$SCRATCH/limit.log" || fail "exit-after-minutes: no time-limit message"
echo "ok: --exit-after-minutes 0.05 saved and exited 85 after $(metric "$SCRATCH/limit/metrics.jsonl" loss | wc -l) steps"
