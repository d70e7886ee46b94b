#!/usr/bin/env bash
# The torch writer against two floors in one script (issue 45 item 2): the disk (`dd oflag=direct
# conv=fsync` of the input) and tmpfs (`cp` of the input to /dev/shm), so CPU cost cannot hide
# behind a slow disk. The input is a training checkpoint written by torch itself
# (benches/make_training_checkpoint.py; default V = 43690, D = 1024: train.pt ~1 GiB = embedding,
# head and their AdamW moments; model.pt the model alone, 1/3 of it), grown by 64 rows with
# sanitize-checkpoint (train.pt) and extend-embeddings (model.pt).
#
# Each binary folder in BINS ("NAME:DIR ...", default "tree:target/release") runs every command,
# interleaved with the floors run by run, so revisions are compared on the same machine state:
#   BINS="base:/tmp/base/target/release tree:target/release" RUNS=3 bash benches/torch_writer_floors.sh
# Prints, per command, destination and binary: the median wall time, the median floor, and each
# run's ratio. The page cache is warm (the input is read once before; dropping caches needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
dir=${BENCH_DIR:-target/torch-writer-floors}
shm=${SHM_DIR:-/dev/shm/ckpt-surgery-bench}
py=${PYTHON:-python3}
V=${V:-43690}; D=${D:-1024}
bins=${BINS:-"tree:target/release"}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet --bins
mkdir -p "$dir" "$shm"
trap 'rm -rf "$shm"' EXIT
if [ ! -f "$dir/in/train.pt" ] || [ "$(cat "$dir/in/.size" 2>/dev/null)" != "$V $D" ]; then
  rm -rf "$dir/in"
  V=$V D=$D "$py" benches/make_training_checkpoint.py "$dir/in" >/dev/null
  echo "$V $D" >"$dir/in/.size"
fi
new=$((V + 64))
echo "train.pt $(stat -c %s "$dir/in/train.pt") bytes, model.pt $(stat -c %s "$dir/in/model.pt") bytes; +64 rows; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$dir/in/train.pt" "$dir/in/model.pt" >/dev/null

secs() { # the wall time of a command, in seconds; a failure stops the script
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null 2>"$dir/err" || { echo "failed: $* ($(tail -1 "$dir/err"))" >&2; exit 1; }
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
floor() { # DEST INPUT: the floor of writing INPUT's bytes to DEST
  case $1 in
    disk) dd if="$2" of="$dir/floor.out" bs=16M oflag=direct conv=fsync status=none; rm -f "$dir/floor.out" ;;
    shm) cp "$2" "$shm/floor.out"; rm -f "$shm/floor.out" ;;
  esac
}
job() { # JOB BIN OUT
  case $1 in
    sanitize) "$2/sanitize-checkpoint" "$dir/in/train.pt" --output "$3" --vocab-rows $new ;;
    extend) "$2/extend-embeddings" "$dir/in/model.pt" --output "$3" --new-rows $new ;;
  esac
}
outdir() { if [ "$1" = disk ]; then echo "$dir"; else echo "$shm"; fi; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

res=$dir/results
rm -f "$res"
for i in $(seq "$runs"); do
  for dest in disk shm; do
    for j in sanitize extend; do
      input=$dir/in/train.pt
      [ $j = extend ] && input=$dir/in/model.pt
      f=$(secs floor $dest "$input")
      for b in $bins; do
        name=${b%%:*} bin=${b#*:} out=$(outdir $dest)/out.pt
        rm -f "$out"
        t=$(secs job $j "$bin" "$out")
        rm -f "$out"
        echo "$j $dest $name $t $f" >>"$res"
      done
    done
  done
done
echo "| command | destination | binary | wall (median) | floor (median) | ratio of medians | per-run ratios |"
echo "|---|---|---|---|---|---|---|"
for j in sanitize extend; do
  for dest in disk shm; do
    for b in $bins; do
      name=${b%%:*}
      rows=$(awk -v j=$j -v d=$dest -v n="$name" '$1 == j && $2 == d && $3 == n' "$res")
      w=$(echo "$rows" | awk '{print $4}' | median)
      f=$(echo "$rows" | awk '{print $5}' | median)
      ratios=$(echo "$rows" | awk '{printf "%.2f ", $4 / $5}')
      fl=$([ $dest = disk ] && echo "dd oflag=direct conv=fsync" || echo "cp to /dev/shm")
      printf "| %s | %s | %s | %.2f s | %.2f s (%s) | %.2f | %s|\n" "$j" "$dest" "$name" "$w" "$f" "$fl" "$(echo "$w / $f" | bc -l)" "$ratios"
    done
  done
done
