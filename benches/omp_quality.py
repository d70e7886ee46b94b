#!/usr/bin/env python3
"""Quality check of `extend-embeddings --init omp` (issue 35): on a small model pair trained here on
text in two scripts, the omp-initialised model's loss on held-out new-script text, before any
further training, must be lower than with `--init mean` and `--init subword-mean`.

Run from the repository root (needs torch, transformers, tokenizers, safetensors; about 5 minutes
on 2 cores):

    cargo build --release --bin extend-embeddings --bin merge-tokenizers
    python3 benches/omp_quality.py                  # all cases; --keep DIR keeps the models
    python3 benches/omp_quality.py --corpora translit --ties tied --steps 300   # one case, faster

What it does, per new-script corpus and per head kind (tied, untied):
  1. English: testdata/tokenizers/english.txt plus the docstrings of more stdlib modules (prose
     paragraphs, deduplicated), shuffled with a fixed seed; 10 % held out.
  2. The new script, two corpora:
     - `translit`: the same English written in Ethiopic script (a fixed consonant+vowel -> fidel
       transliteration, `.` -> `።`, `,` -> `፣`): a second script with real structure, related
       to the first. The donor learns it from the transliteration of the English training lines;
       the held-out lines are transliterations of the held-out English lines (seen by no model in
       either script).
     - `synthetic`: the repository's Amharic-looking text (testdata/generate.py `amharic_lines`:
       12 frequent words and random fidel strings, no relation to English); donor training
       `amharic_lines(3000, 11)`, held out testdata/tokenizers/amharic.txt.
  3. BASE: a byte-level BPE (1000 ids) trained on English only, a GPT-2 (hidden 64, 2 layers)
     trained on English; DONOR: a byte-level BPE (1500 ids) on English + the new script, a GPT-2 of
     hidden 48 on both. save_pretrained + tokenizer.json each.
  4. merge-tokenizers --base BASE/tokenizer.json --add DONOR/tokenizer.json, restricted to the
     donor's tokens that hold a non-ASCII byte (the new script; its English tokens would change how
     English is split), --check-text on the held-out English (must not change).
  5. extend-embeddings BASE --tokenizer merged.json --init {mean, subword-mean, omp --donor DONOR
     --omp-k K for each K}; each output loaded with transformers; mean cross-entropy per token
     (nats) on the held-out new-script lines and on the held-out English lines, both tokenised
     with the merged tokenizer, each line after an <|endoftext|> token. References printed beside
     them, not part of the check: `--init zeros`, omp from a donor whose rows of the tokens BASE
     lacks are permuted among themselves (same statistics, wrong identities), the uniform
     distribution (ln V), the unextended BASE on its own tokenizer and the DONOR on its own (nats
     per byte). Asserted on the way: the merged tokenizer keeps English's ids, and with the
     softmax over the old ids only every output scores English exactly as BASE does.

Exit status 1 if, in any case and for any K, omp's held-out new-script loss is not below both
baselines; 0 otherwise. Everything is seeded; figures vary slightly with the torch build / cores.
"""
import argparse
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EOT = "<|endoftext|>"


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- text

MODULES = ["argparse", "collections", "json", "pathlib", "random", "string", "textwrap", "zipfile",
           "unittest", "logging", "functools", "itertools", "heapq", "bisect", "calendar", "csv",
           "os", "re", "subprocess", "threading", "shutil", "tarfile", "datetime", "decimal",
           "fractions", "statistics", "typing", "dataclasses", "enum", "inspect", "ast", "pickle",
           "copy", "pprint", "difflib", "gzip", "io", "tempfile", "glob", "fnmatch",
           "configparser", "optparse", "doctest", "timeit", "traceback", "warnings", "weakref",
           "contextlib", "abc", "numbers", "operator", "queue", "sched", "secrets", "hashlib",
           "uuid", "base64", "struct", "codecs", "locale", "gettext", "platform", "types",
           "mailbox", "smtplib", "ftplib", "imaplib", "socket", "selectors", "signal", "shlex",
           "cmd", "code", "dis", "tokenize", "zipimport", "pkgutil", "sqlite3", "wave", "colorsys",
           "email.message", "email.utils", "http.client", "http.server", "urllib.parse",
           "urllib.request", "xml.dom.minidom", "xml.etree.ElementTree", "html.parser",
           "concurrent.futures", "multiprocessing.pool", "asyncio.tasks", "asyncio.events",
           "unittest.mock", "logging.handlers", "importlib.metadata", "ipaddress", "netrc",
           "plistlib", "reprlib", "quopri", "filecmp", "fileinput", "linecache", "stat",
           "getpass", "graphlib", "keyword", "mimetypes", "numbers", "runpy", "symtable",
           "tabnanny", "trace", "tracemalloc", "zoneinfo", "lzma", "bz2", "hmac", "binascii"]


def english_paragraphs():
    """Prose paragraphs from stdlib docstrings (modules, their public members, class methods)."""
    import importlib
    import re
    seen, out = set(), []

    def take(doc):
        if not isinstance(doc, str):
            return
        for para in doc.split("\n\n"):
            text = " ".join(line.strip() for line in para.strip().splitlines())
            if not (40 <= len(text) <= 400) or text in seen:
                continue
            letters = sum(c.isalpha() or c == " " for c in text)
            if letters < 0.85 * len(text) or ">>>" in text or re.search(r"[{}\[\]=<>|]", text):
                continue
            seen.add(text)
            out.append(text)

    warnings.simplefilter("ignore")
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        take(mod.__doc__)
        for a in sorted(dir(mod)):
            if a.startswith("_"):
                continue
            obj = getattr(mod, a, None)
            take(getattr(obj, "__doc__", None) if not isinstance(obj, (str, int, float, bytes)) else None)
            if isinstance(obj, type) and obj.__module__ == mod.__name__:
                for m in sorted(vars(obj)):
                    if not m.startswith("_"):
                        take(getattr(vars(obj)[m], "__doc__", None))
    return out


def english_corpus():
    with open(os.path.join(ROOT, "testdata/tokenizers/english.txt"), encoding="utf-8") as f:
        lines = [l.strip() for l in f if len(l.strip()) >= 20]
    seen = set(lines)
    for p in english_paragraphs():
        if p not in seen:
            seen.add(p)
            lines.append(p)
    random.Random(35).shuffle(lines)
    n_held = len(lines) // 10
    return lines[n_held:], lines[:n_held]


# Ethiopic transliteration: consonant series (first-order fidel) per Latin consonant; vowel orders
# e=1st(ä) u=2nd i=3rd a=4th o=7th; a consonant with no vowel after it takes the 6th order; a lone
# vowel is written on the glottal series አ.
SERIES = {"b": 0x1260, "c": 0x1328, "d": 0x12F0, "f": 0x1348, "g": 0x1308, "h": 0x1200, "j": 0x1300,
          "k": 0x12A8, "l": 0x1208, "m": 0x1218, "n": 0x1290, "p": 0x1350, "q": 0x1240, "r": 0x1228,
          "s": 0x1230, "t": 0x1270, "v": 0x1268, "w": 0x12C8, "x": 0x12B8, "y": 0x12E8, "z": 0x12D8}
VOWEL = {"e": 0, "u": 1, "i": 2, "a": 3, "o": 6}
PUNCT = {".": "።", ",": "፣", ";": "፤", ":": "፥", "?": "፧"}


def translit(text):
    s, out, i = text.lower(), [], 0
    while i < len(s):
        c = s[i]
        if c in SERIES:
            nxt = s[i + 1] if i + 1 < len(s) else ""
            if nxt in VOWEL:
                out.append(chr(SERIES[c] + VOWEL[nxt]))
                i += 2
                continue
            out.append(chr(SERIES[c] + 5))
        elif c in VOWEL:
            out.append(chr(0x12A0 + VOWEL[c]))
        else:
            out.append(PUNCT.get(c, c))
        i += 1
    return "".join(out)


def synthetic_amharic(n, seed):
    spec = importlib.util.spec_from_file_location("generate", os.path.join(ROOT, "testdata/generate.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen.amharic_lines(n, seed)


# ---------------------------------------------------------------- tokenizers and models

def train_tokenizer(lines, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def encode_lines(tok, lines, max_len):
    eot = tok.token_to_id(EOT)
    return [[eot] + e.ids[:max_len - 1] for e in tok.encode_batch(lines)]


def train_model(folder, tok, lines, width, tied, steps, seed, max_len=128, batch=16):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    eot = tok.token_to_id(EOT)
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=max_len, n_embd=width,
                        n_layer=2, n_head=2, bos_token_id=eot, eos_token_id=eot,
                        tie_word_embeddings=tied)
    model = GPT2LMHeadModel(config)
    stream = []
    for ids in encode_lines(tok, lines, 10 ** 9):
        stream.extend(ids)
    stream.append(eot)
    data = torch.tensor(stream)
    n_blocks = (len(data) - 1) // max_len
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * max(0.05, 1 - s / steps))
    g = torch.Generator().manual_seed(seed)
    model.train()
    t0 = time.time()
    for step in range(steps):
        starts = torch.randint(0, len(data) - max_len - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + max_len] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    model.save_pretrained(folder)
    tok.save(os.path.join(folder, "tokenizer.json"))
    log(f"    trained {os.path.basename(folder)}: vocab {config.vocab_size}, width {width}, "
        f"{'tied' if tied else 'untied'}, {len(stream)} tokens ({n_blocks} blocks), {steps} steps, "
        f"final train loss {loss.item():.3f}, {time.time() - t0:.0f} s")


@torch.no_grad()
def loss_stats(model, seqs, new_from=None, only_first=None):
    """Mean CE per predicted token; (nats sum, tokens) overall and on targets ≥ new_from.
    only_first: the softmax over the first ids only (the old vocabulary)."""
    tot = n = tot_new = n_new = 0.0
    for ids in seqs:
        x = torch.tensor([ids])
        logits = model(input_ids=x).logits[0, :-1].float()
        if only_first is not None:
            logits = logits[:, :only_first]
        tgt = x[0, 1:]
        ce = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
        tot += ce.sum().item()
        n += len(tgt)
        if new_from is not None:
            m = tgt >= new_from
            tot_new += ce[m].sum().item()
            n_new += m.sum().item()
    return {"ce": tot / n, "nats": tot, "tokens": int(n),
            "ce_new": (tot_new / n_new) if n_new else float("nan"), "tokens_new": int(n_new)}


def load(folder):
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(folder)
    m.eval()
    return m


# ---------------------------------------------------------------- tools

def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        log("FAILED:", " ".join(cmd), "\n", p.stdout[-3000:], p.stderr[-3000:])
        sys.exit(2)
    return p.stdout


def addition_tokenizer(donor_tok_path, out_path):
    """The donor's tokenizer.json keeping only its byte alphabet, the tokens with a non-ASCII byte
    (the new script) and the merges that make them."""
    from tokenizers import pre_tokenizers
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2 byte -> symbol map: printable ASCII maps to itself
    ascii_syms = {chr(b) for b in range(0x21, 0x7F)} | {"Ġ", "Ċ", "ĉ"} | {
        c for c in alphabet if ord(c) >= 0x100 and ord(c) - 0x100 < 0x21}
    with open(donor_tok_path, encoding="utf-8") as f:
        j = json.load(f)

    def is_new(tok):
        return any(c not in ascii_syms for c in tok)

    vocab = j["model"]["vocab"]
    keep = {t for t in vocab if is_new(t) and t != EOT}
    kept_sorted = sorted(keep, key=lambda t: vocab[t])
    # the byte alphabet stays (merges start from it; the base has it, so it is skipped there)
    alpha = [t for t in sorted(vocab, key=vocab.get) if len(t) == 1 and t not in keep]
    j["model"]["vocab"] = {t: i for i, t in enumerate(alpha + kept_sorted)}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if (a + b) in keep and a in j["model"]["vocab"] and b in j["model"]["vocab"]:
            merges.append(m)
    j["model"]["merges"] = merges
    j["added_tokens"] = []
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return len(kept_sorted)


def shuffled_donor(donor_dir, base_tok, donor_tok, out_dir):
    from safetensors.torch import load_file, save_file
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(donor_dir, out_dir)
    base_vocab = base_tok.get_vocab()
    rows = sorted(i for t, i in donor_tok.get_vocab().items() if t not in base_vocab)
    perm = torch.tensor(rows)[torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))]
    w = load_file(os.path.join(donor_dir, "model.safetensors"))
    for name in ("transformer.wte.weight", "lm_head.weight"):
        if name in w:
            t = w[name].clone()
            t[rows] = w[name][perm]
            w[name] = t
    save_file(w, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


# ---------------------------------------------------------------- one case

def case(args, work, corpus, tied, eng_train, eng_held):
    tag = f"{corpus}-{'tied' if tied else 'untied'}"
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    log(f"== {tag}")
    if corpus == "translit":
        new_train = [translit(l) for l in eng_train]
        new_held = [translit(l) for l in eng_held]
    else:
        new_train = synthetic_amharic(3000, 11)
        with open(os.path.join(ROOT, "testdata/tokenizers/amharic.txt"), encoding="utf-8") as f:
            new_held = [l.strip() for l in f if l.strip()]
    log(f"    new-script sample: {new_held[0][:70]}")

    base_tok = train_tokenizer(eng_train, 1000)
    donor_lines = eng_train + new_train
    random.Random(1).shuffle(donor_lines)
    donor_tok = train_tokenizer(donor_lines, 1500)
    base_dir, donor_dir = os.path.join(d, "base"), os.path.join(d, "donor")
    if args.reuse and os.path.exists(os.path.join(donor_dir, "config.json")):
        from tokenizers import Tokenizer
        base_tok = Tokenizer.from_file(os.path.join(base_dir, "tokenizer.json"))
        donor_tok = Tokenizer.from_file(os.path.join(donor_dir, "tokenizer.json"))
        log("    reusing the trained models in", d)
    else:
        train_model(base_dir, base_tok, eng_train, 64, tied, args.steps, seed=1)
        train_model(donor_dir, donor_tok, donor_lines, 48, tied, args.steps, seed=2)

    add = os.path.join(d, "addition.json")
    n_add = addition_tokenizer(os.path.join(donor_dir, "tokenizer.json"), add)
    held_en = os.path.join(d, "english_heldout.txt")
    held_new = os.path.join(d, "newscript_heldout.txt")
    with open(held_en, "w", encoding="utf-8") as f:
        f.write("\n".join(eng_held) + "\n")
    with open(held_new, "w", encoding="utf-8") as f:
        f.write("\n".join(new_held) + "\n")
    merged = os.path.join(d, "merged.json")
    if os.path.exists(merged):
        os.remove(merged)
    rep = json.loads(run([args.merge_bin, "--base", os.path.join(base_dir, "tokenizer.json"),
                          "--add", add, "--output", merged, "--check-text", held_en,
                          "--check-text", held_new, "--json"]))
    from tokenizers import Tokenizer
    mtok = Tokenizer.from_file(merged)
    V0 = base_tok.get_vocab_size()
    log(f"    merged tokenizer: {V0} -> {mtok.get_vocab_size()} ids ({n_add} donor tokens offered)")

    # the same ids for English under both tokenizers (merge-tokenizers checked it too)
    en_seqs = encode_lines(mtok, eng_held, 128)
    assert en_seqs == encode_lines(base_tok, eng_held, 128), "merged tokenizer changed English ids"
    new_seqs = encode_lines(mtok, new_held, 128)
    n_bytes = sum(len(l.encode()) for l in new_held)

    results = {"case": tag, "base_vocab": V0, "merged_vocab": mtok.get_vocab_size(), "inits": {}}
    # references: the unextended base reading the new script with its own (byte-ish) tokenizer,
    # and the donor with its own tokenizer: nats per byte of held-out new-script text
    base = load(base_dir)
    s = loss_stats(base, encode_lines(base_tok, new_held, 128))
    results["ref_base_own_tok_nats_per_byte"] = s["nats"] / n_bytes
    results["ref_base_english_ce"] = loss_stats(base, en_seqs)["ce"]
    donor = load(donor_dir)
    s = loss_stats(donor, encode_lines(donor_tok, new_held, 128))
    results["ref_donor_nats_per_byte"] = s["nats"] / n_bytes

    # zeros is a reference only (new rows 0: logit 0 for every new token), not part of the check
    inits = [("mean", ["--init", "mean"]), ("subword-mean", ["--init", "subword-mean"]),
             ("zeros", ["--init", "zeros"])]
    for k in args.ks:
        inits.append((f"omp k={k}", ["--init", "omp", "--donor", donor_dir, "--omp-k", str(k)]))
    # control: the same pursuit from a donor whose rows of the tokens BASE lacks are permuted among
    # themselves (same statistics, wrong token identities): reference only, not part of the check
    shuf_dir = os.path.join(d, "donor_shuffled")
    shuffled_donor(donor_dir, base_tok, donor_tok, shuf_dir)
    inits.append((f"omp k={args.ks[1] if len(args.ks) > 1 else args.ks[0]} shuffled donor",
                  ["--init", "omp", "--donor", shuf_dir, "--omp-k",
                   str(args.ks[1] if len(args.ks) > 1 else args.ks[0])]))
    for name, flags in inits:
        out = os.path.join(d, "out_" + name.replace(" ", "").replace("=", ""))
        shutil.rmtree(out, ignore_errors=True)
        rep = json.loads(run([args.extend_bin, base_dir, "--tokenizer", merged, "--output", out,
                              "--json"] + flags))
        m = load(out)
        assert m.get_input_embeddings().weight.shape[0] == mtok.get_vocab_size()
        s_new = loss_stats(m, new_seqs, new_from=V0)
        s_en = loss_stats(m, en_seqs)
        # the old rows are intact: over the old vocabulary, English scores exactly as in BASE
        en_old = loss_stats(m, en_seqs, only_first=V0)["ce"]
        assert abs(en_old - results["ref_base_english_ce"]) < 1e-4, (name, en_old)
        r = {"new_ce": s_new["ce"], "new_ce_on_new_ids": s_new["ce_new"],
             "new_tokens": s_new["tokens"], "new_tokens_new_ids": s_new["tokens_new"],
             "new_nats_per_byte": s_new["nats"] / n_bytes, "english_ce": s_en["ce"]}
        if "donor" in rep:
            dn = rep["donor"]
            r["donor_report"] = {k2: v for k2, v in dn.items() if k2 != "sample"}
        results["inits"][name] = r
        log(f"    {name:24s} new-script CE {r['new_ce']:.4f} (on new ids {r['new_ce_on_new_ids']:.4f}, "
            f"{r['new_nats_per_byte']:.4f} nats/byte)   English CE {r['english_ce']:.4f}")
    results["ref_uniform_ce"] = math.log(mtok.get_vocab_size())
    log(f"    reference: uniform over the merged vocabulary: {results['ref_uniform_ce']:.4f} nats/token")
    log(f"    reference: base model, base tokenizer: {results['ref_base_own_tok_nats_per_byte']:.4f} "
        f"nats/byte; donor, own tokenizer: {results['ref_donor_nats_per_byte']:.4f} nats/byte; "
        f"base English CE {results['ref_base_english_ce']:.4f}")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="translit,synthetic")
    ap.add_argument("--ties", default="tied,untied")
    ap.add_argument("--ks", default="4,8,16,32,64", help="--omp-k values (donor width is 48)")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--keep", help="work folder to keep (default: a temp folder, removed)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse models trained before")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target/release"))
    args = ap.parse_args()
    args.ks = [int(k) for k in args.ks.split(",")]
    args.extend_bin = os.path.join(args.bin_dir, "extend-embeddings")
    args.merge_bin = os.path.join(args.bin_dir, "merge-tokenizers")
    for b in (args.extend_bin, args.merge_bin):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --bin extend-embeddings --bin merge-tokenizers")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    work = args.keep or tempfile.mkdtemp(prefix="omp_quality.")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    eng_train, eng_held = english_corpus()
    log(f"English: {len(eng_train)} training lines, {len(eng_held)} held out "
        f"({sum(map(len, eng_train))} characters of training text)")
    all_results, failures = [], []
    try:
        for corpus in args.corpora.split(","):
            for tie in args.ties.split(","):
                r = case(args, work, corpus, tie == "tied", eng_train, eng_held)
                all_results.append(r)
                base_best = min(r["inits"]["mean"]["new_ce"], r["inits"]["subword-mean"]["new_ce"])
                for name, v in r["inits"].items():
                    if name.startswith("omp") and "shuffled" not in name and not v["new_ce"] < base_best:
                        failures.append(f"{r['case']} {name}: {v['new_ce']:.4f} ≥ {base_best:.4f}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_results, f, indent=1)
    log(f"\nheld-out new-script CE (nats/token), {time.time() - t0:.0f} s in all")
    for r in all_results:
        log(f"  {r['case']:18s} " + "  ".join(f"{n}: {v['new_ce']:.3f}" for n, v in r["inits"].items())
            + f"  (uniform {r['ref_uniform_ce']:.3f})")
    if failures:
        log("FAIL: omp not below both mean and subword-mean:\n  " + "\n  ".join(failures))
        sys.exit(1)
    log("PASS: omp below mean and subword-mean in every case")


if __name__ == "__main__":
    main()
