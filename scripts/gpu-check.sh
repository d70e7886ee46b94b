#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one command (the lent device machines have no cargo:
# build here with `bash scripts/gpu-check.sh --build DIR`, carry DIR, then run
# `bash scripts/gpu-check.sh DIR` there):
#   1. the GPU tests (tests/cuda_gpu.rs): every GPU path against the CPU reference, with cuBLAS
#      and with the kernels alone;
#   2. extend-embeddings --device cuda against --device cpu on the shipped T3 checkpoint
#      (mean, hewitt, subword-mean): the outputs compared tensor by tensor (python3 + torch);
#   3. the kernels' bench (benches/cuda.rs, then torch on the same GPU).
# CUDA 13 machines carry libnvrtc.so.13 / libcublas.so.13 only: unversioned links to them are
# made in a temp folder (cudarc loads symbols by name, the calls we make exist in both).
# Env: BENCH=0 skips step 3; RUNS, N, D, KS as benches/cuda.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--build" ]; then
  dir=${2:?usage: gpu-check.sh --build DIR}
  mkdir -p "$dir"
  cargo build --release --locked --features cuda --bin extend-embeddings
  exe() { cargo "$@" --locked --features cuda --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("executable") and m["target"]["kind"][0] in ("test", "bench"): print(m["executable"])' | tail -1; }
  cp "$(exe test --release --test cuda_gpu)" "$dir/cuda_gpu"
  cp "$(exe bench --bench cuda)" "$dir/cuda_bench"
  cargo build --release --locked --bin merge-tokenizers
  cp target/release/extend-embeddings "$dir/"
  t=testdata/tokenizers
  target/release/merge-tokenizers --base $t/chatterbox_base.json --add $t/amharic_addition.json \
    --output "$dir/merged.json" --overwrite >/dev/null
  strip "$dir"/cuda_gpu "$dir"/cuda_bench "$dir"/extend-embeddings
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
echo "== 1. GPU tests against the CPU reference"
"$dir/cuda_gpu" --test-threads 1 --nocapture || failed+=("GPU tests")
echo "== 2. extend-embeddings --device cuda vs cpu"
out=$(mktemp -d)
tok=testdata/tokenizers
"$dir/extend-embeddings" --help >/dev/null
for init in mean hewitt subword-mean; do
  for dev in cpu cuda; do
    "$dir/extend-embeddings" testdata/chatterbox_t3/t3_bf16.safetensors --output "$out/$init-$dev.safetensors" \
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
if [ "${BENCH:-1}" != 0 ]; then
  echo "== 3. the kernels' bench"
  "$dir/cuda_bench" || failed+=("bench")
  python3 benches/cuda_torch.py || failed+=("torch bench")
fi
[ ${#failed[@]} = 0 ] || { echo "FAILED: ${failed[*]}"; exit 1; }
echo "gpu-check: all passed"
