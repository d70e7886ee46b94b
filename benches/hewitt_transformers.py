#!/usr/bin/env python3
"""transformers' _init_added_embeddings_weights_with_mean on N × D f32 for each k in KS: median
wall seconds of RUNS, printed as JSON {k: seconds}. Called by benches/hewitt.rs."""
import json
import os
import statistics
import time

import torch
from transformers import PreTrainedModel

n, d = int(os.environ.get("N", 262144)), int(os.environ.get("D", 2560))
runs = int(os.environ.get("RUNS", 5))
ks = [int(k) for k in os.environ.get("KS", "81,1000,5000").split(",")]
old = torch.nn.Embedding(n, d)
torch.nn.init.uniform_(old.weight, -0.5, 0.5)
out = {}
for k in ks:
    new = torch.nn.Embedding(n + k, d)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        with torch.no_grad():
            PreTrainedModel._init_added_embeddings_weights_with_mean(None, old, new, n, k)
        times.append(time.perf_counter() - t)
    out[str(k)] = statistics.median(times)
print(json.dumps(out))
