#!/usr/bin/env bash
# --device cuda under bf16 / fp16 (one rank, label gpu): the compute tensors held in 2 bytes
# against the emulated path (fp32 containers rounded after every op, MPITRAIN_PRECISION_STORAGE=
# fp32), gpt2 and llama, 8 steps of the tiny model. The rounding points are the same and cuDNN /
# cuBLASLt read the same 2-byte values (in place, or copies of the rounded containers), so the
# losses differ only where the GPU's sums run in another order (atomic adds, another cuBLASLt
# algorithm for a bf16 output): within 2e-3 per step, device_cuda.sh's bound for a GPU run
# against itself (derived, not yet measured on a GPU: the script prints each figure). The start-up
# line says which path ran; the trainer's accounting shows the compute weights halved (parameters
# and gradients (2 + 4) / (4 + 4) = 0.75 of the emulated run's) and the device arena of the
# activations in use at most 0.6 of the emulated run's (fp32 statistics stay). Without a usable
# GPU: SKIP (exit 77) with the trainer's reason.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_cuda_trainer
steps=8
held() { sed -n "s/.*$2 \([0-9.]*\) MiB.*/\1/p" "$1"; }
arena_in_use() { awk '$1 == "activations" && NF == 4 {print $3; exit}' "$1"; }  # MiB
for arch in gpt2 llama; do
  arch_args=(--arch "$arch")
  [ "$arch" = llama ] && arch_args+=(--n-kv-head 2)
  for p in bf16 fp16; do
    name="$arch-$p"
    # shellcheck disable=SC2046
    set -- $(tiny_args) "${arch_args[@]}" --device cuda --precision "$p" --steps $steps
    for storage in 2byte fp32; do  # MPITRAIN_PRECISION_STORAGE: "" (the backend's choice), fp32
      run="$SCRATCH/$name-$storage"
      MPITRAIN_PRECISION_STORAGE=${storage#2byte} run_trainer 1 "$run.log" "$@" --out-dir "$run"
      [ "$rc" = 0 ] || { cat "$run.log"; fail "$name ($storage storage) exited $rc"; }
      containers=$(grep -c "in fp32 containers" "$run.log" || true)
      if [ "$storage" = fp32 ]; then
        [ "$containers" -gt 0 ] || fail "$name: not the emulated path"
      else
        [ "$containers" = 0 ] || fail "$name: not 2-byte storage"
      fi
      metric "$run/metrics.jsonl" loss > "$run.loss"
    done
    [ "$(wc -l < "$SCRATCH/$name-2byte.loss")" = $steps ] || fail "$name: expected $steps losses"
    d=$(max_rel_diff "$SCRATCH/$name-fp32.loss" "$SCRATCH/$name-2byte.loss")
    awk -v d="$d" 'BEGIN{exit !(d < 2e-3)}' || {
      paste "$SCRATCH/$name-2byte.loss" "$SCRATCH/$name-fp32.loss"
      fail "$name: 2-byte storage departs from the emulated path ($d)"
    }
    awk -v p2="$(held "$SCRATCH/$name-2byte.log" "parameters and gradients")" \
        -v p4="$(held "$SCRATCH/$name-fp32.log" "parameters and gradients")" \
        -v a2="$(arena_in_use "$SCRATCH/$name-2byte.log")" \
        -v a4="$(arena_in_use "$SCRATCH/$name-fp32.log")" -v name="$name" -v d="$d" '
      BEGIN {
        printf "%s: losses within %s; parameters+gradients %.2f vs %.2f MiB (%.3f), activations arena %.1f vs %.1f MiB\n",
          name, d, p2, p4, p2 / p4, a2, a4
        # the log rounds ~1 MiB to 0.01 MiB
        if (p2 / p4 < 0.73 || p2 / p4 > 0.77) { print "FAIL: the compute weights are not halved"; exit 1 }
        if (a4 <= 0 || a2 > 0.6 * a4) { print "FAIL: the activations arena is not about halved"; exit 1 }
      }' || fail "$name: memory of 2-byte storage"
  done
done
echo "ok: --device cuda holds bf16 / fp16 tensors in 2 bytes and trains as the emulated path"
