#!/usr/bin/env bash
# ZeRO-2/3 options that cannot work stop before any work with one clear message and exit 2: a
# --zero-shard-size that does not divide dp, hybrid sharding under ZeRO-1, and an explicit
# --check-replicas under ZeRO-3 (no rank holds a whole copy to compare); the run's --out-dir is
# not created.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
refused() {  # refused NAME NP MESSAGE ARGS...: exit 2, MESSAGE said once, no step, no out-dir
  local name=$1 np=$2 message=$3; shift 3
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/$name.log" $(tiny_args) --steps 2 --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc, not 2"; }
  grep -qF -- "$message" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$message'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.log")" = 1 ] ||
    { cat "$SCRATCH/$name.log"; fail "$name: not exactly one message"; }
  ! grep -q MPI_ABORT "$SCRATCH/$name.log" || fail "$name: left through MPI_Abort"
  ! grep -q '^step ' "$SCRATCH/$name.log" || fail "$name: trained before refusing"
  [ ! -e "$SCRATCH/$name" ] || fail "$name: created its out-dir before refusing"
  echo "$name: exit 2, $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}
refused shard-size-3-of-dp4 4 "zero-shard-size 3 does not divide the data-parallel size 4" \
  --dp 4 --zero 3 --zero-shard-size 3
refused shard-size-with-zero1 2 "zero-shard-size 2 (hybrid sharding) needs --zero 2 or 3" \
  --dp 2 --zero 1 --zero-shard-size 2
refused check-replicas-zero3 2 "under --zero 3 each rank holds only its own piece" \
  --dp 2 --zero 3 --check-replicas 10
