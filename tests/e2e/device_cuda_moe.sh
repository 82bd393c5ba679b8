#!/usr/bin/env bash
# Mixture of experts on --device cuda (label gpu): a tiny llama MoE (4 experts, top-2, one shared
# expert) trains 6 steps from the same seed and data on the GPU as on the CPU, and the per-step
# losses, gradient norms and aux losses must agree. The routing is the MoE layer's host code over
# staged copies (model/moe.hpp); the experts' GEMMs and SwiGLU run on the GPU; under expert
# parallelism the routed rows cross ranks over the ep group's device communicator:
#   - one rank: cuda against cpu, fp32 and bf16 (--kernels cuda);
#   - all ranks on GPU 0 over --comm mpi (pinned staging or CUDA-aware MPI): ep 2 at dp 2, and
#     with ZeRO-1 and ZeRO-3, against ep 1 at dp 2 on the GPU; bf16 ep 2 against bf16 ep 1
#     (1e-4 / 1e-3: the CPU's bf16 ep 2 is within 2.4e-5 / 2.0e-5 of ep 1, expert_parallel.sh);
#   - the all-layers aux loss (--moe-aux-loss-form all-layers): pp 2 on GPU 0 over --comm mpi
#     (the rows per expert staged with the activations) against one rank on the GPU;
#   - where the machine has 2 GPUs: ep 2 and the all-layers pp 2 over NCCL (grouped send /
#     receive).
# Bounds: 1e-5 (losses, aux) and 1e-4 (norms) relative in fp32, as device_cuda_cp.sh's, and
# 5e-3 / 5e-2 in bf16 (device_cuda.sh's loss bound: cuDNN's attention in bf16 against the CPU's
# fp32). Not yet measured on a GPU: the CPU's ep layouts agree within 2.1e-9 / 1.7e-8
# (expert_parallel.sh); a top-k choice flipped by the GPU's other summation order would move a
# loss by about 1e-4 on this model, so a failure beyond the bound names that first.
# Without a usable GPU: SKIP (exit 77) with the trainer's reason.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_cuda_trainer
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 6 --arch llama --n-kv-head 2 --n-experts 4 --top-k 2 \
  --n-shared-experts 1 --moe-z-loss-coef 0.001
moe=("$@")
gpus=$(gpu_count)
echo "GPUs on this machine: $gpus"

run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  run_trainer "$np" "$SCRATCH/$name.log" "${moe[@]}" --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  metric "$SCRATCH/$name/metrics.jsonl" grad_norm > "$SCRATCH/$name.norm"
  metric "$SCRATCH/$name/metrics.jsonl" moe_aux_loss > "$SCRATCH/$name.aux"
}
same() {  # same REFERENCE NAME LOSS_TOLERANCE NORM_TOLERANCE
  within "$1" "$2" loss "$3"
  within "$1" "$2" aux "$3"
  within "$1" "$2" norm "$4"
}

run cpu 1 --device cpu
run cuda 1 --device cuda
same cpu cuda 1e-5 1e-4
grep -q "^note: mixture of experts on cuda: .* on the host over staged copies" \
  "$SCRATCH/cuda.log" ||
  { cat "$SCRATCH/cuda.log"; fail "the start-up does not say where the routing runs"; }
run bf16-cpu 1 --device cpu --precision bf16
run bf16-cuda 1 --device cuda --precision bf16 --kernels cuda
same bf16-cpu bf16-cuda 5e-3 5e-2

export CUDA_VISIBLE_DEVICES=0
run ep1-dp2 2 --device cuda --dp 2 --comm mpi
run ep2 2 --device cuda --dp 2 --ep 2 --comm mpi
same ep1-dp2 ep2 1e-5 1e-4
run ep2-zero1 2 --device cuda --dp 2 --ep 2 --zero 1 --comm mpi
same ep1-dp2 ep2-zero1 1e-5 1e-4
run ep2-zero3 2 --device cuda --dp 2 --ep 2 --zero 3 --comm mpi
same ep1-dp2 ep2-zero3 1e-5 1e-4
run bf16-ep1-dp2 2 --device cuda --dp 2 --precision bf16 --kernels cuda --comm mpi
run bf16-ep2 2 --device cuda --dp 2 --ep 2 --precision bf16 --kernels cuda --comm mpi
same bf16-ep1-dp2 bf16-ep2 1e-4 1e-3
run all-layers 1 --device cuda --moe-aux-loss-form all-layers
run all-layers-pp2 2 --device cuda --pp 2 --moe-aux-loss-form all-layers --comm mpi
same all-layers all-layers-pp2 1e-5 1e-4
unset CUDA_VISIBLE_DEVICES

if [ "$gpus" -ge 2 ]; then
  run ep2-nccl 2 --device cuda --dp 2 --ep 2 --comm nccl
  same ep1-dp2 ep2-nccl 1e-5 1e-4
  run all-layers-pp2-nccl 2 --device cuda --pp 2 --moe-aux-loss-form all-layers --comm nccl
  same all-layers all-layers-pp2-nccl 1e-5 1e-4
fi
echo "PASS"
