"""A large torch training checkpoint written by torch itself (issue 24's torch-writer case).

A model with an untied [V, D] f32 embedding and head (plus a small layer), AdamW stepped once, saved
as torch.save({"model": …, "optimizer": …, "step": 1}) -> OUT/train.pt (embedding, head and their two
moments each: 6·V·D·4 bytes, 6 GiB at the default V = 131072, D = 2048), and the model alone ->
OUT/model.pt. Usage: python3 benches/make_training_checkpoint.py OUT (env V, D override the sizes).
"""
import os
import sys

import torch

out = sys.argv[1]
V = int(os.environ.get("V", 131072))
D = int(os.environ.get("D", 2048))
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, D)
        self.norm = torch.nn.LayerNorm(D)
        self.lm_head = torch.nn.Linear(D, V, bias=False)


m = Model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
for p in m.parameters():
    p.grad = torch.randn_like(p) * 1e-3
opt.step()
for p in m.parameters():
    p.grad = None
torch.save(m.state_dict(), os.path.join(out, "model.pt"))
torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(), "step": 1}, os.path.join(out, "train.pt"))
print(f"wrote {out}/train.pt and {out}/model.pt (V={V}, D={D})")
