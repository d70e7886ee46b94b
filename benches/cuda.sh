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
python3 - <<'PY' || echo "torch: not run (needs torch with CUDA)"
import os, time, torch
assert torch.cuda.is_available()
n, d = int(os.environ.get("N", 262144)), int(os.environ.get("D", 4096))
ks = [int(k) for k in os.environ.get("KS", "81,10000,100000").split(",")]
runs = int(os.environ.get("RUNS", 3))
x = (torch.rand(n, d) - 0.5).to(torch.bfloat16)
def t(f):
    v = []
    for _ in range(runs):
        torch.cuda.synchronize(); s = time.perf_counter(); f(); torch.cuda.synchronize(); v.append(time.perf_counter() - s)
    return sorted(v)[len(v) // 2]
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()} (host tensor copied each run, as the tool reads from disk)")
print(f"{'column mean (f64)':<34} torch {t(lambda: x.cuda().double().mean(0)):.4f} s")
ids = torch.randint(0, n, (100000, 3))
print(f"{'segment mean, 100000 tokens':<34} torch {t(lambda: x.cuda()[ids.cuda()].float().mean(1)):.4f} s")
for k in ks:
    def hew():
        g = x.cuda().float(); mu = g.mean(0); xc = g - mu
        z = torch.randn(n, k, device="cuda")
        return mu + (1e-9 / n) ** 0.5 * (xc.T @ z).T
    print(f"{'hewitt k = ' + str(k):<34} torch {t(hew):.4f} s")
PY
