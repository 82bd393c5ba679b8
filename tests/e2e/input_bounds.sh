#!/usr/bin/env bash
# Sizes and bounds checked before any work, each a clear message and exit 2:
#   - a model that cannot fit in a rank's memory (--d-model 1000000; a huge n-layer, d-ff,
#     vocab-size, max-seq-len) is refused at once (the message, no out-dir; a 60 s bound) with
#     its plan per part; 2147483647 (2^31 - 1) is past the size options' bound;
#   - numeric options at both ends of their ranges: just inside trains a step, just outside is
#     refused naming the option, the value and the range; a config file's value alike;
#   - trace-merge --out onto one of its inputs is refused, the input intact;
#   - comm-bench --max-bytes 1000000G names the bound instead of dying of std::bad_alloc.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 1
tiny=("$@")

refused() {  # [NP=ranks] refused NAME EXPECTED_TEXT TRAINER_ARGS...
  local name=$1 expected=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  run_trainer "${NP:-1}" "$SCRATCH/$name.log" "$@" --out-dir "$SCRATCH/$name"
  t1=$(date +%s.%N)
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit code $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.log")" = 1 ] || { cat "$SCRATCH/$name.log"; fail "$name: not one message"; }
  [ ! -e "$SCRATCH/$name" ] || fail "$name: the out-dir was written"
  # Before any work: the message and the absent out-dir show the check came first; the time
  # only catches a run that started on the model (it would not end for hours). Measured 1.7-2.6 s
  # on 2 idle cores (MPI start-up, the data checks), 5.3-6.3 s with load 10-17 (ctest -j beside
  # builds): bounded at 60 s, so that a loaded machine never fails it.
  awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 60) }' || fail "$name: took $t0 -> $t1, over 60 s"
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}

# ---- a model that cannot fit ------------------------------------------------------------------
for size in "d_model:--d-model 1000000" "n_layer:--n-layer 100000000" "d_ff:--d-ff 200000000" \
    "vocab:--vocab-size 200000000" "positions:--max-seq-len 200000000"; do
  # shellcheck disable=SC2086
  NP=2 refused "huge_${size%%:*}" "the model does not fit in memory: it needs" "${tiny[@]}" ${size#*:}
  grep -q "(params [0-9.]* GiB, grads [0-9.]* GiB, optimizer [0-9.]* GiB, master .*, activations .*), a rank has [0-9.]* GiB" \
    "$SCRATCH/huge_${size%%:*}.log" || { cat "$SCRATCH/huge_${size%%:*}.log"; fail "huge_${size%%:*}: no plan per part"; }
  grep -q "even micro-batch 1 needs .* times that" "$SCRATCH/huge_${size%%:*}.log" || fail "huge_${size%%:*}: no word on what fits"
done
refused int_max "d-model must be in [1, 268435456] (got 2147483647)" "${tiny[@]}" --d-model 2147483647
NP=2 refused auto_none "micro-batch-size auto: none fits" "${tiny[@]}" --d-model 1000000 --micro-batch-size auto

# ---- numeric options at both ends --------------------------------------------------------------
run_trainer 2 "$SCRATCH/low.log" "${tiny[@]}" --dp 2 --warmup-steps 0 --bucket-mb 0.0625 --min-lr-ratio 0 --lr 1e-30 \
  --weight-decay 0 --beta1 0 --beta2 0 --adam-eps 1e-30 --norm-eps 1e-30 --grad-clip 0 \
  --initial-loss-scale 1 --min-loss-scale 1e-30 --out-dir "$SCRATCH/low"
[ "$rc" = 0 ] || { cat "$SCRATCH/low.log"; fail "the low ends exited $rc"; }
run_trainer 2 "$SCRATCH/high.log" "${tiny[@]}" --dp 2 --warmup-steps 0 --bucket-mb 1048576 --min-lr-ratio 1 --lr 10 \
  --weight-decay 10 --beta1 0.999999 --beta2 0.999999 --adam-eps 1 --norm-eps 1 \
  --initial-loss-scale 1e18 --min-loss-scale 1e18 --out-dir "$SCRATCH/high"
[ "$rc" = 0 ] || { cat "$SCRATCH/high.log"; fail "the high ends exited $rc"; }
echo "ok: every option at the ends of its range trains a step"
refused bucket_low "bucket-mb must be in [0.0625, 1048576] (got 0.0624)" "${tiny[@]}" --bucket-mb 0.0624
refused bucket_high "bucket-mb must be in [0.0625, 1048576] (got 1e+300)" "${tiny[@]}" --bucket-mb 1e300
refused ratio_high "min-lr-ratio must be in [0, 1] (got 1.0001)" "${tiny[@]}" --min-lr-ratio 1.0001
refused lr_zero "lr must be in (0, 10] (got 0)" "${tiny[@]}" --lr 0
refused lr_inf "lr must be in (0, 10] (got inf)" "${tiny[@]}" --lr inf
refused decay_negative "weight-decay must be in [0, 10] (got -0.1)" "${tiny[@]}" --weight-decay -0.1
refused eps_nan "adam-eps must be in (0, 1] (got nan)" "${tiny[@]}" --adam-eps nan
refused norm_eps_inf "norm-eps must be in (0, 1] (got inf)" "${tiny[@]}" --norm-eps inf
refused beta_one "beta2 must be in [0, 1) (got 1)" "${tiny[@]}" --beta2 1
refused scale_inf "initial-loss-scale must be in [1, 1e+18] (got inf)" "${tiny[@]}" --initial-loss-scale inf
printf 'min-lr-ratio = 5\n' > "$SCRATCH/bad.ini"
refused config_value "min-lr-ratio must be in [0, 1] (got 5)" --config "$SCRATCH/bad.ini" "${tiny[@]}"

# ---- trace-merge --out onto an input -----------------------------------------------------------
mkdir -p "$SCRATCH/traces"
for r in 0 1; do
  printf '[{"name": "step", "ph": "X", "pid": %d, "tid": 0, "ts": 1, "dur": 2}]\n' "$r" \
    > "$SCRATCH/traces/trace-rank$r.json"
done
cp "$SCRATCH/traces/trace-rank0.json" "$SCRATCH/rank0.copy"
for out in "$SCRATCH/traces/trace-rank0.json" "$SCRATCH/traces/../traces/trace-rank0.json"; do
  set +e
  "$BUILD_DIR/trace-merge" --out "$out" "$SCRATCH/traces" > "$SCRATCH/merge.out" 2> "$SCRATCH/merge.err"
  code=$?
  set -e
  [ "$code" = 2 ] || { cat "$SCRATCH/merge.err"; fail "trace-merge --out onto an input exited $code"; }
  grep -q "is the input .*trace-rank0.json" "$SCRATCH/merge.err" || { cat "$SCRATCH/merge.err"; fail "trace-merge: unclear message"; }
  cmp -s "$SCRATCH/rank0.copy" "$SCRATCH/traces/trace-rank0.json" || fail "trace-merge overwrote its input"
done
"$BUILD_DIR/trace-merge" --out "$SCRATCH/merged.json" "$SCRATCH/traces" > /dev/null || fail "trace-merge to a new file failed"
echo "ok: trace-merge --out onto an input -> $(cat "$SCRATCH/merge.err")"

# ---- comm-bench --max-bytes past memory --------------------------------------------------------
set +e
$MPIRUN -np 2 "$BUILD_DIR/comm-bench" --max-bytes 1000000G > "$SCRATCH/bench.out" 2> "$SCRATCH/bench.err"
code=$?
set -e
[ "$code" = 2 ] || { cat "$SCRATCH/bench.out" "$SCRATCH/bench.err"; fail "comm-bench --max-bytes 1000000G exited $code"; }
grep -q "comm-bench: error: --max-bytes 1073741824000000 needs three buffers of it, .* GiB per rank; a rank has .*: --max-bytes [0-9]*M at most" \
  "$SCRATCH/bench.err" || { cat "$SCRATCH/bench.err"; fail "comm-bench: no bound in the message"; }
echo "ok: $(cat "$SCRATCH/bench.err")"
