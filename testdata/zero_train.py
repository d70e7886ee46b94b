#!/usr/bin/env python3
"""A tiny DeepSpeed ZeRO run on CPU (gloo), launched by generate.py's zero_files() with torchrun, 2 ranks.

  torchrun --nproc_per_node 2 testdata/zero_train.py --stage 2 --rows 999 --save DIR [--bf16]
  torchrun --nproc_per_node 2 testdata/zero_train.py --stage 2 --rows 1063 --load DIR --dump F --steps 1

--save: train --steps steps and save_checkpoint(DIR) (tag global_stepN, `latest`).
--load: load_checkpoint(DIR) (optimizer state included) into a model of --rows rows, dump DeepSpeed's
own full view of every parameter (safe_get_full_fp32_param / safe_get_full_optimizer_state) to --dump
(a safetensors file, written by rank 0), then train --steps steps (0: none) and report the loss.
Environment: DS_ACCELERATOR=cpu, the venv's bin on PATH (DeepSpeed compiles a small CPU op once).
"""
import argparse
import os

import torch
import torch.nn as nn


class Tiny(nn.Module):
    """An embedding and an untied head of `rows` rows (width 3), a small layer between."""

    def __init__(self, rows, dim=3):
        super().__init__()
        self.embed = nn.Embedding(rows, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, rows, bias=False)

    def forward(self, ids):
        return self.head(torch.tanh(self.proj(self.embed(ids))))


def config(stage, bf16, elastic=False):
    return {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                              "elastic_checkpoint": elastic},
        "bf16": {"enabled": bf16},
        "steps_per_print": 1000,
    }


def dump(engine, model, path):
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    opt = engine.optimizer
    if hasattr(opt, "_hp_optimizer_states_linked"):
        # Stages 1/2 link each parameter to its optimizer state fragments before the first step
        # creates the state: link again now that it exists.
        opt._hp_optimizer_states_linked = False
        opt._lazy_init_hp_params_optimizer_state()
    out = {}
    for name, p in model.named_parameters():
        out[name] = safe_get_full_fp32_param(p).detach().float().cpu().clone()
        for key in ("exp_avg", "exp_avg_sq"):
            out[f"{name}.{key}"] = safe_get_full_optimizer_state(p, key).detach().float().cpu().clone()
    if torch.distributed.get_rank() == 0:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in out.items()}, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--rows", type=int, default=999)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--save")
    ap.add_argument("--load")
    ap.add_argument("--dump")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--elastic", action="store_true", help="zero_optimization.elastic_checkpoint")
    ap.add_argument("--freeze-embed", action="store_true", help="embed.weight without gradient")
    a = ap.parse_args()

    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(a.seed)
    model = Tiny(a.rows)
    first = [model.embed.weight, model.proj.weight, model.proj.bias]
    if a.freeze_embed:
        model.embed.weight.requires_grad_(False)
        first = first[1:]
    groups = [
        {"params": first, "weight_decay": 0.01},
        {"params": [model.head.weight], "weight_decay": 0.0},
    ]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=config(a.stage, a.bf16, a.elastic))
    if a.load:
        path, _ = engine.load_checkpoint(a.load)
        assert path is not None, f"nothing loaded from {a.load}"
        if a.dump:
            dump(engine, model, a.dump)
    rank = torch.distributed.get_rank()
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(a.steps):
        ids = torch.randint(0, 999, (2, 7), generator=g)
        logits = engine(ids)
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, a.rows), ids.reshape(-1))
        engine.backward(loss)
        engine.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    if a.save:
        engine.save_checkpoint(a.save)
        if a.dump and not a.load:
            dump(engine, model, a.dump)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
