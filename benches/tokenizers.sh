#!/usr/bin/env bash
# Gemma-sized tokenizers (issue 24): a 262144-id byte-level BPE tokenizer.json with 261887
# merges, generated (not committed) by benches/make_big_tokenizers.py; merge-tokenizers with
# 1 000 and 20 000 new words, and with the first words of those that make 1 000 and 20 000 new
# ids (--check-text), and check-vocab with it, beside loading the same file in Python's
# tokenizers (what a user's own script pays). Medians of RUNS (default 5).
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
merge=(target/release/merge-tokenizers --base "$dir/big_bpe.json" --check-text
  testdata/tokenizers/english.txt --allow-base-change)
# New ids the merge of the words in file $1 makes (each word's bare and Ġ forms and the pieces
# between: 1 000 words make about 4 500 ids).
ids_of() {
  "${merge[@]}" --add "$1" --output "$dir/dry.json" --dry-run --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin); print(r["merged_size"] - r["base_size"])'
}
# Additions of 1 000 and 20 000 new ids: the fewest first words of add_20000.txt that make them.
for k in 1000 20000; do
  lo=1 hi=20000
  while [ "$lo" -lt "$hi" ]; do
    mid=$(((lo + hi) / 2))
    head -n "$mid" "$dir/add_20000.txt" >"$dir/prefix.txt"
    if [ "$(ids_of "$dir/prefix.txt")" -ge "$k" ]; then hi=$mid; else lo=$((mid + 1)); fi
  done
  head -n "$lo" "$dir/add_20000.txt" >"$dir/ids_$k.txt"
  echo "ids_$k.txt: the first $lo words of add_20000.txt"
done
declare -A took
for add in add_1000 add_20000 ids_1000 ids_20000; do
  out=$(for i in $(seq "$runs"); do
    # Random ASCII words made ordinary byte-level tokens: some synthesized merges meet English
    # pairs, which the base-text check refuses (exit 1); the bench times the whole merge.
    timed "${merge[@]}" --add "$dir/$add.txt" --output "$dir/m_${add}_$i.json"; done)
  t=$(awk '{print $1}' <<<"$out" | median); m=$(awk '{print $2}' <<<"$out" | median)
  took[$add]=$t
  ids=$(ids_of "$dir/$add.txt")
  echo "merge-tokenizers $add.txt (+$ids ids) --check-text: $t s, peak RSS $((m / 1024)) MiB, $(awk -v a="$t" -v b="$py" 'BEGIN{printf "%.2f", a/b}')× the Python load"
done
for r in add ids; do
  echo "${r}_20000 / ${r}_1000: $(awk -v a="${took[${r}_20000]}" -v b="${took[${r}_1000]}" 'BEGIN{printf "%.2f", a/b}')×"
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
