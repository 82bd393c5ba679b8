#!/usr/bin/env bash
# --device cuda on several ranks (label gpu), against --device cpu in the same layout:
#   - every dp x tp x pp layout with sizes in {1, 2} (2, 4 and 8 ranks) with all ranks sharing
#     GPU 0 over the MPI communicator (--comm mpi: pinned staging), 4 steps of the tiny model in
#     fp32: losses per step and the validation loss within 1e-4 relative of the CPU run (float
#     sums in other orders, as tests/e2e/device_cuda.sh); ZeRO-1 at dp 2 x pp 2 and llama
#     (untied embeddings) at tp 2 x pp 2 too, ZeRO-2 at dp 2, ZeRO-3 at dp 2 x tp 2 and hybrid
#     ZeRO-3 (shard groups of 2) at dp 4;
#   - --comm nccl where ranks would share a GPU: exit 2 with the reason; --comm auto there: mpi;
#   - a rank that stops in step 2 (MPITRAIN_FAULT=hang) with a 4 s timeout: exit 3 naming it;
#   - where the machine has at least 2 (4) GPUs: the same comparisons over NCCL for dp 2, tp 2,
#     pp 2 (1F1B, GPipe, llama) (and dp 2 x tp 2, ZeRO-1 and ZeRO-3 at dp 2 x pp 2), and the hang
#     over NCCL, which the watchdog sees as device work that does not complete (the host is in a copy, not
#     in a communication call);
#   - --micro-batch-size auto on the GPU: the plan is printed and the run trains.
# Without a usable GPU: SKIP (exit 77) with the trainer's reason.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
require_cuda_trainer
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 4 --global-batch-size 8 --micro-batch-size 2
tiny=("$@")
gpus=$(gpu_count)
echo "GPUs on this machine: $gpus"

losses() {  # losses RUN_DIR: the step losses and the final validation loss
  metric "$1/metrics.jsonl" loss
  metric "$1/metrics.jsonl" val_loss
}

compare() {  # compare NAME NP COMM ARGS...: cpu and cuda runs in one layout
  local name=$1 np=$2 comm=$3; shift 3
  run_trainer "$np" "$SCRATCH/$name-cpu.log" "${tiny[@]}" "$@" --out-dir "$SCRATCH/$name-cpu"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-cpu.log"; fail "$name cpu exited $rc"; }
  run_trainer "$np" "$SCRATCH/$name-cuda.log" "${tiny[@]}" "$@" --device cuda --comm "$comm" \
    --out-dir "$SCRATCH/$name-cuda"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name-cuda.log"; fail "$name cuda --comm $comm exited $rc"; }
  grep -q "^comm: $comm" "$SCRATCH/$name-cuda.log" || { cat "$SCRATCH/$name-cuda.log"; fail "$name: not over $comm"; }
  losses "$SCRATCH/$name-cpu" > "$SCRATCH/$name-cpu.loss"
  losses "$SCRATCH/$name-cuda" > "$SCRATCH/$name-cuda.loss"
  [ "$(wc -l < "$SCRATCH/$name-cuda.loss")" = 5 ] || fail "$name: expected 4 losses and a val loss"
  local d
  d=$(max_rel_diff "$SCRATCH/$name-cpu.loss" "$SCRATCH/$name-cuda.loss")
  echo "$name (np $np, --comm $comm): losses cpu vs cuda within $d relative (allowed 1e-4)"
  awk -v d="$d" 'BEGIN{exit !(d < 1e-4)}' || {
    paste "$SCRATCH/$name-cpu.loss" "$SCRATCH/$name-cuda.loss"; fail "$name: cuda does not match cpu"; }
}

# All ranks on GPU 0, over MPI.
export CUDA_VISIBLE_DEVICES=0
compare mpi_dp2 2 mpi --dp 2
compare mpi_tp2 2 mpi --tp 2
compare mpi_pp2 2 mpi --pp 2
compare mpi_dp2_tp2 4 mpi --dp 2 --tp 2
compare mpi_dp2_pp2 4 mpi --dp 2 --pp 2
compare mpi_tp2_pp2 4 mpi --tp 2 --pp 2
compare mpi_dp2_tp2_pp2 8 mpi --dp 2 --tp 2 --pp 2
compare mpi_dp2_pp2_zero 4 mpi --dp 2 --pp 2 --zero 1
compare mpi_dp2_zero2 2 mpi --dp 2 --zero 2
compare mpi_dp2_tp2_zero3 4 mpi --dp 2 --tp 2 --zero 3
compare mpi_dp4_zero3_hybrid 4 mpi --dp 4 --zero 3 --zero-shard-size 2
compare mpi_llama_tp2_pp2 4 mpi --tp 2 --pp 2 --arch llama --n-kv-head 2

run_trainer 2 "$SCRATCH/shared-nccl.log" "${tiny[@]}" --dp 2 --device cuda --comm nccl \
  --out-dir "$SCRATCH/shared-nccl"
[ "$rc" = 2 ] || { cat "$SCRATCH/shared-nccl.log"; fail "--comm nccl on a shared GPU exited $rc, expected 2"; }
grep -q 'NCCL needs a GPU per rank' "$SCRATCH/shared-nccl.log" || fail "no reason for refusing nccl"
run_trainer 2 "$SCRATCH/shared-auto.log" "${tiny[@]}" --dp 2 --device cuda --steps 1 \
  --out-dir "$SCRATCH/shared-auto"
[ "$rc" = 0 ] && grep -q '^comm: mpi' "$SCRATCH/shared-auto.log" ||
  { cat "$SCRATCH/shared-auto.log"; fail "--comm auto on a shared GPU should run over mpi"; }
grep -q '(shared)' "$SCRATCH/shared-auto.log" || fail "the device table does not mark the shared GPU"

hang() {  # hang NAME COMM: rank 1 stops in step 2; the job must end with exit 3 naming it
  local name=$1 comm=$2
  MPITRAIN_FAULT=hang:rank=1:step=2 run_trainer 2 "$SCRATCH/$name.log" "${tiny[@]}" --dp 2 \
    --device cuda --comm "$comm" --comm-timeout 4 --comm-timeout-startup 60 --steps 3 \
    --out-dir "$SCRATCH/$name"
  [ "$rc" = 3 ] || { cat "$SCRATCH/$name.log"; fail "$name: a hung rank gave exit $rc, expected 3"; }
  grep -q 'not arrived: rank 1' "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: rank 1 not named"; }
  echo "$name: exit 3, rank 1 named"
}
hang hang_mpi mpi

run_trainer 1 "$SCRATCH/auto.log" "${tiny[@]}" --device cuda --micro-batch-size auto \
  --out-dir "$SCRATCH/auto"
[ "$rc" = 0 ] || { cat "$SCRATCH/auto.log"; fail "--micro-batch-size auto exited $rc"; }
grep '^micro-batch auto:' "$SCRATCH/auto.log" || fail "no micro-batch plan printed"

unset CUDA_VISIBLE_DEVICES
if [ "$gpus" -ge 2 ]; then
  compare nccl_dp2 2 nccl --dp 2
  compare nccl_tp2 2 nccl --tp 2
  compare nccl_pp2 2 nccl --pp 2
  compare nccl_pp2_gpipe 2 nccl --pp 2 --pp-schedule gpipe
  compare nccl_llama_pp2 2 nccl --pp 2 --arch llama --n-kv-head 2
  hang hang_nccl nccl
else
  echo "nccl over 2 ranks: skipped: this machine has $gpus GPU"
fi
if [ "$gpus" -ge 4 ]; then
  compare nccl_dp2_tp2 4 nccl --dp 2 --tp 2
  compare nccl_dp2_pp2_zero 4 nccl --dp 2 --pp 2 --zero 1
  compare nccl_dp2_pp2_zero3 4 nccl --dp 2 --pp 2 --zero 3
else
  echo "nccl over 4 ranks: skipped: this machine has $gpus GPUs"
fi
echo "ok: --device cuda on several ranks matches --device cpu"
