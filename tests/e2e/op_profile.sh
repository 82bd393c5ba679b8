#!/usr/bin/env bash
# --profile-ops: rank 0 prints, and writes to <out-dir>/op_profile.txt, where its steps' time
# went. The run computes the same bits as one without it (per-step losses string-equal), every
# op of the model has its row with the calls a step makes, the rows add up to "all ops", and
# "all ops" plus the time outside the ops is the step. At dp 2 as at one rank.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
for np in 1 2; do
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/plain$np.log" $(tiny_args) --dp "$np" --steps 4 \
    --out-dir "$SCRATCH/plain$np"
  [ "$rc" = 0 ] || { cat "$SCRATCH/plain$np.log"; fail "np $np without --profile-ops exited $rc"; }
  # shellcheck disable=SC2046
  run_trainer "$np" "$SCRATCH/prof$np.log" $(tiny_args) --dp "$np" --steps 4 --profile-ops \
    --out-dir "$SCRATCH/prof$np"
  [ "$rc" = 0 ] || { cat "$SCRATCH/prof$np.log"; fail "np $np with --profile-ops exited $rc"; }
  metric "$SCRATCH/plain$np/metrics.jsonl" loss > "$SCRATCH/plain$np.loss"
  metric "$SCRATCH/prof$np/metrics.jsonl" loss > "$SCRATCH/prof$np.loss"
  [ "$(wc -l < "$SCRATCH/prof$np.loss")" = 4 ] || fail "np $np: expected 4 losses"
  cmp -s "$SCRATCH/plain$np.loss" "$SCRATCH/prof$np.loss" ||
    { paste "$SCRATCH/plain$np.loss" "$SCRATCH/prof$np.loss"; fail "np $np: --profile-ops changed the losses"; }
  table=$SCRATCH/prof$np/op_profile.txt
  [ -f "$table" ] || fail "np $np: no op_profile.txt"
  grep -q "^op profile of rank 0, 1 thread(s), 3 step(s) after the warm-up step" "$table" ||
    { cat "$table"; fail "np $np: header"; }
  grep -q "^phase .* op .* x floor" "$SCRATCH/prof$np.log" || fail "np $np: the table was not printed"
  # calls per step of the tiny model (2 layers, gpt2, micro-batches of 2 in a batch of 8 over dp):
  # per micro-batch 4 linear layers a block + the head, 2 + 1 layernorms, 2 attentions a pass;
  # one optimizer call and one grad-norm call a step over all the tensors.
  mb=$((8 / np / 2))
  for want in "forward matmul_forward $((9 * mb))" "backward matmul_backward $((9 * mb))" \
              "forward attention_forward $((2 * mb))" "backward attention_backward $((2 * mb))" \
              "forward layernorm_forward $((5 * mb))" "backward layernorm_backward $((5 * mb))" \
              "forward gelu_forward $((2 * mb))" "forward embedding_forward $mb" \
              "loss ce_loss $mb" "optimizer adamw 1" "optimizer sum_squares 1"; do
    read -r phase op calls <<< "$want"
    line=$(awk -v p="$phase" -v o="$op" '$1 == p && $2 == o' "$table")
    [ -n "$line" ] || { cat "$table"; fail "np $np: no $phase $op row"; }
    [ -z "$calls" ] || [ "$(echo "$line" | awk '{print $3}')" = "$calls" ] ||
      { cat "$table"; fail "np $np: $op: expected $calls calls a step: $line"; }
  done
  # The rows' ms/step add up to "all ops", and all ops + outside = step, within the printed
  # rounding (0.0005 ms a figure).
  awk '$1 ~ /^(forward|loss|backward|optimizer|memory)$/ { rows += $4; n++ }
       /^all ops/ { ops = $3 } /^outside the ops/ { out = $(NF - 1) } /^step / { step = $2 }
       END {
         if (ops <= 0 || step <= 0) { print "FAIL: no all-ops or step line"; exit 1 }
         tol = 0.0005 * (n + 1)
         if ((rows - ops > tol) || (ops - rows > tol)) { printf "FAIL: rows %.3f, all ops %.3f\n", rows, ops; exit 1 }
         if ((ops + out - step > 0.0015) || (step - ops - out > 0.0015)) { printf "FAIL: %.3f + %.3f != %.3f\n", ops, out, step; exit 1 }
       }' "$table" || { cat "$table"; fail "np $np: the table does not add up"; }
  echo "np $np: profile of $(grep -c '^\(forward\|loss\|backward\|optimizer\|memory\) ' "$table") ops, losses unchanged"
done
[ ! -e "$SCRATCH/plain1/op_profile.txt" ] || fail "op_profile.txt written without --profile-ops"
echo "PASS"
