#!/usr/bin/env bash
# --export-hf and --init-from DIR: a Hugging Face checkpoint that leaves the program and comes back.
# For gpt2 and for llama (GQA 4/2) the tiny model trains 300 steps and is exported; then
#   - PyTorch, reading the directory with its own forward written from transformers' conventions
#     (tests/support/hf_reference.py: Conv1D layout, rotate-half RoPE, GQA), continues the prompt
#     greedily with the same 24 bytes as the trainer's own sample (an argmax over the logits each
#     step: a wrong layout, transposition or RoPE order changes them within a few tokens);
#   - --init-from the directory evaluates to the exported run's validation loss exactly and
#     exports byte-identical safetensors (fp32 both ways: nothing is rounded);
#   - an export directory that holds files, one under a file, a config of another
#     model_type, and --export-llmc of a llama model are refused with exit 2 before any step.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  fail "/usr/bin/python3 has no torch (python3-torch): make test installs it (tools/install-deps.sh)"
prompt="The "
sample() { sed -n '/^---- sample (/,/^----$/p' "$1" | sed '1d;$d'; }
for arch in gpt2 llama; do
  flags=(--arch "$arch")
  [ "$arch" = llama ] && flags+=(--n-kv-head 2)
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/$arch.log" $(tiny_args) "${flags[@]}" --steps 300 --sample-tokens 24 --sample-temperature 0 \
    --sample-prompt "$prompt" --export-hf "$SCRATCH/$arch-hf" --out-dir "$SCRATCH/$arch"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$arch.log"; fail "$arch: training with --export-hf exited $rc"; }
  for f in config.json model.safetensors; do
    [ -s "$SCRATCH/$arch-hf/$f" ] || fail "$arch: no $f in the export"
  done
  [ ! -e "$SCRATCH/$arch-hf.tmp" ] || fail "$arch: the temporary export directory was left"
  sample "$SCRATCH/$arch.log" > "$SCRATCH/$arch.ours"
  /usr/bin/python3 "$SOURCE_DIR/tests/support/hf_reference.py" "$SCRATCH/$arch-hf" "$prompt" 24 32 \
    > "$SCRATCH/$arch.torch" || fail "$arch: the PyTorch reference failed"
  cmp -s "$SCRATCH/$arch.ours" "$SCRATCH/$arch.torch" ||
    { diff "$SCRATCH/$arch.ours" "$SCRATCH/$arch.torch"; fail "$arch: PyTorch's continuation differs"; }
  echo "$arch: PyTorch continues '$prompt' as the trainer does: $(tr '\n' ' ' < "$SCRATCH/$arch.torch")"

  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/$arch-back.log" $(tiny_args) --steps 0 --init-from "$SCRATCH/$arch-hf" \
    --export-hf "$SCRATCH/$arch-hf2" --out-dir "$SCRATCH/$arch-back"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$arch-back.log"; fail "$arch: --init-from the export exited $rc"; }
  a=$(metric "$SCRATCH/$arch/metrics.jsonl" val_loss | tail -1)
  b=$(metric "$SCRATCH/$arch-back/metrics.jsonl" val_loss | tail -1)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$arch: val loss $b from the export, $a when it was written"
  cmp -s "$SCRATCH/$arch-hf/model.safetensors" "$SCRATCH/$arch-hf2/model.safetensors" ||
    fail "$arch: exporting the imported model does not give the same safetensors"
  echo "$arch: --init-from the export: val loss $b, as written; re-export byte-identical"
done

refused() {  # refused WHAT PATTERN ARGS...: exit 2, the message, no step taken
  local what=$1 pattern=$2; shift 2
  # shellcheck disable=SC2046
  run_trainer 1 "$SCRATCH/refused.log" $(tiny_args) --steps 5 "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/refused.log"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "$what: no '$pattern'"; }
  ! grep -q '"step": 1' "$SCRATCH/r/metrics.jsonl" 2>/dev/null || fail "$what: trained before refusing"
  rm -rf "$SCRATCH/r"
}
refused "a non-empty export dir" "is not an empty directory" --export-hf "$SCRATCH/gpt2-hf" --out-dir "$SCRATCH/r"
touch "$SCRATCH/plain-file"
refused "a parent that is a file" "exists and is not a directory" --export-hf "$SCRATCH/plain-file/hf" \
  --out-dir "$SCRATCH/r"
refused "llm.c's format for llama" "holds gpt2 models only" --arch llama --export-llmc "$SCRATCH/l.bin" \
  --out-dir "$SCRATCH/r"
mkdir -p "$SCRATCH/bert"
cp "$SCRATCH/gpt2-hf/model.safetensors" "$SCRATCH/bert/"
echo '{"model_type": "bert", "vocab_size": 256}' > "$SCRATCH/bert/config.json"
refused "another model_type" "model_type 'bert'" --init-from "$SCRATCH/bert" --out-dir "$SCRATCH/r"
echo "ok: Hugging Face export and import"
