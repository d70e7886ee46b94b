"""Megatron-Core's own loader on a checkpoint sanitize-checkpoint resized (issue 49, item 3).

    python scripts/megatron_resize_check.py OLD_ROOT NEW_ROOT TRUE_VOCAB [DIVISIBLE_BY]
    python scripts/megatron_resize_check.py --optimizer OLD_ROOT NEW_ROOT TRUE_VOCAB [DIVISIBLE_BY]
    python scripts/megatron_resize_check.py --optimizer --sharding fully_reshardable --bf16 OLD NEW N

--optimizer: NEW_ROOT keeps the distributed optimizer's dp_reshardable state (see the end of
this file): loaded with Megatron's own model + optimizer path at TP = 2 and tried at TP = 1.
--sharding fully_reshardable: both roots hold that layout instead (testdata/megatron/
tp2_fully_reshardable); Megatron reshards it over TP, so TP = 1 must load too.
--bf16: the runs are bf16 (bf16 weights, fp32 main copies: that fixture's).
--pp N (with --optimizer): the runs have N pipeline stages of one layer each
(`testdata/megatron_save.py ROOT fully_reshardable bf16 N`); each stage checks the vocabulary
matrix it holds, at TP = 2 (2 x N processes) and TP = 1 (N processes). --layers L
[--first-stage-layers K]: the runs' layer count and first stage's share of them; --dp N: the
runs' data-parallel replicas, TP x PP x N processes; --bucket-size N: the runs'
overlap_grad_reduce bucket_size (`megatron_save.py ROOT SHARDING DTYPE PP
--layers L --first-stage-layers K --dp N`); --tied: the runs share the embedding with the output
layer (`megatron_save.py ... --tied`; with --pp the last stage's output layer is checked as its
copy); --vpp V: each rank holds V model chunks (virtual pipeline stages, `megatron_save.py ...
--vpp V`: chunk v of stage s is virtual stage v x PP + s, one layer each by default; only the
first chunk is bucketed, as Megatron-LM's get_model does); --fp32-norms (with --bf16): the runs
keep megatron-core's fp32 norm weights beside bf16 matrices (`megatron_save.py ... bf16
--fp32-norms`: two buffers per model chunk, one per dtype); --instances N (with --dp): N
distributed optimizer instances (`megatron_save.py ... --dp D --instances N`).

OLD_ROOT: the input save root (testdata/megatron/tp2); NEW_ROOT: sanitize-checkpoint's output
(a save made with `megatron_save.py --hidden H`: set CKPT_SURGERY_MEGATRON_HIDDEN=H here too).
Builds megatron-core's GPTModel (testdata/megatron_save.py's config) with the new padded
vocabulary and loads NEW_ROOT with `dist_checkpointing.load` (strict: every key of the model
present: a missing key fails the load; the strict modes read the tensors metadata
through a torch.empty(strides=...) call that this torch rejects, for the input as for the output) at TP = 2 (two gloo processes, the saved split) and at TP = 1 (one
process: Megatron reshards the row chunks), and OLD_ROOT into a model of the old size the same
way; then checks: the old rows bit for bit, the new rows as planned (every new row equal: one
mean row), every other parameter bit-identical, common.pt's args padded_vocab_size updated and
no optimizer state left (`--optimizer drop`). Needs megatron-core 0.16.1 (/work/venv) and runs on
CPU, with megatron_save.py's CPU stand-ins for CUDA calls.
"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testdata"))
import megatron_save as ms  # noqa: E402  (its CUDA stand-ins apply on import)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from megatron.core import dist_checkpointing, parallel_state  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


DTYPE = [torch.float32]  # torch.bfloat16 with --bf16 (the fully_reshardable fixture's run)
PP = [1]  # --pp N: the run's pipeline stages (--optimizer only)
LAYERS = [None, None]  # --layers L, --first-stage-layers K (default: one layer per stage)
DP = [1]  # --dp N: data-parallel replicas (--optimizer only)
BUCKET = [None]  # --bucket-size N: overlap_grad_reduce with that bucket_size (--optimizer only)
TIED = [False]  # --tied: the embedding shared with the output layer (--optimizer only)
VPP = [1]  # --vpp V: model chunks per pipeline rank, virtual pipeline stages (--optimizer only)
CAST = [True]  # False with --fp32-norms: bf16 weights but fp32 norm weights (--optimizer only)
INSTANCES = [1]  # --instances N: distributed optimizer instances (--optimizer only)


def partial():
    """The runs' distributed optimizer instances, as megatron-core's settings (none for one)."""
    return {"num_distributed_optimizer_instances": INSTANCES[0]} if INSTANCES[0] > 1 else {}


def chunks(rows):
    """The rank's model chunks (one without --vpp), as `megatron_save.py --vpp` builds them."""
    dtype, pp, vpp = DTYPE[0], PP[0], VPP[0]
    config = TransformerConfig(num_layers=LAYERS[0] or pp * vpp, pipeline_model_parallel_size=pp,
                               virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                               num_layers_in_first_pipeline_stage=LAYERS[1], hidden_size=ms.HIDDEN, num_attention_heads=2, kv_channels=ms.KV,
                               ffn_hidden_size=ms.FFN, add_bias_linear=False, normalization="RMSNorm",
                               use_cpu_initialization=True, params_dtype=dtype, pipeline_dtype=dtype,
                               bf16=dtype == torch.bfloat16)
    return ms.model_chunks(config, rows, pp, vpp, TIED[0], dtype, CAST[0])


def load(root, rows):
    """`root`'s newest iteration loaded into a GPTModel of `rows` vocabulary rows: its state
    (this rank's TP shards) and the common state."""
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = os.path.join(root, f"iter_{int(f.read().strip()):07d}")
    (m,) = chunks(rows)  # without --optimizer: one model (no --vpp)
    loaded = dist_checkpointing.load(m.sharded_state_dict(), it)
    m.load_state_dict(loaded, strict=False)
    common = dist_checkpointing.load_common_state_dict(it)
    return {k: v.detach().clone() for k, v in m.state_dict().items() if torch.is_tensor(v)}, common


def check(tp, rank, old_root, new_root, n, by):
    old_rows = ms.padded(ms.TRUE_VOCAB, by, ms.TP)
    new_rows = ms.padded(n, by, ms.TP)
    old, _ = load(old_root, old_rows)
    new, common = load(new_root, new_rows)
    per_old, per_new = old_rows // tp, new_rows // tp
    for name in VOCAB:
        a, b = old[name], new[name]
        assert b.shape == (per_new, ms.HIDDEN), (name, b.shape)
        # Global rows: this rank holds new rows [rank*per_new, (rank+1)*per_new).
        lo, hi = rank * per_new, (rank + 1) * per_new
        gathered_old = [None] * tp
        dist.all_gather_object(gathered_old, a)
        whole_old = torch.cat(gathered_old)
        assert whole_old.shape[0] == old_rows and a.shape[0] == per_old
        for r in range(lo, min(hi, old_rows)):
            assert torch.equal(b[r - lo].view(torch.int32), whole_old[r].view(torch.int32)), (name, r)
        fresh = b[max(old_rows, lo) - lo:] if hi > old_rows else b[:0]
        if len(fresh):
            assert torch.equal(fresh, fresh[:1].expand_as(fresh)), (name, "new rows differ")
            mean = whole_old.double().mean(0).float()
            assert torch.allclose(fresh[0], mean, atol=1e-6), (name, fresh[0], mean)
    for k in old:
        if k not in VOCAB and not k.endswith("_extra_state"):
            assert torch.equal(old[k], new[k]), k
    args = common["args"]
    assert args.padded_vocab_size == new_rows, args.padded_vocab_size
    assert "optimizer" not in common
    print(f"TP={tp} rank {rank}: {VOCAB} {old_rows}->{new_rows} rows: old rows bit-identical, "
          f"new rows one mean row, other parameters bit-identical, args.padded_vocab_size={new_rows}: OK")


def worker(rank, tp, port, old_root, new_root, n, by):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=tp)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    check(tp, rank, old_root, new_root, n, by)
    dist.destroy_process_group()




# --- The distributed optimizer (`--optimizer`): OLD_ROOT and NEW_ROOT both hold dp_reshardable
# state; each is loaded into a GPTModel + DistributedOptimizer built at its own vocabulary size
# through Megatron-LM's own path (model.sharded_state_dict, optimizer.sharded_state_dict(
# is_loading=True), dist_checkpointing.load, model.load_state_dict, optimizer.load_state_dict).

STATES = ("param", "exp_avg", "exp_avg_sq")


SHARDING = ["dp_reshardable"]


def load_with_optimizer(root, rows):
    """Per vocabulary matrix and every other parameter: this rank's weight and its optimizer
    states after Megatron's own load."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = os.path.join(root, f"iter_{int(f.read().strip()):07d}")
    cs = chunks(rows)
    # Megatron-LM's get_model: only the first model chunk is bucketed.
    ddps = [DistributedDataParallel(
        m.config, DistributedDataParallelConfig(use_distributed_optimizer=True, grad_reduce_in_fp32=True,
                                                overlap_grad_reduce=BUCKET[0] is not None, bucket_size=BUCKET[0],
                                                **partial()), m,
        disable_bucketing=i > 0) for i, m in enumerate(cs)]
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True,
                        bf16=DTYPE[0] == torch.bfloat16, fp16=False), ddps)
    # Without apex / Transformer Engine (CPU) the optimizer's state_dict needs Adam's state to
    # exist (a 'step' per parameter); placeholders, all overwritten by the load.
    for o in getattr(opt, "chained_optimizers", [opt]):
        for g in o.optimizer.param_groups:
            for p in g["params"]:
                o.optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                        "exp_avg_sq": torch.zeros_like(p)}
    models = ms.model_state(cs)
    optim_sd = opt.sharded_state_dict(models["model"] if len(cs) == 1 else models, is_loading=True,
                                      metadata={"distrib_optim_sharding_type": SHARDING[0]})
    sd = dist_checkpointing.load({**models, "optimizer": optim_sd}, it)
    for m, key in zip(cs, models):
        m.load_state_dict(sd[key], strict=False)
    if SHARDING[0] == "fully_reshardable":
        keep_torch_adam_step(opt)
    with torch.no_grad():  # as in training: the main params are views of leaf parameters
        opt.load_state_dict(sd["optimizer"])
    (dopt,) = getattr(opt, "chained_optimizers", [opt])
    if DP[0] > 1:
        # Each replica holds a shard of each bucket, not whole parameters: the load (Megatron's
        # own size assertions, DCP reading the shard's chunks) is the check; this layout
        # reshards over DP, so the values are compared with --dp 1.
        return {}
    out = {}
    for key, m in zip(models, cs):
        for name, p in m.named_parameters():
            st = dopt._get_main_param_and_optimizer_states(p)
            # A chunk's layers are numbered from 0: named by chunk beside the vocabulary matrices.
            at = name if name in VOCAB or len(cs) == 1 else f"{key}.{name}"
            out[at] = {"weight": p.detach().clone(), **{s: st[s].detach().clone().view(p.shape) for s in STATES}}
    return out


def keep_torch_adam_step(opt):
    """megatron-core 0.16.1's fully_reshardable load copies the loaded states into every state
    a parameter has, and loads no per-parameter step (apex/TE's FusedAdam on a GPU keeps none):
    with torch's Adam (CPU, no apex/TE) the 'step' Adam keeps per parameter is a KeyError, for
    an unmodified save too. The step is loaded from param_groups before that; keep it."""
    for dopt in getattr(opt, "chained_optimizers", [opt]):
        orig = dopt._set_main_param_and_optimizer_states

        def set_states(model_param, tensors, orig=orig, dopt=dopt):
            now = dopt._get_main_param_and_optimizer_states(model_param)
            if "step" in now and "step" not in tensors:
                tensors = {**tensors, "step": now["step"].clone()}
            return orig(model_param, tensors)

        dopt._set_main_param_and_optimizer_states = set_states


def gathered(t, tp):
    parts = [None] * tp
    dist.all_gather_object(parts, t, group=parallel_state.get_tensor_model_parallel_group())
    return torch.cat(parts)


def bits(t):
    return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def check_optimizer(tp, rank, old_root, new_root, n, by):
    old_rows, new_rows = ms.padded(ms.TRUE_VOCAB, by, ms.TP), ms.padded(n, by, ms.TP)
    old, new = load_with_optimizer(old_root, old_rows), load_with_optimizer(new_root, new_rows)
    keep = min(old_rows, new_rows)
    for name in [v for v in VOCAB if v in new]:  # with --pp: the first / last stage's
        o = {k: gathered(v, tp) for k, v in old[name].items()}
        w = {k: gathered(v, tp) for k, v in new[name].items()}
        assert w["weight"].shape == (new_rows, ms.HIDDEN), (name, w["weight"].shape)
        for s in STATES:
            assert torch.equal(bits(w[s][:keep]), bits(o[s][:keep])), (name, s, "old rows differ")
        if new_rows > old_rows:
            assert not w["exp_avg"][old_rows:].any() and not w["exp_avg_sq"][old_rows:].any(), (name, "new moments")
            # The new rows were loaded, not left at the model's own init: one mean row (--init mean).
            fresh = w["weight"][old_rows:]
            assert torch.equal(fresh, fresh[:1].expand_as(fresh)), (name, "new rows differ")
            mean = o["weight"].double().mean(0)
            tol = 1e-6 if fresh.dtype == torch.float32 else 2 ** -8
            assert torch.allclose(fresh[0].double(), mean, rtol=tol, atol=1e-9), (name, fresh[0], mean)
        if w["weight"].dtype == torch.float32:
            assert torch.equal(bits(w["param"]), bits(w["weight"])), (name, "main params != weights")
        else:  # bf16 weights, fp32 main copies: the new ones exactly the weights, all rounding to them
            assert torch.equal(w["param"][old_rows:], w["weight"][old_rows:].float()), (name, "new main params")
            assert torch.equal(w["param"].to(w["weight"].dtype), w["weight"]), (name, "main params != weights")
    for k in old:
        if k not in VOCAB:
            # The norm weights are replicated over TP: the model item holds rank 0's replica and
            # each rank's bucket its own main copy, loaded into the same storage (the fp32 main
            # param is a view of the weight), so which one a rank ends with depends on the order
            # DCP reads the files. The fixture's one fake step (other random grads on each rank)
            # made the replicas differ, which a real run (same grads on every TP rank) does not:
            # their weight and main param are not compared, their moments are.
            replicated = "norm" in k
            for s in (STATES[1:] if replicated else ("weight",) + STATES):
                assert torch.equal(bits(old[k][s]), bits(new[k][s])), (k, s, old[k], new[k])
    with open(os.path.join(new_root, "latest_checkpointed_iteration.txt")) as f:
        it = os.path.join(new_root, f"iter_{int(f.read().strip()):07d}")
    args = dist_checkpointing.load_common_state_dict(it)["args"]
    assert args.padded_vocab_size == new_rows, args.padded_vocab_size
    if DP[0] > 1:
        print(f"TP={tp} DP={DP[0]} rank {rank} optimizer ({SHARDING[0]}): {old_rows}->{new_rows} rows: "
              f"loaded by Megatron (its per-bucket size assertions, each replica's shard), "
              f"args.padded_vocab_size={new_rows} (values: --dp 1): OK")
        return
    print(f"TP={tp} rank {rank} optimizer ({SHARDING[0]}): {VOCAB} {old_rows}->{new_rows} rows: param/exp_avg/exp_avg_sq of the "
          f"old rows bit-identical, new rows one mean row with moments zero, main params == weights, "
          f"args.padded_vocab_size={new_rows}, every other parameter's "
          f"weight and states bit-identical (TP-replicated norms: moments): OK")


def worker_optimizer(rank, tp, port, old_root, new_root, n, by, sharding, dtype, pp, layers, dp, bucket, tied, vpp,
                     cast, instances):
    SHARDING[0], DTYPE[0], PP[0], LAYERS[:], DP[0], BUCKET[0], TIED[0] = sharding, dtype, pp, layers, dp, bucket, tied
    VPP[0], CAST[0], INSTANCES[0] = vpp, cast, instances
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=tp * pp * dp)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                             virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                                             **partial())
    try:
        check_optimizer(tp, rank, old_root, new_root, n, by)
    except AssertionError:
        raise
    except BaseException as e:  # noqa: B036  Megatron refusing (TP=1: dp_reshardable reshards DP only); torch DCP raises a BaseException
        if tp == ms.TP or sharding == "fully_reshardable":
            raise
        print(f"TP={tp} rank {rank} optimizer: Megatron's loader refuses: {type(e).__name__}: {str(e).splitlines()[-1][:300]}")
    dist.destroy_process_group()


def main_optimizer(old_root, new_root, n, by, sharding, dtype, pp, layers, dp, bucket, tied, vpp, cast, instances):
    args = (old_root, new_root, n, by, sharding, dtype, pp, layers, dp, bucket, tied, vpp, cast, instances)
    mp.spawn(worker_optimizer, args=(2, 29653, *args), nprocs=2 * pp * dp, join=True)
    if sharding == "fully_reshardable" or dp == 1:
        # dp_reshardable does not reshard over TP (refused at TP = 1 by design); with DP > 1
        # and tiny buckets Megatron's own sharded_state_dict may assert an empty bucket there.
        mp.spawn(worker_optimizer, args=(1, 29654, *args), nprocs=pp * dp, join=True)


if __name__ == "__main__":
    optimizer = "--optimizer" in sys.argv
    dtype = torch.bfloat16 if "--bf16" in sys.argv else torch.float32
    tied = "--tied" in sys.argv
    cast = "--fp32-norms" not in sys.argv
    argv = [a for a in sys.argv[1:] if a not in ("--optimizer", "--bf16", "--tied", "--fp32-norms")]
    sharding, pp = "dp_reshardable", 1
    if "--sharding" in argv:
        i = argv.index("--sharding")
        sharding = argv[i + 1]
        del argv[i:i + 2]
    if "--pp" in argv:
        i = argv.index("--pp")
        pp = int(argv[i + 1])
        del argv[i:i + 2]
    layers, dp, bucket = [None, None], 1, None
    if "--dp" in argv:
        i = argv.index("--dp")
        dp = int(argv[i + 1])
        del argv[i:i + 2]
    if "--bucket-size" in argv:
        i = argv.index("--bucket-size")
        bucket = int(argv[i + 1])
        del argv[i:i + 2]
    instances = 1
    if "--instances" in argv:
        i = argv.index("--instances")
        instances = int(argv[i + 1])
        del argv[i:i + 2]
    vpp = 1
    if "--vpp" in argv:
        i = argv.index("--vpp")
        vpp = int(argv[i + 1])
        del argv[i:i + 2]
    for j, flag in enumerate(("--layers", "--first-stage-layers")):
        if flag in argv:
            i = argv.index(flag)
            layers[j] = int(argv[i + 1])
            del argv[i:i + 2]
    old_root, new_root, n = argv[0], argv[1], int(argv[2])
    by = int(argv[3]) if len(argv) > 3 else ms.DIVISIBLE_BY
    if optimizer:
        main_optimizer(old_root, new_root, n, by, sharding, dtype, pp, layers, dp, bucket, tied, vpp, cast, instances)
    else:
        mp.spawn(worker, args=(2, 29651, old_root, new_root, n, by), nprocs=2, join=True)
        mp.spawn(worker, args=(1, 29652, old_root, new_root, n, by), nprocs=1, join=True)
