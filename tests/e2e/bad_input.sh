#!/usr/bin/env bash
# Bad input: one clear message from rank 0, exit code 2, before any work; nothing the user had is
# overwritten.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"

expect_usage_error() {  # [NP=ranks] expect_usage_error NAME EXPECTED_TEXT TRAINER_ARGS...
  local name=$1 expected=$2; shift 2
  set +e
  $MPIRUN -np "${NP:-2}" "$TRAINER" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err"
  local rc=$?
  set -e
  [ $rc = 2 ] || { cat "$SCRATCH/$name.out" "$SCRATCH/$name.err"; fail "$name: exit code $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.err" || { cat "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  [ "$(grep -c 'trainer: error:' "$SCRATCH/$name.err")" = 1 ] || { cat "$SCRATCH/$name.err"; fail "$name: not exactly one message"; }
  grep -q '^step ' "$SCRATCH/$name.out" && fail "$name: training started"
  # An agreed error leaves through MPI_Finalize on every rank: no MPI_Abort banner.
  grep -q 'MPI_ABORT' "$SCRATCH/$name.err" && { cat "$SCRATCH/$name.err"; fail "$name: MPI_Abort"; }
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.err")"
}

# shellcheck disable=SC2046
set -- $(tiny_model_args) --steps 2
model=("$@")  # for the cases with their own data
tiny=(--train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5" $(val_args) "${model[@]}")
printf 'a small text' > "$SCRATCH/short.txt"
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/short" "$SCRATCH/short.txt" > /dev/null
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/shard" --format llmc "$SOURCE_DIR/README.md" > /dev/null
head -c 4096 /dev/urandom > "$SCRATCH/garbage.bin"

expect_usage_error missing_data "$SCRATCH/nope.h5" "${model[@]}" --train-data "$SCRATCH/nope.h5" --out-dir "$SCRATCH/o1"
expect_usage_error heads "must be a positive multiple of n-head" "${tiny[@]}" --n-head 3 --out-dir "$SCRATCH/o2"
expect_usage_error gqa_on_gpt2 "n-kv-head must equal n-head" "${tiny[@]}" --n-kv-head 2 --out-dir "$SCRATCH/o3"
expect_usage_error batch_split "must be divisible by dp x micro-batch-size" "${tiny[@]}" --global-batch-size 6 --out-dir "$SCRATCH/o4"
expect_usage_error token_range "holds token id" "${model[@]}" --train-data "$SCRATCH/shard/train.bin" --vocab-size 64 --out-dir "$SCRATCH/o5"
expect_usage_error declared_vocab "declares vocab_size 256" "${tiny[@]}" --vocab-size 100 --out-dir "$SCRATCH/o6"
expect_usage_error too_short "$SCRATCH/short/train.h5" "${model[@]}" --train-data "$SCRATCH/short/train.h5" --out-dir "$SCRATCH/o7"
expect_usage_error bad_init "$SCRATCH/garbage.bin" "${tiny[@]}" --init-from "$SCRATCH/garbage.bin" --out-dir "$SCRATCH/o8"
# Model options the model would not use: the experts' on a dense model, RoPE's on gpt2.
expect_usage_error dense_top_k "top-k is a mixture-of-experts option, and this model is dense" "${tiny[@]}" --top-k 3 --out-dir "$SCRATCH/o20"
expect_usage_error dense_aux_form "moe-aux-loss-form is a mixture-of-experts option, and this model is dense" "${tiny[@]}" --moe-aux-loss-form all-layers --out-dir "$SCRATCH/o20"
expect_usage_error bad_aux_form "moe-aux-loss-form must be auto, per-layer or all-layers, not 'pooled'" "${tiny[@]}" --moe-aux-loss-form pooled --out-dir "$SCRATCH/o20"
expect_usage_error gpt2_rope "rope-theta is a llama option (gpt2 has no rotary embedding)" "${tiny[@]}" --rope-theta 500000 --out-dir "$SCRATCH/o21"
expect_usage_error bad_option "unrecognised option '--bogus'" "${tiny[@]}" --bogus 1
expect_usage_error bad_number "steps" "${tiny[@]}" --steps many
# A misspelt option names the nearest known one.
expect_usage_error typo_option "unrecognised option '--stpes' (did you mean --steps?)" \
  "${tiny[@]}" --stpes 3
expect_usage_error underscore_option "(did you mean --n-layer?)" "${tiny[@]}" --n_layer 3

# Layouts that do not fit (3D parallelism).
expect_usage_error grid_mismatch "dp x tp x pp = 3 x 1 x ? does not fit the 2 ranks" "${tiny[@]}" --dp 3 --out-dir "$SCRATCH/o9"
# ... naming the rank counts and the layouts that would fit (not --tp 3: 4 heads).
NP=3 expect_usage_error grid_alternatives \
  "does not fit the 3 ranks of this job: use -np 2, 4, 6 ... or --tp 1" \
  "${tiny[@]}" --tp 2 --out-dir "$SCRATCH/o19"
expect_usage_error tp_heads "n-head (3) is not divisible by tp (2)" "${tiny[@]}" --tp 2 --n-head 3 --d-model 48 --out-dir "$SCRATCH/o10"
expect_usage_error tp_kv_heads "n-kv-head (1) is not divisible by tp (2)" "${tiny[@]}" --tp 2 --arch llama --n-kv-head 1 --out-dir "$SCRATCH/o11"
expect_usage_error pp_layers "fewer than the 2 pipeline stages" "${tiny[@]}" --pp 2 --n-layer 1 --out-dir "$SCRATCH/o12"
expect_usage_error pp_layer_list "must list 2 stage sizes adding up to n-layer 2" "${tiny[@]}" --pp 2 --pp-layers 2,1 --out-dir "$SCRATCH/o13"
expect_usage_error pp_schedule "pp-schedule must be 'gpipe' or '1f1b'" "${tiny[@]}" --pp 2 --pp-schedule zigzag --out-dir "$SCRATCH/o14"
expect_usage_error dp_batch "must be divisible by dp x micro-batch-size = 2 x 4" "${tiny[@]}" --dp 2 --micro-batch-size 4 --global-batch-size 12 --out-dir "$SCRATCH/o15"

# --device and --comm: an unknown device or comm, nccl without a GPU device, a host-side
# compression on the GPU, --tf32 with bf16, cuda without a usable GPU (here), or in a build
# without CUDA. None of them creates its out-dir.
expect_usage_error bad_device "device must be cpu or cuda, not 'tpu'" "${tiny[@]}" --device tpu --out-dir "$SCRATCH/o16"
expect_usage_error bad_comm "comm must be auto, nccl or mpi, not 'gloo'" "${tiny[@]}" --comm gloo --out-dir "$SCRATCH/o17"
expect_usage_error nccl_on_cpu "--comm nccl needs --device cuda" "${tiny[@]}" --comm nccl --out-dir "$SCRATCH/o17"
if grep -q '^MPITRAIN_CUDA:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  expect_usage_error cuda_compress "--grad-compress int8 encodes on the host: --device cpu only" "${tiny[@]}" --device cuda --dp 2 --grad-compress int8 --out-dir "$SCRATCH/o17"
  expect_usage_error cuda_profile "--profile-ops times the CPU backend's ops" "${tiny[@]}" --device cuda --dp 2 --profile-ops --out-dir "$SCRATCH/o17"
  expect_usage_error cuda_tf32_bf16 "--tf32 lets fp32 GEMMs run as TF32, and precision bf16 runs them in bf16" "${tiny[@]}" --device cuda --dp 2 --precision bf16 --tf32 --out-dir "$SCRATCH/o17"
  if nvidia-smi -L > /dev/null 2>&1; then
    echo "a GPU is usable here: the no-GPU case does not apply"
  else
    expect_usage_error cuda_no_gpu "--device cuda: no CUDA device usable: " "${tiny[@]}" --device cuda --dp 2 --out-dir "$SCRATCH/o18"
  fi
else
  NP=1 expect_usage_error cuda_not_built "--device cuda: this build has no CUDA backend" "${tiny[@]}" --device cuda --out-dir "$SCRATCH/o18"
fi
for d in o16 o17 o18; do [ ! -e "$SCRATCH/$d" ] || fail "a rejected --device run created $d"; done

# What could only fail at the end, refused at start-up (no out-dir created): a sample filter the
# model cannot meet, --steps 0 with nothing to do, --save-best without validation data, two
# exports into one file.
expect_usage_error top_k_vocab "sample-top-k 300 exceeds the vocabulary (256 tokens)" "${tiny[@]}" --sample-tokens 8 --sample-top-k 300 --out-dir "$SCRATCH/o20"
expect_usage_error top_p_zero "sample-top-p must be in (0, 1] (got 0)" "${tiny[@]}" --sample-top-p 0 --out-dir "$SCRATCH/o20"
expect_usage_error nothing_to_do "--steps 0 trains nothing, and nothing else is asked" --train-data "$DATA_DIR/train.h5" "${model[@]}" --steps 0 --out-dir "$SCRATCH/o20"
expect_usage_error best_without_val "save-best keeps the checkpoint of the lowest validation loss: it needs val-data" --train-data "$DATA_DIR/train.h5" "${model[@]}" --save-best --out-dir "$SCRATCH/o20"
expect_usage_error same_export "export-llmc and export-params name the same file $SCRATCH/m.bin" "${tiny[@]}" --export-llmc "$SCRATCH/m.bin" --export-params "$SCRATCH/m.bin" --out-dir "$SCRATCH/o20"
expect_usage_error bad_tokenizer "$SCRATCH/short.txt' is not a tokenizer descriptor" "${tiny[@]}" --tokenizer "$SCRATCH/short.txt" --out-dir "$SCRATCH/o20"
[ ! -e "$SCRATCH/o20" ] && [ ! -e "$SCRATCH/m.bin" ] || fail "a run refused at start-up wrote something"

# An out-dir that already holds a run is left exactly as it was.
mkdir -p "$SCRATCH/previous"
echo '{"step": 1, "loss": 1}' > "$SCRATCH/previous/metrics.jsonl"
before=$(md5sum < "$SCRATCH/previous/metrics.jsonl")
expect_usage_error existing_out_dir "already holds files; pass --overwrite" "${tiny[@]}" --out-dir "$SCRATCH/previous"
[ "$(md5sum < "$SCRATCH/previous/metrics.jsonl")" = "$before" ] || fail "existing metrics.jsonl was changed"
[ "$(ls "$SCRATCH/previous")" = metrics.jsonl ] || fail "files were added to the existing out-dir"
# A failed run creates no out-dir.
[ ! -e "$SCRATCH/o2" ] || fail "a rejected run created its out-dir"
