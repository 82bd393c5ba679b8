#!/usr/bin/env bash
# Bit-exact resume: 10 steps uninterrupted and 5 steps + save + exit 85 + resume + 5 steps give
# identical losses to the last bit (the %.9g values of metrics.jsonl) and identical state: the
# checkpoints both runs write at their last step hold the same parameters and optimizer state
# bit for bit (h5diff without a tolerance, group by group; only the manifest, which records the
# wall time, is left out). For both architectures and for a layout with dp, tp and pp > 1.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

# Every group of the checkpoint but the manifest, e.g. "params adam_m adam_v".
state_groups() {  # state_groups CHECKPOINT_H5
  h5ls "$1" | awk '$2 == "Group" && $1 != "manifest" {print $1}'
}
check() {  # check NAME NP ARGS...
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  set -- $(tiny_args) --steps 10 --eval-interval 5 --save-interval 100 "$@"
  run_trainer "$np" "$SCRATCH/$name-full.log" "$@" --out-dir "$SCRATCH/$name-full"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-full.log"; fail "$name: uninterrupted run exited $rc"; }
  run_trainer "$np" "$SCRATCH/$name-a.log" "$@" --out-dir "$SCRATCH/$name" --exit-at-step 5
  [ "$rc" = 85 ] || { cat "$SCRATCH/$name-a.log"; fail "$name: first part exited $rc, expected 85"; }
  run_trainer "$np" "$SCRATCH/$name-b.log" "$@" --out-dir "$SCRATCH/$name" --resume auto
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-b.log"; fail "$name: resumed run exited $rc"; }
  grep -q "resumed from step 5" "$SCRATCH/$name-b.log" || fail "$name: did not resume from step 5"
  metric "$SCRATCH/$name-full/metrics.jsonl" loss > "$SCRATCH/$name-full.loss"
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  metric "$SCRATCH/$name-full/metrics.jsonl" val_loss >> "$SCRATCH/$name-full.loss"
  metric "$SCRATCH/$name/metrics.jsonl" val_loss >> "$SCRATCH/$name.loss"
  [ "$(wc -l < "$SCRATCH/$name.loss")" = 12 ] || fail "$name: expected 10 losses and 2 val losses"
  cmp -s "$SCRATCH/$name-full.loss" "$SCRATCH/$name.loss" \
    || { paste "$SCRATCH/$name-full.loss" "$SCRATCH/$name.loss"; fail "$name: losses differ"; }
  local full=$SCRATCH/$name-full/checkpoints/step-00000010/checkpoint.h5
  local resumed=$SCRATCH/$name/checkpoints/step-00000010/checkpoint.h5
  local groups
  groups=$(state_groups "$full")
  [ "$groups" = "$(state_groups "$resumed")" ] || fail "$name: the checkpoints hold other groups"
  echo "$groups" | grep -qx params || fail "$name: no params group in $full"
  [ "$(echo "$groups" | wc -l)" -ge 3 ] || fail "$name: no optimizer state in $full ($groups)"
  for g in $groups; do
    h5diff "$full" "$resumed" "/$g" "/$g" > "$SCRATCH/$name-$g.diff" 2>&1 ||
      { head -20 "$SCRATCH/$name-$g.diff"; fail "$name: /$g differs after the resume"; }
  done
  echo "ok: $name: 5 + resume + 5 steps equal 10 steps bit for bit (losses and" $groups")"
}
check gpt2-dp2 2 --arch gpt2
check llama-dp2 2 --arch llama --n-kv-head 2
check gpt2-dp2-tp2-pp2 8 --arch gpt2 --dp 2 --tp 2 --pp 2
check llama-dp2-tp2-pp2 8 --arch llama --n-kv-head 2 --dp 2 --tp 2 --pp 2
