#!/usr/bin/env bash
# Checkpoints larger than memory (issue 24): a sharded safetensors set of SIZE_GIB (default: this
# machine's RAM + 4 GiB; cheap xorshift data) with a 262144 × 2560 bf16 embedding and an untied
# head, grown by 64 rows. For each command: wall time and peak RSS, medians of RUNS (default 3)
# with each run's ratio against its floor measured beside it:
#   inspect-checkpoint --hash   vs  dd iflag=direct of every shard to /dev/null (the disk read floor)
#   extend-embeddings (copy)    vs  dd oflag=direct conv=fsync of every shard (the disk write floor)
#   extend-embeddings --link    vs  the same dd of the two shards that change
#   check-vocab                 (reads headers only)
# The page cache is dropped before every timed command (needs root; otherwise runs are warm).
# Refuses to start unless the disk has room for input + output. Usage: bash benches/larger_than_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ram_gib=$(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
size=${SIZE_GIB:-$((ram_gib + 4))}
runs=${RUNS:-3}
dir=${BENCH_DIR:-target/larger-than-memory}
mkdir -p "$dir"
avail=$(df --output=avail -B1G "$dir" | tail -1 | tr -d ' ')
have=$(du -s -B1G "$dir/in" 2>/dev/null | awk '{print $1}' || echo 0)
if (( avail + have < 2 * size + 2 )); then
  echo "refusing: $dir has ${avail} GiB free (+${have} GiB of an earlier input); input + output need $((2 * size + 2)) GiB" >&2
  exit 2
fi
cargo build --release --quiet --bins
if [ ! -f "$dir/in/model.safetensors.index.json" ] || [ "$(cat "$dir/in/.size" 2>/dev/null)" != "$size" ]; then
  rm -rf "$dir/in"
  SIZE_GIB=$size cargo bench --quiet --bench make_big_sharded -- "$dir/in"
  echo "$size" > "$dir/in/.size"
fi
bytes=$(du -cb "$dir"/in/*.safetensors | tail -1 | awk '{print $1}')
changed=$((2 * 262144 * 2560 * 2))
echo "input: $(ls "$dir"/in/*.safetensors | wc -l) shards, $bytes bytes ($((bytes >> 30)) GiB) on a ${ram_gib} GiB machine; changed tensors $changed bytes"
cold() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
timed() { /usr/bin/time -f "%e %M" "$@" >/dev/null 2>"$dir/t"; tail -1 "$dir/t"; }
secs() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ddread() { for f in "$dir"/in/*.safetensors; do dd if="$f" of=/dev/null bs=16M iflag=direct status=none; done; }
ddwrite() { mkdir -p "$dir/dd"; for f in "$@"; do dd if="$f" of="$dir/dd/$(basename "$f")" bs=16M oflag=direct conv=fsync status=none; done; rm -rf "$dir/dd"; }
first=$(ls "$dir"/in/*.safetensors | head -1); last=$(ls "$dir"/in/*.safetensors | tail -1)
report() { # name, runs of "wall rss floor"
  local name=$1; shift
  local w r f
  w=$(printf '%s\n' "$@" | awk '{print $1}' | median); r=$(printf '%s\n' "$@" | awk '{print $2}' | median)
  f=$(printf '%s\n' "$@" | awk '{print $3}' | median)
  local ratios; ratios=$(printf '%s\n' "$@" | awk '$3 > 0 {printf "%.2f ", $1 / $3}')
  echo "$name: wall $w s (floor $f s), peak RSS $((r / 1024)) MiB; per-run ratios: ${ratios:-—}"
}
res=()
for i in $(seq "$runs"); do
  cold; t=$(timed target/release/inspect-checkpoint "$dir/in" --hash)
  cold; f=$(secs ddread)
  res+=("$t $f")
done
report "inspect-checkpoint --hash" "${res[@]}"
res=()
for i in $(seq "$runs"); do
  rm -rf "$dir/out"; cold; t=$(timed target/release/extend-embeddings "$dir/in" --output "$dir/out" --new-rows 262208)
  rm -rf "$dir/out"; cold; f=$(secs ddwrite "$dir"/in/*.safetensors)
  res+=("$t $f")
done
report "extend-embeddings (every shard written)" "${res[@]}"
res=()
for i in $(seq "$runs"); do
  rm -rf "$dir/out"; cold; t=$(timed target/release/extend-embeddings "$dir/in" --output "$dir/out" --new-rows 262208 --link)
  rm -rf "$dir/out"; cold; f=$(secs ddwrite "$first" "$last")
  res+=("$t $f")
done
rm -rf "$dir/out"
report "extend-embeddings --link (two shards written)" "${res[@]}"
res=()
for i in $(seq "$runs"); do
  cold; t=$(timed target/release/check-vocab "$dir/in")
  res+=("$t 0")
done
report "check-vocab" "${res[@]}"
echo "RSS bound for extend: changed tensors + 64 MiB = $(((changed >> 20) + 64)) MiB"
