#!/usr/bin/env bash
# Expert parallelism (--ep N): a tiny llama MoE (4 experts, top-2) trains with its routed experts
# split over ep consecutive dp ranks, rows sent to their experts' ranks by all-to-alls. From the
# same seed and data every layout must give the per-step losses and gradient norms of ep 1 at
# the same dp within fp32-order noise (an expert's weight gradient sums its rows in one GEMM
# instead of per rank then over dp).
# Measured (AMD EPYC Zen 5, 2 cores, loaded): against ep 1 at dp 4, ep 2, ep 4, ep 2 x tp 2 and
# ep 2 x pp 2 losses within 2.1e-9 relative, gradient norms within 1.7e-8; bf16 ep 2 against
# ep 1 (dp 2) within 2.2e-5 and 2.3e-5 with attention's tiles in fp32, 2.9e-5 and 1.04e-4 with
# them in bf16 (a CPU with AVX512-BF16: P and dS rounded to bf16 too, so the two orders' fp32
# differences in the experts' gradients flip more roundings; step 1 is the same bits).
# Over --seed 1-8 (the initial values), those layouts and LAMB's below: losses within 9.4e-9,
# norms within 9.4e-8.
# Bounds: LOSS_TOL 5e-8, NORM_TOL 5e-7; bf16 1e-4 (loss) and 4e-4 (norm). Routing rows to the wrong rank (each
# expert's rows sent to the rank before its owner) moved the losses by up to 8.0e-4 and
# the norms by 4.3e-3 relative, and test_expert_dispatch names each misrouted row.
# LAMB (--lr 3e-2) takes whole-tensor trust ratios at every layout: the ep-split experts' norms
# summed over ep without ZeRO, over dp's shards with ZeRO (dp = ep x expert-dp). ep 2, ep 2 x
# tp 2, ep 2 ZeRO-1 and ZeRO-3 against ep 1 at dp 4: losses within 1.92e-9 relative, gradient
# norms within 1.22e-8 (LOSS_TOL, NORM_TOL). Without the sum over ep (each rank's ratios from
# its 2 of 4 experts) ep 2 moved the losses by 1.49e-5 and the norms by 2.2e-4.
# MPITRAIN_MOE_STAGED=1 (the MoE host code's device copies, taken on the CPU) gives ep 2's bits.
# Checkpoints are layout-free: ep 2 resumes at ep 1 and at ep 4 (within LOSS_TOL of 6 straight
# steps at ep 2; measured 0 and 2.1e-9).
# Bad input (exit 2, the reason): ep not dividing dp, ep not dividing the experts, a dense model,
# hybrid sharding (ZeRO with ep: expert_parallel_zero.sh).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
LOSS_TOL=5e-8 NORM_TOL=5e-7 BF16_LOSS_TOL=1e-4 BF16_NORM_TOL=4e-4
moe="--arch llama --n-kv-head 2 --n-experts 4 --top-k 2"
run() {  # run NAME NP ARGS...: 6 steps of one learning-rate schedule
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/$name.log" $(tiny_args) $moe --steps 6 --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
}
same() {  # same REFERENCE NAME [LOSS_TOLERANCE NORM_TOLERANCE]
  within "$1" "$2" loss "${3:-$LOSS_TOL}"
  within "$1" "$2" norm "${4:-$NORM_TOL}"
}

lamb="--optimizer lamb --lr 3e-2"
run_cases 2 'run ep1 4' 'run ep2 4 --ep 2' 'run ep4 4 --ep 4' 'run ep2-tp2 4 --tp 2 --ep 2' \
  'run ep2-pp2 4 --pp 2 --ep 2' 'run bf16-ep1 2 --precision bf16' \
  'run bf16-ep2 2 --precision bf16 --ep 2' 'run lamb-ep1 4 $lamb' 'run lamb-ep2 4 $lamb --ep 2' \
  'run lamb-ep2-tp2 4 $lamb --tp 2 --ep 2' 'run lamb-z1 4 $lamb --ep 2 --zero 1' \
  'run lamb-z3 4 $lamb --ep 2 --zero 3' 'export MPITRAIN_MOE_STAGED=1; run ep2-staged 4 --ep 2'
for name in ep1 ep2 ep4 ep2-tp2 ep2-pp2 bf16-ep1 bf16-ep2 lamb-ep1 lamb-ep2 lamb-ep2-tp2 lamb-z1 \
  lamb-z3 ep2-staged; do
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  metric "$SCRATCH/$name/metrics.jsonl" grad_norm > "$SCRATCH/$name.norm"
done
grep -q "expert parallel: ep 2 x expert-dp 2, 2 of 4 experts per rank" "$SCRATCH/ep2.log" ||
  { cat "$SCRATCH/ep2.log"; fail "the start-up line does not name ep"; }
for name in ep2 ep4 ep2-tp2 ep2-pp2; do same ep1 $name; done
same bf16-ep1 bf16-ep2 $BF16_LOSS_TOL $BF16_NORM_TOL
for name in lamb-ep2 lamb-ep2-tp2 lamb-z1 lamb-z3; do same lamb-ep1 $name; done
# The device's way on the CPU (MPITRAIN_MOE_STAGED=1: the MoE layers' host code reads and writes
# every backend tensor through download / upload) changes no bit.
for kind in loss norm; do
  cmp -s "$SCRATCH/ep2.$kind" "$SCRATCH/ep2-staged.$kind" ||
    { paste "$SCRATCH/ep2.$kind" "$SCRATCH/ep2-staged.$kind"; fail "staged like a device: $kind"; }
done

# Resume across ep sizes: 3 + 3 steps, the layout changed at the checkpoint, against ep 2's 6.
run_cases 2 "resume_in_pieces ep2-to-ep1 4 '$moe --ep 2' 4 '$moe'" \
  "resume_in_pieces ep2-to-ep4 4 '$moe --ep 2' 4 '$moe --ep 4'"
for name in ep2-to-ep1 ep2-to-ep4; do within ep2 $name loss $LOSS_TOL; done

bad() {  # bad NAME NP REASON ARGS...: exit 2 with REASON
  local name=$1 np=$2 reason=$3; shift 3
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/$name.log" $(tiny_args) --steps 1 --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc, expected 2"; }
  grep -q -- "$reason" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no reason"; }
}
bad ep3 4 "ep 3 does not divide the data-parallel size 4" $moe --n-experts 6 --ep 3
bad ep4-of-6 4 "ep 4 does not divide the 6 experts" $moe --n-experts 6 --ep 4
bad dense 2 "needs a mixture-of-experts model" --ep 2
bad hsdp 4 "with hybrid sharding (--zero-shard-size 2) is not supported" $moe --ep 2 --zero 2 \
  --zero-shard-size 2
echo "PASS"
