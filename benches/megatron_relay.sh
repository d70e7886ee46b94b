#!/usr/bin/env bash
# Megatron-Core's default optimizer layout (dp_reshardable buckets) re-laid for a grown
# vocabulary: time and memory of sanitize-checkpoint on saves megatron-core itself writes
# (testdata/megatron_save.py --hidden 1024 --layers 8: a 100M-parameter GPT, TP 2, one fp32
# bucket per group, 1.6 GB with Adam's three fp32 states), grown 128 -> 256 padded rows, at
# DP 1 and DP 3 (where every replica's part end moves and the parameters across it are gathered).
# For each: medians of RUNS (default 3) of wall time, peak RSS (ru_maxrss, which counts the data
# files' pages the reader maps while it opens them) and peak anonymous RSS (sampled every 5 ms
# from /proc: what the job itself allocates), each run's floors measured beside it:
#   disk:  cp -r of the save into BENCH_DIR, then sync (the bytes a copy of the save writes)
#   tmpfs: cp -r of the save to /dev/shm (no disk)
# The memory bound is the changed tensors (the two vocabulary matrices' new weights and their
# three fp32 states, old and new) + 64 MiB.
# BASE_BIN=path/to/an/older/sanitize-checkpoint times that build too, in the same runs;
# BIN=path runs that build instead of building target/release's.
# Needs a Python with torch and megatron-core 0.16.1 (PY, default /work/venv/bin/python):
# pip install --no-deps megatron-core==0.16.1. Usage: bash benches/megatron_relay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
dir=${BENCH_DIR:-target/megatron-relay}
py=${PY:-/work/venv/bin/python}
mkdir -p "$dir"
bin=${BIN:-target/release/sanitize-checkpoint}
[ -n "${BIN:-}" ] || cargo build --release --quiet --bin sanitize-checkpoint
for dp in 1 3; do
  if [ ! -f "$dir/dp$dp/latest_checkpointed_iteration.txt" ]; then
    rm -rf "$dir/dp$dp"
    "$py" testdata/megatron_save.py "$dir/dp$dp" dp_reshardable f32 1 --layers 8 --hidden 1024 \
      --dp "$dp" >/dev/null 2>&1
  fi
done
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
secs() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
# wall seconds, peak RSS KiB (ru_maxrss), peak anonymous RSS KiB (sampled)
measure() {
  "$py" - "$@" <<'EOF'
import resource, subprocess, sys, time
t0 = time.time()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
anon = 0
while p.poll() is None:
    try:
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("RssAnon"):
                anon = max(anon, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.005)
wall = time.time() - t0
err = p.stderr.read().decode()
if p.returncode != 0:
    sys.exit(f"{sys.argv[1]} failed ({p.returncode}): {err[-400:]}")
print(f"{wall:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} {anon}")
EOF
}
cpdisk() { cp -rL "$1" "$dir/cp" && sync; }
cpshm() { cp -rL "$1" /dev/shm/megatron-relay-cp; }
bound=$(( (2 * 256 * 1024 * 4 * (1 + 2 * 3) >> 20) + 64 ))
for dp in 1 3; do
  in="$dir/dp$dp"
  echo "DP $dp: $(du -sbL "$in" | awk '{print $1}') bytes; memory bound $bound MiB"
  for which in new base; do
    b=$bin
    if [ "$which" = base ]; then
      [ -n "${BASE_BIN:-}" ] || continue
      b=$BASE_BIN
    fi
    res=()
    for i in $(seq "$runs"); do
      rm -rf "$dir/out"
      m=$(measure "$b" "$in" --output "$dir/out" --vocab-rows 150)
      out=$(du -sb "$dir/out" | awk '{print $1}')
      rm -rf "$dir/cp"; d=$(secs cpdisk "$in"); rm -rf "$dir/cp"
      rm -rf /dev/shm/megatron-relay-cp; s=$(secs cpshm "$in"); rm -rf /dev/shm/megatron-relay-cp
      res+=("$m $d $s $out")
    done
    col() { printf '%s\n' "${res[@]}" | awk -v c="$1" '{print $c}' | median; }
    ratios=$(printf '%s\n' "${res[@]}" | awk '{printf "%.2f/%.2f ", $1 / $4, $1 / $5}')
    echo "  $which ($b): wall $(col 1) s, peak RSS $(( $(col 2) / 1024 )) MiB, peak anon $(( $(col 3) / 1024 )) MiB, output $(( $(col 6) >> 20 )) MiB; floors cp+sync $(col 4) s, cp to tmpfs $(col 5) s; per-run wall/disk-floor, wall/tmpfs-floor: $ratios"
  done
done
rm -rf "$dir/out"
