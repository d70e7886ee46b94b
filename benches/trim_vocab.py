"""trim-vocab at Gemma scale (issue 47's speed goal; not in CI): a 262144-token byte-level BPE
(benches/make_big_tokenizers.py) with a 262144 × 2560 bf16 embedding and untied head (2.7 GB),
trimmed to the tokens of a 10 MB corpus. The goal: trim-vocab ≤ 2× (reading the corpus with
`tokenizers` + writing the output at the disk floor), both measured here, in the same run, median
of RUNS, interleaved. Also into tmpfs, against tokenizers + `cp` to tmpfs, so the CPU's cost
cannot hide behind the disk.

    python3 benches/trim_vocab.py target/release/trim-vocab [WORK_DIR]

Needs torch, safetensors and tokenizers (pip). OPENBLAS_* unset for the Python baselines.
"""
import json, os, random, statistics, subprocess, sys, time

EXE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/trim-vocab")
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/trim-bench"
RUNS = int(os.environ.get("RUNS", "3"))
N, D = 262144, 2560
HERE = os.path.dirname(os.path.abspath(__file__))
env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
os.makedirs(WORK, exist_ok=True)
model = os.path.join(WORK, "model")
tokdir = os.path.join(WORK, "tok")
corpus = os.path.join(WORK, "corpus.txt")


def setup():
    if not os.path.exists(os.path.join(tokdir, "big_bpe.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_tokenizers.py"), tokdir], check=True, env=env)
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        import torch
        from safetensors.torch import save_file
        os.makedirs(model, exist_ok=True)
        g = torch.Generator().manual_seed(47)
        t = {"model.embed_tokens.weight": (torch.randn(N, D, generator=g) * 0.02).to(torch.bfloat16),
             "lm_head.weight": (torch.randn(N, D, generator=g) * 0.02).to(torch.bfloat16),
             "model.norm.weight": torch.ones(D, dtype=torch.bfloat16)}
        save_file(t, os.path.join(model, "model.safetensors"))
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": N,
                   "hidden_size": D, "tie_word_embeddings": False}, open(os.path.join(model, "config.json"), "w"))
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        subprocess.run(["cp", os.path.join(tokdir, "big_bpe.json"), os.path.join(model, "tokenizer.json")], check=True)
    if not os.path.exists(corpus):
        # 10 MB of text: words drawn from the tokenizer's own ASCII tokens (a Zipf-like draw, so a
        # realistic fraction of the vocabulary is used), 100 words a line.
        vocab = json.load(open(os.path.join(tokdir, "big_bpe.json")))["model"]["vocab"]
        words = [t.replace("Ġ", "") for t in vocab if t.isascii() and t.replace("Ġ", "").isalpha() and len(t) > 2]
        random.seed(47)
        with open(corpus, "w") as f:
            size = 0
            while size < 10_000_000:
                line = " ".join(words[min(int(random.paretovariate(0.6)) - 1, len(words) - 1)] for _ in range(100))
                f.write(line + "\n")
                size += len(line) + 1


def run_timed(cmd, out, **kw):
    subprocess.run(["rm", "-rf", out], check=True)
    os.sync()
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def tokenizers_read():
    # What reading the corpus with `tokenizers` costs (the user's tool for the same question).
    code = ("import tokenizers,sys; t=tokenizers.Tokenizer.from_file(sys.argv[1]); "
            "lines=open(sys.argv[2]).read().splitlines(); t.encode_batch(lines)")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, os.path.join(model, "tokenizer.json"), corpus], check=True, env=env)
    return time.perf_counter() - t


def main():
    setup()
    out_disk, out_shm = os.path.join(WORK, "out"), "/dev/shm/trim-bench-out"
    ours = [EXE, model, "--keep-corpus", corpus, "--allow-shrink", "--output"]
    # Warm the page cache and learn the output size (an earlier run's output removed first).
    subprocess.run(["rm", "-rf", out_disk, out_shm], check=True)
    subprocess.run(ours + [out_disk], check=True, stdout=subprocess.DEVNULL)
    written = os.path.join(out_disk, "model.safetensors")
    size = os.path.getsize(written)
    times = {k: [] for k in ["ours (disk)", "tokenizers read", "dd floor of the output", "ours (tmpfs)", "cp to tmpfs"]}
    for _ in range(RUNS):
        times["ours (disk)"].append(run_timed(ours + [out_disk], out_disk))
        times["tokenizers read"].append(tokenizers_read())
        times["dd floor of the output"].append(run_timed(
            ["dd", f"if={written}", f"of={out_disk}.dd", "bs=16M", "oflag=direct", "conv=fsync", "status=none"],
            out_disk + ".dd"))
        times["ours (tmpfs)"].append(run_timed(ours + [out_shm], out_shm))
        times["cp to tmpfs"].append(run_timed(["cp", written, out_shm + ".cp"], out_shm + ".cp"))
    subprocess.run(["rm", "-rf", out_shm, out_shm + ".cp", out_disk + ".dd"], check=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    rep = json.load(open(os.path.join(out_disk, "token_map.json")))
    print(f"## trim-vocab: {N} tokens, {N} × {D} bf16 embedding + head → {rep['new_vocab_size']} rows "
          f"({size / 1e9:.2f} GB written), 10 MB corpus, median of {RUNS}")
    print("| command | median | runs |")
    print("|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.2f} s | {' '.join(f'{x:.2f}' for x in v)} |")
    floor = med["tokenizers read"] + med["dd floor of the output"]
    print(f"ours (disk) / (tokenizers read + dd floor): {med['ours (disk)'] / floor:.2f}× (goal ≤ 2×)")
    floor_shm = med["tokenizers read"] + med["cp to tmpfs"]
    print(f"ours (tmpfs) / (tokenizers read + cp to tmpfs): {med['ours (tmpfs)'] / floor_shm:.2f}×")


if __name__ == "__main__":
    main()
