#!/usr/bin/env bash
# Seed 000 on the shipped testdata: merge the Chatterbox-like tokenizer with the Amharic addition,
# grow the T3-like checkpoint's text vocabulary to match, and print both reports.
# Usage: bash testdata/amharic_pipeline.sh [OUT_DIR]   (default: a new temp folder)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
cargo build --release --quiet --bin merge-tokenizers --bin extend-embeddings
echo "== merge-tokenizers"
target/release/merge-tokenizers \
  --base testdata/tokenizers/chatterbox_base.json \
  --add testdata/tokenizers/amharic_addition.json \
  --output "$out/Am_tokenizer_merged.json" \
  --check-text testdata/tokenizers/english.txt --check-text testdata/tokenizers/amharic.txt
echo
echo "== extend-embeddings"
target/release/extend-embeddings testdata/chatterbox_t3/t3_bf16.safetensors \
  --output "$out/t3_extended.safetensors" --tokenizer "$out/Am_tokenizer_merged.json"
echo
echo "outputs in $out"
