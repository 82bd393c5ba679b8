#!/usr/bin/env bash
# The all-layers load-balancing loss (--moe-aux-loss-form all-layers, transformers' form: one
# loss over the routing of all MoE layers pooled) at every layout: a tiny llama MoE (4 experts,
# top-2, MoE in both layers, aux coefficient 0.1 so that its gradient shows) trains 4 steps at
# one rank, and at pp 2 (each micro-batch's rows per expert travel with its activations to the
# last stage and back with its gradients; an evaluation between steps sends none), pp 2 under
# GPipe, pp 2 with full recomputation, pp 2 x tp 2 with sequence parallelism, pp 2 x dp 2 x ep 2
# and cp 2; the per-step losses, gradient norms, aux and z-losses and the validation losses
# must equal one rank's within fp32-order noise. The form is the objective's: per-layer
# (the default of a model given by flags) trains otherwise, and its --export-hf says that
# transformers would weight another loss by the coefficient it writes; run.ini records the form,
# and a resume that leaves it out keeps it (2 steps + resume + 2 equal 4 bit for bit). A stage
# holding no MoE layer passes the counts on (4 layers, every 2nd MoE, --pp-layers 1,3).
# Measured (AMD EPYC Zen 5, 2 cores): pp 2, GPipe and full recomputation the same bits as one
# rank; pp 2 x tp 2 sp, pp 2 x ep 2 and cp 2 losses within 2.0e-9 relative (validation losses
# 2.0e-9), gradient norms 2.0e-8, aux losses 9.7e-9, z-losses 6.0e-9. Bounds (moe_context_parallel.sh's): LOSS_TOL 1e-7, NORM_TOL 1e-6, AUX_TOL 3e-6.
# Without the earlier stage's counts added at pp 2 the losses moved by 4.0e-4; without the whole
# model's counts taken back before the first stage's backward, by 2.0e-4; a resume that drops
# the recorded form: "loss differs after the resume".
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
LOSS_TOL=1e-7 NORM_TOL=1e-6 AUX_TOL=3e-6
# shellcheck disable=SC2207
SHAPE=(--train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5" --eval-samples 16
       --eval-interval 2 $(tiny_model_args) --arch llama --n-kv-head 2 --n-experts 4 --top-k 2 --moe-every 1 --moe-ff 64
       --moe-aux-loss-coef 0.1 --moe-z-loss-coef 0.001 --save-interval 100)
MOE=("${SHAPE[@]}" --moe-aux-loss-form all-layers --steps 4)
KEYS=(loss grad_norm moe_aux_loss moe_z_loss val_loss)
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  run_trainer "$np" "$SCRATCH/$name.log" "${MOE[@]}" --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
}
run_cases 2 'run one 1' 'run pp2 2 --pp 2' 'run pp2-gpipe 2 --pp 2 --pp-schedule gpipe' \
  'run pp2-full 2 --pp 2 --recompute full' 'run pp2-tp2-sp 4 --pp 2 --tp 2 --sequence-parallel' \
  'run pp2-ep2 4 --pp 2 --dp 2 --ep 2' 'run cp2 2 --cp 2'

for name in one pp2 pp2-gpipe pp2-full pp2-tp2-sp pp2-ep2 cp2; do
  for key in "${KEYS[@]}"; do metric "$SCRATCH/$name/metrics.jsonl" "$key" > "$SCRATCH/$name.$key"; done
done
for name in pp2 pp2-gpipe pp2-full pp2-tp2-sp pp2-ep2 cp2; do same_per_step one "$name" "${KEYS[@]}"; done
grep -qx "moe-aux-loss-form = all-layers" "$SCRATCH/pp2/run.ini" ||
  fail "run.ini does not record moe-aux-loss-form all-layers"

# A stage without an MoE layer passes the counts on: 4 layers, every 2nd MoE, stage 0 holding
# only the dense layer 0 (measured: one rank's bits).
four=()
for ((i = 0; i < ${#MOE[@]}; i++)); do
  case ${MOE[i]} in
    --n-layer) four+=(--n-layer 4) i=$((i + 1)) ;;
    --moe-every) four+=(--moe-every 2) i=$((i + 1)) ;;
    *) four+=("${MOE[i]}") ;;
  esac
done
for np in 1 2; do
  split=()
  [ "$np" = 1 ] || split=(--pp 2 --pp-layers "1,3")
  run_trainer "$np" "$SCRATCH/four$np.log" "${four[@]}" "${split[@]}" --out-dir "$SCRATCH/four$np"
  [ "$rc" = 0 ] || { cat "$SCRATCH/four$np.log"; fail "4 layers at pp $np exited $rc"; }
  for key in "${KEYS[@]}"; do metric "$SCRATCH/four$np/metrics.jsonl" "$key" > "$SCRATCH/four$np.$key"; done
done
same_per_step four1 four2 "${KEYS[@]}"

# The form is in effect: per-layer (the default here) gives other aux losses and losses.
run_trainer 1 "$SCRATCH/per-layer.log" "${SHAPE[@]}" --steps 4 --out-dir "$SCRATCH/per-layer" \
  --export-hf "$SCRATCH/per-layer-hf"
[ "$rc" = 0 ] || { cat "$SCRATCH/per-layer.log"; fail "per-layer exited $rc"; }
# its export's coefficient means another loss to transformers: said
grep -qF "note: its router_aux_loss_coef 0.1 weighted this run's per-layer load-balancing losses, summed (moe-aux-loss-form per-layer); transformers weights one loss over all 2 MoE layers' routing by it" \
  "$SCRATCH/per-layer.log" || { tail -5 "$SCRATCH/per-layer.log"; fail "the export's coefficient not explained"; }
grep -qx "moe-aux-loss-form = per-layer" "$SCRATCH/per-layer/run.ini" ||
  fail "run.ini does not record moe-aux-loss-form per-layer (the default of a model by flags)"
for key in moe_aux_loss loss; do
  metric "$SCRATCH/per-layer/metrics.jsonl" "$key" > "$SCRATCH/per-layer.$key"
  d=$(max_rel_diff "$SCRATCH/one.$key" "$SCRATCH/per-layer.$key")
  awk -v d="$d" 'BEGIN{exit !(d > 1e-4)}' || fail "per-layer and all-layers: $key within $d"
done
echo "per-layer vs all-layers: the aux losses and losses differ"

# A resume that leaves the form out keeps the checkpoint's (per-layer here would change the loss).
run_trainer 2 "$SCRATCH/a.log" "${MOE[@]}" --pp 2 --out-dir "$SCRATCH/pieces" --exit-at-step 2
[ "$rc" = 85 ] || { cat "$SCRATCH/a.log"; fail "first piece exited $rc, expected 85"; }
run_trainer 2 "$SCRATCH/b.log" "${SHAPE[@]}" --steps 4 --pp 2 --out-dir "$SCRATCH/pieces" \
  --resume auto
[ "$rc" = 0 ] || { cat "$SCRATCH/b.log"; fail "resumed piece exited $rc"; }
for key in "${KEYS[@]}"; do
  cmp -s <(metric "$SCRATCH/pp2/metrics.jsonl" "$key") \
    <(metric "$SCRATCH/pieces/metrics.jsonl" "$key") ||
    { paste <(metric "$SCRATCH/pp2/metrics.jsonl" "$key") \
        <(metric "$SCRATCH/pieces/metrics.jsonl" "$key"); fail "$key differs after the resume"; }
done
echo "ok: 2 + resume + 2 steps at pp 2 equal 4 bit for bit, the form kept"
echo "PASS"
