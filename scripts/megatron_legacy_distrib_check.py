"""Load a resized Megatron-LM legacy save with the distributed optimizer the way Megatron-LM's
load_checkpoint does for ckpt_format 'torch' (each rank's model_optim_rng.pt into a GPTModel built
with the new padded vocabulary, strict=True; optimizer.load_state_dict; then
DistributedOptimizer.load_parameter_state of the rank folder's distrib_optim.pt, which asserts
its numel_unpadded against the new run's buffers and scatters each bucket to the replicas), and
compare with the input loaded the same way into a model of the old size: every parameter's main
copy and Adam moments bit-identical, the vocabulary matrices' old rows bit-identical (gathered
over the TP ranks), new rows' main copy equal to the new weights and moments zero; then one
optimizer step runs.

    PYTHONPATH=testdata python scripts/megatron_legacy_distrib_check.py IN_ROOT OUT_ROOT [--dp N]

--dp N: load at N data-parallel replicas (TP x N processes; the values are compared at DP 1,
where each rank holds whole parameters: run without --dp for them). The runs' pipeline stages
and tied embeddings come from CKPT_SURGERY_MEGATRON_PP / CKPT_SURGERY_MEGATRON_TIED, model chunks
from CKPT_SURGERY_MEGATRON_VPP (set them as `megatron_legacy_save.py --pp N --tied --vpp V` did):
TP x PP x DP processes.
"""
import os, sys
import megatron_legacy_save as mls  # the fixture's model and optimizer, with the CPU no-ops
import megatron_save as ms
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from megatron.core import parallel_state

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# megatron-core 0.16.1's load of a per-parameter step that torch's CPU Adam keeps (see there)
from megatron_resize_check import keep_torch_adam_step  # noqa: E402

VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


def rank_dir(root, tp):
    it = open(os.path.join(root, "latest_checkpointed_iteration.txt")).read().strip()
    return os.path.join(root, f"iter_{int(it):07d}", mls.rank_folder(tp))


def load(root, tp):
    sd = torch.load(os.path.join(rank_dir(root, tp), "model_optim_rng.pt"), weights_only=False)
    models, ddps, opt = mls.build(sd["args"].padded_vocab_size, distributed=True)
    for key, model in zip(mls.model_keys(), models):
        model.load_state_dict(sd[key], strict=True)
    opt.load_state_dict(sd["optimizer"])
    keep_torch_adam_step(opt)
    with torch.no_grad():  # the copy into the fp32 main params (leaves); Megatron-LM's load runs so too
        opt.load_parameter_state(os.path.join(rank_dir(root, tp), "distrib_optim.pt"))
    return models, ddps, opt


def named_parameters(models):
    """Every chunk's parameters, named `KEY/NAME` (a chunk's layers are numbered from 0)."""
    return {f"{key}/{n}": p for key, m in zip(mls.model_keys(), models) for n, p in m.named_parameters()}


def states(models, opt):
    out = {}
    for dopt in getattr(opt, "chained_optimizers", [opt]):
        for n, p in named_parameters(models).items():
            if p in dopt.model_param_gbuf_map:
                out[n] = {k: v.detach().clone() for k, v in dopt._get_main_param_and_optimizer_states(p).items()}
    return out


def gathered(t, rows):
    """A TP-split matrix's rows gathered over the TP group (rank order)."""
    t = t.reshape(rows, -1).contiguous()
    parts = [torch.empty_like(t) for _ in range(parallel_state.get_tensor_model_parallel_world_size())]
    dist.all_gather(parts, t, group=parallel_state.get_tensor_model_parallel_group())
    return torch.cat(parts)


def bits(t):
    return t.contiguous().view(torch.int32)


def worker(rank, world, src, out, port, dp):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=mls.TP, pipeline_model_parallel_size=mls.PP,
                                             virtual_pipeline_model_parallel_size=mls.VPP if mls.VPP > 1 else None)
    tp = parallel_state.get_tensor_model_parallel_rank()
    m1, ddp1, o1 = load(out, tp)
    if dp == 1:
        m0, _, o0 = load(src, tp)
        s0, s1 = states(m0, o0), states(m1, o1)
        w0, w1 = named_parameters(m0), named_parameters(m1)
        assert s0.keys() == s1.keys()
        for name in s0:
            for k in ("param", "exp_avg", "exp_avg_sq"):
                a, b = s0[name][k], s1[name][k]
                if name.split("/")[-1].split("module.")[-1] not in VOCAB:
                    assert torch.equal(bits(a), bits(b)), (name, k)
                    continue
                old, new = gathered(a, w0[name].shape[0]), gathered(b, w1[name].shape[0])
                n = old.shape[0]
                assert torch.equal(bits(old), bits(new[:n])), (name, k)
                if k == "param":
                    weights = gathered(w1[name].detach().float(), w1[name].shape[0])
                    assert torch.equal(new[n:], weights[n:]), name
                else:
                    assert torch.count_nonzero(new[n:]) == 0, (name, k)
        if tp == 0:  # one line per pipeline stage
            print(f"rank {rank} TP={mls.TP} PP={mls.PP} DP=1: every parameter's main copy and moments bit-identical, {VOCAB} old rows "
                  f"bit-identical, new rows' main copy = new weights, moments zero: OK")
    g = torch.Generator().manual_seed(7 + rank)
    for p in (p for ddp in ddp1 for p in ddp.parameters()):
        p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=g))
    o1.step()
    print(f"TP={mls.TP} DP={dp} rank {rank}: load_parameter_state and one step: OK")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    dp = ms.flag(sys.argv, "--dp") or 1
    world = mls.TP * mls.PP * dp
    mp.spawn(worker, args=(world, sys.argv[1], sys.argv[2], 29647, dp), nprocs=world, join=True)
