#!/usr/bin/env bash
# Run fuzz targets for SECONDS each, two at a time, and keep libFuzzer's final stats.
#   bash fuzz/seed.sh && bash fuzz/run.sh 600              # every target, 10 minutes each
#   bash fuzz/run.sh 60 pickle_vm sentencepiece_parse      # some targets
# Needs `cargo install cargo-fuzz` and the nightly toolchain, or, where only the stable one can be
# had, the stable one told to accept nightly flags (RUSTC_BOOTSTRAP=1, set below when `cargo
# +nightly` is missing). Limits: 1 GiB RSS, 10 s per input.
# No sanitizer (-s none): the library is safe Rust (the one unsafe is the mmap), and ASan made
# the pickle target 25x slower.
# Crashes land in fuzz/artifacts/TARGET/; logs in fuzz/logs/TARGET.log.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-600}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors_open sharded_index pickle_vm torch_container tokenizer_merge sentencepiece_parse gguf_open gguf_edit chat_template)
if cargo +nightly --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
"${fuzz[@]}" build -O -s none >/dev/null 2>&1 || { echo "cargo fuzz build failed"; exit 2; }
mkdir -p logs
one() {
  "${fuzz[@]}" run -O -s none "$1" "corpus/$1" -- -max_total_time="$secs" -rss_limit_mb=1024 \
    -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 >"logs/$1.log" 2>&1
  echo "$1: exit $? $(grep -E 'stat::number_of_executed_units' "logs/$1.log" | awk '{print $2}') execs"
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  one "${targets[i]}" &
  [ -n "${targets[i+1]:-}" ] && one "${targets[i+1]}" &
  wait
done
