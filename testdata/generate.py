#!/usr/bin/env python3
"""Writes the committed test fixtures with the real tools (torch, safetensors, transformers).

Run from the repository root:  python3 testdata/generate.py
Needs: pip install torch safetensors transformers  (tokenizers/sentencepiece fixtures come later).
Everything is seeded, so a re-run gives the same tensors. Keep the total under 20 MB.
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


def main():
    chatterbox_t3()
    gpt2()
    broken()
    total = 0
    for root, _, files in os.walk(HERE):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"fixtures written: {total / 1e6:.1f} MB")
    if total > 20e6:
        sys.exit("fixtures exceed 20 MB")


if __name__ == "__main__":
    main()
