"""torch on the same GPU for the operations of benches/cuda.rs (N, D, KS, RUNS as there)."""
import os, time, torch
assert torch.cuda.is_available()
n, d = int(os.environ.get("N", 262144)), int(os.environ.get("D", 4096))
ks = [int(k) for k in os.environ.get("KS", "81,1024,4096,10000").split(",")]
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
