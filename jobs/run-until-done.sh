#!/bin/bash
# Reruns a training command while it exits 85 ("checkpoint saved, restart me"), for machines
# without a batch system. The command should contain --resume auto so each try continues.
#
#   jobs/run-until-done.sh [MAX_TRIES] -- mpirun -np 8 ./build/trainer --config run.ini \
#       --out-dir runs/a --save-interval 200 --exit-after-minutes 60 --resume auto
#
# MAX_TRIES defaults to 10. Exits with the last exit code: 0 when training finished, 85 when it
# was still stopping after MAX_TRIES tries, anything else at the first failure. SIGINT/SIGTERM to
# this script are passed on to the command (which saves and exits 85) and stop the loop.
set -uo pipefail

usage() { echo "usage: $0 [MAX_TRIES] -- COMMAND [ARGS...]" >&2; exit 2; }

max=10
if [ $# -gt 0 ] && [ "$1" != -- ]; then max=$1; shift; fi
case $max in '' | *[!0-9]* | 0) usage ;; esac
if [ $# -eq 0 ] || [ "$1" != -- ]; then usage; fi
shift
[ $# -gt 0 ] || usage

stop=0
pid=
# shellcheck disable=SC2317  # called from the traps
on_signal() {
  stop=1
  if [ -n "$pid" ]; then kill -s "$1" "$pid" 2> /dev/null; fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

rc=0
for try in $(seq 1 "$max"); do
  echo "run-until-done: try $try/$max: $*"
  "$@" &
  pid=$!
  rc=
  while :; do
    interrupted=$stop
    wait "$pid"
    r=$?
    if [ "$r" -eq 127 ] && [ -n "$rc" ]; then break; fi  # status was already collected
    rc=$r
    [ "$stop" != "$interrupted" ] || break
  done
  pid=
  if [ "$rc" -ne 85 ]; then
    echo "run-until-done: exit code $rc after $try tries"
    exit "$rc"
  fi
  if [ "$stop" -eq 1 ]; then
    echo "run-until-done: stopped by a signal (exit 85, checkpoint saved)"
    exit 85
  fi
done
echo "run-until-done: still exit 85 after $max tries"
exit "$rc"
