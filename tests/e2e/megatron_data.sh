#!/usr/bin/env bash
# Megatron-LM's indexed datasets (PREFIX.bin + PREFIX.idx, what its preprocess_data.py writes)
# train like the same tokens in a nanoGPT file:
#   - the tokens of prepare-data's nanoGPT files, written as Megatron pairs (uint16, and int32 as
#     for a vocabulary of 65500 or more; the .idx as Megatron's _IndexWriter lays it out, one
#     sequence a document), named by the prefix or by the .bin, with --data-format auto or
#     megatron, give the nanoGPT run's losses and val loss bit for bit;
#   - a .idx named instead of its data, a .bin cut short and a lone .bin under --data-format
#     megatron exit 2 before any step, naming the file.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
head -c 200000 "$SOURCE_DIR/README.md" > "$SCRATCH/text.txt"
"$BUILD_DIR/prepare-data" --out-dir "$SCRATCH/nano" --format nanogpt "$SCRATCH/text.txt" > /dev/null ||
  fail "prepare-data failed"
# PREFIX.bin/.idx of a nanoGPT file: its tokens as DTYPE, a document every 1000 tokens.
to_megatron() {  # to_megatron NANOGPT_FILE PREFIX uint16|int32
  /usr/bin/python3 - "$@" <<'PY' || fail "writing the Megatron pair $2 failed"
import struct, sys
source, prefix, dtype = sys.argv[1:]
raw = open(source, "rb").read()
tokens = struct.unpack("<%dH" % (len(raw) // 2), raw)
fmt, code, size = ("<%dH", 8, 2) if dtype == "uint16" else ("<%di", 4, 4)
with open(prefix + ".bin", "wb") as f:
    f.write(struct.pack(fmt % len(tokens), *tokens))
lengths = [min(1000, len(tokens) - a) for a in range(0, len(tokens), 1000)]
with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(lengths) + 1))
    f.write(struct.pack("<%di" % len(lengths), *lengths))
    f.write(struct.pack("<%dq" % len(lengths), *[size * sum(lengths[:i]) for i in range(len(lengths))]))
    f.write(struct.pack("<%dq" % (len(lengths) + 1), *range(len(lengths) + 1)))
PY
}
mkdir -p "$SCRATCH/meg"
for side in train val; do
  to_megatron "$SCRATCH/nano/$side.bin" "$SCRATCH/meg/${side}_text_document" uint16
  to_megatron "$SCRATCH/nano/$side.bin" "$SCRATCH/meg/${side}32_text_document" int32
done

# shellcheck disable=SC2207
model=($(tiny_model_args) --vocab-size 256 --steps 3)
# shellcheck disable=SC2207
args=("${model[@]}" $(val_args))
train() {  # train NAME TRAIN VAL [ARGS...]: its losses and val loss into $SCRATCH/NAME.loss
  local name=$1 train=$2 val=$3
  shift 3
  run_trainer 1 "$SCRATCH/$name.log" "${args[@]}" --train-data "$train" --val-data "$val" "$@" \
    --out-dir "$SCRATCH/run-$name"
  [ "$rc" = 0 ] || { cat "$SCRATCH/$name.log"; fail "$name exited $rc"; }
  { metric "$SCRATCH/run-$name/metrics.jsonl" loss; metric "$SCRATCH/run-$name/metrics.jsonl" val_loss; } > "$SCRATCH/$name.loss"
}
train nano "$SCRATCH/nano/train.bin" "$SCRATCH/nano/val.bin"
train prefix "$SCRATCH/meg/train_text_document" "$SCRATCH/meg/val_text_document"
train bin32 "$SCRATCH/meg/train32_text_document.bin" "$SCRATCH/meg/val32_text_document.bin"
train explicit "$SCRATCH/meg/train_text_document.bin" "$SCRATCH/meg/val32_text_document" \
  --data-format megatron
for name in prefix bin32 explicit; do
  cmp -s "$SCRATCH/nano.loss" "$SCRATCH/$name.loss" ||
    fail "Megatron data ($name): $(tr '\n' ' ' < "$SCRATCH/$name.loss"), the nanoGPT file: $(tr '\n' ' ' < "$SCRATCH/nano.loss")"
done
echo "Megatron pairs (uint16 and int32, by prefix and by .bin): losses and val loss $(tr '\n' ' ' < "$SCRATCH/nano.loss")as the nanoGPT file's, bit for bit"

refused() {  # refused NAME PATTERN TRAIN [ARGS...]: exit 2 naming it, no step
  local name=$1 pattern=$2 train=$3
  shift 3
  run_trainer 1 "$SCRATCH/$name.log" "${model[@]}" --train-data "$train" "$@" --out-dir "$SCRATCH/$name"
  if [ "$rc" != 2 ] || ! grep -qF -- "$pattern" "$SCRATCH/$name.log"; then
    cat "$SCRATCH/$name.log"
    fail "$name: exit $rc, expected 2 with '$pattern'"
  fi
  [ ! -e "$SCRATCH/$name/metrics.jsonl" ] || fail "$name: a step was taken"
  echo "$name: exit 2, $(grep -oF -- "$pattern" "$SCRATCH/$name.log" | head -1)"
}
refused idx "is a Megatron index; name its data: '$SCRATCH/meg/train_text_document.bin' or the prefix" \
  "$SCRATCH/meg/train_text_document.idx"
cp "$SCRATCH/meg/train_text_document.idx" "$SCRATCH/meg/cut_text_document.idx"
head -c 1000 "$SCRATCH/meg/train_text_document.bin" > "$SCRATCH/meg/cut_text_document.bin"
refused cut "of '$SCRATCH/meg/cut_text_document.bin', which has 1000: the two files do not match" \
  "$SCRATCH/meg/cut_text_document"
refused lone "and $SCRATCH/nano/train.idx is missing" "$SCRATCH/nano/train.bin" --data-format megatron
echo "ok: Megatron indexed datasets"
