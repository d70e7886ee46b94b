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


def build(rows):
    """The GPTModel at TP = 2 with `rows` padded vocabulary rows, bf16, its DDP wrapper and
    Megatron's mixed-precision optimizer (the verifier builds the same with the new size)."""
    config = TransformerConfig(num_layers=1, hidden_size=ms.HIDDEN, num_attention_heads=2, kv_channels=ms.KV,
                               ffn_hidden_size=ms.FFN, add_bias_linear=False, normalization="RMSNorm",
                               use_cpu_initialization=True, params_dtype=torch.bfloat16,
                               pipeline_dtype=torch.bfloat16, bf16=True)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                     vocab_size=rows, max_sequence_length=32, position_embedding_type="rope",
                     share_embeddings_and_output_weights=False)
    ddp = DistributedDataParallel(
        config, DistributedDataParallelConfig(use_distributed_optimizer=False, grad_reduce_in_fp32=True), model)
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=False, bf16=True, fp16=False), [ddp])
    return model, ddp, opt


def legacy_args(rows):
    a = ms.megatron_args(rows)
    a.ckpt_format, a.use_distributed_optimizer = "torch", False
    a.params_dtype, a.bf16, a.no_save_rng = torch.bfloat16, True, True
    return a


def worker(rank, world, root, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP)
    torch.manual_seed(0)
    rows = ms.padded(ms.TRUE_VOCAB, ms.DIVISIBLE_BY, TP)
    model, ddp, opt = build(rows)
    g = torch.Generator().manual_seed(200 + rank)
    for p in ddp.parameters():
        p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=g))
    opt.step()
    state = {
        "args": legacy_args(rows),
        "checkpoint_version": 3.0,
        "iteration": ITERATION,
        "model": model.state_dict_for_save_checkpoint(),
        "optimizer": opt.state_dict(),
        "opt_param_scheduler": {"max_lr": 1e-2, "num_steps": ITERATION * 8},
        "num_floating_point_operations_so_far": 0,
    }
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    d = os.path.join(root, f"iter_{ITERATION:07d}", f"mp_rank_{tp_rank:02d}")
    os.makedirs(d, exist_ok=True)
    torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    dist.barrier()
    if rank == 0:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(ITERATION))
    dist.destroy_process_group()


if __name__ == "__main__":
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    mp.spawn(worker, args=(2, root, 29643), nprocs=2, join=True)
