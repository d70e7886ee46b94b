#!/usr/bin/env python3
"""By-hand check (not run by CI: needs torch) that a DCP folder written by sanitize-checkpoint
loads with torch.distributed.checkpoint.load into the resized model and optimizer and trains.

    python tests/dcp_verify.py ORIG_DIR NEW_DIR ROWS WORLD TIED

ORIG_DIR: the input (testdata/dcp/single or fsdp2); NEW_DIR: sanitize's output with --vocab-rows
ROWS; WORLD: 1 (plain model) or 2 (two gloo processes, FSDP2 on CPU); TIED: 1 when the model ties
its head to the embedding (fsdp2 fixture). Checks: rows min(old, ROWS) of every vocabulary weight
and of its exp_avg / exp_avg_sq are bit-identical to the input; grown moment rows are zero;
grown weight rows equal the old rows' column mean (f32); step counts are kept; one AdamW step
runs with a finite loss. Prints OK per rank, or raises.
"""
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gen", os.path.join(HERE, "..", "testdata", "generate.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)


def full_state(d):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    tmp = d.rstrip("/") + f".verify-{os.getpid()}.pt"
    dcp_to_torch_save(d, tmp)
    sd = torch.load(tmp, weights_only=False)
    os.remove(tmp)
    return sd


def check(rank, world, orig, new, rows, tied, port):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict, get_state_dict
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = gen.dcp_model(rows, tied=tied)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = gen.dcp_state(model, opt)
    dcp.load(state, checkpoint_id=new, no_dist=(world == 1))
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"], options=flat)

    full = StateDictOptions(full_state_dict=True, flatten_optimizer_state_dict=True)
    msd, osd = get_state_dict(model, opt, options=full)
    before = full_state(orig)
    vocab = ["tok_embeddings.weight", "output.weight"]
    for name in vocab:
        w, w0 = msd[name], before["model"][name]
        keep = min(rows, w0.shape[0])
        assert w.shape[0] == rows, (name, w.shape)
        assert torch.equal(w[:keep], w0[:keep]), name
        if rows > w0.shape[0]:
            mean = w0.double().mean(0).float()
            assert torch.equal(w[w0.shape[0]:], mean.expand(rows - w0.shape[0], -1)), name
        for m in ["exp_avg", "exp_avg_sq"]:
            key = f"state.{name}.{m}"
            if key not in osd:
                continue
            v, v0 = osd[key], before["optim"][key]
            assert v.shape[0] == rows, (key, v.shape)
            kept = min(rows, v0.shape[0])
            assert torch.equal(v[:kept], v0[:kept]), key
            assert torch.count_nonzero(v[kept:]) == 0, key
            assert torch.equal(osd[f"state.{name}.step"], before["optim"][f"state.{name}.step"]), key
    loss = gen.dcp_step(model, opt, rows, seed=11)
    assert loss == loss and abs(loss) < 1e6, loss
    print(f"rank {rank}/{world}: OK rows={rows} loss={loss:.4f}")
    if world > 1:
        dist.destroy_process_group()


def main():
    orig, new, rows, world, tied = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
    if world == 1:
        check(0, 1, orig, new, rows, tied, 0)
    else:
        import torch.multiprocessing as mp
        mp.spawn(check, args=(world, orig, new, rows, tied, 29544), nprocs=world, join=True)


if __name__ == "__main__":
    main()
