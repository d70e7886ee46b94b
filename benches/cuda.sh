#!/usr/bin/env bash
# The CUDA path's figures on a GPU machine, in one command: the Rust bench (GPU and CPU path),
# then torch on the same GPU for the same operations (when torch is installed).
# Usage: bash benches/cuda.sh   (env: RUNS, N, D, KS, CPU=0, BW_GBS, PEAK_TFLOPS; see benches/cuda.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ldconfig -p 2>/dev/null | grep -q libnvrtc.so.12 && [ -z "${LD_LIBRARY_PATH:-}" ]; then
  venv=target/cuda-check-venv
  [ -x "$venv/bin/python" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install --quiet nvidia-cuda-nvrtc-cu12; }
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  export LD_LIBRARY_PATH="$(dirname "$(find "$site/nvidia" -name 'libnvrtc.so.12*' | head -1)")"
fi
cargo bench --locked --features cuda --bench cuda
python3 benches/cuda_torch.py || echo "torch: not run (needs torch with CUDA)"
