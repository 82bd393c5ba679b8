#!/usr/bin/env bash
# ZeRO-1: sharding the optimizer state and master weights over the data-parallel group changes
# where the update is computed, not what it is. For dp 2 and 4, alone and with tp or pp 2, and
# for each optimizer, 5 steps with --zero 1 give per-step losses within 1e-5 relative of the same
# layout without ZeRO (reduce-scatter and all-reduce may add the dp ranks' gradients in another
# order: fp32 noise ~1e-7). The optimizer memory printed per rank shrinks as 1/dp. A checkpoint
# written with ZeRO at dp 2 resumes without ZeRO at dp 4 and the reverse, continuing the
# uninterrupted run's losses (same 1e-5).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/$name.log" $(tiny_args) --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
}
optimizer_mib() { sed -n 's/.*optimizer state \([0-9.]*\) MiB.*/\1/p' "$SCRATCH/$1.log"; }
same() {  # same A B: losses within 1e-5
  local d
  d=$(max_rel_diff "$SCRATCH/$1.loss" "$SCRATCH/$2.loss")
  [ "$(wc -l < "$SCRATCH/$1.loss")" = "$(wc -l < "$SCRATCH/$2.loss")" ] || fail "$1 vs $2: step counts differ"
  awk -v d="$d" 'BEGIN{exit !(d < 1e-5)}' || fail "$2 differs from $1 by $d"
  echo "$2 vs $1: max relative loss difference $d"
}
for opt in adamw lamb; do
  for layout in "2 --dp 2" "4 --dp 4" "4 --dp 2 --tp 2" "4 --dp 2 --pp 2"; do
    np=${layout%% *} flags=${layout#* }
    name="$opt-$(echo "$flags" | tr -d ' -')"
    # shellcheck disable=SC2086
    run "$name" "$np" --optimizer $opt $flags --steps 5
    # shellcheck disable=SC2086
    run "$name-zero" "$np" --optimizer $opt $flags --steps 5 --zero 1
    same "$name" "$name-zero"
    full=$(optimizer_mib "$name") sharded=$(optimizer_mib "$name-zero")
    dp=$(echo "$flags" | sed -n 's/.*--dp \([0-9]*\).*/\1/p')
    echo "$name: optimizer state $full MiB per rank, with ZeRO-1 $sharded MiB (dp $dp)"
    awk -v f="$full" -v s="$sharded" -v dp="$dp" 'BEGIN{r=s*dp/f; exit !(r > 0.95 && r < 1.10)}' \
      || fail "$name: ZeRO-1 optimizer memory $sharded MiB is not 1/$dp of $full MiB"
  done
done
# Across ZeRO and dp: 6 steps straight vs 3 + 3 with a change of layout at the checkpoint.
run straight 2 --dp 2 --steps 6
pieces() {  # pieces NAME NP1 FLAGS1 NP2 FLAGS2
  resume_in_pieces "$@"
  same straight "$1"
}
pieces zero-dp2-to-dp4 2 "--dp 2 --zero 1" 4 "--dp 4"
pieces dp4-to-zero-dp2 4 "--dp 4" 2 "--dp 2 --zero 1"
