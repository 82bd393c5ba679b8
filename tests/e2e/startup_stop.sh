#!/usr/bin/env bash
# A stop signal during start-up (data checks, model, checkpoint load, sgemm measurement) is a
# requeue, not a kill: SIGTERM 0.1 s and 0.3 s after the ranks enter main() gives exit 85 on
# every rank (also when only one rank got it), the message that no checkpoint was written, and
# no checkpoint (handlers installed late would let the first step run: a failure here);
# a run resuming from a checkpoint and stopped during its start-up leaves that checkpoint as it
# was, and the requeued run then finishes from it; a run waiting for another run's out-dir lock
# and stopped there exits 85 at once, the other run's lock untouched.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# A larger model than tiny's: its start-up lasts ~1 s here (the first step's line 1.7 s after the
# ranks start), so that 0.1 s and 0.3 s fall well inside it.
# shellcheck disable=SC2046
set -- $(tiny_args) --n-layer 6 --d-model 256
big=("$@")

# Whether process PID catches SIGTERM (bit 15 of SigCgt in /proc/PID/status). Before main() the
# dynamic loader maps the trainer's libraries (CUDA's among them: 0.1 s and more on a loaded
# machine), and a signal then kills it as it would any program: the delays count from main().
catches_term() {
  local mask
  mask=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2> /dev/null) || return 1
  [ -n "$mask" ] && (( (16#$mask >> 14) & 1 ))
}

# Starts the trainer on 2 ranks, signals all ranks (or only the last) DELAY s after both have
# entered main(), and expects exit 85 with the start-up stop message and no step taken.
stop_in_startup() {  # stop_in_startup NAME DELAY all|one TRAINER_ARGS...
  local name=$1 delay=$2 who=$3; shift 3
  set +e
  $MPIRUN -np 2 "$TRAINER" "$@" > "$SCRATCH/$name.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 1000); do
    [ "$(pgrep -x trainer -P "$launcher" | wc -l)" = 2 ] && break
    sleep 0.01
  done
  for _ in $(seq 1 1000); do  # both in main(): the handlers are the first thing it installs
    local pid ready=0
    for pid in $(pgrep -x trainer -P "$launcher"); do catches_term "$pid" && ready=$((ready + 1)); done
    [ "$ready" = 2 ] && break
    sleep 0.01
  done
  sleep "$delay"
  if [ "$who" = all ]; then pkill -TERM -x trainer -P "$launcher"
  else kill -TERM "$(pgrep -x trainer -P "$launcher" | tail -1)"; fi
  wait "$launcher"
  rc=$?
  set -e
  [ "$rc" = 85 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit code $rc, expected 85"; }
  grep -q "stopped by SIGTERM during start-up (.*), before the first step: no checkpoint written" \
    "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no start-up stop message"; }
  grep -q '^step \|stopping after step' "$SCRATCH/$name.log" && fail "$name: a step was taken"
  echo "ok: $name -> $(grep 'stopped by' "$SCRATCH/$name.log")"
}

stop_in_startup fresh_0.1s 0.1 all "${big[@]}" --steps 20 --save-interval 1 --out-dir "$SCRATCH/a"
[ ! -e "$SCRATCH/a/checkpoints" ] || fail "fresh_0.1s: a checkpoint was written"
stop_in_startup one_rank_0.3s 0.3 one "${big[@]}" --steps 20 --save-interval 1 --out-dir "$SCRATCH/b"
[ ! -e "$SCRATCH/b/checkpoints" ] || fail "one_rank_0.3s: a checkpoint was written"

# A run with a checkpoint, resumed and stopped during the start-up: the checkpoint stays.
run_trainer 2 "$SCRATCH/first.log" "${big[@]}" --steps 2 --save-interval 2 --out-dir "$SCRATCH/c"
[ "$rc" = 0 ] || { cat "$SCRATCH/first.log"; fail "the first run exited $rc"; }
before=$(dir_state "$SCRATCH/c/checkpoints")
for delay in 0.1 0.3; do
  stop_in_startup "resume_${delay}s" "$delay" all "${big[@]}" --steps 4 --save-interval 1 \
    --out-dir "$SCRATCH/c" --resume auto
  [ "$(dir_state "$SCRATCH/c/checkpoints")" = "$before" ] ||
    fail "resume_${delay}s: the checkpoints changed"
done
run_trainer 2 "$SCRATCH/requeued.log" "${big[@]}" --steps 4 --out-dir "$SCRATCH/c" --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/requeued.log"; fail "the requeued run exited $rc"; }
grep -q "resumed from step 2" "$SCRATCH/requeued.log" || fail "the requeued run did not resume from step 2"
echo "ok: the checkpoint stood through the stops; the requeued run resumed from step 2 and finished"

# Stopped while waiting for the out-dir lock (--lock-wait 60): exit 85 within seconds, not a
# refusal after the wait; the holder's lock file as it was.
$MPIRUN -np 1 "$TRAINER" "${big[@]}" --steps 100000 --out-dir "$SCRATCH/held" > "$SCRATCH/holder.log" 2>&1 &
holder=$!
trap 'pkill -KILL -P "$holder" 2> /dev/null || true; rm -rf "$SCRATCH"' EXIT
for _ in $(seq 1 500); do [ -s "$SCRATCH/held/run.lock" ] && break; sleep 0.02; done
lock_before=$(cat "$SCRATCH/held/run.lock")
$MPIRUN -np 2 "$TRAINER" "${big[@]}" --steps 2 --out-dir "$SCRATCH/held" --resume auto --lock-wait 60 \
  > "$SCRATCH/waiter.log" 2>&1 &
waiter=$!
for _ in $(seq 1 1000); do grep -q 'waiting up to 60 s' "$SCRATCH/waiter.log" && break; sleep 0.01; done
grep -q 'waiting up to 60 s' "$SCRATCH/waiter.log" || { cat "$SCRATCH/waiter.log"; fail "the second run never waited"; }
SECONDS=0
pkill -TERM -x trainer -P "$waiter"
set +e; wait "$waiter"; rc=$?; set -e
[ "$rc" = 85 ] || { cat "$SCRATCH/waiter.log"; fail "stopped while waiting for the lock: exit $rc, expected 85"; }
(( SECONDS < 10 )) || fail "the stop took ${SECONDS} s: it waited for the lock"  # measured: < 1 s
grep -q "stopped by SIGTERM during start-up (waiting for the out-dir lock)" "$SCRATCH/waiter.log" ||
  { cat "$SCRATCH/waiter.log"; fail "no start-up stop message naming the lock wait"; }
[ "$(cat "$SCRATCH/held/run.lock")" = "$lock_before" ] || fail "the holder's lock file changed"
pkill -TERM -P "$holder"
wait "$holder" || true
echo "ok: stopped while waiting for the out-dir lock -> exit 85 in ${SECONDS} s, the holder's lock untouched"
