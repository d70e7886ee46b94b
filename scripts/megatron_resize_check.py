"""Megatron-Core's own loader on a checkpoint sanitize-checkpoint resized (issue 49, item 3).

    python scripts/megatron_resize_check.py OLD_ROOT NEW_ROOT TRUE_VOCAB [DIVISIBLE_BY]

OLD_ROOT: the input save root (testdata/megatron/tp2); NEW_ROOT: sanitize-checkpoint's output.
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
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


def model(rows):
    config = TransformerConfig(num_layers=1, hidden_size=ms.HIDDEN, num_attention_heads=2, kv_channels=ms.KV,
                               ffn_hidden_size=ms.FFN, add_bias_linear=False, normalization="RMSNorm",
                               use_cpu_initialization=True, params_dtype=torch.float32,
                               pipeline_dtype=torch.float32)
    return GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                    vocab_size=rows, max_sequence_length=32, position_embedding_type="rope",
                    share_embeddings_and_output_weights=False)


def load(root, rows):
    """`root`'s newest iteration loaded into a GPTModel of `rows` vocabulary rows: its state
    (this rank's TP shards) and the common state."""
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = os.path.join(root, f"iter_{int(f.read().strip()):07d}")
    m = model(rows)
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


if __name__ == "__main__":
    old_root, new_root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    by = int(sys.argv[4]) if len(sys.argv) > 4 else ms.DIVISIBLE_BY
    mp.spawn(worker, args=(2, 29651, old_root, new_root, n, by), nprocs=2, join=True)
    mp.spawn(worker, args=(1, 29652, old_root, new_root, n, by), nprocs=1, join=True)
