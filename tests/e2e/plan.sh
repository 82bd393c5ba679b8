#!/usr/bin/env bash
# The layout planner (build/plan): a ranked table and the trainer flags of the best layout, which
# the trainer then runs as they are; grids that cannot run reported with the reason (too few
# layers, heads not divisible, memory, the margin --micro-batch-size auto keeps); the trainer naming
# only layouts the model admits; ZeRO 0-3 offered, --zero 3 limiting the search to it; bad
# input -> one message, exit 2; and given an H100 cluster's numbers, Megatron's layout for
# Llama-2 70B (TP 8, PP 2 to 8) among the top choices, and pure data parallelism only with ZeRO-3.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
PLAN="$BUILD_DIR/plan"

# The model of tiny_args as an INI file (the planner reads the trainer's INI).
cat > "$SCRATCH/tiny.ini" <<'EOF'
arch = gpt2
n-layer = 2
n-head = 4
d-model = 64
vocab-size = 256
seq-len = 32
global-batch-size = 8
EOF
cpu=(--config "$SCRATCH/tiny.ini" --cpu --cores-per-node 2 --host-mem 8 --peak-gflops 100)
# A plan's lines with a layout's " sp" (sequence parallelism) dropped: the table's columns in
# place for the awk programs below.
without_sp() { sed -E 's/^( *[0-9]+ +dp[0-9]+ tp[0-9]+ pp[0-9]+ cp[0-9]+) sp /\1 /' "$1"; }

# 1. The table and the flags, for 4 ranks on one node.
"$PLAN" "${cpu[@]}" --ranks-per-node 4 --top 0 > "$SCRATCH/cpu.txt"
cat "$SCRATCH/cpu.txt"
grep -q '^rank  layout  *mb  *zero  *recompute  *memory GiB  *est. step s  *bubble %  *exposed comm %  *tokens/s  *MFU %  *headroom %$' \
  "$SCRATCH/cpu.txt" || fail "no table header"
rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^dp[0-9]+$/ && $3 ~ /^tp[0-9]+$/ && $4 ~ /^pp[0-9]+$/ && $5 ~ /^cp[0-9]+$/' "$SCRATCH/cpu.txt" | wc -l)
# dp x tp x pp x cp = 4 with pp <= 2 layers; at cp 1: (4,1,1) (2,2,1) (1,4,1) (2,1,2) (1,2,2);
# micro-batches dividing 8/dp; where dp x cp > 1 ZeRO 0, 1, 2, 3 and 3 keeping its gathered
# parameters (3k); three recomputation modes; where tp > 1 with and without sequence parallelism
# (x 2); all fit in 2 GiB. Context parallelism (2 cp divides seq-len 32): cp 2 with (2,1,1) (1,2,1)
# (1,1,2), cp 4 with (1,1,1), all with every ZeRO level.
[ "$rows" = $(( (2 * 5 + 2 * 3 * 5 + 2 * 4 + 3 * 5 + 2 * 4) * 3 + (3 * 5 + 4 * 5 * 2 + 4 * 5) * 3 + 3 * 5 * 4 )) ] ||
  fail "$rows rows, expected 498"
without_sp "$SCRATCH/cpu.txt" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^dp/ {print $10}' | sort -c -g ||
  fail "the table is not sorted by step time"
flags=$(sed -n 's/^trainer flags: //p' "$SCRATCH/cpu.txt")
[[ $flags =~ ^--dp\ ([0-9]+)\ --tp\ ([0-9]+)\ --pp\ ([0-9]+)\ --cp\ ([0-9]+)\ --micro-batch-size\ [0-9]+\ --zero\ [0-3](\ --zero3-reshard-after-forward\ false)?\ --recompute\ (none|selective|full)\  ]] ||
  fail "trainer flags line: '$flags'"
layout="dp ${BASH_REMATCH[1]} x tp ${BASH_REMATCH[2]} x pp ${BASH_REMATCH[3]} x cp ${BASH_REMATCH[4]}"
grep -q "^   1  dp${BASH_REMATCH[1]} tp${BASH_REMATCH[2]} pp${BASH_REMATCH[3]} cp${BASH_REMATCH[4]} " "$SCRATCH/cpu.txt" ||
  fail "the flags are not the first row's layout"
grep -q '^do not fit:$' "$SCRATCH/cpu.txt" || fail "no 'do not fit' section"
grep -q '^  dp1 tp1 pp4 cp1  *n-layer 2 is fewer than the 4 pipeline stages (pp)$' "$SCRATCH/cpu.txt" ||
  fail "pp 4 over 2 layers not reported"

# The flags are the trainer's own: it runs them on the same model (last flag wins over tiny_args).
# shellcheck disable=SC2046,SC2086
run_trainer 4 "$SCRATCH/train.log" $(tiny_args) --steps 2 --out-dir "$SCRATCH/run" $flags
[ "$rc" = 0 ] || { cat "$SCRATCH/train.log"; fail "the trainer did not run the planner's flags (exit $rc)"; }
grep -q "4 ranks = $layout" "$SCRATCH/train.log" || { cat "$SCRATCH/train.log"; fail "the trainer ran another layout than $layout"; }
echo "ok: the trainer ran the best layout: $flags"

# 2. Grids that cannot run: heads not divisible by tp, and no memory.
"$PLAN" "${cpu[@]}" --cores-per-node 8 --ranks-per-node 8 > "$SCRATCH/eight.txt"
grep -q '^  dp1 tp8 pp1 cp1  *n-head (4) is not divisible by tp (8)$' "$SCRATCH/eight.txt" ||
  { cat "$SCRATCH/eight.txt"; fail "tp 8 over 4 heads not reported"; }
set +e
"$PLAN" "${cpu[@]}" --ranks-per-node 4 --host-mem 0.05 > "$SCRATCH/small.txt" 2> "$SCRATCH/small.err"
small_rc=$?
set -e
[ "$small_rc" = 1 ] || fail "nothing fits: exit $small_rc, expected 1"
grep -q 'no layout fits' "$SCRATCH/small.err" || fail "nothing fits: no message"
grep -q '^  dp4 tp1 pp1 cp1  *memory: at least [0-9.]* GiB per rank (mb 1, zero [0-3]k\{0,1\}, recompute full) > 0.01 GiB usable$' \
  "$SCRATCH/small.txt" || { cat "$SCRATCH/small.txt"; fail "memory not given as the reason"; }
echo "ok: grids that do not fit are named with the reason"
# The trainer, given a grid that does not fit its ranks, names only layouts the model admits:
# -np 3 --tp 2 on 4 heads offers --tp 1, not --tp 3 (3 ranks fit, 4 heads do not split in 3).
# shellcheck disable=SC2046
run_trainer 3 "$SCRATCH/tp.log" $(tiny_args) --steps 1 --out-dir "$SCRATCH/tp" --tp 2
grep -qF 'does not fit the 3 ranks of this job: use -np 2, 4, 6 ... or --tp 1' "$SCRATCH/tp.log" &&
  ! grep -qF -- '--tp 3' "$SCRATCH/tp.log" && [ "$rc" = 2 ] ||
  { cat "$SCRATCH/tp.log"; fail "-np 3 --tp 2 on 4 heads: exit $rc, not only the admitted layouts"; }
echo "ok: $(grep -o 'dp x tp x pp.*' "$SCRATCH/tp.log" | head -1)"

# 2b. --zero 3: only ZeRO-3 options (resharding after forward or keeping what it gathered), the
# flags say so, and the grids without data parallelism say why they have none.
"$PLAN" "${cpu[@]}" --ranks-per-node 4 --top 0 --zero 3 > "$SCRATCH/zero3.txt"
levels=$(without_sp "$SCRATCH/zero3.txt" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^dp/ {print $7}' | sort -u | tr '\n' ' ')
[ "$levels" = "3 3k " ] || { cat "$SCRATCH/zero3.txt"; fail "--zero 3: zero column '$levels'"; }
grep -q '^trainer flags: .* --zero 3 ' "$SCRATCH/zero3.txt" || fail "--zero 3: flags without --zero 3"
grep -q '^  dp1 tp4 pp1 cp1  *zero 3 needs dp > 1$' "$SCRATCH/zero3.txt" ||
  { cat "$SCRATCH/zero3.txt"; fail "--zero 3: dp 1 not explained"; }
"$PLAN" "${cpu[@]}" --ranks-per-node 4 --zero 3 --zero3-reshard-after-forward false --zero-shard-size 2 \
  --dp 4 > "$SCRATCH/hsdp.txt"
grep -q '^trainer flags: .* --zero 3 --zero3-reshard-after-forward false --zero-shard-size 2 ' \
  "$SCRATCH/hsdp.txt" || { cat "$SCRATCH/hsdp.txt"; fail "HSDP flags"; }
echo "ok: --zero 3 plans ZeRO-3 only: $(sed -n 's/^trainer flags: //p' "$SCRATCH/hsdp.txt")"

# 3. Bad input: one message, exit 2.
expect_plan_error() {  # expect_plan_error NAME EXPECTED_TEXT ARGS...
  local name=$1 expected=$2 code
  shift 2
  set +e
  "$PLAN" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err"
  code=$?
  set -e
  [ "$code" = 2 ] || { cat "$SCRATCH/$name.err"; fail "$name: exit $code, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.err" || { cat "$SCRATCH/$name.err"; fail "$name: no '$expected'"; }
  [ "$(wc -l < "$SCRATCH/$name.err")" = 1 ] || { cat "$SCRATCH/$name.err"; fail "$name: not one line"; }
  [ ! -s "$SCRATCH/$name.out" ] || fail "$name: printed a plan"
  echo "ok: $name -> $(cat "$SCRATCH/$name.err")"
}
gpu=(--nodes 8 --gpus-per-node 8 --gpu-mem 80 --peak-tflops 989 --intra-bw 450 --inter-bw 400)
llama=(--config "$SOURCE_DIR/input/llama2-70b.ini")
expect_plan_error no_config "--config MODEL.ini is required" "${gpu[@]}"
expect_plan_error missing_config "cannot read config file" --config "$SCRATCH/nope.ini" "${gpu[@]}"
expect_plan_error no_ranks "--gpus-per-node G (GPU nodes), --cpu, or a --cluster file" "${llama[@]}"
expect_plan_error no_peak "peak TFLOP/s per GPU (--peak-tflops, or gpu_peak_tflops in a cluster file) must be given" "${llama[@]}" --nodes 8 --gpus-per-node 8 --gpu-mem 80 --intra-bw 450 --inter-bw 400
expect_plan_error bad_option "unrecognised option '--bogus'" "${llama[@]}" "${gpu[@]}" --bogus 1
expect_plan_error bad_number "gpu-mem" "${llama[@]}" "${gpu[@]}" --gpu-mem lots
expect_plan_error bad_precision "fp8" "${llama[@]}" "${gpu[@]}" --precision fp8
expect_plan_error bad_zero "--zero must be 0, 1, 2 or 3" "${llama[@]}" "${gpu[@]}" --zero 4
expect_plan_error bad_reshard "for option '--zero3-reshard-after-forward' is invalid" "${llama[@]}" "${gpu[@]}" --zero3-reshard-after-forward maybe
expect_plan_error bad_shard_size "--zero-shard-size must not be negative" "${llama[@]}" "${gpu[@]}" --zero-shard-size -2
expect_plan_error zero_batch "--global-batch must be positive" "${llama[@]}" "${gpu[@]}" --global-batch 0
expect_plan_error bad_recompute "recompute 'some' is not one of none, selective, full" "${llama[@]}" "${gpu[@]}" --recompute some
expect_plan_error no_vocab "leaves vocab-size to the training data" --config "$SOURCE_DIR/input/tiny-gpt2.ini" --cpu --peak-gflops 100
printf 'nodes = two\n' > "$SCRATCH/cluster.ini"
expect_plan_error bad_cluster "cluster file $SCRATCH/cluster.ini" "${llama[@]}" --cluster "$SCRATCH/cluster.ini"
# Flags and keys that would not be used, and values out of range: refused, not dropped.
expect_plan_error gpu_flag_on_cpu "--gpu-mem describes GPU nodes, and this plan is for CPU (--cpu) nodes" "${llama[@]}" --cpu --peak-gflops 100 --gpu-mem 80
expect_plan_error cpu_flag_on_gpu "--host-mem describes CPU nodes, and this plan is for GPU nodes" "${llama[@]}" "${gpu[@]}" --host-mem 512
expect_plan_error zero_mem_bw "--mem-bw must be positive" "${llama[@]}" "${gpu[@]}" --mem-bw 0
expect_plan_error negative_ranks "--ranks-per-node must be at least 1" "${llama[@]}" --cpu --peak-gflops 100 --ranks-per-node -3
expect_plan_error sp_without_tp "--sequence-parallel true splits the activations over tp, and --tp is 1" "${llama[@]}" "${gpu[@]}" --tp 1 --sequence-parallel true
expect_plan_error reshard_without_zero3 "--zero3-reshard-after-forward is ZeRO-3's, and --zero is 1" "${llama[@]}" "${gpu[@]}" --zero 1 --zero3-reshard-after-forward false
printf 'nodes = 1\nmemroy_bw_gbps = 8\n' > "$SCRATCH/typo.ini"
expect_plan_error cluster_typo "unrecognised option 'memroy_bw_gbps'" "${llama[@]}" --cluster "$SCRATCH/typo.ini"
sed 's/^ranks_per_node.*/ranks_per_node = 4/' "$SOURCE_DIR/input/cluster-example.ini" > "$SCRATCH/ranks.ini"
expect_plan_error cluster_ranks "ranks_per_node 4 differs from gpus_per_node 8" "${llama[@]}" --cluster "$SCRATCH/ranks.ini"
# A config with evaluation settings (the validation data given to the trainer apart) is planned.
"$PLAN" --config "$SOURCE_DIR/input/gpt2-small.ini" --cpu --peak-gflops 100 --vocab-size 50304 \
  --top 1 > "$SCRATCH/small.txt" 2>&1 || { cat "$SCRATCH/small.txt"; fail "plan of input/gpt2-small.ini"; }
grep -q "^best: " "$SCRATCH/small.txt" || { cat "$SCRATCH/small.txt"; fail "plan of input/gpt2-small.ini: no best"; }

# 4. Llama-2 70B on 8 nodes of 8 H100 (80 GiB, 989 TFLOP/s bf16, NVLink 450 GB/s, 8 x 400 Gb/s
# InfiniBand per node), global batch 1024 x 4096 tokens: Megatron's layout (TP 8, PP 2-8) among
# the top 5 grids (the GPU backend holds bf16 weights, activations and tp messages in 2 bytes; a
# grid's ZeRO levels and recomputation modes are rows of their own). Megatron's published layout is
# at cp 1, and so is this search: with cp (the planner's ring assumed overlapped) dp2 tp2 pp8 cp2
# ranks first, a layout Megatron's table does not cover.
"$PLAN" "${llama[@]}" "${gpu[@]}" --cp 1 --top 30 > "$SCRATCH/70b.txt"
cat "$SCRATCH/70b.txt"
top_grids=$(without_sp "$SCRATCH/70b.txt" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^dp/ && !seen[$2 $3 $4 $5]++ {print $2, $3, $4, $5}' | head -5)
megatron=$(echo "$top_grids" | awk '$2 == "tp8" && ($3 == "pp2" || $3 == "pp4" || $3 == "pp8")')
[ -n "$megatron" ] || fail "no TP 8 x PP 2-8 layout among the top 5 grids for Llama-2 70B: $top_grids"
echo "ok: Megatron's layout ranks: $(echo "$megatron" | head -1)"
# Pure data parallelism holds 70B in 80 GiB only fully sharded (ZeRO-3: 1/64 of the parameters,
# gradients and optimizer state, plus two gathered blocks).
"$PLAN" "${llama[@]}" "${gpu[@]}" --dp 64 --top 0 > "$SCRATCH/70b-dp64.txt"
dp64=$(without_sp "$SCRATCH/70b-dp64.txt" | awk '$1 ~ /^[0-9]+$/ && $2 == "dp64" {print $7}' | sort -u | tr '\n' ' ')
[[ $dp64 =~ ^3(\ 3k)?\ $ ]] || { cat "$SCRATCH/70b-dp64.txt"; fail "dp 64 fits 70B with zero '$dp64'"; }
set +e
"$PLAN" "${llama[@]}" "${gpu[@]}" --dp 64 --zero 1 > "$SCRATCH/70b-zero1.txt" 2>&1
set -e
grep -q '^  dp64 tp1 pp1 cp1  *memory: at least' "$SCRATCH/70b-zero1.txt" ||
  fail "pure data parallelism fitted 70B in 80 GiB with ZeRO-1"
grep -q '^  dp4 tp16 pp1 cp1  *tp 16 does not divide the 8 ranks of a node' "$SCRATCH/70b.txt" ||
  fail "tp across nodes not reported"
# The same cluster from a cluster file (bandwidths in Gb/s, as links are sold: NVLink's 450 GB/s,
# 8 x 400 Gb/s InfiniBand), flags overriding it.
cat > "$SCRATCH/h100.ini" <<'EOF'
nodes = 4
gpus_per_node = 8
gpu_memory_gib = 80
gpu_peak_tflops = 989
intra_node_gbps = 3600
inter_node_gbps = 3200
EOF
"$PLAN" "${llama[@]}" --cluster "$SCRATCH/h100.ini" --nodes 8 --cp 1 --top 30 > "$SCRATCH/70b-file.txt"
diff <(grep -v '^cluster' "$SCRATCH/70b.txt") <(grep -v '^cluster' "$SCRATCH/70b-file.txt") ||
  fail "the cluster file with --nodes 8 gave another plan than the flags"
# The repository's example cluster file alone is a whole description.
"$PLAN" --config "$SCRATCH/tiny.ini" --cluster "$SOURCE_DIR/input/cluster-example.ini" --top 1 > "$SCRATCH/example.txt" ||
  { cat "$SCRATCH/example.txt"; fail "plan --cluster input/cluster-example.ini alone failed"; }
grep -q '^cluster 2 x 8 GPU ranks | per rank 80.00 GiB, 989 TFLOP/s peak .* 450 GB/s in a node, 50 GB/s per rank across nodes$' \
  "$SCRATCH/example.txt" || { cat "$SCRATCH/example.txt"; fail "the example cluster file read wrongly"; }

# 5. The margin --micro-batch-size auto keeps (10% of what the baseline leaves) is the plan's
# too: Llama-2 70B on 32 x 8 H100 once picked a layout of 79.08 GiB of 80 (1.2% headroom).
"$PLAN" "${llama[@]}" "${gpu[@]}" --nodes 32 --top 10 > "$SCRATCH/70b-32.txt"
usable=$(sed -n 's/^memory per rank 80.00 GiB; a layout may hold \([0-9.]*\) GiB of it .*margin of --micro-batch-size auto)$/\1/p' "$SCRATCH/70b-32.txt")
[ "$usable" = 72.30 ] || { cat "$SCRATCH/70b-32.txt"; fail "usable memory '$usable', expected 3 + 0.9 x 77 = 72.30 GiB"; }
without_sp "$SCRATCH/70b-32.txt" | awk -v usable="$usable" '$1 ~ /^[0-9]+$/ && $2 ~ /^dp/ && ($9 > usable || $NF < 9.6) {bad = 1; print "over:", $0}
  END {exit bad}' || fail "a layout beyond the margin"
echo "ok: the plan keeps the margin: top pick $(without_sp "$SCRATCH/70b-32.txt" | awk '$1 == 1 && $2 ~ /^dp/ {print $9 " GiB, headroom " $NF " %"}')"

# 6. A mixture-of-experts model plans on GPUs (the trainer runs it there), with the note that the
# step times leave out the host's routing; a CPU plan has no such note.
cat > "$SCRATCH/moe.ini" <<'EOF'
arch = llama
n-layer = 4
n-head = 8
n-kv-head = 2
d-model = 512
n-experts = 8
top-k = 2
vocab-size = 32000
seq-len = 512
global-batch-size = 64
EOF
"$PLAN" --config "$SCRATCH/moe.ini" "${gpu[@]}" --nodes 1 --top 1 > "$SCRATCH/moe-gpu.txt" ||
  { cat "$SCRATCH/moe-gpu.txt"; fail "an MoE plan on GPUs failed"; }
grep -q '^note: on GPUs the trainer routes an MoE layer.s tokens on the host' \
  "$SCRATCH/moe-gpu.txt" ||
  { cat "$SCRATCH/moe-gpu.txt"; fail "the GPU MoE plan does not say the routing is left out"; }
"$PLAN" --config "$SCRATCH/moe.ini" --cpu --cores-per-node 2 --host-mem 8 --peak-gflops 100 \
  --top 1 > "$SCRATCH/moe-cpu.txt" ||
  { cat "$SCRATCH/moe-cpu.txt"; fail "an MoE plan on CPUs failed"; }
! grep -q '^note: on GPUs' "$SCRATCH/moe-cpu.txt" || fail "a CPU plan notes the GPU's routing"
echo "ok: an MoE model plans on GPUs, noting the host's routing left out"
echo "ok: plan"
