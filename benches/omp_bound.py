"""What this machine allows a Batch-OMP of issue 35's T = 1000 bench, measured with numpy's own
BLAS (the baseline's): the Gram D·Dᵀ of S×D random f32 rows (numpy hands `D @ D.T` to ssyrk),
and the memory read bandwidth of two processes streaming 2 GiB each at once (the pick streams
Gram columns on both cores).

Usage: omp_bound.py [S D RUNS] [T NUMPY_S SELECTED SHARED_GB]
With the last four (the bench's targets, numpy's time for them, the atoms selected by some target
and the pick's GB with ideal sharing, the last two printed by `cargo bench --bench omp`), it
prints a floor for any Batch-OMP here, against numpy's time / 5: the Gram of only the atoms that
end up selected, at ssyrk's rate; α₀ = Y·Dᵀ (T·S·D FMA) at the same rate; the pick reading each
step's distinct columns once for all targets at the measured bandwidth. The refit and all
bookkeeping are left out, so the floor is low."""
import sys, time
from multiprocessing import Barrier, Process, Queue
import numpy as np

a = sys.argv[1:]
s, d, runs = (int(a[0]), int(a[1]), int(a[2])) if len(a) >= 3 else (32768, 2048, 3)


def median(v):
    return sorted(v)[len(v) // 2]


def gram_seconds():
    D = np.random.default_rng(0).standard_normal((s, d), dtype=np.float32)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        G = D @ D.T
        out.append(time.perf_counter() - t0)
        del G
    return median(out)


def reader(q, start, n):
    x = np.ones(n, dtype=np.float32)
    x.max()  # pages in
    start.wait()  # both stream at the same time
    t0 = time.perf_counter()
    for _ in range(5):
        x.max()
    q.put(5 * x.nbytes / (time.perf_counter() - t0))


def bandwidth(procs=2, n=1 << 29):
    q, start = Queue(), Barrier(procs)
    ps = [Process(target=reader, args=(q, start, n)) for _ in range(procs)]
    for p in ps:
        p.start()
    got = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return sum(got)


g = gram_seconds()
fma = s * s * d / 2
print(f"numpy D @ D.T, S={s} D={d}: {g:.2f} s (median of {runs}), {fma / g / 1e9:.1f} GFMA/s "
      f"counting the upper triangle")
bws = [bandwidth() for _ in range(3)]
bw = max(bws)  # the fastest: the floor below must not be too high
print(f"read bandwidth, 2 processes x 2 GiB (5 passes each, at once, summed): best of 3 "
      f"{bw / 1e9:.1f} GB/s ({' '.join(f'{b / 1e9:.1f}' for b in bws)})")
if len(a) >= 7:
    t, numpy_s, selected, shared_gb = int(a[3]), float(a[4]), int(a[5]), float(a[6])
    gram_sel = g * (selected / s) ** 2
    alpha0 = t * s * d / (fma / g)
    pick = shared_gb * 1e9 / bw
    print(f"floor: Gram of the {selected} selected atoms {gram_sel:.1f} s + alpha0 {alpha0:.1f} s"
          f" + pick {shared_gb:.0f} GB at {bw / 1e9:.1f} GB/s {pick:.1f} s = "
          f"{gram_sel + alpha0 + pick:.1f} s (half the pick's bytes: "
          f"{gram_sel + alpha0 + pick / 2:.1f} s); 5x numpy needs <= {numpy_s / 5:.1f} s")
