#!/usr/bin/env bash
# The CUDA path checked on a machine without a GPU (issue: CUDA kernels written, compiled and
# checked without a GPU). Installs NVRTC and ptxas from PyPI into a private venv
# (target/cuda-check-venv), then:
#   1. cargo test --features cuda: the NVRTC compile test (every kernel for sm_80 and sm_90 through
#      the binary's own code path) and the host-emulated kernels against the CPU reference;
#   2. ptxas on that PTX: registers and spills per kernel.
# Usage: bash scripts/cuda-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/cuda-check-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nvrtc_dir=$(dirname "$(find "$site/nvidia" -name 'libnvrtc.so.12*' | head -1)")
ptxas=$(find "$site/nvidia" -name ptxas -type f | head -1)
[ -n "$nvrtc_dir" ] || { echo "libnvrtc.so.12 not found in $venv" >&2; exit 1; }
ptx_dir=$(mktemp -d)
echo "== NVRTC: $nvrtc_dir"
LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CKPT_SURGERY_PTX_DIR="$ptx_dir" \
  cargo test --locked --features cuda --test cuda_nvrtc --test cuda_host -- --nocapture 2>&1 \
  | grep -E "^test |skipped|kernels|test result"
if grep -q skipped <<<"$(LD_LIBRARY_PATH="$nvrtc_dir" cargo test --locked --features cuda --test cuda_nvrtc -- --nocapture 2>&1)"; then
  echo "the NVRTC test was skipped: libnvrtc did not load" >&2
  exit 1
fi
echo "== ptxas ($ptxas): registers and spills"
for arch in 80 90; do
  "$ptxas" -arch=sm_$arch -v -o /dev/null "$ptx_dir/kernels_compute_$arch.ptx" 2>&1 \
    | grep -E "Compiling entry|Used|spill" | sed "s/^/sm_$arch: /"
done
rm -rf "$ptx_dir"
