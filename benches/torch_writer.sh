#!/usr/bin/env bash
# The torch writer at scale (issue 24): a 6 GiB training checkpoint written by torch itself
# (benches/make_training_checkpoint.py: untied [131072, 2048] f32 embedding and head, AdamW
# stepped once; needs python3 with torch) grown by 64 rows with sanitize-checkpoint (embedding,
# head and their four moments change), and the 2 GiB model alone with extend-embeddings. For each
# command: wall time and peak RSS, medians of RUNS (default 3), each run's ratio against the disk
# floor measured beside it (dd oflag=direct conv=fsync of the input file). The page cache is
# dropped before every timed command (needs root; otherwise runs are warm). Refuses to start
# without room for inputs + outputs. Usage: bash benches/torch_writer.sh   (PYTHON=… to choose)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
dir=${BENCH_DIR:-target/torch-writer}
py=${PYTHON:-python3}
V=${V:-131072}; D=${D:-2048}
mkdir -p "$dir"
need=$(((6 * V * D * 4 + 2 * V * D * 4) * 2 / 1073741824 + 2))
avail=$(df --output=avail -B1G "$dir" | tail -1 | tr -d ' ')
have=$(du -s -B1G "$dir/in" 2>/dev/null | awk '{print $1}' || echo 0)
if (( avail + have < need )); then
  echo "refusing: $dir has ${avail} GiB free (+${have} GiB of an earlier input); inputs + outputs need $need GiB" >&2
  exit 2
fi
cargo build --release --quiet --bins
if [ ! -f "$dir/in/train.pt" ] || [ "$(cat "$dir/in/.size" 2>/dev/null)" != "$V $D" ]; then
  rm -rf "$dir/in"
  V=$V D=$D "$py" benches/make_training_checkpoint.py "$dir/in"
  echo "$V $D" > "$dir/in/.size"
fi
new=$((V + 64))
echo "input: train.pt $(stat -c %s "$dir/in/train.pt") bytes, model.pt $(stat -c %s "$dir/in/model.pt") bytes; +64 rows"
echo "changed tensors: sanitize $((6 * V * D * 4 >> 20)) MiB (embedding, head, 4 moments), extend $((2 * V * D * 4 >> 20)) MiB; new rows: sanitize $((6 * 64 * D * 4 >> 10)) KiB, extend $((2 * 64 * D * 4 >> 10)) KiB"
cold() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
timed() { /usr/bin/time -f "%e %M" "$@" >/dev/null 2>"$dir/t"; tail -1 "$dir/t"; }
secs() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ddwrite() { dd if="$1" of="$dir/dd.out" bs=16M oflag=direct conv=fsync status=none; rm -f "$dir/dd.out"; }
report() { # name, runs of "wall rss floor"
  local name=$1; shift
  local w r f ratios
  w=$(printf '%s\n' "$@" | awk '{print $1}' | median); r=$(printf '%s\n' "$@" | awk '{print $2}' | median)
  f=$(printf '%s\n' "$@" | awk '{print $3}' | median)
  ratios=$(printf '%s\n' "$@" | awk '$3 > 0 {printf "%.2f ", $1 / $3}')
  echo "$name: wall $w s (floor $f s), peak RSS $((r / 1024)) MiB; per-run ratios: $ratios"
}
measure() { # name, input file, tool, its arguments (the output is $dir/out.pt)
  local name=$1 input=$2; shift 2
  local res=() t f
  for i in $(seq "$runs"); do
    rm -f "$dir/out.pt"; cold; t=$(timed "target/release/$1" "$input" --output "$dir/out.pt" "${@:2}")
    rm -f "$dir/out.pt"; cold; f=$(secs ddwrite "$input")
    res+=("$t $f")
  done
  rm -f "$dir/out.pt"
  report "$name" "${res[@]}"
}
measure "sanitize-checkpoint train.pt +64 rows" "$dir/in/train.pt" sanitize-checkpoint --vocab-rows $new
measure "extend-embeddings model.pt +64 rows" "$dir/in/model.pt" extend-embeddings --new-rows $new
