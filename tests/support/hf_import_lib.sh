# Shared by tests/e2e/hf_import.sh and hf_mixtral.sh (sourced after e2e_lib.sh): small random
# Hugging Face checkpoints whose config.json has exactly the keys of a real one
# (tests/support/hf_configs, shrunk; written by tests/support/hf_checkpoint.py, not by mpitrain),
# evaluated with --init-from and against the float64 reference (tests/support/hf_reference.py),
# and the refusals of what the model lacks.
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  fail "/usr/bin/python3 has no numpy or torch: make test installs them (tools/install-deps.sh)"
configs="$SOURCE_DIR/tests/support/hf_configs"
make_ckpt() {  # make_ckpt NAME CONFIG ARGS...: $SCRATCH/NAME
  local name=$1 config=$2; shift 2
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_checkpoint.py" "$configs/$config.json" \
    "$SCRATCH/$name" "$@" || fail "$name: the checkpoint writer failed"
}
# Validation tokens both sides read alike: 16 windows of 32 + 1 bytes of text, nanoGPT's uint16.
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([c, 0]) for c in sys.stdin.buffer.read(513)))' \
  < "$SOURCE_DIR/README.md" > "$SCRATCH/val.bin"
eval_args=(--train-data "$DATA_DIR/train.h5" --val-data "$SCRATCH/val.bin" --seq-len 32
           --global-batch-size 8 --micro-batch-size 2 --eval-interval 0 --eval-samples 16
           --sample-tokens 0 --peak-gflops 100 --threads 1 --steps 0)
val_loss() {  # val_loss NAME ARGS...: the validation loss of --init-from $SCRATCH/NAME
  local name=$1; shift
  run_trainer 1 "$SCRATCH/$name.log" "${eval_args[@]}" --init-from "$SCRATCH/$name" \
    --out-dir "$SCRATCH/$name-run" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name: --init-from exited $rc"; }
  metric "$SCRATCH/$name-run/metrics.jsonl" val_loss | tail -1
}
same() {  # same WHAT A B
  [ -n "$2" ] && [ "$2" = "$3" ] || fail "$1: val loss $3, expected $2"
}
matches_reference() {  # matches_reference NAME LOSS: the float64 reference's loss of $SCRATCH/NAME
  local theirs
  theirs=$(/usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/$1" --loss \
    "$SCRATCH/val.bin" 32 16) || fail "$1: the PyTorch reference failed"
  # measured up to 3e-8 relative (fp32 vs float64, 9 printed digits); a feature left out moves
  # it by more than 1e-4
  awk -v a="$2" -v b="$theirs" 'BEGIN{d=(a-b)/b; if (d<0) d=-d; exit !(d < 1e-6)}' ||
    fail "$1: val loss $2, PyTorch's float64 reference $theirs"
  echo "$1: val loss $2, PyTorch's float64 reference $theirs"
}
refused() {  # refused WHAT PATTERN NAME CONFIG ARGS...: exit 2 naming it, no step taken
  local what=$1 pattern=$2 name=$3 config=$4; shift 4
  make_ckpt "$name" "$config" "$@"
  run_trainer 1 "$SCRATCH/refused.log" "${eval_args[@]}" --steps 5 --init-from "$SCRATCH/$name" \
    --out-dir "$SCRATCH/r"
  [ "$rc" = 2 ] || { cat "$SCRATCH/refused.log"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "$what: no '$pattern'"; }
  ! grep -q '"step": 1' "$SCRATCH/r/metrics.jsonl" 2>/dev/null || fail "$what: trained before refusing"
  rm -rf "$SCRATCH/r"
}
