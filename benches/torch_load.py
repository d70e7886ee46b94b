#!/usr/bin/env python3
"""inspect-checkpoint on a 2 GiB torch.save file, beside torch.load(mmap=True, weights_only=True).

Run from the repository root (needs torch):
    cargo build --release && python3 benches/torch_load.py        # RUNS=7 BENCH_DIR=/tmp
Prints a markdown table: median wall time and peak RSS of each, over RUNS runs, page cache warm.
inspect-checkpoint's time includes starting its process; torch.load's does not include starting
Python (it is timed inside one process), so the comparison favours torch.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

RUNS = int(os.environ.get("RUNS", "7"))
EXE = os.path.join("target", "release", "inspect-checkpoint")
d = os.path.join(os.environ.get("BENCH_DIR", tempfile.gettempdir()), "ckpt-surgery-bench")
os.makedirs(d, exist_ok=True)
path = os.path.join(d, "big_2gib.pt")
if not os.path.exists(path):
    g = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(2048, 4096, generator=g) for i in range(64)}
    torch.save(sd, path)
    del sd
size = os.path.getsize(path)
subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the cache for both


def rss_kib(cmd):
    out = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, check=True)
    return int(out.stderr.strip().splitlines()[-1])


ours = []
for _ in range(RUNS):
    t = time.perf_counter()
    subprocess.run([EXE, path, "--json"], stdout=subprocess.DEVNULL, check=True)
    ours.append(time.perf_counter() - t)
ours_rss = statistics.median(rss_kib([EXE, path, "--json"]) for _ in range(3))

theirs = []
for _ in range(RUNS):
    t = time.perf_counter()
    sd = torch.load(path, mmap=True, weights_only=True)
    theirs.append(time.perf_counter() - t)
    del sd
load = ("import torch,sys; sd=torch.load(sys.argv[1], mmap=True, weights_only=True); "
        "print(sum(t.numel() for t in sd.values()))")
theirs_rss = statistics.median(rss_kib([sys.executable, "-c", load, path]) for _ in range(3))
baseline_rss = statistics.median(rss_kib([sys.executable, "-c", "import torch"]) for _ in range(3))

o, t = statistics.median(ours), statistics.median(theirs)
print(f"## 2 GiB torch.save file ({size} bytes, 64 tensors), warm cache, median of {RUNS}")
print("| command | wall | peak RSS |")
print("|---|---|---|")
print(f"| inspect-checkpoint FILE --json (whole process) | {o * 1e3:.1f} ms | {ours_rss / 1024:.1f} MiB |")
print(f"| torch.load(mmap=True, weights_only=True) (in process) | {t * 1e3:.1f} ms | "
      f"{theirs_rss / 1024:.1f} MiB (python + import torch alone: {baseline_rss / 1024:.1f} MiB) |")
print(f"torch.load / inspect-checkpoint: {t / o:.2f}x")
