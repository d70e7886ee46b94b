#!/usr/bin/env python3
"""Issue 48: extend-embeddings growing a ~8 GB Q4_K GGUF (Llama-shaped, 262144-token byte-level
BPE, token_embd Q4_K [262144 × 2560], output Q6_K, Q4_K filler blocks) by +1000 tokens, beside the
disk floor (dd oflag=direct conv=fsync of the output's size) and, when /dev/shm holds it, the tmpfs
floor (cp into /dev/shm). Medians of RUNS, interleaved; each command run twice, the second timed.

Run from the repository root with a python that has gguf (0.19.0) and numpy:
    cargo build --release --locked --bin extend-embeddings --bin merge-tokenizers
    /work/venv-llama/bin/python benches/gguf_grow.py   # RUNS=3 GB=8 WORK=/tmp/gguf-bench
GB=2 makes a smaller file for a quick run (fewer filler tensors; the embedding and head stay whole).
FLOOR=source saves one output's worth of disk (8 GB): the floors copy the source file instead of a
copy of our output (real bytes too, 0.2 % fewer) and their times are scaled to the output's size.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = int(os.environ.get("RUNS", "3"))
GB = float(os.environ.get("GB", "8"))
WORK = os.environ.get("WORK", "/tmp/gguf-bench")
FLOOR = os.environ.get("FLOOR", "output")
EXE = os.path.join("target", "release", "extend-embeddings")
MERGE = os.path.join("target", "release", "merge-tokenizers")
N, D, FF = 262144, 2560, 10240
Q = gguf.GGMLQuantizationType
os.makedirs(WORK, exist_ok=True)
tokdir = os.path.join(WORK, "tok")
src = os.path.join(WORK, f"model_{GB:g}gb.gguf")
merged = os.path.join(WORK, "merged.json")
dst = os.path.join(WORK, "out.gguf")
rng = np.random.default_rng(48)


def q4k_blocks(n):
    # 144 bytes a block of 256: f16 d, f16 dmin (finite, small), 12 scale bytes, 128 quant bytes.
    b = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
    dm = (rng.random((n, 2), dtype=np.float32) * 1e-3).astype(np.float16)
    b[:, 0:4] = dm.view(np.uint8).reshape(n, 4)
    return b


def q6k_blocks(n):
    # 210 bytes a block: 128 ql, 64 qh, 16 int8 scales, f16 d last.
    b = rng.integers(0, 256, size=(n, 210), dtype=np.uint8)
    d = (rng.random(n, dtype=np.float32) * 1e-3).astype(np.float16)
    b[:, 208:210] = d.view(np.uint8).reshape(n, 2)
    return b


def tensors():
    t = [("token_embd.weight", (N, D), Q.Q4_K), ("output.weight", (N, D), Q.Q6_K),
         ("output_norm.weight", (D,), Q.F32)]
    per_layer = [("attn_q", (D, D)), ("attn_k", (D, D)), ("attn_v", (D, D)), ("attn_output", (D, D)),
                 ("ffn_gate", (FF, D)), ("ffn_up", (FF, D)), ("ffn_down", (D, FF))]
    size = N * D // 256 * (144 + 210)
    layers = 0
    while size < GB * 1e9:
        for name, shape in per_layer:
            t.append((f"blk.{layers}.{name}.weight", shape, Q.Q4_K))
            size += shape[0] * shape[1] // 256 * 144
        t.append((f"blk.{layers}.attn_norm.weight", (D,), Q.F32))
        t.append((f"blk.{layers}.ffn_norm.weight", (D,), Q.F32))
        layers += 1
    return t, layers


def write_model():
    tok = json.load(open(os.path.join(tokdir, "big_bpe.json"), encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    toks = [None] * len(vocab)
    for s, i in vocab.items():
        toks[i] = s
    for a in tok.get("added_tokens", []):
        if a["id"] < len(toks):
            toks[a["id"]] = a["content"]
    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    assert len(toks) == N and None not in toks, "big_bpe.json is not 262144 dense ids"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    ts, layers = tensors()
    w = gguf.GGUFWriter(src + ".part", "llama")
    w.add_context_length(8192)
    w.add_embedding_length(D)
    w.add_block_count(layers)
    w.add_feed_forward_length(FF)
    w.add_head_count(20)
    w.add_head_count_kv(20)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types([3 if i in special else 1 for i in range(N)])
    w.add_token_merges(merges)
    for name, shape, qt in ts:
        nb = int(np.prod(shape)) * 4 if qt == Q.F32 else \
            int(np.prod(shape)) // 256 * (144 if qt == Q.Q4_K else 210)
        # element shape in numpy order (rows, columns); the writer stores it as ne = (columns, rows)
        w.add_tensor_info(name, shape, np.dtype(np.float32), nb, raw_dtype=qt if qt != Q.F32 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    align = w.data_alignment
    f.write(bytes(-f.tell() % align))
    chunk = 1 << 16   # blocks a chunk: numpy holds ~14 MB at a time
    for name, shape, qt in ts:
        if qt == Q.F32:
            f.write(np.ones(shape, dtype=np.float32).tobytes())
        else:
            left = int(np.prod(shape)) // 256
            while left:
                n = min(chunk, left)
                f.write((q4k_blocks(n) if qt == Q.Q4_K else q6k_blocks(n)).tobytes())
                left -= n
        f.write(bytes(-f.tell() % align))
    w.close()
    os.rename(src + ".part", src)


def setup():
    for b in (EXE, MERGE):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --locked --bin extend-embeddings --bin merge-tokenizers")
    if not os.path.exists(os.path.join(tokdir, "big_bpe.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_tokenizers.py"), tokdir], check=True)
    if not os.path.exists(src):
        write_model()
    if not os.path.exists(merged):
        subprocess.run([MERGE, "--base", os.path.join(tokdir, "big_bpe.json"), "--add",
                        os.path.join(tokdir, "add_1000.txt"), "--output", merged, "--allow-base-change"],
                       check=True, stdout=subprocess.DEVNULL)


def run(cmd):
    # Returns the peak RSS (bytes) of the command, from wait4.
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        sys.exit(f"{cmd[0]} failed ({status})")
    return ru.ru_maxrss * 1024


rss = []


def ours(out=dst):
    rss.append(run([EXE, src, "--tokenizer", merged, "--output", out, "--overwrite"]))


def timed(fn, out):
    for _ in range(2):   # the second run is timed (see benches/extend_embeddings.py)
        if os.path.exists(out):
            os.remove(out)
        os.sync()
        t = time.perf_counter()
        fn()
        e = time.perf_counter() - t
    os.remove(out)
    return e


def main():
    setup()
    subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)   # page cache warm
    ours()
    out_size = os.path.getsize(dst)
    # The floors' source: our output itself (real bytes, not a sparse file — `cp` of a sparse
    # file copies no data, which made the tmpfs floor 0 s), held in the page cache.
    if FLOOR == "source":
        blob, scale = src, out_size / os.path.getsize(src)
        os.remove(dst)
    else:
        blob, scale = os.path.join(WORK, "floor.bin"), 1.0
        os.replace(dst, blob)
    subprocess.run(["cat", blob], stdout=subprocess.DEVNULL, check=True)
    x = os.path.join(WORK, "x")
    cmds = [("extend-embeddings", ours, dst),
            ("dd bs=16M oflag=direct conv=fsync (the disk floor, output's size)",
             lambda: subprocess.run(["dd", f"if={blob}", f"of={x}", "bs=16M", "oflag=direct", "conv=fsync",
                                     "status=none"], check=True), x)]
    st = os.statvfs("/dev/shm")
    if st.f_bavail * st.f_frsize > out_size * 1.2 + (2 << 30):
        shm = "/dev/shm/gguf-bench-out.gguf"
        cmds += [("cp to tmpfs (the memory floor)",
                  lambda: subprocess.run(["cp", blob, shm], check=True), shm),
                 ("extend-embeddings to tmpfs", lambda: ours(shm), shm)]
    else:
        print(f"/dev/shm has {st.f_bavail * st.f_frsize >> 20} MiB free: no tmpfs leg")
    times = {name: [] for name, _, _ in cmds}
    loads = []
    for _ in range(RUNS):
        for name, fn, out in cmds:
            floor = not name.startswith("extend-embeddings")
            times[name].append(timed(fn, out) * (scale if floor else 1.0))
        loads.append(os.getloadavg()[0])
    print(f"## grow a {os.path.getsize(src) / 1e9:.2f} GB Q4_K GGUF by +1000 tokens "
          f"(output {out_size} bytes), median of {RUNS}; load average (1 min) per run: "
          + " ".join(f"{v:.2f}" for v in loads)
          + ("" if scale == 1.0 else f"; floors copy the source, times scaled ×{scale:.4f} to the output's size"))
    print("| command | wall (median) | runs |\n|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.2f} s | {' '.join(f'{t:.2f}' for t in v)} |")
    pairs = [("extend-embeddings", cmds[1][0])]
    if len(cmds) > 2:
        pairs.append(("extend-embeddings to tmpfs", "cp to tmpfs (the memory floor)"))
    for a, b in pairs:
        r = [p / q for p, q in zip(times[a], times[b])]
        print(f"{a} / {b}: run by run {' '.join(f'{v:.2f}' for v in r)}; median {statistics.median(r):.2f}×; "
              f"of medians {statistics.median(times[a]) / statistics.median(times[b]):.2f}×")
    print(f"peak RSS of extend-embeddings: median {statistics.median(rss) / 2**20:.0f} MiB, max {max(rss) / 2**20:.0f} MiB")
    print(f"(this script's own peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
