#!/usr/bin/env bash
# Seed 000 on the shipped testdata: merge the Chatterbox-like tokenizer with the Amharic addition,
# grow the T3-like checkpoint's text vocabulary to match, and print both reports.
# Usage: bash testdata/amharic_pipeline.sh [OUT_DIR]
# Without OUT_DIR the outputs go to a temp folder that is removed on exit; give OUT_DIR to keep them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/step.sh
if [ $# -ge 1 ]; then
  out=$1
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
step "build the release binaries (first time: about 3 minutes on 2 cores)" \
  cargo build --release --quiet --bin merge-tokenizers --bin extend-embeddings
echo
step "merge-tokenizers: Chatterbox base (2454 ids) + Amharic addition" \
  target/release/merge-tokenizers \
  --base testdata/tokenizers/chatterbox_base.json \
  --add testdata/tokenizers/amharic_addition.json \
  --output "$out/Am_tokenizer_merged.json" \
  --check-text testdata/tokenizers/english.txt --check-text testdata/tokenizers/amharic.txt
echo
step "extend-embeddings: the T3 checkpoint's text embedding and head to the merged rows" \
  target/release/extend-embeddings testdata/chatterbox_t3/t3_bf16.safetensors \
  --output "$out/t3_extended.safetensors" --tokenizer "$out/Am_tokenizer_merged.json"
echo
if [ $# -ge 1 ]; then
  echo "outputs in $out"
else
  echo "outputs were in a temp folder, now removed; run 'bash testdata/amharic_pipeline.sh OUT_DIR' to keep them"
fi
