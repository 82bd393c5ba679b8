#!/usr/bin/env bash
# bf16 / fp16 compute tensors held in 2 bytes train exactly as the emulated path (fp32 containers
# rounded after every op, MPITRAIN_PRECISION_STORAGE=fp32): the rounding points are the same and
# the float arithmetic between them is the same, so every step's loss is string-equal, for gpt2
# and llama, bf16 and fp16, at 1 rank and at dp 2 x tp 2 x pp 2 (1F1B with full recomputation;
# GPipe with selective recomputation and ZeRO-1, whose all-gather then carries the 2-byte
# compute copy). The 2-byte run's start-up line shows the activations it really holds: fewer
# bytes than the emulated run's "in fp32 containers".
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
steps=4
layouts=("1" "8 --dp 2 --tp 2 --pp 2 --pp-schedule 1f1b --recompute full"
         "8 --dp 2 --tp 2 --pp 2 --pp-schedule gpipe --recompute selective --zero 1")
activations() { sed -n 's/.*| activations \([0-9.]*\) MiB.*/\1/p' "$1"; }
for arch in gpt2 llama; do
  arch_args=(--arch "$arch")
  [ "$arch" = llama ] && arch_args+=(--n-kv-head 2)
  for p in bf16 fp16; do
    for layout in "${layouts[@]}"; do
      read -r ranks extra <<< "$layout"
      name="$arch-$p-$ranks-$(echo "$extra" | tr -d ' -' | cut -c1-40)"
      # shellcheck disable=SC2046,SC2086
      set -- $(tiny_args) "${arch_args[@]}" --precision "$p" --steps $steps $extra
      run_trainer "$ranks" "$SCRATCH/$name-2byte.log" "$@" --out-dir "$SCRATCH/$name-2byte"
      [ "$rc" = 0 ] || { cat "$SCRATCH/$name-2byte.log"; fail "$name (2-byte) exited $rc"; }
      MPITRAIN_PRECISION_STORAGE=fp32 run_trainer "$ranks" "$SCRATCH/$name-fp32.log" "$@" \
        --out-dir "$SCRATCH/$name-fp32"
      [ "$rc" = 0 ] || { cat "$SCRATCH/$name-fp32.log"; fail "$name (emulated) exited $rc"; }
      grep -q "in fp32 containers" "$SCRATCH/$name-fp32.log" || fail "$name: not the emulated path"
      grep -q "in fp32 containers" "$SCRATCH/$name-2byte.log" && fail "$name: not 2-byte storage"
      metric "$SCRATCH/$name-2byte/metrics.jsonl" loss > "$SCRATCH/$name-2byte.loss"
      metric "$SCRATCH/$name-fp32/metrics.jsonl" loss > "$SCRATCH/$name-fp32.loss"
      [ "$(wc -l < "$SCRATCH/$name-2byte.loss")" = $steps ] || fail "$name: expected $steps losses"
      cmp -s "$SCRATCH/$name-2byte.loss" "$SCRATCH/$name-fp32.loss" || {
        paste "$SCRATCH/$name-2byte.loss" "$SCRATCH/$name-fp32.loss"
        fail "$name: 2-byte storage and the emulated path differ"
      }
      a2=$(activations "$SCRATCH/$name-2byte.log") a4=$(activations "$SCRATCH/$name-fp32.log")
      awk -v a="$a2" -v b="$a4" 'BEGIN{exit !(a < b)}' \
        || fail "$name: activations $a2 MiB in 2 bytes, $a4 MiB emulated"
      echo "$name: $steps losses equal; activations $a2 MiB (2-byte) vs $a4 MiB (emulated)"
    done
  done
done
