#!/usr/bin/env bash
# Gemma-sized tokenizers (issue 24): a 262144-id byte-level BPE tokenizer.json with 261887
# merges, generated (not committed) by benches/make_big_tokenizers.py; merge-tokenizers with
# 1 000 and 20 000 new words (--check-text) and check-vocab with it, beside loading the same file
# in Python's tokenizers (what a user's own script pays). Medians of RUNS (default 5).
# Needs: python3 with tokenizers (pip install tokenizers; sentencepiece and protobuf for the
# SentencePiece case). Usage: bash benches/tokenizers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 benches/make_big_tokenizers.py "$dir" >/dev/null
cargo build --release --quiet --bin merge-tokenizers --bin check-vocab
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
timed() { /usr/bin/time -f "%e %M" "$@" >/dev/null 2>"$dir/t" || true; tail -1 "$dir/t"; }
py=$(for _ in $(seq "$runs"); do python3 -c "
import time, sys
from tokenizers import Tokenizer
t = time.perf_counter(); Tokenizer.from_file(sys.argv[1]); print(round(time.perf_counter() - t, 3))" "$dir/big_bpe.json"; done | median)
echo "python tokenizers load of the 262144-id tokenizer.json: $py s (median of $runs)"
for k in 1000 20000; do
  out=$(for i in $(seq "$runs"); do
    # Random ASCII words made ordinary byte-level tokens: some synthesized merges meet English
    # pairs, which the base-text check refuses (exit 1); the bench times the whole merge.
    timed target/release/merge-tokenizers --base "$dir/big_bpe.json" --add "$dir/add_$k.txt" \
      --output "$dir/m_${k}_$i.json" --check-text testdata/tokenizers/english.txt \
      --allow-base-change; done)
  t=$(awk '{print $1}' <<<"$out" | median); m=$(awk '{print $2}' <<<"$out" | median)
  echo "merge-tokenizers +$k --check-text: $t s, peak RSS $((m / 1024)) MiB, $(awk -v a="$t" -v b="$py" 'BEGIN{printf "%.2f", a/b}')× the Python load"
done
if [ -f "$dir/big_sp.model" ]; then
  spy=$(for _ in $(seq "$runs"); do python3 -c "
import time, sys, sentencepiece as spm
t = time.perf_counter(); spm.SentencePieceProcessor(model_file=sys.argv[1]); print(round(time.perf_counter() - t, 3))" "$dir/big_sp.model"; done | median)
  echo "python sentencepiece load of the 262144-piece .model: $spy s"
  for k in 1000 20000; do
    out=$(for i in $(seq "$runs"); do
      timed target/release/merge-tokenizers --base "$dir/big_sp.model" --add "$dir/add_$k.txt" \
        --output "$dir/s_${k}_$i.model" --score 0; done)
    t=$(awk '{print $1}' <<<"$out" | median); m=$(awk '{print $2}' <<<"$out" | median)
    echo "merge-tokenizers (SentencePiece) +$k --score 0: $t s, peak RSS $((m / 1024)) MiB, $(awk -v a="$t" -v b="$spy" 'BEGIN{printf "%.2f", a/b}')× the Python load"
  done
fi
out=$(for _ in $(seq "$runs"); do timed target/release/check-vocab testdata/gpt2 --tokenizer "$dir/big_bpe.json"; done)
t=$(awk '{print $1}' <<<"$out" | median); m=$(awk '{print $2}' <<<"$out" | median)
echo "check-vocab (model folder + the 262144-id tokenizer): $t s, peak RSS $((m / 1024)) MiB, $(awk -v a="$t" -v b="$py" 'BEGIN{printf "%.2f", a/b}')× the Python load"
