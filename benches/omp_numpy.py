"""A plain numpy OMP over the inputs benches/omp.rs wrote (dict S×D, y T×D, f32 raw), timed;
then its atoms against ours (atoms: T×K i64, -1 padded). Usage: omp_numpy.py DIR S D T K RUNS [N].
With N < T, only the first N targets are pursued (a multiple of the 256-target block: each block is
independent, so the time is linear in the targets) and the time for all T is printed beside the
measured one as measured × T / N."""
import sys, time
import numpy as np

dir_, s, d, t, k, runs = sys.argv[1], *map(int, sys.argv[2:7])
n = int(sys.argv[7]) if len(sys.argv) > 7 else t
D = np.fromfile(f"{dir_}/dict", dtype=np.float32).reshape(s, d)
Y = np.fromfile(f"{dir_}/y", dtype=np.float32).reshape(t, d)[:n]


def omp(D, Y, k, block=256):
    atoms = np.full((len(Y), k), -1, dtype=np.int64)
    for b0 in range(0, len(Y), block):
        y = Y[b0:b0 + block].astype(np.float64)
        r = Y[b0:b0 + block].copy()
        sel = np.zeros((len(y), 0), dtype=np.int64)
        rows = np.arange(len(y))
        for step in range(k):
            c = np.abs(r @ D.T)  # f32 correlations, as ours
            c[rows[:, None], sel] = -1.0
            new = c.argmax(axis=1)
            sel = np.concatenate([sel, new[:, None]], axis=1)
            A = D[sel].astype(np.float64)  # B × t × D
            G = A @ A.transpose(0, 2, 1)
            x = np.linalg.solve(G, (A @ y[:, :, None]))[:, :, 0]
            r = (y - np.einsum("bt,btd->bd", x, A)).astype(np.float32)
        atoms[b0:b0 + block] = sel
    return atoms


times = []
for _ in range(runs):
    t0 = time.perf_counter()
    got = omp(D, Y, k)
    times.append(time.perf_counter() - t0)
ours = np.fromfile(f"{dir_}/atoms", dtype=np.int64).reshape(t, k)[:n]
same = (got == ours).all(axis=1).mean()
med = sorted(times)[len(times) // 2]
whole = f"{med:.2f} s" if n == t else f"{med * t / n:.2f} s for all T ({med:.2f} s measured for the first {n})"
print(f"numpy T={t} S={s} D={d} k={k}: {whole} (median of {runs}); "
      f"targets with identical atoms: {100 * same:.2f}%")
