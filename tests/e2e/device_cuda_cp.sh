#!/usr/bin/env bash
# Context parallelism on --device cuda (label gpu): the ring of K/V blocks runs the CUDA block
# kernels (src/backend/cuda/attention.cu) over the cp group's device communicator. Each
# layout trains 4 steps of the tiny model from the same seed and data as cp 1 on the GPU, and
# the per-step losses and gradient norms must agree:
#   - all ranks on GPU 0 over --comm mpi (pinned staging or CUDA-aware MPI): llama with GQA at
#     cp 2 and cp 4, gpt2 at cp 2, cp 2 x dp 2, cp 2 x tp 2; bf16 storage at cp 2 (--kernels
#     cuda: both layouts use our fp32 attention kernels, cuDNN's would round P to bf16 at cp 1);
#   - where the machine has 2 (4) GPUs: llama cp 2 (cp 4) over NCCL, which matches sends to
#     receives by order, not by tag.
# Bounds: losses 1e-5 and gradient norms 1e-4 relative in fp32, 1e-4 and 1e-3 in bf16. Not yet
# measured on a GPU: the CPU's cp runs agree within 5.8e-9 / 3.0e-8 (bf16 1.5e-5 / 2.5e-4,
# tests/e2e/context_parallel.sh); the GPU adds atomic sums (dq, embeddings) in any order. A
# skipped ring step moved the CPU's losses by 1.8e-4 to 2e-3 and the norms by 0.02 to 0.46.
# Without a usable GPU: SKIP (exit 77) with the trainer's reason.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_cuda_trainer
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 4 --lr-decay-steps 6 --device cuda
tiny=("$@")
llama=(--arch llama --n-kv-head 2)
gpus=$(gpu_count)
echo "GPUs on this machine: $gpus"

run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  run_trainer "$np" "$SCRATCH/$name.log" "${tiny[@]}" --out-dir "$SCRATCH/$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  metric "$SCRATCH/$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
  metric "$SCRATCH/$name/metrics.jsonl" grad_norm > "$SCRATCH/$name.norm"
}
same() {  # same REFERENCE NAME LOSS_TOLERANCE NORM_TOLERANCE
  within "$1" "$2" loss "$3"
  within "$1" "$2" norm "$4"
}

export CUDA_VISIBLE_DEVICES=0
run llama-cp1 1 "${llama[@]}"
run llama-cp2 2 "${llama[@]}" --cp 2 --comm mpi
same llama-cp1 llama-cp2 1e-5 1e-4
run llama-cp4 4 "${llama[@]}" --cp 4 --comm mpi
same llama-cp1 llama-cp4 1e-5 1e-4
run gpt2-cp1 1
run gpt2-cp2 2 --cp 2 --comm mpi
same gpt2-cp1 gpt2-cp2 1e-5 1e-4
run llama-dp2 2 "${llama[@]}" --dp 2 --comm mpi
run llama-cp2-dp2 4 "${llama[@]}" --cp 2 --dp 2 --comm mpi
same llama-dp2 llama-cp2-dp2 1e-5 1e-4
run llama-tp2 2 "${llama[@]}" --tp 2 --comm mpi
run llama-cp2-tp2 4 "${llama[@]}" --cp 2 --tp 2 --comm mpi
same llama-tp2 llama-cp2-tp2 1e-5 1e-4
run llama-bf16-cp1 1 "${llama[@]}" --precision bf16 --kernels cuda
run llama-bf16-cp2 2 "${llama[@]}" --precision bf16 --kernels cuda --cp 2 --comm mpi
same llama-bf16-cp1 llama-bf16-cp2 1e-4 1e-3
unset CUDA_VISIBLE_DEVICES

if [ "$gpus" -ge 2 ]; then
  run llama-cp2-nccl 2 "${llama[@]}" --cp 2 --comm nccl
  same llama-cp1 llama-cp2-nccl 1e-5 1e-4
fi
if [ "$gpus" -ge 4 ]; then
  run llama-cp4-nccl 4 "${llama[@]}" --cp 4 --comm nccl
  same llama-cp1 llama-cp4-nccl 1e-5 1e-4
fi
echo "PASS"
