"""Megatron-LM's legacy checkpoint (`--ckpt-format torch`) of issue 49 (testdata/megatron/legacy_tp2):
`iter_0000010/mp_rank_00/model_optim_rng.pt` and `mp_rank_01/...` plus
`latest_checkpointed_iteration.txt`, written on CPU by megatron-core 0.16.1 with the same one-layer
GPTModel as testdata/megatron_save.py (TP = 2, 84-token vocabulary padded to 128 rows, untied
output layer) but in bf16 with Megatron's mixed-precision optimizer
(Float16OptimizerWithFloat16Params over Adam: fp32 master copies, no distributed optimizer),
stepped once. Each rank's file is the dict Megatron-LM's checkpointing.generate_state_dict builds
for ckpt_format 'torch' and save_checkpoint torch.saves: args, checkpoint_version 3.0, iteration,
model (state_dict_for_save_checkpoint), optimizer (the optimizer's state_dict()),
opt_param_scheduler. No rng_state: this is a `--no-save-rng` save (Megatron's rng_state holds
numpy's RNG state, an ndarray, and torch.cuda.get_rng_state(), which needs a GPU).

    python testdata/generate.py megatron_legacy_files   (runs: python testdata/megatron_legacy_save.py ROOT)

Other runs (options: docs/fixtures.md): `ROOT --distributed-optimizer --float16-module` is
testdata/megatron/legacy_tp2_distrib.
"""
import os, sys
import megatron_save as ms  # applies the CPU no-ops for Megatron's CUDA calls (see its docstring)
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.transformer.transformer_config import TransformerConfig

TP, ITERATION = ms.TP, ms.ITERATION
BUCKET_ENV = "CKPT_SURGERY_MEGATRON_BUCKET"
# --bucket-size N: overlap_grad_reduce with that bucket_size (read on import, by every spawned
# process and by scripts/megatron_legacy_distrib_check.py)
BUCKET = int(os.environ[BUCKET_ENV]) if os.environ.get(BUCKET_ENV) else None
CAST_ENV = "CKPT_SURGERY_MEGATRON_FLOAT16_MODULE"
# --float16-module: every weight bf16, norms too, as Megatron-LM's Float16Module casts a --bf16
# model (one bf16 buffer); without it the norms stay fp32 (a second, fp32 buffer)
CAST = os.environ.get(CAST_ENV) == "1"
PP_ENV, TIED_ENV = "CKPT_SURGERY_MEGATRON_PP", "CKPT_SURGERY_MEGATRON_TIED"
# --pp N: N pipeline stages of one layer each (rank folders mp_rank_TT_PPP); --tied: the embedding
# shared with the output layer (megatron-core gives it a bucket of its own on the first and last
# stages). Read likewise.
PP = int(os.environ.get(PP_ENV) or 1)
TIED = os.environ.get(TIED_ENV) == "1"
VPP_ENV = "CKPT_SURGERY_MEGATRON_VPP"
# --vpp V: V model chunks per pipeline rank (virtual pipeline stages, one layer each; the rank
# file's model0, model1, …; a buffer per chunk and dtype). Read likewise.
VPP = int(os.environ.get(VPP_ENV) or 1)


def build(rows, distributed=False):
    """The GPTModel at TP = 2 with `rows` padded vocabulary rows, bf16 (with --vpp: the rank's
    model chunks), a DDP wrapper each and Megatron's mixed-precision optimizer, or its
    distributed optimizer with `distributed` (the verifier builds the same with the new size):
    (models, ddps, optimizer)."""
    config = TransformerConfig(num_layers=PP * VPP, pipeline_model_parallel_size=PP,
                               virtual_pipeline_model_parallel_size=VPP if VPP > 1 else None,
                               hidden_size=ms.HIDDEN, num_attention_heads=2, kv_channels=ms.KV,
                               ffn_hidden_size=ms.FFN, add_bias_linear=False, normalization="RMSNorm",
                               use_cpu_initialization=True, params_dtype=torch.bfloat16,
                               pipeline_dtype=torch.bfloat16, bf16=True)
    models = ms.model_chunks(config, rows, PP, VPP, TIED, torch.bfloat16, cast=CAST)
    # Megatron-LM's get_model: only the first model chunk is bucketed.
    ddps = [DistributedDataParallel(
        config, DistributedDataParallelConfig(use_distributed_optimizer=distributed, grad_reduce_in_fp32=True,
                                              overlap_grad_reduce=BUCKET is not None, bucket_size=BUCKET), model,
        disable_bucketing=i > 0) for i, model in enumerate(models)]
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=distributed, bf16=True, fp16=False),
        ddps)
    return models, ddps, opt


def model_keys():
    """The rank file's model entries: `model`, or `model0`, `model1`, … with --vpp."""
    return ["model"] if VPP == 1 else [f"model{i}" for i in range(VPP)]


def legacy_args(rows, distributed=False, dp=1):
    a = ms.megatron_args(rows, pp=PP, dp=dp, bucket=BUCKET, tied=TIED, vpp=VPP)
    a.ckpt_format, a.use_distributed_optimizer = "torch", distributed
    a.params_dtype, a.bf16, a.no_save_rng = torch.bfloat16, True, True
    return a


def worker(rank, world, root, port, distributed=False):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP,
                                             virtual_pipeline_model_parallel_size=VPP if VPP > 1 else None)
    torch.manual_seed(0)
    rows = ms.padded(ms.TRUE_VOCAB, ms.DIVISIBLE_BY, TP)
    models, ddps, opt = build(rows, distributed)
    g = torch.Generator().manual_seed(200 + rank)
    for p in (p for ddp in ddps for p in ddp.parameters()):
        p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=g))
        if getattr(p, "shared_embedding", False):  # as megatron_save.py: both copies take one step
            shared = torch.Generator().manual_seed(1000 + parallel_state.get_tensor_model_parallel_rank())
            p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=shared))
    opt.step()
    state = {
        "args": legacy_args(rows, distributed, world // (TP * PP)),
        "checkpoint_version": 3.0,
        "iteration": ITERATION,
        **{k: m.state_dict_for_save_checkpoint() for k, m in zip(model_keys(), models)},
        "optimizer": opt.state_dict(),
        "opt_param_scheduler": {"max_lr": 1e-2, "num_steps": ITERATION * 8},
        "num_floating_point_operations_so_far": 0,
    }
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    d = os.path.join(root, f"iter_{ITERATION:07d}", rank_folder(tp_rank))
    first = parallel_state.get_data_parallel_rank() == 0
    if first:
        os.makedirs(d, exist_ok=True)
    dist.barrier()
    if distributed:
        # Megatron-LM's save_checkpoint: every replica gathers, the first one writes.
        opt.save_parameter_state(os.path.join(d, "distrib_optim.pt"))
    if first:
        torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    dist.barrier()
    if rank == 0:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(ITERATION))
    dist.destroy_process_group()


def rank_folder(tp_rank):
    """Megatron-LM's rank folder: mp_rank_TT, or mp_rank_TT_PPP with pipeline stages."""
    if PP == 1:
        return f"mp_rank_{tp_rank:02d}"
    return f"mp_rank_{tp_rank:02d}_{parallel_state.get_pipeline_model_parallel_rank():03d}"


if __name__ == "__main__":
    dp = ms.flag(sys.argv, "--dp") or 1
    if "--float16-module" in sys.argv:
        os.environ[CAST_ENV] = "1"
    if "--bucket-size" in sys.argv:
        os.environ[BUCKET_ENV] = str(ms.flag(sys.argv, "--bucket-size"))
    if "--pp" in sys.argv:
        os.environ[PP_ENV] = str(ms.flag(sys.argv, "--pp"))
    if "--tied" in sys.argv:
        os.environ[TIED_ENV] = "1"
    if "--vpp" in sys.argv:
        os.environ[VPP_ENV] = str(ms.flag(sys.argv, "--vpp"))
    distributed = "--distributed-optimizer" in sys.argv
    root = [a for a in sys.argv[1:] if not a.startswith("--")][0]
    os.makedirs(root, exist_ok=True)
    pp = int(os.environ.get(PP_ENV) or 1)  # PP was read on import, before the flags
    mp.spawn(worker, args=(TP * pp * dp, root, 29643, distributed), nprocs=TP * pp * dp, join=True)
