#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one command (the lent device machines have no cargo:
# build here with `bash scripts/gpu-check.sh --build DIR`, carry DIR, then run
# `bash scripts/gpu-check.sh DIR` there):
#   1. the GPU tests (tests/cuda_gpu.rs): every GPU path against the CPU reference, with cuBLAS
#      and with the kernels alone;
#   1b. the SUITES below with `auto` taking the GPU for every matrix (their omp/hewitt/knn runs);
#   2. extend-embeddings --device cuda against --device cpu on the shipped T3 checkpoint
#      (mean, hewitt, subword-mean): the outputs compared tensor by tensor (python3 + torch);
#   4. issue 46's transplant on the GPU beside mergekit-tokensurgeon --cuda
#      (benches/transplant_tokensurgeon.py --device cuda; GPT-2's files are carried in DIR/pkgs
#      from TRANSPLANT_WORK's, and mergekit's wheels in .whl/ when there: see docs/benchmarks.md);
#   3. the kernels' bench (benches/cuda.rs, then torch on the same GPU).
# CUDA 13 machines carry libnvrtc.so.13 / libcublas.so.13 only: unversioned links to them are
# made in a temp folder (cudarc loads symbols by name, the calls we make exist in both).
# Env: BENCH=0 skips step 3, SUITE=0 step 1b, TRANSPLANT=0 step 4 (TRANSPLANT_NS: the Ns);
# RUNS, N, D, KS as benches/cuda.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test suites whose hewitt/omp/knn runs take the GPU on a machine with one (auto, with the
# size threshold lowered by CKPT_SURGERY_TEST_AUTO_MIN_BYTES=0).
SUITES=${SUITES:-"extend_omp transplant_donor donor_quality extend_embeddings transplant"}
if [ "${1:-}" = "--build" ]; then
  dir=${2:?usage: gpu-check.sh --build DIR}
  mkdir -p "$dir/suite/bin" "$dir/suite/tests"
  cargo build --release --locked --features cuda --bins
  exe() { cargo "$@" --locked --features cuda --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("executable") and m["target"]["kind"][0] in ("test", "bench"): print(m["executable"])' | tail -1; }
  cp "$(exe test --release --test cuda_gpu)" "$dir/cuda_gpu"
  cp "$(exe bench --bench cuda)" "$dir/cuda_bench"
  for t in $SUITES; do cp "$(exe test --release --test "$t")" "$dir/suite/tests/$t"; done
  for b in $(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys
print(" ".join(t["name"] for p in json.load(sys.stdin)["packages"] if p["name"] == "ckpt-surgery"
               for t in p["targets"] if t["kind"] == ["bin"]))'); do
    cp "target/release/$b" "$dir/suite/bin/"
  done
  t=testdata/tokenizers
  target/release/merge-tokenizers --base $t/chatterbox_base.json --add $t/amharic_addition.json \
    --output "$dir/merged.json" --overwrite >/dev/null
  strip "$dir"/cuda_gpu "$dir"/cuda_bench "$dir"/suite/bin/* "$dir"/suite/tests/*
  tar -C "$dir" -cJf "$dir/suite.tar.xz" suite && rm -r "$dir/suite"
  # GPT-2's vocab.json / merges.txt for the transplant bench (the device machine has no network).
  if [ -d "${TRANSPLANT_WORK:-/tmp/transplant-bench}/pkgs" ]; then
    mkdir -p "$dir/pkgs"
    cp "${TRANSPLANT_WORK:-/tmp/transplant-bench}"/pkgs/gpt2_* "$dir/pkgs/"
  fi
  ls -la "$dir"
  exit 0
fi
dir=${1:?usage: gpu-check.sh DIR (built by --build DIR)}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
links=$(mktemp -d)
for l in nvrtc cublas cublasLt; do
  if ! ldconfig -p | grep -q "lib$l.so.12"; then
    f=$(find /usr/local /opt /usr/lib -name "lib$l.so.1[23]*" 2>/dev/null | sort | head -1)
    if [ -n "$f" ]; then
      ln -sf "$f" "$links/lib$l.so"
      export LD_LIBRARY_PATH="$links:$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "lib$l: $f"
    fi
  fi
done
failed=()
# The binaries (built with --features cuda) and the suites' test executables; the tests run the
# binaries at the path they were built in (/work/main/target/release).
tar -C "$dir" -xJf "$dir/suite.tar.xz"
root=$(pwd)
if [ "$root" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$root" /work/main; fi
mkdir -p /work/main/target/release
cp "$dir"/suite/bin/* /work/main/target/release/
ee=/work/main/target/release/extend-embeddings
echo "== 1. GPU tests against the CPU reference"
"$dir/cuda_gpu" --test-threads 1 --nocapture || failed+=("GPU tests")
echo "== 1b. the test suites with auto taking the GPU for every matrix"
if [ "${SUITE:-1}" != 0 ]; then
  export CKPT_SURGERY_TEST_AUTO_MIN_BYTES=0
  "$ee" testdata/chatterbox_t3/t3_bf16.safetensors --output /tmp/auto-gpu.safetensors \
    --tokenizer "$dir/merged.json" --base-tokenizer testdata/tokenizers/chatterbox_base.json \
    --init hewitt --seed 3 --json --overwrite | grep -o '"device[^,]*' || failed+=("auto takes the GPU")
  for t in "$dir"/suite/tests/*; do
    n=$(basename "$t")
    if "$t" --test-threads 4 >"/tmp/suite-$n.log" 2>&1; then
      echo "-- $n: $(grep "^test result" "/tmp/suite-$n.log")"
    else
      failed+=("suite $n")
      echo "-- $n FAILED:"; grep -E -A30 "^failures:|panicked" "/tmp/suite-$n.log" | head -80
    fi
  done
  unset CKPT_SURGERY_TEST_AUTO_MIN_BYTES
fi
echo "== 2. extend-embeddings --device cuda vs cpu"
out=$(mktemp -d)
tok=testdata/tokenizers
"$ee" --help >/dev/null
for init in mean hewitt subword-mean; do
  for dev in cpu cuda; do
    "$ee" testdata/chatterbox_t3/t3_bf16.safetensors --output "$out/$init-$dev.safetensors" \
      --tokenizer "$dir/merged.json" --base-tokenizer "$tok/chatterbox_base.json" \
      --init "$init" --seed 3 --device "$dev" --json >"$out/$init-$dev.json" || failed+=("extend $init $dev")
  done
done
python3 - "$out" <<'PY' || failed+=("extend-embeddings cuda vs cpu")
import sys, torch
from safetensors.torch import load_file
out = sys.argv[1]
bad = 0
for init in ["mean", "hewitt", "subword-mean"]:
    a, b = load_file(f"{out}/{init}-cpu.safetensors"), load_file(f"{out}/{init}-cuda.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k].double(), b[k].double()
        same = torch.equal(a[k], b[k])
        # bf16 outputs: a value rounded the other way differs by one bf16 ulp at most.
        ulp = (x.abs().clamp_min(1e-30).log2().floor() - 7).exp2()
        off = ((x - y).abs() > ulp * 1.01).sum().item()
        print(f"{init:<13} {k:<28} {tuple(a[k].shape)} identical={same} beyond-1-ulp={off}")
        bad += off
sys.exit(1 if bad else 0)
PY
if [ "${TRANSPLANT:-1}" != 0 ] && [ -d "$dir/pkgs" ]; then
  echo "== 4. transplant-tokenizer on the GPU beside mergekit-tokensurgeon --cuda (issue 46's work)"
  work=${TRANSPLANT_WORK:-/tmp/transplant-gpu}
  mkdir -p "$work/pkgs" && cp "$dir"/pkgs/* "$work/pkgs/"
  ts=none
  if ls .whl/mergekit-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && ts=/tmp/site/bin/mergekit-tokensurgeon
  fi
  tb() { PYTHONUNBUFFERED=1 python3 benches/transplant_tokensurgeon.py /work/main/target/release/transplant-tokenizer \
    --device cuda --threads "$(nproc)" --ns "${TRANSPLANT_NS:-2000,20000}" --runs "${RUNS:-2}" \
    --runs-large 1 --work "$work" --tokensurgeon "$1"; }
  tb "$ts" || { [ "$ts" != none ] && echo "tokensurgeon failed: ours alone" && tb none; } \
    || failed+=("transplant bench")
  cat "$work/results.json" || true
fi
if [ "${BENCH:-1}" != 0 ]; then
  echo "== 3. the kernels' bench"
  "$dir/cuda_bench" || failed+=("bench")
  python3 benches/cuda_torch.py || failed+=("torch bench")
fi
[ ${#failed[@]} = 0 ] || { echo "FAILED: ${failed[*]}"; exit 1; }
echo "gpu-check: all passed"
