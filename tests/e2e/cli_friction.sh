#!/usr/bin/env bash
# What a user of nanoGPT, Hugging Face or Megatron-LM trips over first (issue 32, items 7-14):
# - --version prints the build: CUDA, cuDNN, NCCL (on or off), MPI, HDF5, BLAS, oneDNN;
# - another trainer's option name (--learning-rate, --max-iters) names ours (exit 2);
# - a run whose step-6 save was cut short (step-6.tmp, `latest` at step 3) while best/ holds
#   step 4: ckpt-inspect RUN_DIR shows best/, as --resume auto takes it (saying so);
# - that resume with --steps 9 instead of 12 keeps the 12-step cosine schedule (the lr of step 5
#   is the 12-step one, computed here in double) and says so at start-up; given no model,
#   batch or order options, it takes the checkpoint's (as --resume PATH does), and a later
#   resume with another --shuffle is refused (exit 2) naming both;
# - --export-hf and --export-llmc under directories that do not exist yet: created;
# - --init-from the export, --steps 0 --val-data, no --train-data: evaluates it (the val loss of
#   the run that wrote it);
# - warmup-stable-decay (--lr-schedule wsd): Megatron's lr per step, kept by a resume, its
#   misuse refused.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_model_args) $(val_args)
model=("$@")
data=(--train-data "$DATA_DIR/train.h5" --val-data "$DATA_DIR/val.h5")

# 13. --version
run_trainer 1 "$SCRATCH/version.log" --version
[ "$rc" = 0 ] || { cat "$SCRATCH/version.log"; fail "--version exited $rc"; }
for lib in compiler CUDA cuDNN NCCL MPI HDF5 BLAS oneDNN; do
  grep -Eq "^  $lib +[^ ]" "$SCRATCH/version.log" || { cat "$SCRATCH/version.log"; fail "--version: no $lib line"; }
done
grep -q "^  BLAS .*OpenBLAS" "$SCRATCH/version.log" || fail "--version: BLAS is not OpenBLAS's config"
echo "ok: --version prints the build"

# 14. other trainers' names
for pair in "--learning-rate:--lr" "--max-iters:--steps" "--gradient-accumulation-steps:--global-batch-size"; do
  theirs=${pair%%:*} ours=${pair#*:}
  run_trainer 1 "$SCRATCH/foreign.log" "${data[@]}" "$theirs" 3 --out-dir "$SCRATCH/foreign"
  [ "$rc" = 2 ] || { cat "$SCRATCH/foreign.log"; fail "$theirs: exit $rc, expected 2"; }
  grep -q -- "unrecognised option '$theirs' (did you mean $ours?" "$SCRATCH/foreign.log" ||
    { cat "$SCRATCH/foreign.log"; fail "$theirs: no hint of $ours"; }
done
echo "ok: --learning-rate, --max-iters, --gradient-accumulation-steps name ours"

# 8 and 12. A save cut short after best/: step-3 and best (step 4) committed, step 6 not.
run="$SCRATCH/run"
run_trainer 1 "$SCRATCH/first.log" "${data[@]}" "${model[@]}" --steps 12 --save-interval 3 \
  --eval-interval 4 --save-best --exit-at-step 6 --global-batch-size 4 --shuffle false \
  --seed 7 --beta2 0.5 --out-dir "$run"
[ "$rc" = 85 ] || { cat "$SCRATCH/first.log"; fail "the first piece exited $rc, expected 85"; }
mv "$run/checkpoints/step-00000006" "$run/checkpoints/step-00000006.tmp"
echo step-00000003 > "$run/checkpoints/latest"
set +e
"$BUILD_DIR/ckpt-inspect" "$run" > "$SCRATCH/inspect.log" 2>&1
inspect_rc=$?
set -e
[ "$inspect_rc" = 0 ] || { cat "$SCRATCH/inspect.log"; fail "ckpt-inspect RUN_DIR exited $inspect_rc"; }
grep -q "^checkpoint $run/checkpoints/best/checkpoint.h5$" "$SCRATCH/inspect.log" &&
  grep -q "^newer: $run/checkpoints/best holds step 4, newer than step 3" "$SCRATCH/inspect.log" ||
  { cat "$SCRATCH/inspect.log"; fail "ckpt-inspect RUN_DIR does not show best/ (step 4)"; }
echo "ok: ckpt-inspect RUN_DIR shows best/, newer than latest's step 3"

# 7. Resumed with --steps 9: the schedule keeps its 12 steps. No model, seq-len, batch, seed,
# --shuffle, lr or optimizer options: the checkpoint's (the defaults: 12 layers, 8 sequences,
# seed 1337, shuffled, lr 0.001 after 10 warm-up steps, beta2 0.95).
run_trainer 1 "$SCRATCH/second.log" "${data[@]}" --eval-samples 16 --sample-tokens 0 \
  --peak-gflops 100 --threads 1 --steps 9 --resume auto --out-dir "$run"
[ "$rc" = 0 ] || { cat "$SCRATCH/second.log"; fail "the resume exited $rc"; }
for setting in "n-layer = 2" "seq-len = 32" "global-batch-size = 4" "micro-batch-size = 2" \
  "shuffle = false" "seed = 7" "lr = 0.003" "warmup-steps = 2" "beta2 = 0.5"; do
  grep -qx "$setting" "$run/run.ini" ||
    { cat "$run/run.ini"; fail "--resume auto did not take the checkpoint's $setting"; }
done
grep -q "^resume: $run/checkpoints/best holds step 4, newer than step 3 that $run/checkpoints/latest leads to" \
  "$SCRATCH/second.log" && grep -q "^resumed from step 4 " "$SCRATCH/second.log" ||
  { cat "$SCRATCH/second.log"; fail "--resume auto did not take best/ (step 4) saying so"; }
grep -q "^lr schedule at step 5: decays over the 12 steps of the run that started it, not this run's --steps 9" \
  "$SCRATCH/second.log" || { cat "$SCRATCH/second.log"; fail "no start-up line on the schedule"; }
got=$(sed -n 's/.*"step": 5,.*"lr": \([^,}]*\).*/\1/p' "$run/metrics.jsonl" | tail -1)
# lr 3e-3, min 3e-4, warm-up 2, 12 steps: step index 4, progress (4-2)/(12-2-1)
python3 - "$got" <<'PYEOF' || fail "the lr of step 5 is not the 12-step schedule's"
import math, sys
got = float(sys.argv[1])
want = 3e-4 + (3e-3 - 3e-4) * 0.5 * (1 + math.cos(math.pi * 2 / 9))
over9 = 3e-4 + (3e-3 - 3e-4) * 0.5 * (1 + math.cos(math.pi * 2 / 6))
# metrics.jsonl prints 9 significant digits: 1e-7 relative is a few times that rounding
if abs(got - want) > 1e-7 * want: sys.exit(f"lr {got}: want {want} (over 9 steps: {over9})")
print(f"ok: the lr of step 5 is {got}, the 12-step schedule's (over 9 steps: {over9:.6g})")
PYEOF

# fp16 from an fp32 checkpoint: said, and its loss scale starts at --initial-loss-scale (the
# fp32 run kept a scale of 1), not at 1.
run_trainer 1 "$SCRATCH/fp16.log" "${data[@]}" --precision fp16 --steps 6 --eval-samples 16 \
  --sample-tokens 0 --peak-gflops 100 --threads 1 --resume "$run/checkpoints/step-00000003" \
  --out-dir "$SCRATCH/fp16"
[ "$rc" = 0 ] || { cat "$SCRATCH/fp16.log"; fail "the fp16 resume exited $rc"; }
grep -q "^resume: given otherwise than the checkpoint's run: precision fp16 (the checkpoint's run: fp32)$" \
  "$SCRATCH/fp16.log" && grep -q "^resume: the checkpoint's run kept no loss scale (precision fp32): fp16 starts at --initial-loss-scale 65536$" \
  "$SCRATCH/fp16.log" || { cat "$SCRATCH/fp16.log"; fail "the fp16 resume did not say what it changed"; }
[ "$(metric "$SCRATCH/fp16/metrics.jsonl" loss_scale | head -1)" = 65536 ] ||
  fail "the fp16 resume's loss scale: $(metric "$SCRATCH/fp16/metrics.jsonl" loss_scale | head -1)"
# Another sample length is another data order: refused unless --allow-data-change.
run_trainer 1 "$SCRATCH/seq16.log" "${data[@]}" --seq-len 16 --steps 6 --sample-tokens 0 \
  --threads 1 --resume "$run/checkpoints/step-00000003" --out-dir "$SCRATCH/seq16"
[ "$rc" = 2 ] && grep -q "was trained on samples of seq-len 32, this run's are 16: leave --seq-len out" \
  "$SCRATCH/seq16.log" || { cat "$SCRATCH/seq16.log"; fail "a resume at another seq-len: exit $rc"; }
echo "ok: a resume in fp16 from fp32 starts the loss scale afresh; another seq-len is refused"

# Another sample order than the checkpoint's is refused, the run left as it was.
before=$(dir_state "$run")
run_trainer 1 "$SCRATCH/reorder.log" "${data[@]}" --steps 12 --shuffle true --resume auto \
  --out-dir "$run"
[ "$rc" = 2 ] || { cat "$SCRATCH/reorder.log"; fail "a resume with another --shuffle: exit $rc"; }
grep -q "was written with --shuffle false, this run has --shuffle true: leave it out" \
  "$SCRATCH/reorder.log" || { cat "$SCRATCH/reorder.log"; fail "--shuffle change: not named"; }
[ "$before" = "$(dir_state "$run")" ] || fail "the refused resume changed the run"
echo "ok: --resume auto takes the checkpoint's settings; another --shuffle is refused"

# 10. Exports under directories that do not exist yet.
run_trainer 1 "$SCRATCH/export.log" "${data[@]}" "${model[@]}" --steps 2 --out-dir "$SCRATCH/e" \
  --export-hf "$SCRATCH/new/a/hf" --export-llmc "$SCRATCH/new/b/model.bin"
[ "$rc" = 0 ] || { cat "$SCRATCH/export.log"; fail "exports under new directories exited $rc"; }
[ -s "$SCRATCH/new/a/hf/model.safetensors" ] && [ -s "$SCRATCH/new/b/model.bin" ] ||
  fail "the exports under new directories were not written"
echo "ok: --export-hf and --export-llmc create their parent directories"

# 11. Evaluate the exported model: no --train-data. The same micro-batch as the run that wrote it
# (2, tiny_model_args), so the same sums: the default (auto) may choose another, whose sums in
# another order can turn the ninth digit (4.97585549 at 4, 4.97585548 at 1 and 2).
run_trainer 1 "$SCRATCH/eval.log" --init-from "$SCRATCH/new/a/hf" --steps 0 --val-data "$DATA_DIR/val.h5" \
  --seq-len 32 --eval-samples 16 --micro-batch-size 2 --sample-tokens 0 --peak-gflops 100 \
  --threads 1 --out-dir "$SCRATCH/v"
[ "$rc" = 0 ] || { cat "$SCRATCH/eval.log"; fail "--init-from --steps 0 --val-data exited $rc"; }
a=$(metric "$SCRATCH/e/metrics.jsonl" val_loss | tail -1)
b=$(metric "$SCRATCH/v/metrics.jsonl" val_loss | tail -1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "val loss $b of the export, $a when it was written"
echo "ok: --init-from --steps 0 --val-data evaluates without --train-data (val loss $b)"

# 15. Warmup-stable-decay (--lr-schedule wsd, Megatron's WSD): 10 steps, 2 of warm-up, the last
# 4 decaying (linear, and sqrt: Megatron's minus_sqrt) to min-lr-ratio x lr; a resume at step 5
# given none of the flags keeps the schedule (kept settings), the lr and losses of steps 6-10 bit
# for bit; the WSD flags with another schedule, and a decay longer than the steps after the
# warm-up, exit 2.
wsd=("${data[@]}" "${model[@]}" --steps 10 --lr 2e-3 --warmup-steps 2 --min-lr-ratio 0.1
     --lr-schedule wsd --lr-wsd-decay-steps 4)
for style in linear sqrt; do
  run_trainer 1 "$SCRATCH/wsd.log" "${wsd[@]}" --lr-wsd-decay-style "$style" --out-dir "$SCRATCH/wsd-$style"
  [ "$rc" = 0 ] || { cat "$SCRATCH/wsd.log"; fail "wsd $style exited $rc"; }
  metric "$SCRATCH/wsd-$style/metrics.jsonl" lr > "$SCRATCH/wsd-$style.lr"
  # Megatron-LM's get_lr with its num_steps = our step + 1 (the last step reaches min)
  python3 - "$style" "$SCRATCH/wsd-$style.lr" <<'PYEOF' || fail "wsd $style: the lr per step"
import math, sys
style, got = sys.argv[1], [float(x) for x in open(sys.argv[2])]
shape = {"linear": lambda q: 1 - q, "sqrt": lambda q: 1 - math.sqrt(q)}[style]
want = []
for s in range(10):
    n = s + 1
    coeff = n / 2 if n <= 2 else 1.0 if n <= 10 - 4 else shape((n - (10 - 4)) / 4)
    want.append(2e-4 + (2e-3 - 2e-4) * coeff if n > 2 else 2e-3 * coeff)
# metrics.jsonl prints 9 significant digits: 1e-7 relative is a few times that rounding
bad = [(s + 1, g, w) for s, (g, w) in enumerate(zip(got, want)) if abs(g - w) > 1e-7 * w]
if len(got) != 10 or bad: sys.exit(f"wsd {style}: lr {got}, want {want}")
print(f"ok: wsd {style}: lr per step {' '.join(f'{g:.4g}' for g in got)}")
PYEOF
done
run_trainer 1 "$SCRATCH/wsd.log" "${wsd[@]}" --exit-at-step 5 --out-dir "$SCRATCH/wsd-resumed"
[ "$rc" = 85 ] || { cat "$SCRATCH/wsd.log"; fail "wsd's first piece exited $rc"; }
run_trainer 1 "$SCRATCH/wsd.log" "${data[@]}" --steps 10 --resume auto --out-dir "$SCRATCH/wsd-resumed"
[ "$rc" = 0 ] || { cat "$SCRATCH/wsd.log"; fail "wsd's resume exited $rc"; }
for key in lr loss; do
  cmp -s <(metric "$SCRATCH/wsd-linear/metrics.jsonl" "$key" | tail -5) \
    <(metric "$SCRATCH/wsd-resumed/metrics.jsonl" "$key" | tail -5) ||
    fail "wsd resumed without its flags: steps 6-10's $key differ from the straight run's"
done
echo "ok: a resume keeps the wsd schedule: steps 6-10 bit for bit"
for refused in "--lr-wsd-decay-steps 4:lr-wsd-decay-steps shapes lr-schedule wsd's decay, and lr-schedule is cosine" \
  "--lr-schedule wsd --lr-wsd-decay-steps 9:lr-wsd-decay-steps 9 does not fit after warmup-steps 2 in the schedule's 10 steps" \
  "--lr-schedule wsd:lr-schedule wsd decays over the last lr-wsd-decay-steps steps"; do
  # shellcheck disable=SC2086
  run_trainer 1 "$SCRATCH/refused.log" "${data[@]}" "${model[@]}" --steps 10 --warmup-steps 2 \
    ${refused%%:*} --out-dir "$SCRATCH/wsd-refused"
  [ "$rc" = 2 ] && grep -qF "${refused#*:}" "$SCRATCH/refused.log" ||
    { cat "$SCRATCH/refused.log"; fail "${refused%%:*}: exit $rc, expected 2 with '${refused#*:}'"; }
  [ ! -e "$SCRATCH/wsd-refused/metrics.jsonl" ] || fail "${refused%%:*}: a step was taken"
done
echo "ok: the wsd flags with another schedule, a decay that does not fit, and wsd without its steps exit 2"
