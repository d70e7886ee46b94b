"""Load a resized Megatron-LM legacy save the way Megatron-LM's load_checkpoint does for
ckpt_format 'torch' (torch.load of each rank's model_optim_rng.pt, model.load_state_dict(strict=True)
into a GPTModel built with the new padded vocabulary at TP = 2, optimizer.load_state_dict), and
compare with the input: old rows of the weights, Adam moments and fp32 master copies bit-identical,
new moments zero, new master rows equal to the new weights.

    PYTHONPATH=testdata python scripts/megatron_legacy_check.py IN_ROOT OUT_ROOT
"""
import os, sys
import megatron_legacy_save as mls  # the fixture's model and optimizer, with the CPU no-ops
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from megatron.core import parallel_state

VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


def rank_file(root, tp):
    it = open(os.path.join(root, "latest_checkpointed_iteration.txt")).read().strip()
    return os.path.join(root, f"iter_{int(it):07d}", f"mp_rank_{tp:02d}", "model_optim_rng.pt")


def glob(files, get):
    return torch.cat([get(torch.load(f, weights_only=False)) for f in files])


def index(sd, name):
    names = [k for k, v in sd["model"].items() if torch.is_tensor(v) and not k.endswith("_extra_state")]
    groups = sd["optimizer"]["optimizer"]["param_groups"]
    order = [n for n in names if sd["model"][n].dim() > 1] + [n for n in names if sd["model"][n].dim() == 1]
    assert [len(g["params"]) for g in groups] == [sum(sd["model"][n].dim() > 1 for n in names), sum(sd["model"][n].dim() == 1 for n in names)]
    return order.index(name)


def worker(rank, world, src, out, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=mls.TP)
    sd = torch.load(rank_file(out, rank), weights_only=False)
    rows = sd["args"].padded_vocab_size
    model, ddp, opt = mls.build(rows)
    model.load_state_dict(sd["model"], strict=True)
    opt.load_state_dict(sd["optimizer"])
    if rank == 0:
        ins, outs = [rank_file(src, t) for t in range(mls.TP)], [rank_file(out, t) for t in range(mls.TP)]
        old = glob(ins, lambda s: s["model"][VOCAB[0]]).shape[0]
        for name in VOCAB:
            i = index(torch.load(ins[0], weights_only=False), name)
            w0, w1 = glob(ins, lambda s: s["model"][name]), glob(outs, lambda s: s["model"][name])
            assert w1.shape[0] == rows and torch.equal(w0.view(torch.int16), w1[:old].view(torch.int16)), name
            for k in ("exp_avg", "exp_avg_sq"):
                m0 = glob(ins, lambda s: s["optimizer"]["optimizer"]["state"][i][k])
                m1 = glob(outs, lambda s: s["optimizer"]["optimizer"]["state"][i][k])
                assert torch.equal(m0.view(torch.int32), m1[:old].view(torch.int32)), (name, k)
                assert torch.count_nonzero(m1[old:]) == 0, (name, k)
            j = i  # the fp16 params are group 0's, in order
            f0 = glob(ins, lambda s: s["optimizer"]["fp32_from_fp16_params"][0][j])
            f1 = glob(outs, lambda s: s["optimizer"]["fp32_from_fp16_params"][0][j])
            assert torch.equal(f0.view(torch.int32), f1[:old].view(torch.int32)), name
            assert torch.equal(f1[old:], w1[old:].float()), name
            print(f"{name}: {old} -> {rows} rows; old rows, moments and master copies bit-identical; new moments zero; new master rows = new weights")
        print(f"loaded at TP={mls.TP} with strict=True, optimizer.load_state_dict ok")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, sys.argv[1], sys.argv[2], 29645), nprocs=2, join=True)
