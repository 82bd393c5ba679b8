#!/usr/bin/env bash
# Data parallelism: -np 1, 2 and 4 with the same global batch see the same samples and give the
# same per-step losses up to fp32 summation order (relative difference < 1e-5), for both
# architectures.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
for arch in gpt2 llama; do
  extra=()
  [ "$arch" = llama ] && extra=(--n-kv-head 2)
  for np in 1 2 4; do
    # shellcheck disable=SC2046
    $MPIRUN -np $np "$TRAINER" $(tiny_args) --arch $arch "${extra[@]}" --steps 5 \
      --out-dir "$SCRATCH/$arch-np$np" > "$SCRATCH/$arch-np$np.log" 2>&1 \
      || { cat "$SCRATCH/$arch-np$np.log"; fail "$arch np=$np exited non-zero"; }
    metric "$SCRATCH/$arch-np$np/metrics.jsonl" loss > "$SCRATCH/$arch-np$np.loss"
    [ "$(wc -l < "$SCRATCH/$arch-np$np.loss")" = 5 ] || fail "$arch np=$np: expected 5 losses"
  done
  for np in 2 4; do
    d=$(max_rel_diff "$SCRATCH/$arch-np1.loss" "$SCRATCH/$arch-np$np.loss")
    echo "$arch: np=1 vs np=$np max relative loss difference $d"
    awk -v d="$d" 'BEGIN{exit !(d < 1e-5)}' || fail "$arch np=$np differs from np=1 by $d"
  done
done
echo "losses (gpt2, np=1):"; cat "$SCRATCH/gpt2-np1.loss"
