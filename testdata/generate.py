#!/usr/bin/env python3
"""Writes the committed test fixtures with the real tools (torch, safetensors, transformers).

Run from the repository root:  python3 testdata/generate.py
Needs: pip install torch safetensors transformers  (tokenizers/sentencepiece fixtures come later).
Everything is seeded, so a re-run gives the same tensors. Keep the total under 20 MB.
Re-running may still change some bytes: the safetensors writer orders `__metadata__` keys through a
hash map, and torch.save writes a random serialization id. Commit regenerated files only on purpose.
"""
import json
import os
import shutil
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def out(*parts):
    p = os.path.join(HERE, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def fresh_dir(name):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def describe(path):
    """What the reference reader reports: name -> dtype, shape, plus metadata."""
    tensors = {}
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        for name in f.keys():
            s = f.get_slice(name)
            tensors[name] = {"dtype": s.get_dtype(), "shape": list(s.get_shape())}
    return {"metadata": meta, "tensors": tensors}


def chatterbox_t3():
    """A Chatterbox-T3-like checkpoint: text vocabulary 2454 (untied head), speech table 8194,
    and the Llama backbone's unused 8-row embed_tokens that must never be taken for a vocabulary."""
    d = fresh_dir("chatterbox_t3")
    g = torch.Generator().manual_seed(2454)
    dim = 64
    tensors = {
        "text_emb.weight": torch.randn(2454, dim, generator=g) * 0.02,
        "text_head.weight": torch.randn(2454, dim, generator=g) * 0.02,
        "speech_emb.weight": torch.randn(8194, dim, generator=g) * 0.02,
        "tfmr.embed_tokens.weight": torch.randn(8, dim, generator=g) * 0.02,
        "text_pos_emb.emb.weight": torch.randn(130, dim, generator=g) * 0.02,
        "tfmr.layers.0.self_attn.q_proj.weight": torch.randn(dim, dim, generator=g) * 0.02,
        "tfmr.layers.0.mlp.up_proj.weight": torch.randn(2 * dim, dim, generator=g) * 0.02,
        "tfmr.norm.weight": torch.ones(dim),
    }
    meta = {"format": "pt", "model": "t3-like fixture"}
    save_file(tensors, os.path.join(d, "t3_f32.safetensors"), metadata=meta)
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()},
              os.path.join(d, "t3_bf16.safetensors"), metadata=meta)
    for name in ("t3_f32", "t3_bf16"):
        with open(os.path.join(d, name + ".expected.json"), "w") as f:
            json.dump(describe(os.path.join(d, name + ".safetensors")), f, indent=1, sort_keys=True)


def gpt2():
    """A GPT-2-like model saved by transformers' save_pretrained: tied head, config.json, in
    single-file and 2-shard forms, each with what safe_open reports."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(50257)
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=999, eos_token_id=999)
    model = GPT2LMHeadModel(config)
    single = fresh_dir("gpt2")
    model.save_pretrained(single, safe_serialization=True)
    sharded = fresh_dir("gpt2_sharded")
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="450KB")
    shards = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors"))
    if len(shards) != 2:
        sys.exit(f"expected 2 shards, transformers wrote {len(shards)}: adjust max_shard_size")
    with open(os.path.join(single, "expected.json"), "w") as f:
        json.dump(describe(os.path.join(single, "model.safetensors")), f, indent=1, sort_keys=True)
    merged = {"metadata": None, "tensors": {}}
    for s in shards:
        merged["tensors"].update(describe(os.path.join(sharded, s))["tensors"])
    with open(os.path.join(sharded, "expected.json"), "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)

    # The same model as torch shards with pytorch_model.bin.index.json, the way transformers < 5
    # wrote it (transformers 5 always writes safetensors): same grouping, torch.save per shard.
    bin_dir = fresh_dir("gpt2_bin_sharded")
    index = json.load(open(os.path.join(sharded, "model.safetensors.index.json")))
    sd = model.state_dict()
    weight_map = {}
    for s in shards:
        name = s.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
        keys = sorted(k for k, v in index["weight_map"].items() if v == s)
        torch.save({k: sd[k].contiguous() for k in keys}, os.path.join(bin_dir, name))
        weight_map.update({k: name for k in keys})
    with open(os.path.join(bin_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": index["metadata"], "weight_map": weight_map}, f, indent=2)
    shutil.copy(os.path.join(sharded, "config.json"), bin_dir)
    gpt2_tokenizer()


def gpt2_tokenizer():
    """The GPT-2 folder's tokenizer, as transformers saves one: a byte-level BPE trained on
    english.txt to 999 tokens plus <|endoftext|> at 999 (config's bos/eos), and an addition of
    new words for merge-tokenizers (one per line) that the folder test merges and grows into."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=999, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    lines = open(os.path.join(HERE, "tokenizers", "english.txt"), encoding="utf-8").read().splitlines()
    tok.train_from_iterator(lines, trainer)
    assert tok.get_vocab_size() == 999, tok.get_vocab_size()
    tok.add_special_tokens(["<|endoftext|>"])
    assert tok.token_to_id("<|endoftext|>") == 999
    t = GPT2TokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                          unk_token="<|endoftext|>")
    t.save_pretrained(os.path.join(HERE, "gpt2"))
    words = ["checkpoint", "surgery", "safetensors", "tokenizer", "embedding", "Amharic", "vocabulary"]
    with open(os.path.join(HERE, "tokenizers", "gpt2_addition.txt"), "w", encoding="utf-8") as f:
        f.write("".join(w + "\n" for w in words if tok.token_to_id(w) is None))


def header_bytes(obj):
    text = json.dumps(obj, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def broken():
    """Files every reader must refuse with a clear message (exit 2), starting from real ones."""
    d = fresh_dir("broken")
    good = os.path.join(d, "_good.safetensors")
    g = torch.Generator().manual_seed(3)
    save_file({"a": torch.randn(4, 4, generator=g), "b": torch.randn(3, generator=g)}, good,
              metadata={"format": "pt"})
    data = open(good, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    body = data[8 + n:]
    os.remove(good)

    def write(name, blob):
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)

    write("truncated.safetensors", data[:-10])
    write("header_past_end.safetensors", struct.pack("<Q", len(data) + 1000) + data[8:])
    write("header_too_large.safetensors", struct.pack("<Q", 200_000_000) + data[8:])
    write("trailing_bytes.safetensors", data + b"\0" * 16)
    # Overlap: b starts inside a.
    write("overlapping_offsets.safetensors", header_bytes({
        "a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [60, 72]},
    }) + body[:72])
    write("gap_between_tensors.safetensors", header_bytes({
        "a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [68, 80]},
    }) + body + b"\0" * 8)
    write("size_mismatch.safetensors", header_bytes({
        "a": {"dtype": "F32", "shape": [4, 5], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [64, 76]},
    }) + body)
    write("unknown_dtype.safetensors", header_bytes({
        "a": {"dtype": "F24", "shape": [4, 4], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [64, 76]},
    }) + body)
    # Duplicate names: json.dumps cannot write them, so splice the text.
    dup = (b'{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},'
           b'"a":{"dtype":"F32","shape":[3],"data_offsets":[64,76]}}')
    dup += b" " * (-len(dup) % 8)
    write("duplicate_names.safetensors", struct.pack("<Q", len(dup)) + dup + body)
    # Non-UTF-8: a Latin-1 byte inside the metadata value.
    bad = b'{"__metadata__":{"format":"p\xe9"},"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},' \
          b'"b":{"dtype":"F32","shape":[3],"data_offsets":[64,76]}}'
    bad += b" " * (-len(bad) % 8)
    write("non_utf8_header.safetensors", struct.pack("<Q", len(bad)) + bad + body)
    write("empty.safetensors", b"")
    write("not_a_checkpoint.safetensors", b"hello, this is a text file and not a checkpoint\n")

    # Sharded sets whose index and shards disagree.
    def shard_set(name, index, shards):
        sd = os.path.join(d, name)
        os.makedirs(sd)
        for fname, tensors in shards.items():
            save_file(tensors, os.path.join(sd, fname))
        with open(os.path.join(sd, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)

    x = torch.zeros(2, 2)
    shard_set("sharded_missing_tensor",
              {"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors",
                                               "z": "s2.safetensors"}},
              {"s1.safetensors": {"x": x}, "s2.safetensors": {"y": x}})
    shard_set("sharded_tensor_in_two_shards",
              {"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}},
              {"s1.safetensors": {"x": x}, "s2.safetensors": {"x": x.clone(), "y": x}})


def tensor_sha(t):
    """sha256 of a tensor's elements laid out contiguously, as torch itself holds them."""
    import hashlib
    flat = t.detach().reshape(-1).contiguous()
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest() if flat.numel() else \
        hashlib.sha256(b"").hexdigest()


def canonical(v, path, tensors):
    """The non-tensor tree in a form the Rust tests rebuild: tensors become {"tensor": path}."""
    import argparse
    from collections import OrderedDict
    join = lambda k: f"{path}.{k}" if path else str(k)
    if isinstance(v, torch.Tensor):
        tensors[path] = {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
                         "sha256": tensor_sha(v)}
        return {"tensor": path}
    if v is None or isinstance(v, bool) or isinstance(v, str):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, (dict, OrderedDict)):
        return {"dict": [[canonical(k, "", {}), canonical(x, join(key_text(k)), tensors)]
                         for k, x in v.items()]}
    if isinstance(v, list):
        return [canonical(x, join(i), tensors) for i, x in enumerate(v)]
    if isinstance(v, tuple):
        return {"tuple": [canonical(x, join(i), tensors) for i, x in enumerate(v)]}
    if isinstance(v, (set, frozenset)):
        return {"set": sorted(json.dumps(canonical(x, "", {}), sort_keys=True) for x in v)}
    if isinstance(v, argparse.Namespace):
        return {"object": "argparse.Namespace",
                "state": {"dict": [[k, canonical(x, join(k), tensors)] for k, x in vars(v).items()]}}
    raise TypeError(f"no canonical form for {type(v)} at {path}")


def key_text(k):
    if isinstance(k, bool):
        return "True" if k else "False"
    return str(k)


def expected_torch(path, obj):
    tensors = {}
    tree = canonical(obj, "", tensors)
    with open(path, "w") as f:
        json.dump({"tree": tree, "tensors": tensors}, f, indent=1, sort_keys=True)


def tiny_model():
    import torch.nn as nn

    class TinyT3(nn.Module):
        def __init__(self):
            super().__init__()
            self.text_emb = nn.Embedding(100, 16)
            self.layer = nn.Linear(16, 16)
            self.text_head = nn.Linear(16, 100)
    return TinyT3()


def torch_files():
    """torch.save'd state dict (many dtypes, views), a training checkpoint after 3 real AdamW
    steps, the same in the legacy format, each with expected tensors and tree."""
    import argparse
    d = fresh_dir("torch")
    torch.manual_seed(1950)
    model = tiny_model()
    sd = model.state_dict()
    base = torch.randn(4, 6)
    sd["extra.bf16"] = torch.randn(3, 5).to(torch.bfloat16)
    sd["extra.f16"] = torch.randn(7).to(torch.float16)
    sd["extra.ids"] = torch.tensor([1, -2, 3, 2**40, -(2**62)], dtype=torch.int64)
    sd["extra.mask"] = torch.tensor([True, False, True, True, False, False])
    sd["extra.transposed"] = base.t()             # a non-contiguous view
    sd["extra.rows"] = base[1:3]                  # two views of one storage
    sd["extra.column"] = base[:, 2]
    sd["extra.scalar"] = torch.tensor(3.5)
    torch.save(sd, os.path.join(d, "state_dict.pt"))
    expected_torch(os.path.join(d, "state_dict.expected.json"), sd)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ids = torch.randint(0, 100, (4, 8))
    for _ in range(3):
        x = model.layer(model.text_emb(ids))
        loss = torch.nn.functional.cross_entropy(model.text_head(x).reshape(-1, 100), ids.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "step": 3, "args": argparse.Namespace(lr=1e-3, vocab=100, name="tiny"),
            "note": b"bytes\x00\xff", "tags": {"a", "b"}, "big": 2**70}
    # A tied head: both names hold one Parameter, so torch writes one storage for both.
    tied = tiny_model()
    tied.text_head.weight = tied.text_emb.weight
    torch.save(tied.state_dict(), os.path.join(d, "tied_state_dict.pt"))
    torch.save(ckpt, os.path.join(d, "train_ckpt.pt"))
    torch.save(ckpt, os.path.join(d, "train_ckpt_legacy.pt"), _use_new_zipfile_serialization=False)
    expected_torch(os.path.join(d, "train_ckpt.expected.json"), ckpt)


def vocab_model(rows, dim, buffer=False):
    import torch.nn as nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.text_emb = nn.Embedding(rows, dim)
            self.layer = nn.Linear(dim, dim)
            self.text_head = nn.Linear(dim, rows)
            if buffer:
                self.register_buffer("position_ids", torch.arange(8))
    return Tiny()


def train_steps(model, opt, sched, rows, steps=3):
    ids = torch.randint(0, rows, (2, 6))
    for _ in range(steps):
        x = model.layer(model.text_emb(ids))
        loss = torch.nn.functional.cross_entropy(model.text_head(x).reshape(-1, rows), ids.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def sanitize_files():
    """Training checkpoints for sanitize-checkpoint: seed 001 (24001 rows, AdamW, LambdaLR), the
    seed-000 direction (2454 rows, SGD+momentum, StepLR, zip and legacy), a NaN in a moment, and an
    ambiguous one (a buffer breaks positional matching; embedding and head share a shape)."""
    import argparse
    d = fresh_dir("sanitize")
    expected = {}

    def save(name, model, opt, sched, legacy=False, **extra):
        ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "step": 3, **extra}
        torch.save(ckpt, os.path.join(d, name), _use_new_zipfile_serialization=not legacy)
        names = [n for n, _ in model.named_parameters()]
        groups = opt.state_dict()["param_groups"]
        idx = [i for g in groups for i in g["params"]]
        expected[name] = {"params": {str(i): "model." + n for i, n in zip(idx, names)}}

    torch.manual_seed(1)
    m = vocab_model(24001, 4)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1.0 / (1 + step))
    train_steps(m, o, s, 24001)
    save("adamw_24001.pt", m, o, s, args=argparse.Namespace(vocab=24001))

    torch.manual_seed(2)
    m = vocab_model(2454, 8)
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    s = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
    train_steps(m, o, s, 2454)
    save("sgd_2454.pt", m, o, s)
    save("sgd_2454_legacy.pt", m, o, s, legacy=True)

    torch.manual_seed(3)
    m = vocab_model(100, 4)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.StepLR(o, step_size=2)
    train_steps(m, o, s, 100)
    o.state[m.layer.weight]["exp_avg"][0, 1] = float("nan")
    save("nan_moment.pt", m, o, s)

    torch.manual_seed(4)
    m = vocab_model(100, 4, buffer=True)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.StepLR(o, step_size=2)
    train_steps(m, o, s, 100)
    save("ambiguous.pt", m, o, s)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)


def resume_files():
    """Training checkpoints sanitize-checkpoint must grow so that they resume: every torch.optim
    optimizer that keeps per-parameter tensors (and Adafactor, torch's and transformers'), a tied
    GPT-2 + AdamW (zip and legacy), an EMA copy of the model, a PyTorch Lightning layout. Each is
    an embedding [30, 8] + head [30, 8] model trained 2 steps; expected.json lists every state entry."""
    import copy
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.optimization import Adafactor as HFAdafactor
    d = fresh_dir("resume")
    expected = {}

    def describe_opt(opt_sd):
        return {str(i): {k: (list(v.shape) if isinstance(v, torch.Tensor) else repr(v))
                         for k, v in st.items()} for i, st in opt_sd["state"].items()}

    optimizers = {
        "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
        "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True),
        "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2, initial_accumulator_value=0.1),
        "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-2),
        "radam": lambda ps: torch.optim.RAdam(ps, lr=1e-2),
        "rmsprop_centered": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, centered=True, momentum=0.9),
        "adamax": lambda ps: torch.optim.Adamax(ps, lr=1e-2),
        "adadelta": lambda ps: torch.optim.Adadelta(ps, lr=1.0),
        "adafactor_torch": lambda ps: torch.optim.Adafactor(ps, lr=1e-2),
        "adafactor_hf": lambda ps: HFAdafactor(ps, lr=1e-2, scale_parameter=False, relative_step=False),
    }
    def trained(seed, make, steps=2, keep_start=False):
        """The embedding [30, 8] + head model with `make`'s optimizer and a StepLR, trained
        `steps` steps; with keep_start, also a copy of the untrained model (an EMA's start)."""
        torch.manual_seed(seed)
        m = vocab_model(30, 8)
        o = make(m.parameters())
        s = torch.optim.lr_scheduler.StepLR(o, step_size=5)
        start = copy.deepcopy(m) if keep_start else None
        train_steps(m, o, s, 30, steps=steps)
        return m, o, s, start

    for i, (name, make) in enumerate(optimizers.items()):
        m, o, s, _ = trained(100 + i, make)
        sd = o.state_dict()
        torch.save({"model": m.state_dict(), "optimizer": sd, "scheduler": s.state_dict(), "step": 2},
                   os.path.join(d, f"opt_{name}.pt"))
        expected[f"opt_{name}.pt"] = {"state": describe_opt(sd), "param_groups": [
            {k: v for k, v in g.items() if k in ("initial_accumulator_value", "params")} for g in sd["param_groups"]]}

    # Tied GPT-2 + AdamW: lm_head.weight is wte.weight (one storage, one optimizer parameter).
    torch.manual_seed(7)
    cfg = GPT2Config(vocab_size=50, n_positions=16, n_embd=8, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    gpt = GPT2LMHeadModel(cfg)
    o = torch.optim.AdamW(gpt.parameters(), lr=1e-2)
    s = torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1.0)
    ids = torch.randint(0, 50, (2, 8))
    for _ in range(2):
        loss = gpt(ids, labels=ids).loss
        o.zero_grad()
        loss.backward()
        o.step()
        s.step()
    ck = {"model": gpt.state_dict(), "optimizer": o.state_dict(), "scheduler": s.state_dict(), "step": 2}
    torch.save(ck, os.path.join(d, "tied_gpt2_adamw.pt"))
    torch.save(ck, os.path.join(d, "tied_gpt2_adamw_legacy.pt"), _use_new_zipfile_serialization=False)
    expected["tied_gpt2_adamw.pt"] = {"state": describe_opt(o.state_dict())}

    # An EMA copy of the model beside it (TTS training scripts), and a GradScaler's state.
    m, o, s, ema = trained(8, optimizers["adamw"], keep_start=True)
    with torch.no_grad():
        for pe, pm in zip(ema.parameters(), m.parameters()):
            pe.mul_(0.9).add_(pm, alpha=0.1)
    torch.save({"model": m.state_dict(), "ema": ema.state_dict(), "optimizer": o.state_dict(),
                "scheduler": s.state_dict(), "scaler": {"scale": 65536.0, "growth_factor": 2.0,
                                                        "backoff_factor": 0.5, "growth_interval": 2000,
                                                        "_growth_tracker": 0}, "step": 2},
               os.path.join(d, "ema.pt"))

    # A PyTorch Lightning checkpoint, as plain dicts (Lightning itself is not needed).
    m, o, s, _ = trained(9, lambda ps: torch.optim.Adam(ps, lr=1e-2))
    torch.save({"epoch": 0, "global_step": 2, "pytorch-lightning_version": "2.4.0",
                "state_dict": {"model." + k: v for k, v in m.state_dict().items()},
                "optimizer_states": [o.state_dict()], "lr_schedulers": [s.state_dict()],
                "callbacks": {}, "loops": {}, "hparams_name": "kwargs", "hyper_parameters": {"vocab": 30}},
               os.path.join(d, "lightning.ckpt"))
    # A second table of the old vocabulary size under names that are not the model's (a
    # teacher's embedding): the coverage rule must stop the write unless --keep names it.
    m, o, s, _ = trained(10, optimizers["adamw"], steps=1)
    torch.save({"model": m.state_dict(), "teacher": {"emb": torch.randn(30, 8)}, "optimizer": o.state_dict(),
                "scheduler": s.state_dict()}, os.path.join(d, "teacher.pt"))
    # Lightning with two optimizers (a GAN vocoder's generator and discriminator, manual
    # optimization): the vocabulary is in the first optimizer only, its indices count from 0.
    torch.manual_seed(11)
    gen = vocab_model(30, 8)
    disc = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    og = torch.optim.AdamW(gen.parameters(), lr=1e-2)
    od = torch.optim.Adam(disc.parameters(), lr=1e-2)
    sg = torch.optim.lr_scheduler.StepLR(og, step_size=5)
    ids = torch.randint(0, 30, (2, 6))
    for _ in range(2):
        x = gen.layer(gen.text_emb(ids))
        loss = torch.nn.functional.cross_entropy(gen.text_head(x).reshape(-1, 30), ids.reshape(-1))
        loss = loss + disc(x).mean()
        og.zero_grad()
        od.zero_grad()
        loss.backward()
        og.step()
        od.step()
        sg.step()
    sd = {"generator." + k: v for k, v in gen.state_dict().items()}
    sd.update({"discriminator." + k: v for k, v in disc.state_dict().items()})
    torch.save({"epoch": 0, "global_step": 2, "pytorch-lightning_version": "2.4.0", "state_dict": sd,
                "optimizer_states": [og.state_dict(), od.state_dict()], "lr_schedulers": [sg.state_dict()],
                "callbacks": {}, "loops": {}}, os.path.join(d, "lightning_two_optimizers.ckpt"))
    expected["lightning_two_optimizers.ckpt"] = {
        "state": [describe_opt(og.state_dict()), describe_opt(od.state_dict())]}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)


def tied_files():
    """Tied heads as transformers and torch store them: a BertForMaskedLM folder (the decoder is
    the word embedding and is not stored; its own bias `cls.predictions.bias` [V] is), the same
    model as a torch.save state dict (the decoder's names share the embedding's and the bias's
    storages), and a tied Llama folder whose safetensors file stores the head apart with the
    embedding's bytes (same bytes, config tie_word_embeddings true)."""
    from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(30522)
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    bert = BertForMaskedLM(cfg)
    with torch.no_grad():
        # A trained bias, not transformers' zeros: old rows must be seen to be kept.
        bert.cls.predictions.bias.copy_(torch.randn(120) * 0.1)
    d = fresh_dir("bert_mlm")
    bert.save_pretrained(d)
    d = fresh_dir("bert_mlm_bin")
    bert.config.save_pretrained(d)
    torch.save(bert.state_dict(), os.path.join(d, "pytorch_model.bin"))

    torch.manual_seed(128256)
    lcfg = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    llama = LlamaForCausalLM(lcfg)
    d = fresh_dir("llama_tied_same_bytes")
    llama.config.save_pretrained(d)
    sd = {k: v.contiguous().clone() for k, v in llama.state_dict().items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def trainer_files():
    """A Hugging Face Trainer checkpoint folder, written by the real Trainer: a tiny tied GPT-2
    on the GPT-2 fixture's tokenizer (1000 ids), AdamW (Trainer's weight-decay / no-decay
    groups), 2 steps, save_steps 2 -> testdata/trainer/checkpoint-2/ (model.safetensors,
    optimizer.pt, scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin, config,
    tokenizer files)."""
    from transformers import (GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer,
                              TrainingArguments, default_data_collator)
    torch.manual_seed(2)
    tok = PreTrainedTokenizerFast.from_pretrained(os.path.join(HERE, "gpt2"))
    cfg = GPT2Config(vocab_size=1000, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                     bos_token_id=999, eos_token_id=999)
    model = GPT2LMHeadModel(cfg)
    lines = open(os.path.join(HERE, "tokenizers", "english.txt"), encoding="utf-8").read().splitlines()[:16]
    enc = [tok(l, truncation=True, max_length=16)["input_ids"] for l in lines]
    data = [{"input_ids": e + [999] * (16 - len(e)), "labels": e + [-100] * (16 - len(e))} for e in enc]
    d = fresh_dir("trainer")
    args = TrainingArguments(output_dir=d, max_steps=2, save_steps=2, per_device_train_batch_size=4,
                             learning_rate=1e-2, weight_decay=0.01, report_to=[], use_cpu=True,
                             logging_steps=100, save_only_model=False, seed=2, data_seed=2)
    Trainer(model=model, args=args, train_dataset=data, processing_class=tok,
            data_collator=default_data_collator).train()
    for f in os.listdir(d):
        if f != "checkpoint-2":
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def trainer_run(name, model, steps=2):
    """Train `model` with the real Trainer on the GPT-2 fixture's tokenizer (1000 ids) for `steps`
    steps, AdamW with Trainer's weight-decay / no-decay groups, saved as
    testdata/<name>/checkpoint-<steps>/."""
    from transformers import PreTrainedTokenizerFast, Trainer, TrainingArguments, default_data_collator
    tok = PreTrainedTokenizerFast.from_pretrained(os.path.join(HERE, "gpt2"))
    lines = open(os.path.join(HERE, "tokenizers", "english.txt"), encoding="utf-8").read().splitlines()[:16]
    enc = [tok(l, truncation=True, max_length=16)["input_ids"] for l in lines]
    data = [{"input_ids": e + [999] * (16 - len(e)), "labels": e + [-100] * (16 - len(e))} for e in enc]
    d = fresh_dir(name)
    args = TrainingArguments(output_dir=d, max_steps=steps, save_steps=steps, per_device_train_batch_size=4,
                             learning_rate=1e-2, weight_decay=0.01, report_to=[], use_cpu=True,
                             logging_steps=100, save_only_model=False, seed=2, data_seed=2)
    Trainer(model=model, args=args, train_dataset=data, processing_class=tok,
            data_collator=default_data_collator).train()
    for f in os.listdir(d):
        if f != f"checkpoint-{steps}":
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def resume_real_files():
    """The resume cases of issue 31, written by the real libraries:
    - trainer_untied/checkpoint-2: an untied Llama (embed_tokens and lm_head both [1000, 16]) trained
      2 steps by Trainer (weight-decay groups; model.safetensors sorts the names);
    - trainer_positions/checkpoint-2: a tied GPT-2 whose position table wpe [1000, 16] has the
      vocabulary's shape: growing wte and not wpe are different edits, so which optimizer index is
      which matters;
    - untied_llama_adamw/: the untied Llama saved by save_pretrained (names sorted) with optimizer.pt
      from plain torch.optim.AdamW(model.parameters()) (one group, model order);
    - sanitize/differ.pt / differ_named.pt: an embedding and a position table of one shape, AdamW over
      parameters() (nothing tells them apart) and over named_parameters() (param_names stored);
    - sanitize/positions_resized.pt: differ_named's model with its position table grown to 120
      rows after training and its moments left at 100;
    - sanitize/seed001.pt: seed 001's exact state: text_embedding [24000, 1] with Adam moments [24001, 1]
      (the model was re-sized, the optimizer saved as it was)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(31)
    llama_cfg = dict(vocab_size=1000, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                     tie_word_embeddings=False, bos_token_id=999, eos_token_id=999)
    trainer_run("trainer_untied", LlamaForCausalLM(LlamaConfig(**llama_cfg)))
    torch.manual_seed(32)
    trainer_run("trainer_positions", GPT2LMHeadModel(GPT2Config(
        vocab_size=1000, n_positions=1000, n_embd=8, n_layer=1, n_head=2, bos_token_id=999, eos_token_id=999)))

    d = os.path.join(HERE, "sanitize")
    torch.manual_seed(33)
    m = LlamaForCausalLM(LlamaConfig(**llama_cfg))
    o = torch.optim.AdamW(m.parameters(), lr=1e-2)
    ids = torch.randint(0, 1000, (2, 8))
    for _ in range(2):
        loss = m(ids, labels=ids).loss
        o.zero_grad()
        loss.backward()
        o.step()
    f = fresh_dir("untied_llama_adamw")
    m.save_pretrained(f)
    torch.save(o.state_dict(), os.path.join(f, "optimizer.pt"))

    import torch.nn as nn

    class WithPositions(nn.Module):
        def __init__(self):
            super().__init__()
            self.text_emb = nn.Embedding(100, 4)
            self.register_buffer("position_ids", torch.arange(64))
            self.pos_emb = nn.Embedding(100, 4)
            self.layer = nn.Linear(4, 4)

        def forward(self, ids):
            x = self.layer(self.text_emb(ids) + self.pos_emb(self.position_ids[: ids.shape[1]]))
            return x @ self.text_emb.weight.T

    for name, named in (("differ.pt", False), ("differ_named.pt", True)):
        torch.manual_seed(34)
        m = WithPositions()
        o = torch.optim.AdamW(m.named_parameters() if named else m.parameters(), lr=1e-2)
        ids = torch.randint(0, 100, (2, 6))
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(m(ids).reshape(-1, 100), ids.reshape(-1))
            o.zero_grad()
            loss.backward()
            o.step()
        torch.save({"model": m.state_dict(), "optimizer": o.state_dict(), "step": 2}, os.path.join(d, name))
    # The position table resized to 120 rows after training, its moments not (param_names say
    # which index it is): torch loads this silently and fails at step().
    sd = dict(m.state_dict())
    sd["pos_emb.weight"] = torch.cat([sd["pos_emb.weight"], torch.zeros(20, 4)])
    torch.save({"model": sd, "optimizer": o.state_dict(), "step": 2}, os.path.join(d, "positions_resized.pt"))

    torch.manual_seed(35)

    class Text(nn.Module):
        """seed 001's text embedding, its output tied to it (the smallest model that has it)."""
        def __init__(self, rows):
            super().__init__()
            self.text_embedding = nn.Embedding(rows, 1)
            self.scale = nn.Linear(1, 1)

        def forward(self, ids):
            return self.scale(self.text_embedding(ids)) @ self.text_embedding.weight.T

    m = Text(24001)
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1.0)
    ids = torch.randint(0, 24001, (2, 6))
    loss = torch.nn.functional.cross_entropy(m(ids).reshape(-1, 24001), ids.reshape(-1))
    loss.backward()
    o.step()
    s.step()
    small = Text(24000)
    small.load_state_dict({k: (v[:24000] if v.shape[0] == 24001 else v) for k, v in m.state_dict().items()})
    torch.save({"model": small.state_dict(), "optimizer": o.state_dict(), "scheduler": s.state_dict(), "step": 1},
               os.path.join(d, "seed001.pt"))


def trainer_all_seen_files():
    """Issue 43 point 5, the case the moments cannot tell: trainer_untied_seen/checkpoint-2, an
    untied Llama (embed_tokens and lm_head both [64, 8]) trained 2 steps by the real Trainer
    (AdamW, weight-decay groups) on ids where every id 0..63 is an input, so no moment row of
    either matrix stays zero: nothing in the folder says which of indices 0 and 8 is which.
    (trainer_untied/checkpoint-2 is the case they can: 925 of the embedding's 1000 rows never
    seen as input, so its moments are exactly zero there; an output head's never are.)"""
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, default_data_collator
    torch.manual_seed(43)
    cfg = LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
    ids = torch.cat([torch.randperm(64), torch.randperm(64)]).reshape(8, 16)
    data = [{"input_ids": r.tolist(), "labels": r.tolist()} for r in ids]
    d = fresh_dir("trainer_untied_seen")
    # One batch of all 8 rows per step: every id is an input at both steps.
    args = TrainingArguments(output_dir=d, max_steps=2, save_steps=2, per_device_train_batch_size=8,
                             learning_rate=1e-2, weight_decay=0.01, report_to=[], use_cpu=True,
                             logging_steps=100, save_only_model=False, seed=43, data_seed=43)
    Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=data,
            data_collator=default_data_collator).train()
    for f in os.listdir(d):
        if f != "checkpoint-2":
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def audio_files():
    """Multi-codebook audio models (Higgs-audio style): one table of 8 codebooks × 1026 rows
    (1024 codes + 2 specials) × 16, and a head of the same layout, as a safetensors file and a
    torch state dict; seed 004's batch, audio_out_ids [8, 33] beside labels [8, 40] (a delay
    pattern applied to the labels: 33 + 8 - 1 columns), and a consistent batch."""
    torch.manual_seed(4)
    d = fresh_dir("audio")
    c, s, dim = 8, 1026, 16
    emb = torch.nn.Embedding(c * s, dim)
    head = torch.nn.Linear(dim, c * s, bias=False)
    with torch.no_grad():
        # Each codebook its own offset, so per-codebook statistics differ visibly.
        for k in range(c):
            emb.weight[k * s:(k + 1) * s] += k
            head.weight[k * s:(k + 1) * s] -= k
    sd = {"audio_codebook_embeddings.weight": emb.weight.detach().clone(),
          "audio_decoder_proj.audio_lm_head.weight": head.weight.detach().clone(),
          "audio_decoder_proj.norm.weight": torch.ones(dim)}
    save_file(sd, os.path.join(d, "codebooks.safetensors"), metadata={"format": "pt"})
    torch.save(sd, os.path.join(d, "codebooks.pt"))
    ids = torch.randint(0, 1024, (c, 33))

    def delay(x):
        # The delay pattern: codebook k shifted right by k, padded with BOS (1024) / EOS (1025).
        out = torch.full((c, x.shape[1] + c - 1), 1025, dtype=x.dtype)
        for k in range(c):
            out[k, :k] = 1024
            out[k, k:k + x.shape[1]] = x[k]
        return out
    torch.save({"audio_out_ids": ids, "label_audio_ids": delay(ids)}, os.path.join(d, "batch_seed004.pt"))
    labels = ids.clone()
    labels[:, -3:] = -100
    torch.save({"audio_out_ids": ids, "label_audio_ids": labels}, os.path.join(d, "batch_ok.pt"))
    # The same as a collated batch [B, C, T] (a DataLoader's output), B = 3.
    gb = torch.Generator().manual_seed(44)
    ids3 = torch.randint(0, 1024, (3, c, 33), generator=gb)
    torch.save({"audio_out_ids": ids3, "label_audio_ids": torch.stack([delay(x) for x in ids3])},
               os.path.join(d, "batch_seed004_batched.pt"))
    ids3_ok = ids3.clone()
    torch.save({"audio_out_ids": ids3_ok, "label_audio_ids": ids3_ok.clone()}, os.path.join(d, "batch_ok_batched.pt"))
    past = ids3.clone()
    past[2, 5, 7] = 1030   # one id past codebook 5's 1026 rows, in the last batch entry only
    torch.save({"audio_out_ids": past}, os.path.join(d, "batch_past_batched.pt"))

    # A training checkpoint of a small multi-codebook model (4 codebooks × 34 rows × 8, embedding
    # and head), AdamW after 2 steps: sanitize-checkpoint --segments grows moments per codebook.
    torch.manual_seed(5)
    tc, ts, td = 4, 34, 8
    tm = torch.nn.Module()
    tm.codebook_emb = torch.nn.Embedding(tc * ts, td)
    tm.codebook_head = torch.nn.Linear(td, tc * ts)
    opt = torch.optim.AdamW(tm.parameters(), lr=1e-2)
    offs = torch.arange(tc)[:, None] * ts
    for _ in range(2):
        ids = torch.randint(0, ts, (tc, 6)) + offs
        loss = torch.nn.functional.cross_entropy(tm.codebook_head(tm.codebook_emb(ids)).reshape(-1, tc * ts), ids.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save({"model": tm.state_dict(), "optimizer": opt.state_dict(), "step": 2},
               os.path.join(d, "train_codebooks.pt"))

    torch.manual_seed(6)
    # A model that trains only its new rows (Higgs-audio style): the text embedding as a frozen
    # block [0, 2454) and a trainable block [2454, 2535), joined by torch.cat in forward.
    class SplitEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight_frozen = torch.nn.Parameter(torch.randn(2454, 8), requires_grad=False)
            self.weight_unfrozen = torch.nn.Parameter(torch.randn(81, 8) * 0.01)

        def forward(self, ids):
            return torch.nn.functional.embedding(ids, torch.cat([self.weight_frozen, self.weight_unfrozen]))
    m = torch.nn.Module()
    m.text_emb = SplitEmbedding()
    m.text_head = torch.nn.Linear(8, 2535, bias=False)
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(d, "split_model.safetensors"), metadata={"format": "pt"})
    torch.save(sd, os.path.join(d, "split_model.pt"))


def word_level(n, eos=None, specials=()):
    """A WordLevel tokenizer.json with ids 0..n-1 ("t0", "t1", …), optional specials at given ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {f"t{i}": i for i in range(n)}
    for tok, i in specials:
        vocab.pop(f"t{i}")
        vocab[tok] = i
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[0][0] if specials else "t0"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.add_special_tokens([tok for tok, _ in specials])
    return t


def vocab_files():
    """One folder per seed scenario for check-vocab, and a consistent one."""
    import numpy as np
    base = fresh_dir("check_vocab")
    g = torch.Generator().manual_seed(9)

    def folder(name, rows, config=None, tokenizer=None, extra=None):
        d = os.path.join(base, name)
        os.makedirs(d)
        if rows:
            save_file({"text_emb.weight": torch.randn(rows, 8, generator=g),
                       "text_head.weight": torch.randn(rows, 8, generator=g),
                       "tfmr.layers.0.weight": torch.randn(8, 8, generator=g)},
                      os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        if config is not None:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(config, f, indent=2)
        if tokenizer is not None:
            # The two large ones compact (tokenizers' `pretty=False`), for testdata's size.
            tokenizer.save(os.path.join(d, "tokenizer.json"), pretty=name not in ("seed000", "seed001"))
        for fname, obj in (extra or {}).items():
            with open(os.path.join(d, fname), "w") as f:
                json.dump(obj, f, indent=2)
        return d

    specials = [("<pad>", 0), ("<unk>", 1), ("<bos>", 2), ("<eos>", 3)]
    # Consistent: 1000 ids, 1000 rows, config 1000, special ids agree everywhere.
    d = folder("consistent", 1000, {"vocab_size": 1000, "bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0},
               word_level(1000, specials=specials),
               {"generation_config.json": {"bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0},
                "tokenizer_config.json": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
                "special_tokens_map.json": {"bos_token": "<bos>", "eos_token": {"content": "<eos>"}}})
    np.array([5, 17, 999, 3], dtype=np.int64).tofile(os.path.join(d, "token_ids_i64.bin"))
    np.save(os.path.join(d, "token_ids.npy"), np.array([[5, 17], [999, 3]], dtype=np.uint16))
    # Seed 000: merged tokenizer 2535, embeddings file 3000 rows, config n_vocab 887.
    from tokenizers import Tokenizer
    merged = Tokenizer.from_file(os.path.join(HERE, "tokenizers", "chatterbox_base.json"))
    am = json.load(open(os.path.join(HERE, "tokenizers", "amharic_vocab.json"), encoding="utf-8"))
    merged.add_tokens([t for t, _ in sorted(am.items(), key=lambda kv: kv[1]) if merged.token_to_id(t) is None])
    assert merged.get_vocab_size(with_added_tokens=True) == 2535
    folder("seed000", 3000, {"n_vocab": 887}, merged)
    # Seed 002: tokenizer 300 ids, embedding 299 rows, eos = 299 (MedGemma: 256000 / 255999 / 255999).
    folder("seed002", 299, {"vocab_size": 299, "eos_token_id": 299},
           word_level(300, specials=[("<pad>", 0), ("<unk>", 1), ("<bos>", 2), ("<eos>", 299)]),
           {"generation_config.json": {"bos_token_id": 2, "eos_token_id": [299, 1]}})
    # Seed 003: tokenizer 256 ids, embedding 320 rows (64 padding rows): fine, an info line.
    folder("seed003", 320, {"vocab_size": 320}, word_level(256, specials=[("<unk>", 0)]))
    # A GPT-2 config left at its defaults on a 1000-token model: bos/eos 50256 in config.json and
    # generation_config.json. The ids are wrong, not the table (the tokenizer's <|endoftext|> is 999).
    folder("config_ids", 1000, {"vocab_size": 1000, "bos_token_id": 50256, "eos_token_id": 50256},
           word_level(1000, specials=[("<unk>", 0), ("<|endoftext|>", 999)]),
           {"generation_config.json": {"bos_token_id": 50256, "eos_token_id": 50256}})
    # Seed 001: config (the model being resumed) 24000, checkpoint and optimizer 24001.
    folder("seed001", 0, {"vocab_size": 24000}, word_level(24000, specials=[("<unk>", 0)]))


def write_zip(path, records, compress=()):
    import zipfile
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in records:
            ct = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(name), data, compress_type=ct)


def zip_records(path):
    import zipfile
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def hostile():
    """Files that must be refused (exit 2) without running anything."""
    import io
    import pickle
    import struct as st
    d = fresh_dir("torch_hostile")
    ok = os.path.join(d, "_ok.pt")
    torch.save({"w": torch.arange(4, dtype=torch.float32)}, ok)
    recs = zip_records(ok)
    os.remove(ok)
    pre = recs[0][0].split("/")[0]

    def with_pickle(name, pkl):
        write_zip(os.path.join(d, name), [(f"{pre}/data.pkl", pkl)] +
                  [(n, b) for n, b in recs if not n.endswith("data.pkl")])

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    with_pickle("reduce_os_system.pt", pickle.dumps({"x": Evil()}, protocol=2))
    # STACK_GLOBAL whose module and name come from the memo.
    sg = (b"\x80\x04" + b"\x8c\x02os\x94" + b"\x8c\x06system\x94" + b"00" +
          b"h\x00h\x01\x93" + b"\x8c\x04echo\x85R.")
    with_pickle("stack_global_from_memo.pt", sg)
    inner = pickle.dumps({"x": Evil()}, protocol=2)
    nested = b"\x80\x02cpickle\nloads\nC" + bytes([len(inner)]) + inner + b"\x85R."
    with_pickle("nested_pickle_loads.pt", nested)
    # Memo expansion bomb: l0 = [], l(i) = [l(i-1), l(i-1)], 60 levels: 2**60 values if expanded.
    bomb = b"\x80\x02]q\x00"
    for i in range(1, 61):
        bomb += b"(h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"lq" + bytes([i])
    bomb += b"."
    with_pickle("memo_bomb.pt", bomb)
    # A view reaching past its storage: a 4-element storage read as 10 elements.
    view = (b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n("
            b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
            b"K\x00K\n\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs.")
    with_pickle("view_past_storage.pt", view)
    # A DEFLATE-compressed storage.
    write_zip(os.path.join(d, "compressed_storage.pt"), recs,
              compress={n for n, _ in recs if "/data/" in n})
    # Big-endian storages.
    write_zip(os.path.join(d, "big_endian.pt"),
              [(n, b"big" if n.endswith("/byteorder") else b) for n, b in recs])
    # TorchScript archive.
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(d, "torchscript.pt"))
    # Truncated zip.
    good = open(os.path.join(HERE, "torch", "train_ckpt.pt"), "rb").read()
    with open(os.path.join(d, "truncated.pt"), "wb") as f:
        f.write(good[: len(good) // 2])
    # Local header naming another file than the central directory.
    raw = bytearray(open(os.path.join(HERE, "torch", "state_dict.pt"), "rb").read())
    i = raw.index(b"state_dict/data/0")
    raw[i: i + 17] = b"state_dict/data/X"
    open(os.path.join(d, "name_mismatch.pt"), "wb").write(bytes(raw))
    # data.pkl whose CRC no longer matches (a key renamed in place).
    raw = bytearray(open(os.path.join(HERE, "torch", "state_dict.pt"), "rb").read())
    i = raw.index(b"layer.bias")
    raw[i: i + 10] = b"layer.bIas"
    open(os.path.join(d, "bad_crc.pt"), "wb").write(bytes(raw))
    # An entry flagged as encrypted.
    raw = bytearray(open(os.path.join(HERE, "torch", "state_dict.pt"), "rb").read())
    raw[6] |= 1
    open(os.path.join(d, "encrypted_flag.pt"), "wb").write(bytes(raw))
    # An unknown but harmless-looking global, to check the --allow-global hint.
    with_pickle("unknown_global.pt", b"\x80\x02cmylib.config\nConfig\n)\x81}X\x01\x00\x00\x00aK\x01sb.")


class Py2Pickle:
    """Writes pickle opcodes the way Python 2's cPickle did at protocol 2 (there is no Python 2
    here): str keys as SHORT_BINSTRING/BINSTRING, ints as BININT*, memo PUT after every value."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.memo = 0

    def put(self):
        self.out += b"q" + bytes([self.memo]) if self.memo < 256 else b"r" + self.memo.to_bytes(4, "little")
        self.memo += 1

    def str(self, s):
        b = s.encode("ascii")
        self.out += (b"U" + bytes([len(b)])) if len(b) < 256 else (b"T" + len(b).to_bytes(4, "little"))
        self.out += b
        self.put()

    def int(self, i):
        if 0 <= i < 256:
            self.out += b"K" + bytes([i])
        elif 0 <= i < 65536:
            self.out += b"M" + i.to_bytes(2, "little")
        else:
            self.out += b"J" + i.to_bytes(4, "little", signed=True)

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"
        self.put()

    def op(self, b):
        self.out += b

    def done(self):
        self.out += b"."
        return bytes(self.out)


def py2_legacy_file(path, entries, storage_module="torch.cuda", location="cuda:0", rebuild="_rebuild_tensor_v2",
                    hooks="ordered_dict"):
    """A legacy (pre-zip) torch file as torch 0.4 under Python 2 wrote a state dict:
    REDUCE(collections.OrderedDict, ([[key, tensor], ...],)), storages of class
    torch.cuda.FloatStorage at 'cuda:0'. `entries`: (key, contiguous tensor) in order. `hooks`,
    _rebuild_tensor_v2's backward hooks: an empty OrderedDict, None (as the weights the lpips
    package ships have them), or "nonempty" (OrderedDict([(1, 2)]): must be refused)."""
    cls = {torch.float32: "FloatStorage", torch.int64: "LongStorage", torch.float16: "HalfStorage",
           torch.uint8: "ByteStorage"}
    head = bytearray()
    for obj in (0x1950A86A20F9469CFC6C, 1001):
        p = Py2Pickle()
        if obj > 2**31:
            b = obj.to_bytes(10, "little")
            p.op(b"\x8a" + bytes([len(b)]) + b)
        else:
            p.int(obj)
        head += p.done()
    p = Py2Pickle()
    p.op(b"}"); p.put(); p.op(b"(")
    p.str("little_endian"); p.op(b"\x88")
    p.str("type_sizes"); p.op(b"}"); p.put(); p.op(b"(")
    for k, v in (("int", 4), ("short", 2), ("long", 8)):
        p.str(k); p.int(v)
    p.op(b"u")
    p.str("protocol_version"); p.int(1001)
    p.op(b"u")
    head += p.done()
    # The object.
    p = Py2Pickle()
    p.glob("collections", "OrderedDict")
    p.op(b"]"); p.put(); p.op(b"(")
    keys = []
    for i, (k, t) in enumerate(entries):
        key = str(94_000_000 + 4096 * i)
        keys.append((key, t))
        p.op(b"]"); p.put(); p.op(b"(")
        p.str(k)
        p.glob("torch._utils", rebuild)
        p.op(b"(")
        p.op(b"(")
        p.str("storage")
        p.glob(storage_module, cls[t.dtype])
        p.str(key)
        p.str(location)
        p.int(t.numel())
        p.op(b"N")
        p.op(b"t"); p.put()
        p.op(b"Q")
        p.int(0)
        p.op(b"(")
        for n in t.shape:
            p.int(n)
        p.op(b"t"); p.put()
        p.op(b"(")
        for n in t.stride():
            p.int(n)
        p.op(b"t"); p.put()
        if rebuild == "_rebuild_tensor_v2":
            p.op(b"\x89")
            if hooks == "none":
                p.op(b"N")
            else:
                p.glob("collections", "OrderedDict")
                p.op(b"]"); p.put()
                if hooks == "nonempty":
                    p.op(b"("); p.int(1); p.int(2); p.op(b"t"); p.op(b"a")
                p.op(b"\x85"); p.put(); p.op(b"R"); p.put()
        p.op(b"t"); p.put()
        p.op(b"R"); p.put()
        p.op(b"e")  # APPENDS: the [key, tensor] pair
    p.op(b"e")  # APPENDS: the pairs
    p.op(b"\x85"); p.put()
    p.op(b"R"); p.put()
    body = p.done()
    p = Py2Pickle()
    p.op(b"]"); p.put(); p.op(b"(")
    for key, _ in sorted(keys):
        p.str(key)
    p.op(b"e")
    tail = bytearray(p.done())
    for key, t in sorted(keys, key=lambda kt: kt[0]):
        tail += struct.pack("<q", t.numel())
        tail += t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    with open(path, "wb") as f:
        f.write(bytes(head) + body + bytes(tail))


def torch_eras():
    """Files the way other eras and tools write them: Python 2 era legacy state dicts (hand-
    assembled), every dtype torch.save writes today (zip and legacy), nested containers at
    another pickle protocol, and files that must be refused (a storage no tensor reaches,
    quantized and sparse tensors). Expected values come from torch.load(weights_only=True)."""
    import argparse
    from collections import OrderedDict
    d = fresh_dir("torch_eras")
    g = torch.Generator().manual_seed(27)
    entries = [("conv.weight", torch.randn(4, 3, generator=g)),
               ("conv.bias", torch.randn(4, generator=g)),
               ("bn.num_batches_tracked", torch.tensor(7, dtype=torch.int64)),
               ("emb.weight", torch.randn(6, 2, generator=g).half())]
    py2_legacy_file(os.path.join(d, "py2_ordereddict.pth"), entries)
    py2_legacy_file(os.path.join(d, "py2_rebuild_tensor_v1.pth"), entries[:2],
                    storage_module="torch", location="cpu", rebuild="_rebuild_tensor")
    # The lpips package's weights (lin*.model.1.weight [1, C, 1, 1], backward hooks None).
    gl = torch.Generator().manual_seed(31)
    lpips = [(f"lin{i}.model.1.weight", torch.rand(1, c, 1, 1, generator=gl)) for i, c in enumerate((64, 192, 384))]
    py2_legacy_file(os.path.join(d, "py2_hooks_none.pth"), lpips, hooks="none")
    py2_legacy_file(os.path.join(d, "py2_hooks_nonempty.pth"), lpips[:1], hooks="nonempty")
    for name in ("py2_ordereddict.pth", "py2_rebuild_tensor_v1.pth", "py2_hooks_none.pth"):
        path = os.path.join(d, name)
        obj = torch.load(path, weights_only=True, map_location="cpu")
        expected_torch(path.replace(".pth", ".expected.json"), obj)

    # Every dtype torch.save writes today.
    x = torch.randn(3, 5, generator=g)
    sd = OrderedDict()
    sd["bool"] = x > 0
    sd["uint8"] = (x * 50).to(torch.uint8)
    sd["int8"] = (x * 50).to(torch.int8)
    sd["int16"] = (x * 5000).to(torch.int16)
    sd["int32"] = (x * 1e6).to(torch.int32)
    sd["int64"] = (x * 1e12).to(torch.int64)
    sd["uint16"] = torch.tensor([0, 1, 2, 65535, 40000, 12345], dtype=torch.int32).to(torch.uint16)
    sd["uint32"] = torch.tensor([0, 1, 2**32 - 1, 3_000_000_000], dtype=torch.int64).to(torch.uint32)
    sd["uint64"] = torch.tensor([0, 1, 2**62, 12345], dtype=torch.int64).to(torch.uint64)
    sd["float16"] = x.half()
    sd["bfloat16"] = x.bfloat16()
    sd["float32"] = x
    sd["float64"] = x.double()
    sd["complex64"] = torch.complex(x, -x)
    sd["complex128"] = torch.complex(x.double(), x.double() * 2)
    sd["complex32"] = torch.complex(x.half(), x.half())
    for f8 in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
        sd[f8] = x.abs().to(getattr(torch, f8))
    sd["uint16_view"] = sd["uint16"][1:4]                     # an offset view of a v3 storage
    sd["float32_t"] = x.t()                                   # strides
    sd["float32_row"] = x[2]                                  # offset into a shared storage
    for name, kw in (("dtypes.pt", {}), ("dtypes_legacy.pt", {"_use_new_zipfile_serialization": False})):
        path = os.path.join(d, name)
        torch.save(sd, path, **kw)
    expected_torch(os.path.join(d, "dtypes.expected.json"), torch.load(os.path.join(d, "dtypes.pt"), weights_only=True))

    # Nested containers at pickle protocol 3 (weights_only reads no higher), shared storages,
    # an empty tensor.
    base = torch.randn(5, 4, generator=g)
    tree = {"model": OrderedDict([("a.weight", base), ("a.weight_view", base[1:3, 1:])]),
            "lists": [base[0], (base[4], [torch.zeros(0)])],
            "meta": {"epoch": 3, "args": argparse.Namespace(lr=0.1, layers=[1, 2]),
                     "name": "tiny", "scale": 0.5, "ok": True, "none": None}}
    path = os.path.join(d, "containers_p3.pt")
    torch.save(tree, path, pickle_protocol=3)
    torch.serialization.add_safe_globals([argparse.Namespace])
    expected_torch(os.path.join(d, "containers_p3.expected.json"), torch.load(path, weights_only=True))

    # Must be refused: the tree reaches data/0 but the file also stores data/1.
    two = os.path.join(d, "_two.pt")
    one = os.path.join(d, "_one.pt")
    a = torch.arange(6, dtype=torch.float32)
    torch.save({"a": a, "b": torch.ones(3)}, two)
    torch.save({"a": a}, one)
    recs_two = zip_records(two)
    recs_one = dict(zip_records(one))
    pre_two = recs_two[0][0].split("/")[0]
    write_zip(os.path.join(d, "dropped_storage.pt"),
              [(n, recs_one["_one/data.pkl"] if n.endswith("/data.pkl") else b) for n, b in recs_two])
    os.remove(two)
    os.remove(one)
    assert pre_two == "_two"
    q = torch.quantize_per_tensor(torch.randn(4, generator=g), 0.1, 0, torch.qint8)
    torch.save({"q": q}, os.path.join(d, "quantized.pt"))
    torch.save({"s": torch.eye(3).to_sparse()}, os.path.join(d, "sparse.pt"))


def english_lines():
    """English prose that ships with Python: the docstrings of some stdlib modules."""
    import re
    import textwrap
    mods = ["argparse", "collections", "json", "pathlib", "random", "string", "textwrap", "zipfile",
            "unittest", "logging", "functools", "itertools", "heapq", "bisect", "calendar", "csv"]
    out = []
    for name in mods:
        mod = __import__(name)
        for obj in [mod] + [getattr(mod, a) for a in sorted(dir(mod)) if not a.startswith("_")]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                for para in doc.split("\n\n"):
                    t = re.sub(r"\s+", " ", para).strip()
                    if 20 <= len(t) and re.fullmatch(r"[A-Za-z0-9 ,.;:'()\-]+", t):
                        out.extend(textwrap.wrap(t, 100))
    seen, lines = set(), []
    for line in out:
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


# 60 Ge'ez syllables (Amharic script), enough for a realistic grapheme tokenizer.
AMHARIC = [chr(c) for c in range(0x1200, 0x1200 + 64) if c not in (0x1207, 0x1247)][:60]


def amharic_lines(n, seed):
    """Synthetic Amharic-script sentences: frequent words (the same for every seed, like a
    language's own) mixed with random ones; `seed` picks the sentences."""
    import random
    w = random.Random(7)
    common = ["".join(w.choice(AMHARIC[:20]) for _ in range(w.randint(2, 3))) for _ in range(12)]
    r = random.Random(seed)
    lines = []
    for _ in range(n):
        words = []
        for _ in range(r.randint(4, 9)):
            if r.random() < 0.5:
                words.append(r.choice(common))
            else:
                words.append("".join(r.choice(AMHARIC) for _ in range(r.randint(1, 4))))
        lines.append(" ".join(words) + " ።")
    return lines


def tokenizers_files():
    """A Chatterbox-like grapheme BPE (2454 entries, [START]=255), an 81-token Amharic addition
    (vocab.json and tokenizer.json), a byte-level BPE, a WordPiece, two SentencePiece models, texts."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    import sentencepiece as spm
    d = fresh_dir("tokenizers")
    english = english_lines()
    amharic = amharic_lines(400, 7)
    with open(os.path.join(d, "english.txt"), "w") as f:
        f.write("\n".join(english[:300]) + "\n")
    with open(os.path.join(d, "amharic.txt"), "w") as f:
        f.write("\n".join(amharic_lines(60, 8)) + "\n")

    # Chatterbox-like: BPE over graphemes, Whitespace pre-tokenizer, no normalizer.
    specials = ["[STOP]", "[UNK]", "[SPACE]"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(english, trainers.BpeTrainer(vocab_size=2453, special_tokens=specials,
                                                        show_progress=False))
    model = json.loads(tok.to_str())
    vocab = model["model"]["vocab"]
    if len(vocab) != 2453:
        sys.exit(f"English BPE trained to {len(vocab)} entries, not 2453: add text")
    # [START] at 255: shift every id from 255 up by one.
    vocab = {t: (i + 1 if i >= 255 else i) for t, i in vocab.items()}
    vocab["[START]"] = 255
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["model"]["merges"]]
    base = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]"))
    base.pre_tokenizer = pre_tokenizers.Whitespace()
    base.add_special_tokens(specials + ["[START]"])
    base.save(os.path.join(d, "chatterbox_base.json"))

    # The Amharic addition: 3 specials shared with the base + 60 syllables + 21 merges = 84, 81 new.
    am = Tokenizer(models.BPE(unk_token="[UNK]"))
    am.pre_tokenizer = pre_tokenizers.Whitespace()
    am.train_from_iterator(amharic, trainers.BpeTrainer(vocab_size=84, special_tokens=specials,
                                                       initial_alphabet=AMHARIC, show_progress=False))
    am_vocab = json.loads(am.to_str())["model"]["vocab"]
    # The trainer also learns "።" (end of sentence); keep 81 new entries exactly.
    if len(am_vocab) != 84:
        sys.exit(f"Amharic BPE has {len(am_vocab)} entries, not 84")
    am.save(os.path.join(d, "amharic_addition.json"))
    with open(os.path.join(d, "amharic_vocab.json"), "w", encoding="utf-8") as f:
        json.dump(am_vocab, f, ensure_ascii=False, indent=1)

    # GPT-2-like byte-level BPE and a BERT-like WordPiece.
    bl = Tokenizer(models.BPE())
    bl.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bl.decoder = decoders.ByteLevel()
    bl.train_from_iterator(english, trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    bl.save(os.path.join(d, "bytelevel_bpe.json"))
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.decoder = decoders.WordPiece()
    wp.train_from_iterator(english, trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    wp.save(os.path.join(d, "wordpiece.json"))

    # SentencePiece: an English unigram base and an Amharic addition.
    spm.SentencePieceTrainer.train(sentence_iterator=iter(english), model_prefix=os.path.join(d, "sp_english"),
                                   vocab_size=400, model_type="unigram", byte_fallback=True,
                                   character_coverage=1.0, minloglevel=2)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(amharic), model_prefix=os.path.join(d, "sp_amharic"),
                                   vocab_size=120, model_type="unigram", character_coverage=1.0,
                                   user_defined_symbols=["<am>"], minloglevel=2)
    for f in ("sp_english.vocab", "sp_amharic.vocab"):
        os.remove(os.path.join(d, f))


def tokenizer_additions():
    """Issue 32: an Amharic addition trained as `tokenizers` users do (ByteLevel pre-tokenizer), a
    plain list of Amharic words and characters, and a SentencePiece BPE-type English base (identity
    normaliser: a small file). Written beside tokenizers_files()' output, which stays as it is."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    import sentencepiece as spm
    d = os.path.join(HERE, "tokenizers")
    amharic = amharic_lines(400, 7)
    am = Tokenizer(models.BPE())
    am.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    am.decoder = decoders.ByteLevel()
    am.train_from_iterator(amharic, trainers.BpeTrainer(
        vocab_size=420, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    am.save(os.path.join(d, "amharic_bytelevel.json"))
    # Frequent words of the synthetic language, a greeting, and single characters.
    w = __import__("random").Random(7)
    common = ["".join(w.choice(AMHARIC[:20]) for _ in range(w.randint(2, 3))) for _ in range(12)]
    words = list(dict.fromkeys(common[:8] + ["\u1230\u120b\u121d", "\u1200", "\u1208", "\u1362"]))
    with open(os.path.join(d, "amharic_words.txt"), "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in words))
    english = english_lines()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(english), model_prefix=os.path.join(d, "sp_bpe_english"),
                                   vocab_size=400, model_type="bpe", character_coverage=1.0,
                                   normalization_rule_name="identity", minloglevel=2)
    os.remove(os.path.join(d, "sp_bpe_english.vocab"))

DCP_ROWS, DCP_DIM = 999, 7


def dcp_model(rows, tied=False):
    """A tiny language model for the DCP fixtures: an odd-sized vocabulary matrix (999 x 7)."""
    import torch.nn as nn

    class Lm(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(rows, DCP_DIM)
            self.layer = nn.Linear(DCP_DIM, DCP_DIM)
            self.output = nn.Linear(DCP_DIM, rows, bias=False)
            if tied:
                self.output.weight = self.tok_embeddings.weight

        def forward(self, ids):
            return self.output(torch.relu(self.layer(self.tok_embeddings(ids))))
    return Lm()


def dcp_step(model, opt, rows, seed=7):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, rows, (4, 6), generator=g)
    loss = torch.nn.functional.cross_entropy(model(ids).reshape(-1, rows), ids.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def dcp_state(model, opt):
    """{"model": ..., "optim": ...} as torchtitan saves it: flattened optimizer keys."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(flatten_optimizer_state_dict=True))
    return {"model": msd, "optim": osd}


def dcp_listing(d):
    """What torch's own reader says: every key of the metadata, with its global shape, dtype,
    chunks, and the sha256 of the whole tensor (assembled by torch) in row-major little-endian."""
    import hashlib
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = FileSystemReader(d).read_metadata()
    tmp = d + ".full.pt"
    dcp_to_torch_save(d, tmp)
    full = torch.load(tmp, weights_only=False)
    os.remove(tmp)

    def flat(v, prefix, out):
        if isinstance(v, dict):
            for k, x in v.items():
                flat(x, f"{prefix}.{k}" if prefix else str(k), out)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                flat(x, f"{prefix}.{i}", out)
        else:
            out[prefix] = v
    values = {}
    flat(full, "", values)
    items = {}
    for k, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            t = values[k].contiguous()
            items[k] = {
                "kind": "tensor",
                "dtype": str(m.properties.dtype).replace("torch.", ""),
                "shape": list(m.size),
                "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in m.chunks],
                "sha256": hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest(),
            }
        else:
            items[k] = {"kind": "bytes"}
    files = sorted({s.relative_path for s in md.storage_data.values()})
    with open(os.path.join(os.path.dirname(d), os.path.basename(d) + ".expected.json"), "w") as f:
        json.dump({"files": files, "items": items}, f, indent=1, sort_keys=True)


def dcp_fsdp2_worker(rank, world, d, port):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = dcp_model(DCP_ROWS, tied=True)
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dcp_step(model, opt, DCP_ROWS)
    dcp.save(dcp_state(model, opt), checkpoint_id=d)
    dist.destroy_process_group()


def dcp_files():
    """torch Distributed Checkpoint folders (issue 36): `single` by one process (untied head),
    `fsdp2` by two gloo processes with FSDP2 on CPU (tied head, 999 rows split 500/499), and
    `mismatch`: a model grown to 1063 rows saved with the optimizer of the 999-row model (the
    seed-001 mistake). Each has `<name>.expected.json`: torch's own listing of it."""
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    root = fresh_dir("dcp")
    # Relative paths: the metadata records the checkpoint_id it was saved to.
    cwd = os.getcwd()
    os.chdir(root)
    torch.manual_seed(0)
    model = dcp_model(DCP_ROWS)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dcp_step(model, opt, DCP_ROWS)
    d = "single"
    dcp.save(dcp_state(model, opt), checkpoint_id=d, no_dist=True)
    dcp_listing(d)

    d = "fsdp2"
    mp.spawn(dcp_fsdp2_worker, args=(2, d, 29533), nprocs=2, join=True)
    dcp_listing(d)

    state = dcp_state(model, opt)
    grown = dcp_model(DCP_ROWS + 64)
    with torch.no_grad():
        for name, p in grown.named_parameters():
            old = dict(model.named_parameters())[name]
            p.zero_()
            p[: old.shape[0]] = old
    state["model"] = grown.state_dict()
    d = "mismatch"
    dcp.save(state, checkpoint_id=d, no_dist=True)
    dcp_listing(d)
    os.chdir(cwd)


def zero_files():
    """DeepSpeed ZeRO checkpoints of issue 36, written by DeepSpeed itself on CPU (gloo, 2 ranks, torch
    AdamW) with testdata/zero_train.py: zero1 (stage 1, fp32), zero2_bf16 (stage 2, bf16 with fp32
    master weights) and zero3 (fp32). (ZeRO-1 with bf16 and fp32 gradient accumulation runs
    DeepSpeed's BF16_Optimizer, whose files zero_to_fp32 does not read either: refused, not covered.)
    The model has an embedding and an untied head of 999 rows x width 3 and two parameter groups
    (3009 and 2997 elements: DeepSpeed pads each to a multiple of 2 x world size).
    Beside each save root: NAME.fp32.safetensors, DeepSpeed's zero_to_fp32 of it, and (zero2_bf16,
    zero3) NAME.moments.safetensors, every parameter's Adam moments as DeepSpeed's own
    safe_get_full_optimizer_state gives them after the save.
    Needs: DS_BUILD_OPS=0 pip install deepspeed; the venv's bin on PATH (a CPU op is compiled once)."""
    import subprocess
    from safetensors.torch import save_file as save_st
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    d = fresh_dir("zero")
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    script = os.path.join(HERE, "zero_train.py")
    for name, stage, bf16 in (("zero1", 1, False), ("zero2_bf16", 2, True), ("zero3", 3, False)):
        root = os.path.join(d, name)
        cmd = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc_per_node", "2",
               "--master_port", str(29600 + stage), script, "--stage", str(stage), "--rows", "999",
               "--save", root, "--dump", os.path.join(d, name + ".full.safetensors")]
        if bf16:
            cmd.append("--bf16")
        subprocess.run(cmd, env=env, check=True)
        # DeepSpeed copies its conversion scripts into the save root: not ours to commit.
        for script_name in ("zero_to_fp32.py", "zero_to_torch.py"):
            if os.path.exists(os.path.join(root, script_name)):
                os.remove(os.path.join(root, script_name))
        sd = get_fp32_state_dict_from_zero_checkpoint(root)
        save_st({k: v.contiguous() for k, v in sd.items()}, os.path.join(d, name + ".fp32.safetensors"))
        # The moments only (the weights are the file above), and not for zero1, whose layout is
        # zero2's: the fixtures stay under 0.5 MB.
        full = os.path.join(d, name + ".full.safetensors")
        if name == "zero1":
            os.remove(full)
        else:
            with safe_open(full, framework="pt") as f:
                moments = {k: f.get_tensor(k) for k in f.keys() if k.endswith(("exp_avg", "exp_avg_sq"))}
            save_st(moments, os.path.join(d, name + ".moments.safetensors"))
            os.remove(full)


def megatron_files():
    """Megatron-Core's torch_dist save roots of issue 49 (TP = 2, padded vocabulary, untied output
    layer, distributed-optimizer state: `dp_reshardable` in tp2 and in tp2_pp2_dp3_bf16 (bf16, two
    pipeline stages, three data-parallel replicas, the first stage in two buckets), `fully_reshardable` in tp2_fully_reshardable), written by megatron-core 0.16.1 itself on CPU with
    testdata/megatron_save.py (its docstring says what the model is and why it is this small).
    Needs: pip install --no-deps megatron-core==0.16.1."""
    import subprocess
    d = fresh_dir("megatron")
    subprocess.run([sys.executable, os.path.join(HERE, "megatron_save.py"), os.path.join(d, "tp2")], check=True)
    # The same run in bf16, saved with Megatron-LM's --dist-ckpt-optim-fully-reshardable layout.
    subprocess.run([sys.executable, os.path.join(HERE, "megatron_save.py"),
                    os.path.join(d, "tp2_fully_reshardable"), "fully_reshardable", "bf16"], check=True)
    # A bf16 run in the default layout (dp_reshardable) with two pipeline stages, three
    # data-parallel replicas (TP 2 x PP 2 x DP 3: twelve processes) and overlap_grad_reduce at a
    # bucket_size of 200 elements (the first stage's parameters in two buckets).
    subprocess.run([sys.executable, os.path.join(HERE, "megatron_save.py"),
                    os.path.join(d, "tp2_pp2_dp3_bf16"), "dp_reshardable", "bf16", "2", "--dp", "3",
                    "--bucket-size", "200"], check=True)


def megatron_legacy_files():
    """Megatron-LM's legacy per-rank save of issue 49 (`--ckpt-format torch`, TP = 2,
    mp_rank_0X/model_optim_rng.pt, bf16 with Megatron's mixed-precision optimizer), written by
    megatron-core 0.16.1 on CPU with testdata/megatron_legacy_save.py (its docstring says what is in
    it). Needs: pip install --no-deps megatron-core==0.16.1."""
    import subprocess
    d = os.path.join(HERE, "megatron", "legacy_tp2")
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(HERE, "megatron_legacy_save.py"), d], check=True,
                   cwd=HERE, env=dict(os.environ, PYTHONPATH=HERE))


def megatron_legacy_distrib_files():
    """The same legacy save with Megatron's distributed optimizer (`--use-distributed-optimizer`):
    TP = 2, bf16 cast as Megatron-LM's Float16Module does (one bf16 buffer), each rank folder's
    distrib_optim.pt as DistributedOptimizer.save_parameter_state writes it (megatron-core 0.16.1
    on CPU, testdata/megatron_legacy_save.py ROOT --distributed-optimizer --float16-module)."""
    import subprocess
    d = os.path.join(HERE, "megatron", "legacy_tp2_distrib")
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(HERE, "megatron_legacy_save.py"), d, "--distributed-optimizer",
                    "--float16-module"], check=True, cwd=HERE, env=dict(os.environ, PYTHONPATH=HERE))


def tokenizer_families():
    """Issue 32: an uncased BERT WordPiece tokenizer.json as transformers converts a vocab.txt
    (BertNormalizer lowercasing, BertPreTokenizer, [CLS]/[SEP] post-processor) and a tokenizer.json
    Unigram (Metaspace), both trained on the English lines, and an Amharic WordPiece addition;
    all kept tiny."""
    import tempfile
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import BertTokenizerFast
    d = os.path.join(HERE, "tokenizers")
    english = english_lines()
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator([l.lower() for l in english], trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    with tempfile.TemporaryDirectory() as t:
        vocab = sorted(wp.get_vocab().items(), key=lambda kv: kv[1])
        with open(os.path.join(t, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(k + "\n" for k, _ in vocab))
        BertTokenizerFast.from_pretrained(t, do_lower_case=True).save_pretrained(t)
        with open(os.path.join(t, "tokenizer.json"), encoding="utf-8") as f, \
                open(os.path.join(d, "bert_uncased.json"), "w", encoding="utf-8") as o:
            o.write(f.read())
    # An Amharic WordPiece addition trained as tokenizers users do (BertPreTokenizer, ## pieces).
    am = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    am.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    am.decoder = decoders.WordPiece()
    am.train_from_iterator(amharic_lines(400, 7), trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[UNK]"], show_progress=False))
    am.save(os.path.join(d, "amharic_wordpiece.json"))
    un = Tokenizer(models.Unigram())
    un.pre_tokenizer = pre_tokenizers.Metaspace()
    un.decoder = decoders.Metaspace()
    un.train_from_iterator(english, trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False))
    un.save(os.path.join(d, "unigram_english.json"))


def json_edits():
    """The JSON side files of the GPT-2 fixture as transformers writes them, with the values a
    JSON edit must keep as written: tokenizer_config.json's model_max_length (an integer past
    u64, int(1e30)), a nested object with 1e-05 and -1 (sp_model_kwargs); config.json left at
    GPT-2's bos/eos 50256 (past the 1000-id tokenizer: check-vocab's fix edits them) with 1e-05,
    0.02 and the Hub gpt2's nested task_specific_params. The tests put them beside
    gpt2/model.safetensors and gpt2/tokenizer.json."""
    from tokenizers import Tokenizer
    from transformers import GPT2Config, PreTrainedTokenizerFast
    d = fresh_dir("json_edits")
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=2, n_head=2,
                        task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}})
    config.save_pretrained(d)
    tok = Tokenizer.from_file(os.path.join(HERE, "gpt2", "tokenizer.json"))
    t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                unk_token="<|endoftext|>", clean_up_tokenization_spaces=False,
                                sp_model_kwargs={"alpha": 1e-05, "enable_sampling": False, "nbest_size": -1})
    t.save_pretrained(d)
    for f in os.listdir(d):
        if f not in ("config.json", "tokenizer_config.json"):
            os.remove(os.path.join(d, f))
    assert "1000000000000000019884624838656" in open(os.path.join(d, "tokenizer_config.json")).read()


def sp_only_files():
    """Issue 43: a model folder as Llama-2 and Mistral v1 ship it, with a SentencePiece
    tokenizer.model and no tokenizer.json: a tiny untied LlamaForCausalLM saved by transformers
    (safetensors) beside a BPE .model with byte fallback (as Llama's), trained on the English
    lines; converted_tokenizer.json, that model as transformers converts it. expected.json holds, for new pieces, the ids real sentencepiece splits them into with
    the base's pieces (normaliser off, no dummy prefix: the pieces are already in the model's `▁`
    form) for this BPE base and for the unigram tokenizers/sp_english.model: subword-mean's
    reference."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import LlamaConfig, LlamaForCausalLM
    top = fresh_dir("sp_only")
    d = os.path.join(top, "llama")
    os.makedirs(d)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(english_lines()),
                                   model_prefix=os.path.join(d, "tokenizer"), vocab_size=500,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   normalization_rule_name="identity", minloglevel=2)
    os.remove(os.path.join(d, "tokenizer.vocab"))
    torch.manual_seed(43)
    cfg = LlamaConfig(vocab_size=500, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(d)
    # Llama-2's repositories ship a converted tokenizer.json beside tokenizer.model: transformers'.
    import tempfile
    from transformers import AutoTokenizer
    with tempfile.TemporaryDirectory() as t:
        AutoTokenizer.from_pretrained(d).save_pretrained(t)
        shutil.copy(os.path.join(t, "tokenizer.json"), os.path.join(top, "converted_tokenizer.json"))

    def splits(model_path, pieces):
        m = pb.ModelProto()
        with open(model_path, "rb") as f:
            m.ParseFromString(f.read())
        m.normalizer_spec.name = "identity"
        m.normalizer_spec.precompiled_charsmap = b""
        m.normalizer_spec.add_dummy_prefix = False
        m.normalizer_spec.remove_extra_whitespaces = False
        sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
        have = {p.piece for p in m.pieces}
        return [[p, sp.encode(p)] for p in pieces if p not in have]

    words = ["\u2581checkpoint", "\u2581surgery", "\u2581embeddings", "ization", "\u2581caf\u00e9",
             "\u2581\u1230\u120b\u121d", "\u2581the\u2581model", "\u2581tokenizer"]
    expected = {
        "bpe": splits(os.path.join(d, "tokenizer.model"), words),
        "unigram": splits(os.path.join(HERE, "tokenizers", "sp_english.model"), words),
    }
    with open(os.path.join(top, "expected.json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(
            f' "{k}": [\n' + ",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in v) + "\n ]"
            for k, v in expected.items()) + "\n}\n")


def tokenizer_issue43():
    """Issue 43: sp_bpe_english.model as transformers converts a SentencePiece model to a
    tokenizer.json (LlamaTokenizer from a folder holding tokenizer.model: Metaspace with
    split: false), and a BPE whose unknown token is missing from its vocabulary (unk_token="[UNK]"
    trained with special tokens ["<unk>"] only: tokenizers raises on any character it lacks)."""
    import tempfile
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer
    d = os.path.join(HERE, "tokenizers")
    with tempfile.TemporaryDirectory() as t:
        shutil.copy(os.path.join(d, "sp_bpe_english.model"), os.path.join(t, "tokenizer.model"))
        llama = LlamaTokenizer.from_pretrained(t)
        pre = json.loads(llama.backend_tokenizer.to_str())["pre_tokenizer"]
        if pre.get("type") != "Metaspace" or pre.get("split") is not False:
            sys.exit(f"converted pre_tokenizer is {pre}, not Metaspace with split: false")
        with open(os.path.join(d, "sp_bpe_english_converted.json"), "w", encoding="utf-8") as f:
            f.write(llama.backend_tokenizer.to_str())  # compact: a third of save()'s size
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(english_lines(), trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<unk>"], show_progress=False))
    with open(os.path.join(d, "bpe_unk_missing.json"), "w", encoding="utf-8") as f:
        f.write(bpe.to_str())


def knn_reference():
    """testdata/knn/reference.json: kNN interpolation (mergekit tokensurgeon's
    common_interpolation) computed independently in numpy float64, for every metric x weighting,
    on small integer-valued dictionaries (exact in f32, so distances and ties are exact).
    The rules (src/rows/init/knn.rs): the k nearest rows by distance, ties the lower index first
    (a stable argsort); Euclidean ||t - d||, cosine 1 - t.d / max(|t||d|, 1e-6). Weights:
    distance-proportional 1/d normalised (rows nearer than 1e-6 share all the weight; mergekit
    gives them ~1 - sum 1/(1e6 d_j)) or, for cosine, the similarities over max(sum, 1e-6);
    least squares: numpy's least-norm lstsq(P.T, t) with mergekit's rank cut (f32 epsilon x the
    larger side). Barycentric (argmin |P.T w - t| with sum w = 1, least norm) by another road
    than the Rust side's bordered system: w = 1/k + N z, N an orthonormal basis of the sums-to-0
    plane, z = lstsq(P.T N, t - P.T 1/k). Inputs are redrawn until no singular value lies near
    a rank cut (either exactly rank-deficient or well-conditioned), so the cuts cannot differ."""
    import numpy as np

    eps32 = float(np.finfo(np.float32).eps)

    def nearest(D, t, k, metric):
        if metric == "euclidean":
            dist = np.sqrt(((t - D) ** 2).sum(axis=1))
        else:
            tn, dn = np.sqrt(t @ t), np.sqrt((D * D).sum(axis=1))
            dist = 1.0 - (D @ t) / np.maximum(tn * dn, 1e-6)
        order = np.argsort(dist, kind="stable")
        return order, dist

    def weights(P, t, dd, metric, scheme):
        k = len(dd)
        if scheme == "distance_proportional":
            if metric == "euclidean":
                near = dd < 1e-6
                if near.any():
                    return near / near.sum()
                w = 1.0 / dd
            else:
                w = 1.0 - dd
            return w / max(w.sum(), 1e-6)
        if scheme == "least_squares":
            return np.linalg.lstsq(P.T, t, rcond=eps32 * max(P.shape))[0]
        w0 = np.full(k, 1.0 / k)
        N = sums_to_zero(k)
        z = np.linalg.lstsq(P.T @ N, t - P.T @ w0, rcond=eps32 * max(P.shape))[0]
        return w0 + N @ z

    def sums_to_zero(k):
        return np.linalg.svd(np.ones((1, k)))[2][1:].T

    def clear_of_cuts(P):
        # Singular values (relative to the largest) of P.T and P.T N: zero or far from any cut.
        for m in (P.T, P.T @ sums_to_zero(len(P))):
            sv = np.linalg.svd(m, compute_uv=False)
            r = sv / sv.max()
            if ((r > 1e-12) & (r < 1e-3)).any():
                return False
        return True

    def well_separated(D, T, k):
        # Distinct distances among the k + 1 nearest are far apart (equal ones exactly equal):
        # the Rust side's f64 sums may round differently from numpy's only by ~1e-16.
        for metric in ("euclidean", "cosine"):
            for t in T:
                order, dist = nearest(D, t, k, metric)
                s = dist[order[: k + 1]]
                gaps = np.abs(np.diff(s))
                if ((gaps > 0) & (gaps < 1e-9 * np.maximum(1.0, np.abs(s[1:])))).any():
                    return False
                if not clear_of_cuts(D[order[:k]]):
                    return False
        return True

    def case(name, seed, d, s, n, k, setup):
        rng = np.random.default_rng(seed)
        while True:
            D = rng.integers(-20, 21, (s, d)).astype(np.float64)
            T = rng.integers(-20, 21, (n, d)).astype(np.float64)
            setup(D, T)
            if well_separated(D, T, k):
                break
        expected = {}
        for metric in ("euclidean", "cosine"):
            for scheme in ("distance_proportional", "barycentric", "least_squares"):
                atoms, coefs = [], []
                for t in T:
                    order, dist = nearest(D, t, k, metric)
                    top = order[: min(k, s)]
                    w = weights(D[top], t, dist[top], metric, scheme)
                    atoms.append([int(i) for i in top])
                    coefs.append([float("%.15g" % v) for v in w])
                expected[f"{metric}/{scheme}"] = {"atoms": atoms, "coefs": coefs}
        return {"name": name, "k": k, "dict": D.astype(int).tolist(),
                "targets": T.astype(int).tolist(), "expected": expected}

    def generic(D, T):
        D[7] = D[3]       # two equal rows: shared weight, a singular Gram, a tie
        T[0] = D[11]      # a target equal to a row
        T[1] = D[3]       # ... equal to both copies
        T[2] = 2 * D[5]   # cosine distance 0, Euclidean not

    def wide(D, T):
        T[0] = D[2]       # k > width: least squares and barycentric are underdetermined

    cases = [case("generic", 46, 12, 40, 7, 6, generic),
             case("k_above_width", 47, 5, 16, 4, 9, wide)]
    d = fresh_dir("knn")
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({"cases": cases}, f, separators=(",", ":"))
        f.write("\n")


def donor_quality():
    """testdata/donor_quality/: a base model folder (untied embedding and head, width 16, f32,
    a WordLevel tokenizer of 300 tokens: <unk>, a-z, random words), a donor folder (the same 300
    tokens in another order plus 12 new ones: ten words, "2024" and the byte piece "<0x41>";
    width 72, f16; rows a linear map of the base's plus noise, new rows combinations of three
    shared rows plus noise), merged.json (the base's vocabulary and the 12 new tokens), and
    reference.json: the held-out quality report computed independently in numpy float64
    (src/rows/donor/quality.rs states the rules): held out, the round(5 %) shared tokens of the
    smallest splitmix64(splitmix64(seed) ^ base id); plain OMP per held-out token (largest
    |D r|, least-squares refit with numpy's lstsq, stop at k atoms or |r|^2 <= 1e-12 |y|^2) over
    the other shared tokens' donor rows; rebuilt base row = the same combination of base rows;
    cosine to the true base row; median and 5th percentile (numpy's linear percentile).
    Subword-mean: the token's text split greedily into the longest base tokens other than itself,
    the mean of their rows. For k in 8, 16, 32, 64, 72 (auto's 128 clipped to the width)."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers
    from safetensors.numpy import save_file as save_np

    rng = np.random.default_rng(46)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    words = []
    while len(words) < 273 + 10:
        w = "".join(rng.choice(letters, int(rng.integers(2, 7))))
        if w not in words:
            words.append(w)
    base_vocab = ["<unk>"] + letters + words[:273]
    new = words[273:] + ["2024", "<0x41>"]
    nb, d, dd = len(base_vocab), 16, 72
    E = rng.normal(0, 0.5, (nb, d)).astype(np.float32)
    H = rng.normal(0, 0.5, (nb, d)).astype(np.float32)

    def donor_rows(B):
        A = rng.normal(0, 1, (d, dd))
        shared = np.tanh(B.astype(np.float64) @ A) + 0.3 * rng.normal(0, 1, (nb, dd))
        extra = []
        for _ in new:
            pick = rng.choice(nb, 3, replace=False)
            extra.append(rng.normal(0, 1, 3) @ shared[pick] + 0.1 * rng.normal(0, 1, dd))
        return shared, np.array(extra)

    (de, ne), (dh, nh) = donor_rows(E), donor_rows(H)
    perm = rng.permutation(nb)  # donor id i holds base token perm[i]
    donor_vocab = [base_vocab[p] for p in perm] + new
    DE = np.concatenate([de[perm], ne]).astype(np.float16)
    DH = np.concatenate([dh[perm], nh]).astype(np.float16)

    def tokenizer(vocab, path):
        t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.Whitespace()
        t.save(path)

    d0 = fresh_dir("donor_quality")
    for name, vocab, e, h in (("base", base_vocab, E, H), ("donor", donor_vocab, DE, DH)):
        os.makedirs(os.path.join(d0, name))
        tokenizer(vocab, os.path.join(d0, name, "tokenizer.json"))
        save_np({"model.embed_tokens.weight": e, "lm_head.weight": h},
                os.path.join(d0, name, "model.safetensors"))
        with open(os.path.join(d0, name, "config.json"), "w") as f:
            json.dump({"tie_word_embeddings": False, "vocab_size": len(vocab)}, f)
    tokenizer(base_vocab + new, os.path.join(d0, "merged.json"))

    M = (1 << 64) - 1

    def mix(x):
        z = (x + 0x9E3779B97F4A7C15) & M
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        return z ^ (z >> 31)

    donor_id = {w: i for i, w in enumerate(donor_vocab)}
    shared = [(b, donor_id[w]) for b, w in enumerate(base_vocab)]  # every base token, base id order

    def held_out(seed):
        n = len(shared)
        h = min(max((n * 5 + 50) // 100, 1), 500, n - 1)
        s = mix(seed)
        order = sorted(range(n), key=lambda i: (mix(s ^ shared[i][0]), shared[i][0]))
        return sorted(order[:h])

    def omp(D, y, k):
        sel, x = [], np.zeros(0)
        r = y.copy()
        yy = y @ y
        for _ in range(min(k, len(D))):
            c = D @ r
            c[sel] = 0.0
            a = int(np.argmax(np.abs(c)))
            if c[a] == 0.0:
                break
            sel.append(a)
            x = np.linalg.lstsq(D[sel].T, y, rcond=None)[0]
            r = y - D[sel].T @ x
            if r @ r <= 1e-12 * yy:
                break
        return sel, x

    def cosine(a, b):
        aa, bb = a @ a, b @ b
        if bb == 0:
            return None
        return 0.0 if aa == 0 else float(a @ b / np.sqrt(aa * bb))

    def figures(cs):
        v = np.array([c for c in cs if c is not None])
        return {"tokens": len(v), "median": float(np.median(v)), "p5": float(np.percentile(v, 5))}

    longest = max(len(w) for w in base_vocab)
    index = {w: i for i, w in enumerate(base_vocab)}

    def split(text):
        out, at = [], 0
        while at < len(text):
            for l in range(min(len(text) - at, longest), 0, -1):
                piece = text[at:at + l]
                if piece != text and piece in index:
                    out.append(index[piece])
                    at += l
                    break
            else:
                return None
        return out

    held = held_out(0)
    rest = [i for i in range(len(shared)) if i not in held]
    mats = {"embedding": (DE.astype(np.float64), E.astype(np.float64)),
            "head": (DH.astype(np.float64), H.astype(np.float64))}
    ks = {}
    for k in (8, 16, 32, 64, 72):
        ks[str(k)] = {}
        for m, (Dm, Bm) in mats.items():
            D = Dm[[shared[i][1] for i in rest]]
            cs = []
            for i in held:
                sel, x = omp(D, Dm[shared[i][1]], k)
                rebuilt = sum((xi * Bm[shared[rest[a]][0]] for a, xi in zip(sel, x)), np.zeros(d))
                cs.append(cosine(rebuilt, Bm[shared[i][0]]))
            ks[str(k)][m] = figures(cs)
    sub = {}
    for m, (_, Bm) in mats.items():
        cs = []
        for i in held:
            p = split(base_vocab[shared[i][0]])
            cs.append(None if p is None else cosine(Bm[p].mean(axis=0), Bm[shared[i][0]]))
        sub[m] = figures(cs)
    best = max(ks, key=lambda k: (ks[k]["embedding"]["median"], -int(k)))
    ref = {"held_out_base_ids": {str(s): [shared[i][0] for i in held_out(s)] for s in (0, 7)},
           "rest": len(rest), "ks": ks, "subword_mean": sub, "auto": int(best)}
    with open(os.path.join(d0, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def gguf_listing(path):
    """gguf.GGUFReader's reading of a GGUF file, as JSON: every key (its value type, array element
    type, value) in header order, every tensor (ggml type, ne[] fastest-first as GGUF stores it,
    elements, bytes, absolute data offset), the alignment and the data section's start. The Rust
    reader is compared with this on every key and tensor (tests/gguf.rs)."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    def value(field):
        t = field.types
        if t[0] == GGUFValueType.ARRAY and t[1] == GGUFValueType.ARRAY:
            # An array of arrays: GGUFReader's `data` does not index its elements, so they are
            # decoded from its `parts` (element type, count, one part per value, per element).
            return walk(field.parts, 4, field.parts[3][0], int(field.parts[4][0]))[0]
        if t[0] == GGUFValueType.ARRAY:
            return [decode(field.parts[i], t[1:]) for i in field.data]
        return decode(field.parts[field.data[0]], t)

    def walk(parts, i, etype, count):
        out = []
        i += 1
        for _ in range(count):
            if etype == GGUFValueType.ARRAY:
                sub, n = parts[i][0], int(parts[i + 1][0])
                v, i = walk(parts, i + 1, sub, n)
                out.append(v)
            else:
                out.append(decode(parts[i], [GGUFValueType(etype)]))
                i += 1
        return out, i

    def decode(part, types):
        if types[0] == GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        if types[0] == GGUFValueType.ARRAY:
            return nested(part)
        v = part.tolist()[0]
        if types[0] == GGUFValueType.BOOL:
            return bool(v)
        return v

    r = GGUFReader(path)
    keys = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        keys.append({
            "key": name,
            "type": GGUFValueType(field.types[0]).name.lower(),
            "element": GGUFValueType(field.types[1]).name.lower() if len(field.types) > 1 else None,
            "value": value(field),
        })
    tensors = [{
        "name": t.name,
        "ggml_type": int(t.tensor_type),
        "ggml_type_name": t.tensor_type.name,
        "ne": [int(x) for x in t.shape],
        "elements": int(t.n_elements),
        "bytes": int(t.n_bytes),
        "offset": int(t.data_offset),
    } for t in r.tensors]
    return {
        "version": int(r.fields["GGUF.version"].parts[-1][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "keys": keys,
        "tensors": tensors,
    }


def gguf_files():
    """Issue 48: tiny Llama-shaped GGUF files around testdata/gpt2's byte-level BPE tokenizer
    (1000 tokens, 743 merges), written by gguf.GGUFWriter (gguf==0.19.0), each with
    GGUFReader's listing beside it (<name>.listing.json):
    - llama_gpt2_tied.gguf: token_embd F16, no output.weight (tied), every metadata value type
      (u8…f64, bool, string, arrays of each, an array of arrays), a chat template;
    - llama_gpt2_untied_q8.gguf: token_embd and output Q8_0, a Q4_K tensor (raw blocks: gguf
      quantizes no K-quant, so its bytes are written as the type's blocks), general.alignment 64,
      the table padded to 1024 rows (24 padding rows past the 1000 tokens);
    - broken.gguf: 1000 tokens, token_embd 998 rows, llama.vocab_size 1000, eos id 1005 (past
      the table), a chat template naming <|im_start|> (not in the vocabulary);
    - ggml_types.json: gguf-py's GGML_QUANT_SIZES (name: [number, block, bytes per block])."""
    import numpy as np
    import gguf
    d = os.path.join(HERE, "gguf")
    os.makedirs(d, exist_ok=True)
    tok = json.load(open(os.path.join(HERE, "gpt2", "tokenizer.json"), encoding="utf-8"))
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + [a["content"] for a in sorted(tok["added_tokens"], key=lambda a: a["id"])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    eot = tok["added_tokens"][0]["id"]
    types = [gguf.TokenType.CONTROL if i == eot else gguf.TokenType.NORMAL for i in range(len(tokens))]
    rng = np.random.default_rng(48)
    with open(os.path.join(d, "ggml_types.json"), "w", encoding="utf-8") as f:
        json.dump({t.name: [t.value, *gguf.GGML_QUANT_SIZES[t]] for t in gguf.GGMLQuantizationType}, f)
        f.write("\n")

    def llama(name, embd, rows, tensors, alignment=None, extra=None, vocab_size=None):
        path = os.path.join(d, name)
        w = gguf.GGUFWriter(path, "llama")
        if alignment:
            w.add_custom_alignment(alignment)
        w.add_name(name.removesuffix(".gguf"))
        w.add_context_length(128)
        w.add_embedding_length(embd)
        w.add_block_count(1)
        w.add_feed_forward_length(2 * embd)
        w.add_head_count(2)
        w.add_layer_norm_rms_eps(1e-5)
        if vocab_size is not None:
            w.add_vocab_size(vocab_size)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(eot)
        w.add_eos_token_id(eot)
        for k, v in (extra or {}).items():
            v(w) if callable(v) else w.add_string(k, v)
        for tname, arr, raw in tensors:
            w.add_tensor(tname, arr, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path + ".listing.json", "w", encoding="utf-8") as f:
            json.dump(gguf_listing(path), f, ensure_ascii=False)
            f.write("\n")

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def q8(a):
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)

    def every_type(w):
        w.add_uint8("test.u8", 200)
        w.add_int8("test.i8", -100)
        w.add_uint16("test.u16", 60000)
        w.add_int16("test.i16", -30000)
        w.add_uint32("test.u32", 4000000000)
        w.add_int32("test.i32", -2000000000)
        w.add_float32("test.f32", 0.1)
        w.add_bool("test.bool", True)
        w.add_uint64("test.u64", 2**63 + 5)
        w.add_int64("test.i64", -(2**62))
        w.add_float64("test.f64", 0.1)
        w.add_string("test.string", "héllo ▁ world")
        for t, vals in [(gguf.GGUFValueType.UINT8, [1, 2]), (gguf.GGUFValueType.INT8, [-1, 2]),
                        (gguf.GGUFValueType.UINT16, [3]), (gguf.GGUFValueType.INT16, [-3]),
                        (gguf.GGUFValueType.UINT32, [5, 6]), (gguf.GGUFValueType.INT32, [-5]),
                        (gguf.GGUFValueType.FLOAT32, [0.5, -0.25]), (gguf.GGUFValueType.BOOL, [True, False]),
                        (gguf.GGUFValueType.UINT64, [7]), (gguf.GGUFValueType.INT64, [-7]),
                        (gguf.GGUFValueType.FLOAT64, [0.1])]:
            w.add_key_value(f"test.array.{t.name.lower()}", vals, gguf.GGUFValueType.ARRAY, sub_type=t)
        w.add_array("test.array.string", ["a", "bc", ""])
        w.add_array("test.array.nested", [[1, 2], [3]])

    template = "{% for m in messages %}{{ m['content'] }}<|endoftext|>{% endfor %}"
    llama("llama_gpt2_tied.gguf", 16, 1000, [
        ("token_embd.weight", f32(1000, 16).astype(np.float16), None),
        ("blk.0.attn_norm.weight", np.ones(16, np.float32), None),
        ("output_norm.weight", np.ones(16, np.float32), None),
    ], extra={"tokenizer.chat_template": template, "types": every_type})
    q4k = np.zeros((2, 144), np.uint8)
    q4k[:, 16:] = rng.integers(0, 256, (2, 128), dtype=np.uint8)
    q4k[:, 4:16] = rng.integers(0, 64, (2, 12), dtype=np.uint8)
    q4k[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    q4k[:, 2:4] = np.frombuffer(np.float16(0.001).tobytes(), np.uint8)
    llama("llama_gpt2_untied_q8.gguf", 32, 1024, [
        ("token_embd.weight", q8(f32(1024, 32)), gguf.GGMLQuantizationType.Q8_0),
        ("blk.0.attn_norm.weight", np.ones(32, np.float32), None),
        ("blk.0.ffn_down.weight", q4k, gguf.GGMLQuantizationType.Q4_K),
        ("output_norm.weight", np.ones(32, np.float32), None),
        ("output.weight", q8(f32(1024, 32)), gguf.GGMLQuantizationType.Q8_0),
    ], alignment=64, extra={"tokenizer.chat_template": template,
                            "pad": lambda w: w.add_pad_token_id(eot)})
    llama("broken.gguf", 16, 998, [
        ("token_embd.weight", f32(998, 16).astype(np.float16), None),
        ("output_norm.weight", np.ones(16, np.float32), None),
    ], vocab_size=1000, extra={
        "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|endoftext|>{% endfor %}",
        "eos": lambda w: w.add_key_value("tokenizer.ggml.eos_token_id", 1005, gguf.GGUFValueType.UINT32),
    })


def gguf_sentencepiece():
    """Issue 48: testdata/gguf/llama_sp_untied.gguf, a tiny Llama-shaped GGUF around
    testdata/tokenizers/sp_bpe_english.model (400 pieces) as convert_hf_to_gguf.py's
    _set_vocab_sentencepiece writes it: tokenizer.ggml.model "llama", pre "default", every piece with
    its score and type (<unk> UNKNOWN, <s>/</s> CONTROL, byte pieces BYTE — this model has none,
    the rest NORMAL), bos/eos/unk ids from the model; token_embd and output.weight F16 (untied).
    GGUFReader's listing beside it (llama_sp_untied.gguf.listing.json)."""
    import numpy as np
    import gguf
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(HERE, "tokenizers", "sp_bpe_english.model"))
    n = sp.vocab_size()
    tokens, scores, types = [], [], []
    T = gguf.TokenType
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(T.UNKNOWN if sp.is_unknown(i) else T.CONTROL if sp.is_control(i)
                     else T.UNUSED if sp.is_unused(i) else T.BYTE if sp.is_byte(i) else T.NORMAL)
    rng = np.random.default_rng(4848)
    path = os.path.join(HERE, "gguf", "llama_sp_untied.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("llama_sp_untied")
    w.add_context_length(128)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_tensor("token_embd.weight", (rng.standard_normal((n, 16)) * 0.02).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(16, np.float32))
    w.add_tensor("output.weight", (rng.standard_normal((n, 16)) * 0.02).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path + ".listing.json", "w", encoding="utf-8") as f:
        json.dump(gguf_listing(path), f, ensure_ascii=False)
        f.write("\n")


def family_models():
    """Issues 46/47: a WordPiece and a Unigram model folder written by transformers
    (save_pretrained, f32 safetensors) with their tokenizer as transformers saves it
    (tokenizer.json, tokenizer_config.json, special_tokens_map.json when it writes one).
    wordpiece_bert: a tied BertForMaskedLM (a trained-looking decoder bias) on an uncased BERT
    vocab.txt laid out as BERT's is ([PAD], [unused0..4], then [UNK] [CLS] [SEP] [MASK], then
    tokenizers/bert_uncased.json's pieces), so that trimming the unused tokens moves the specials.
    unigram_llama: an untied LlamaForCausalLM on tokenizers/unigram_english.json with <s> and </s>
    added after its 300 pieces (bos/eos 300/301) and a post-processor that prepends <s>.
    Vocabulary rows = tokenizer size; hidden 16, one layer."""
    import tempfile
    from tokenizers import Tokenizer, processors
    from transformers import (BertConfig, BertForMaskedLM, BertTokenizerFast, LlamaConfig,
                              LlamaForCausalLM, PreTrainedTokenizerFast)
    top = fresh_dir("families")
    d = os.path.join(top, "wordpiece_bert")
    os.makedirs(d)
    with open(os.path.join(HERE, "tokenizers", "bert_uncased.json"), encoding="utf-8") as f:
        pieces = sorted(json.load(f)["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [k for k, _ in pieces if k not in specials]
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(5)] + specials[1:] + words
    with tempfile.TemporaryDirectory() as t:
        with open(os.path.join(t, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(k + "\n" for k in vocab))
        tok = BertTokenizerFast.from_pretrained(t, do_lower_case=True)
    tok.save_pretrained(d)
    assert len(tok) == len(vocab)
    torch.manual_seed(47)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, pad_token_id=0)
    bert = BertForMaskedLM(cfg)
    with torch.no_grad():
        bert.cls.predictions.bias.copy_(torch.randn(len(vocab)) * 0.1)
    bert.save_pretrained(d)

    d = os.path.join(top, "unigram_llama")
    os.makedirs(d)
    un = Tokenizer.from_file(os.path.join(HERE, "tokenizers", "unigram_english.json"))
    un.add_special_tokens(["<s>", "</s>"])
    bos, eos = un.token_to_id("<s>"), un.token_to_id("</s>")
    un.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                      special_tokens=[("<s>", bos)])
    tok = PreTrainedTokenizerFast(tokenizer_object=un, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.save_pretrained(d)
    torch.manual_seed(46)
    lcfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                       tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos)
    LlamaForCausalLM(lcfg).save_pretrained(d)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(top) for f in fs)
    assert total <= 150_000, total


def gguf_quant_reference():
    """Issue 48: testdata/gguf/quant_reference.json, what extend-embeddings' GGUF row codecs are
    compared with: six f32 rows of 256 (normal at two scales, one with an outlier, one all zero,
    one constant, one of halves and ties), and for each ggml type gguf-py quantizes (F16, BF16,
    Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) `gguf.quants.quantize` of every row, as hex. Rows as f32 bits
    (hex) so nothing is lost to decimal. When llama-cpp-python is importable (its libggml-base),
    also ggml's own quantizer (`ggml_quantize_chunk`, no importance matrix: the _ref quantizers
    llama_model_quantize runs) for Q4_K, Q5_K, Q6_K, and gguf-py's dequantization of those bytes."""
    import numpy as np
    import gguf
    rng = np.random.default_rng(4848)
    rows = np.stack([
        (rng.standard_normal(256) * 0.02),
        (rng.standard_normal(256) * 1.5),
        np.where(np.arange(256) == 77, 3.0, rng.standard_normal(256) * 0.01),
        np.zeros(256),
        np.full(256, 0.25),
        np.tile([0.5, -0.5, 1.0, -1.0, 0.125, 0.0, 2.0, -2.0], 32),
    ]).astype(np.float32)
    T = gguf.GGMLQuantizationType
    out = {"rows": [r.view(np.uint32).tolist() for r in rows], "types": {}, "llama_cpp": {}}
    for t in (T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        q = gguf.quants.quantize(rows, t)
        out["types"][t.name] = [bytes(r).hex() for r in q]
    try:
        import ctypes
        import llama_cpp
        libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
        base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
        base.ggml_quantize_chunk.restype = ctypes.c_size_t
        base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        for t in (T.Q4_K, T.Q5_K, T.Q6_K):
            size = gguf.GGML_QUANT_SIZES[t][1]
            dst = np.zeros((len(rows), size), dtype=np.uint8)
            src = np.ascontiguousarray(rows)
            base.ggml_quantize_chunk(int(t), src.ctypes.data, dst.ctypes.data, 0, len(rows), 256, None)
            deq = gguf.quants.dequantize(dst, t)
            out["llama_cpp"][t.name] = {
                "bytes": [bytes(r).hex() for r in dst],
                "dequantized": [r.astype(np.float32).view(np.uint32).tolist() for r in deq],
            }
        out["llama_cpp_version"] = llama_cpp.__version__
    except ImportError:
        pass
    with open(os.path.join(HERE, "gguf", "quant_reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


def main():
    if len(sys.argv) > 1:
        # Only the named generators (others keep their committed bytes).
        for name in sys.argv[1:]:
            globals()[name]()
        return
    chatterbox_t3()
    gpt2()
    broken()
    torch_files()
    hostile()
    torch_eras()
    tokenizers_files()
    sanitize_files()
    resume_files()
    tied_files()
    trainer_files()
    resume_real_files()
    trainer_all_seen_files()
    audio_files()
    vocab_files()
    tokenizer_additions()
    dcp_files()
    zero_files()
    megatron_files()
    megatron_legacy_files()
    megatron_legacy_distrib_files()
    tokenizer_families()
    json_edits()
    sp_only_files()
    tokenizer_issue43()
    knn_reference()
    donor_quality()
    gguf_files()
    family_models()
    gguf_quant_reference()
    gguf_sentencepiece()
    total = 0
    for root, _, files in os.walk(HERE):
        if "__pycache__" in root:
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"fixtures written: {total / 1e6:.1f} MB")
    if total > 20e6:
        sys.exit("fixtures exceed 20 MB")


if __name__ == "__main__":
    main()
