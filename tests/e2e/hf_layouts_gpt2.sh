#!/usr/bin/env bash
# Imported checkpoints train alike across layouts, and export round trips bit for bit
# (tests/support/hf_layouts_lib.sh): gpt2; and --export-hf-shard-size cuts the export into
# shards with transformers' index.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_layouts_lib.sh"
layouts_and_round_trip gpt2

# --export-hf-shard-size: gpt2's export in shards of at most 100 kB (a larger tensor
# alone), with the index transformers' from_pretrained reads; read back, one file again that is
# the one-file round trip's byte for byte. A size that is not one is refused before any step.
train shards 1 --init-from "$ckpt-export" --steps 0 --export-hf "$ckpt-shards" \
  --export-hf-shard-size 100kB
train unsharded 1 --init-from "$ckpt-shards" --steps 0 --export-hf "$ckpt-unsharded"
cmp "$ckpt-again/model.safetensors" "$ckpt-unsharded/model.safetensors" ||
  fail "the sharded export reads back as another model"
/usr/bin/python3 - "$ckpt-shards" 100000 <<'PY' || fail "the sharded export's index"
import json, os, re, struct, sys
d, limit = sys.argv[1], int(sys.argv[2])
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
assert set(index) == {"metadata", "weight_map"}, index.keys()
files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
assert len(files) > 3 and all(re.fullmatch(r"model-%05d-of-%05d\.safetensors" % (i + 1, len(files)), f)
                              for i, f in enumerate(files)), files
held, total = {}, 0
for f in files:
    raw = open(os.path.join(d, f), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = {k: v for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
    data = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in header.values())
    assert data <= limit or len(header) == 1, (f, data)
    held.update({k: f for k in header})
    total += data
assert held == index["weight_map"], "weight_map is not what the files hold"
assert index["metadata"]["total_size"] == total, (index["metadata"], total)
print(f"{len(files)} shards of at most {limit} bytes, total_size {total}")
PY
run_trainer 1 "$SCRATCH/bad-size.log" "${args[@]}" --init-from "$ckpt" --steps 3 \
  --export-hf "$SCRATCH/never" --export-hf-shard-size 5Gb --out-dir "$SCRATCH/bad-size"
[ "$rc" = 2 ] && grep -q "export-hf-shard-size = '5Gb': not a size" "$SCRATCH/bad-size.log" ||
  { cat "$SCRATCH/bad-size.log"; fail "--export-hf-shard-size 5Gb: exit $rc, expected 2 naming it"; }
! grep -q '"step": 1' "$SCRATCH/bad-size/metrics.jsonl" 2>/dev/null || fail "trained before refusing 5Gb"
echo "ok: gpt2 checkpoints across layouts and round trips; export shards"
