#!/usr/bin/env bash
# 3D parallelism: for both architectures, every layout with dp, tp, pp in {1, 2} (and both
# pipeline schedules where pp = 2) trains 5 steps from the same seed and data as the single-rank
# run, with
#  - per-step losses within LOSS_TOL relative of the single-rank run's, and
#  - final parameters within PARAM_TOL of them, tensor by tensor and relative to how far training
#    moved each tensor: ||p_layout - p_1rank|| / ||p_1rank - p_0|| (param-diff --base, p_0 the
#    common initialisation).
# The layouts differ only in the order of fp32 sums (~1e-7 relative). An absolute bound on the
# parameters does not hold on every CPU: AdamW's m / sqrt(v) normalises the gradient's size, so
# where a gradient is near zero that noise moves the update by a visible fraction of lr, and
# OpenBLAS's kernels (so the noise) differ between CPU types. The norm over a tensor is the
# training's whole movement, of which a few such elements are a small part; a wrong result (a
# tensor-parallel sum left out, a stage's gradient lost) moves tensors somewhere else: with the
# tp sum of the attention's input gradient left out, 0.07 to 0.48 per tensor at tp 2, 5 steps.
# Measured (AMD EPYC, AVX2 only; OpenBLAS's own choice of kernels, the same with
# OPENBLAS_CORETYPE=Haswell, and Sandybridge's): losses within 3.1e-7, parameters within 3.3e-4
# relative (llama, tp 2). Bounds: 2e-6 and 3e-3.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
LOSS_TOL=2e-6 PARAM_TOL=3e-3
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  $MPIRUN -np "$np" "$TRAINER" $(tiny_args) --steps 5 --out-dir "$SCRATCH/$name" \
    --export-params "$SCRATCH/$name.h5" "$@" > "$SCRATCH/$name.log" 2>&1 \
    || { cat "$SCRATCH/$name.log"; fail "$name exited non-zero"; }
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
}
for arch in gpt2 llama; do
  model=(--arch "$arch" --n-layer 2)
  [ "$arch" = llama ] && model+=(--n-kv-head 2)
  run "$arch-base" 1 "${model[@]}"
  run "$arch-init" 1 "${model[@]}" --steps 0  # p_0: the parameters before the first step
  for dp in 1 2; do for tp in 1 2; do for pp in 1 2; do
    schedules=(1f1b)
    [ $pp = 2 ] && schedules=(gpipe 1f1b)
    for schedule in "${schedules[@]}"; do
      [ $((dp * tp * pp)) = 1 ] && continue
      name="$arch-dp$dp-tp$tp-pp$pp-$schedule"
      run "$name" $((dp * tp * pp)) "${model[@]}" --dp $dp --tp $tp --pp $pp --pp-schedule "$schedule"
      d=$(max_rel_diff "$SCRATCH/$arch-base.loss" "$SCRATCH/$name.loss")
      "$BUILD_DIR/param-diff" "$SCRATCH/$arch-base.h5" "$SCRATCH/$name.h5" \
        --base "$SCRATCH/$arch-init.h5" --max-rel $PARAM_TOL > "$SCRATCH/$name.diff" 2>&1 \
        || { cat "$SCRATCH/$name.diff"; fail "$name: final parameters differ (bound $PARAM_TOL)"; }
      echo "$name: losses within $d, $(tail -1 "$SCRATCH/$name.diff")"
      awk -v d="$d" -v t=$LOSS_TOL 'BEGIN{exit !(d < t)}' || fail "$name: losses differ by $d"
    done
  done; done; done
done
