# The checks of tests/e2e/hf_layouts_*.sh (sourced after e2e_lib.sh): each family's small random
# checkpoint (config.json with exactly the real model's keys, shrunk: tests/support/hf_configs,
# written by tests/support/hf_checkpoint.py):
#  - --init-from it trains 3 steps at dp 2, tp 2 (each rank reading its slice of the files) and
#    pp 2 (and the layouts given) with the losses of one rank, within LOSS_TOL relative (the
#    bound of parallel_equivalence.sh and model_features.sh);
#  - the one-rank run's --export-hf, read back with --init-from and exported again, gives the
#    same files byte for byte: every tensor and config.json.
/usr/bin/python3 -c "import numpy" 2>/dev/null ||
  fail "/usr/bin/python3 has no numpy: make test installs it (tools/install-deps.sh)"
LOSS_TOL=2e-6
configs="$SOURCE_DIR/tests/support/hf_configs"
# Tokens below the checkpoints' vocabulary of 256: the bytes of text, nanoGPT's uint16.
bytes_as_tokens() {  # bytes_as_tokens COUNT < TEXT > FILE
  /usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([c, 0]) for c in sys.stdin.buffer.read(int(sys.argv[1]))))' "$1"
}
bytes_as_tokens 4000 < "$SOURCE_DIR/README.md" > "$SCRATCH/train.bin"
bytes_as_tokens 513 < "$SOURCE_DIR/docs/ARCHITECTURE.md" > "$SCRATCH/val.bin"
args=(--train-data "$SCRATCH/train.bin" --val-data "$SCRATCH/val.bin" --seq-len 32
      --global-batch-size 8 --micro-batch-size 2 --lr 1e-3 --warmup-steps 1 --eval-interval 0
      --eval-samples 16 --sample-tokens 0 --peak-gflops 100 --threads 1)
train() {  # train NAME NP ARGS...: its losses in $SCRATCH/NAME.loss
  local name=$1 np=$2; shift 2
  run_trainer "$np" "$SCRATCH/$name.log" "${args[@]}" --out-dir "$SCRATCH/run-$name" "$@"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  metric "$SCRATCH/run-$name/metrics.jsonl" loss > "$SCRATCH/$name.loss"
}
layouts_and_round_trip() {  # layouts_and_round_trip FAMILY [LAYOUT...]: also these layouts
  family=$1 ckpt="$SCRATCH/$1"
  shift
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_checkpoint.py" "$configs/$family.json" "$ckpt" ||
    fail "$family: the checkpoint writer failed"
  train "$family-1" 1 --init-from "$ckpt" --steps 3 --export-hf "$ckpt-export"
  [ "$(wc -l < "$SCRATCH/$family-1.loss")" = 3 ] || fail "$family: expected 3 losses"
  layouts=("--dp 2" "--tp 2" "--pp 2" "$@")
  for layout in "${layouts[@]}"; do
    name="$family$(echo "$layout" | tr -d ' -')"
    # shellcheck disable=SC2086
    train "$name" 2 --init-from "$ckpt" --steps 3 $layout
    d=$(max_rel_diff "$SCRATCH/$family-1.loss" "$SCRATCH/$name.loss")
    awk -v d="$d" -v t=$LOSS_TOL 'BEGIN{exit !(d < t)}' || fail "$name: losses differ by $d"
    echo "$family $layout: losses within $d of one rank's"
  done
  train "$family-again" 1 --init-from "$ckpt-export" --steps 0 --export-hf "$ckpt-again"
  (cd "$ckpt-export" && ls) > "$SCRATCH/files-1"
  (cd "$ckpt-again" && ls) > "$SCRATCH/files-2"
  cmp -s "$SCRATCH/files-1" "$SCRATCH/files-2" || fail "$family: the exports hold other files"
  grep -q safetensors "$SCRATCH/files-1" || fail "$family: the export holds no safetensors"
  while read -r f; do
    cmp "$ckpt-export/$f" "$ckpt-again/$f" || fail "$family: $f differs after a round trip"
  done < "$SCRATCH/files-1"
  echo "$family: export, import, export: $(tr '\n' ' ' < "$SCRATCH/files-1")identical"
}
