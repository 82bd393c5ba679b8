#!/bin/bash
# Reruns a training command while it exits 85 ("checkpoint saved, restart me"), for machines
# without a batch system. The command should contain --resume auto so each try continues.
#
#   jobs/run-until-done.sh [MAX_TRIES] -- mpirun -np 8 ./build/trainer --config run.ini \
#       --out-dir runs/a --save-interval 200 --exit-after-minutes 60 --resume auto
#
# MAX_TRIES defaults to 10. Exits with the last exit code: 0 when training finished, 85 when it
# was still stopping after MAX_TRIES tries, anything else at the first failure. Each try runs
# under jobs/save-on-stop, in a session of its own: SIGINT/SIGTERM/SIGHUP to this script (Ctrl-C,
# `timeout`, `kill`) reach the command as SIGUSR2, which mpirun and srun pass on to the ranks (they
# finish the step, save and exit 85), and stop the loop; a second one stops without saving.
set -uo pipefail

usage() { echo "usage: $0 [MAX_TRIES] -- COMMAND [ARGS...]" >&2; exit 2; }

max=10
if [ $# -gt 0 ] && [ "$1" != -- ]; then max=$1; shift; fi
case $max in '' | *[!0-9]* | 0) usage ;; esac
if [ $# -eq 0 ] || [ "$1" != -- ]; then usage; fi
shift
[ $# -gt 0 ] || usage

stops=0  # signals received
pid=
# shellcheck disable=SC2317  # called from the traps
on_signal() {
  stops=$((stops + 1))
  echo "run-until-done: SIG$1: passing it on as SIGTERM to the try (no further tries)" >&2
  # SIGTERM: a job started with & from a script ignores SIGINT, and save-on-stop takes any.
  if [ -n "$pid" ]; then kill -s TERM "$pid" 2> /dev/null; fi
}
for sig in INT TERM HUP USR2; do
  # shellcheck disable=SC2064  # the signal's name now
  trap "on_signal $sig" "$sig"
done

rc=0
for try in $(seq 1 "$max"); do
  echo "run-until-done: try $try/$max: $*"
  # setsid: only this script's signals reach the try (a terminal's Ctrl-C would reach both).
  setsid "$(dirname "$0")/save-on-stop" "$@" &
  pid=$!
  if [ "$stops" -gt 0 ]; then kill -s TERM "$pid"; fi  # a stop that came before the try
  rc=
  while :; do
    seen=$stops
    wait "$pid"
    r=$?
    if [ "$r" -eq 127 ] && [ -n "$rc" ]; then break; fi  # status was already collected
    rc=$r
    [ "$stops" != "$seen" ] || break
  done
  pid=
  if [ "$rc" -ne 85 ]; then
    echo "run-until-done: exit code $rc after $try tries"
    exit "$rc"
  fi
  if [ "$stops" -gt 0 ]; then
    echo "run-until-done: stopped by a signal (exit 85, checkpoint saved)"
    exit 85
  fi
done
echo "run-until-done: still exit 85 after $max tries"
exit "$rc"
