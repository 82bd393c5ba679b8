#!/usr/bin/env bash
# Activation recomputation changes memory, never numbers: --recompute selective and full give
# per-step losses string-equal (all 9 digits) to no recomputation, for both architectures, on a
# layout where the recomputed blocks replay tensor-parallel sums (tp 2) and a pipeline keeps
# several micro-batches in flight (pp 2, 1f1b and gpipe); the activation memory printed at start
# falls from none to selective to full.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
for arch in gpt2 llama; do
  model=(--arch "$arch" --n-layer 4 --global-batch-size 8 --micro-batch-size 2)
  [ "$arch" = llama ] && model+=(--n-kv-head 2)
  for layout in "--tp 2 --pp 2 --pp-schedule 1f1b" "--pp 2 --dp 2 --pp-schedule gpipe"; do
    prev=""
    for mode in none selective full; do
      name="$arch-$mode-$(echo "$layout" | tr -d ' -')"
      # shellcheck disable=SC2046,SC2086
      run_trainer 4 "$SCRATCH/$name.log" $(tiny_args) "${model[@]}" $layout --recompute $mode \
        --steps 4 --out-dir "$SCRATCH/$name"
      [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
      metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
      [ "$(wc -l < "$SCRATCH/$name.loss")" = 4 ] || fail "$name: expected 4 losses"
      mib=$(sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p' "$SCRATCH/$name.log")
      [ -n "$mib" ] || fail "$name: no activation memory printed"
      echo "$name: activations $mib MiB per rank (at most)"
      if [ -n "$prev" ]; then
        cmp -s "$SCRATCH/$prev.loss" "$SCRATCH/$name.loss" \
          || { paste "$SCRATCH/$prev.loss" "$SCRATCH/$name.loss"; fail "$name: losses differ from $prev"; }
        awk -v a="$mib" -v b="$prev_mib" 'BEGIN{exit !(a < b)}' \
          || fail "$name: activations $mib MiB not below $prev's $prev_mib MiB"
      fi
      prev=$name prev_mib=$mib
    done
  done
done
