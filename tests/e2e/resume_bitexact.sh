#!/usr/bin/env bash
# Bit-exact resume: 10 steps uninterrupted and 5 steps + save + exit 85 + resume + 5 steps give
# identical losses to the last bit (the %.9g values of metrics.jsonl), for both architectures
# and for a layout with dp, tp and pp > 1.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
check() {  # check NAME NP ARGS...
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  set -- $(tiny_args) --steps 10 --eval-interval 5 "$@"
  run_trainer "$np" "$SCRATCH/$name-full.log" "$@" --out-dir "$SCRATCH/$name-full"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-full.log"; fail "$name: uninterrupted run exited $rc"; }
  run_trainer "$np" "$SCRATCH/$name-a.log" "$@" --out-dir "$SCRATCH/$name" --save-interval 100 --exit-at-step 5
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
  echo "ok: $name: 5 + resume + 5 steps equal 10 steps bit for bit"
}
check gpt2-dp2 2 --arch gpt2
check llama-dp2 2 --arch llama --n-kv-head 2
check gpt2-dp2-tp2-pp2 8 --arch gpt2 --dp 2 --tp 2 --pp 2
check llama-dp2-tp2-pp2 8 --arch llama --n-kv-head 2 --dp 2 --tp 2 --pp 2
