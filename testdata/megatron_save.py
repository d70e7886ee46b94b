"""Megatron-Core `torch_dist` checkpoint of issue 49 (testdata/megatron/tp2, ~215 KB), written by
megatron-core itself on CPU (`pip install --no-deps megatron-core==0.16.1`): two gloo processes,
tensor parallel size 2, a one-layer GPTModel (local layer spec, RMSNorm, rotary positions, no
biases, untied output layer, hidden 4, 2 heads of 16 channels, ffn 32) with an 84-token vocabulary
(testdata/tokenizers/amharic_addition.json's size) padded to 128 rows (Megatron's rule: a multiple
of make_vocab_size_divisible_by x TP = 64 x 2), one step of Megatron's distributed optimizer (Adam,
`dp_reshardable` state: one flat fp32 bucket per data-parallel group, each
parameter and each alignment gap a chunk of it), saved as Megatron-LM lays out a save root:
`iter_0000010/` (`.metadata`, `__R_K.distcp`, `common.pt`, `metadata.json`) and
`latest_checkpointed_iteration.txt`.

    python testdata/generate.py megatron_files      (runs: python testdata/megatron_save.py ROOT)

Other runs (options: docs/fixtures.md): `ROOT fully_reshardable bf16` is
testdata/megatron/tp2_fully_reshardable and `ROOT dp_reshardable bf16 2 --dp 3 --bucket-size 200`
is testdata/megatron/tp2_pp2_dp3_bf16.

Size: DCP writes every item as its own torch.save record (~1.5 KB of zip framing each, however
small the tensor), so the bytes are the item count: 97 records (72 of them optimizer chunks:
3 states x 12 chunks x 2 TP ranks) and a ~30 KB `.metadata` listing them. One layer is Megatron's
minimum (num_layers=0 divides by zero in its init); no biases, RMSNorm and rotary positions drop
items; the shapes make every parameter a multiple of 64 values (Megatron aligns each parameter in
the bucket to 64, and a gap is one more chunk), except the three norm weights.

Megatron's code calls CUDA in places that do not need a GPU; this script replaces those calls
with CPU equivalents before importing it (torch.cuda.synchronize / current_device, tensors
created with device='cuda', and `Tensor.type()` names, which its distributed optimizer checks).
Nothing else is changed: the tensors, the sharding and the files are Megatron's own.
"""
import argparse, functools, os, sys, warnings
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

warnings.filterwarnings("ignore")
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.current_device = lambda: "cpu"
torch.cuda.Stream = lambda *a, **k: None  # the partial distributed optimizer's stream (--instances)
_type = torch.Tensor.type


def _cuda_type(self, *a, **k):
    t = _type(self, *a, **k)
    if not a and not k and isinstance(t, str) and not t.startswith("torch.cuda."):
        return t.replace("torch.", "torch.cuda.", 1)
    return t


torch.Tensor.type = _cuda_type
# fully_reshardable's save gathers the flat buffers through `.cuda()` tensors (NCCL on a GPU; the
# gloo group here takes CPU tensors).
torch.Tensor.cuda = lambda self, *a, **k: self


def _on_cpu(f):
    @functools.wraps(f)
    def g(*a, **k):
        if str(k.get("device", "")).startswith("cuda"):
            k["device"] = "cpu"
        return f(*a, **k)
    return g


for _n in ("tensor", "zeros", "empty", "ones", "full", "arange"):
    setattr(torch, _n, _on_cpu(getattr(torch, _n)))

from megatron.core import dist_checkpointing, parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.transformer.enums import AttnBackend  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

TRUE_VOCAB, DIVISIBLE_BY, TP, HIDDEN, KV, FFN, ITERATION = 84, 64, 2, 4, 16, 32, 10
HIDDEN_ENV = "CKPT_SURGERY_MEGATRON_HIDDEN"
if os.environ.get(HIDDEN_ENV):  # a bigger model for benches: ffn 4H, two heads of H/2 channels
    HIDDEN = int(os.environ[HIDDEN_ENV])
    KV, FFN = HIDDEN // 2, 4 * HIDDEN


def padded(vocab, divisible_by, tp):
    """Megatron-LM's `_vocab_size_with_padding`."""
    multiple = divisible_by * tp
    return ((vocab + multiple - 1) // multiple) * multiple


def megatron_args(rows, sharding="dp_reshardable", dtype=torch.float32, pp=1, layers=None, first=None, dp=1,
                  bucket=None, tied=False, vpp=1, instances=1):
    """The args Megatron-LM keeps in common.pt (a subset, with the kinds of value it holds:
    ints, strings, bools, a torch dtype, an enum)."""
    args = argparse.Namespace(
        num_layers=layers or pp * vpp, hidden_size=HIDDEN, num_attention_heads=2, kv_channels=KV, ffn_hidden_size=FFN,
        add_bias_linear=False, normalization="RMSNorm", position_embedding_type="rope", seq_length=32,
        max_position_embeddings=32, padded_vocab_size=rows, make_vocab_size_divisible_by=DIVISIBLE_BY,
        tensor_model_parallel_size=TP, pipeline_model_parallel_size=pp, data_parallel_size=dp,
        untie_embeddings_and_output_weights=not tied, tokenizer_type="HuggingFaceTokenizer",
        tokenizer_model="tokenizer.json", vocab_size=None, params_dtype=dtype,
        attention_backend=AttnBackend.auto, ckpt_format="torch_dist", use_distributed_optimizer=True,
        iteration=ITERATION, consumed_train_samples=80,
    )
    if sharding == "fully_reshardable":  # Megatron-LM's --dist-ckpt-optim-fully-reshardable
        args.dist_ckpt_optim_fully_reshardable = True
    if dtype == torch.bfloat16:  # --bf16
        args.bf16 = True
    if first is not None:
        args.decoder_first_pipeline_num_layers = first
    args.overlap_grad_reduce = bucket is not None
    if bucket is not None:
        args.ddp_bucket_size = bucket
    if vpp > 1:  # --num-virtual-stages-per-pipeline-rank
        args.virtual_pipeline_model_parallel_size = vpp
    if instances > 1:  # --num-distributed-optimizer-instances
        args.num_distributed_optimizer_instances = instances
    return args


def model_chunks(config, rows, pp, vpp, tied, dtype, cast=True):
    """The rank's GPTModel, or with virtual pipeline stages (vpp > 1) its model chunks (chunk v
    is virtual stage v x PP + the rank's stage), each as Megatron-LM's get_model builds it
    (cast=False: a bf16 model left as megatron-core builds it, its norm weights fp32)."""
    out = []
    for vp in range(vpp):
        virtual = {"ignore_virtual": False, "vp_stage": vp} if vpp > 1 else {}
        model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                         vocab_size=rows, max_sequence_length=32, position_embedding_type="rope",
                         share_embeddings_and_output_weights=tied,
                         pre_process=parallel_state.is_pipeline_first_stage(**virtual),
                         post_process=parallel_state.is_pipeline_last_stage(**virtual),
                         **({"vp_stage": vp} if vpp > 1 else {}))
        if dtype == torch.bfloat16 and cast:
            # Megatron-LM's Float16Module casts the whole model (its norm weights too) to bf16.
            model = model.bfloat16()
        out.append(model)
    return out


def model_state(chunks):
    """The model part of a save: `model`, or `model0`, `model1`, … for model chunks."""
    if len(chunks) == 1:
        return {"model": chunks[0].sharded_state_dict()}
    return {f"model{i}": c.sharded_state_dict() for i, c in enumerate(chunks)}


def worker(rank, world, root, port, sharding, dtype, pp, layers=None, first=None, dp=1, bucket=None, tied=False,
           vpp=1, cast=True, instances=1):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    partial = {"num_distributed_optimizer_instances": instances} if instances > 1 else {}
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=pp,
                                             virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                                             **partial)
    torch.manual_seed(0)
    rows = padded(TRUE_VOCAB, DIVISIBLE_BY, TP)
    config = TransformerConfig(num_layers=layers or pp * vpp, pipeline_model_parallel_size=pp,
                               virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                               num_layers_in_first_pipeline_stage=first, hidden_size=HIDDEN, num_attention_heads=2, kv_channels=KV,
                               ffn_hidden_size=FFN, add_bias_linear=False, normalization="RMSNorm",
                               use_cpu_initialization=True, params_dtype=dtype,
                               pipeline_dtype=dtype, bf16=dtype == torch.bfloat16)
    chunks = model_chunks(config, rows, pp, vpp, tied, dtype, cast)
    # Megatron-LM's get_model buckets the first model chunk only (disable_bucketing for the rest).
    ddps = [DistributedDataParallel(
        config, DistributedDataParallelConfig(use_distributed_optimizer=True, grad_reduce_in_fp32=True,
                                              overlap_grad_reduce=bucket is not None, bucket_size=bucket,
                                              **partial), model,
        disable_bucketing=i > 0) for i, model in enumerate(chunks)]
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True, bf16=dtype == torch.bfloat16,
                        fp16=False), ddps)
    g = torch.Generator().manual_seed(100 + rank)
    for p in (p for ddp in ddps for p in ddp.parameters()):
        p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=g))
        if getattr(p, "shared_embedding", False):
            # Megatron all-reduces the shared embedding's gradient over the first and last stages
            # (finalize_model_grads), so both copies take the same step: the same gradient here.
            shared = torch.Generator().manual_seed(1000 + parallel_state.get_tensor_model_parallel_rank())
            p.main_grad.copy_(torch.randn(p.main_grad.shape, generator=shared))
    opt.step()
    models = model_state(chunks)
    # As Megatron-LM's generate_state_dict: the optimizer finds its parameters' sharded tensors
    # in the model part (one model, or every chunk's).
    optimizer = opt.sharded_state_dict(models["model"] if vpp == 1 else models,
                                       metadata={"distrib_optim_sharding_type": sharding})
    state = {
        "args": megatron_args(rows, sharding, dtype, pp, layers, first, dp, bucket, tied, vpp, instances),
        "checkpoint_version": 3.0,
        "iteration": ITERATION,
        **models,
        "optimizer": optimizer,
        "opt_param_scheduler": {"max_lr": 1e-2, "num_steps": ITERATION * 8},
        "num_floating_point_operations_so_far": 0,
    }
    it = os.path.join(root, f"iter_{ITERATION:07d}")
    if rank == 0:
        os.makedirs(it, exist_ok=True)
    dist.barrier()
    dist_checkpointing.save(state, it)
    if rank == 0:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(ITERATION))
    dist.destroy_process_group()


def flag(argv, name):
    """The int after `name` in `argv` (both removed), or None."""
    if name not in argv:
        return None
    i = argv.index(name)
    value = int(argv[i + 1])
    del argv[i:i + 2]
    return value


if __name__ == "__main__":
    layers = flag(sys.argv, "--layers")
    first = flag(sys.argv, "--first-stage-layers")
    dp = flag(sys.argv, "--dp") or 1
    bucket = flag(sys.argv, "--bucket-size")
    vpp = flag(sys.argv, "--vpp") or 1
    instances = flag(sys.argv, "--instances") or 1
    cast = "--fp32-norms" not in sys.argv
    if not cast:
        sys.argv.remove("--fp32-norms")
    tied = "--tied" in sys.argv
    if tied:
        sys.argv.remove("--tied")
    if "--hidden" in sys.argv:  # read on import, by every spawned process too
        os.environ[HIDDEN_ENV] = str(flag(sys.argv, "--hidden"))
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    sharding = sys.argv[2] if len(sys.argv) > 2 else "dp_reshardable"
    dtype = torch.bfloat16 if sys.argv[3:4] == ["bf16"] else torch.float32
    pp = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    world = TP * pp * dp
    mp.spawn(worker, args=(world, root, 29641, sharding, dtype, pp, layers, first, dp, bucket, tied, vpp, cast, instances),
             nprocs=world, join=True)
