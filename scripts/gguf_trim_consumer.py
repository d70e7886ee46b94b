#!/usr/bin/env python3
"""Real consumers judge trim-vocab's GGUF outputs (issue 47 on issue 48's format; run by hand, not
in CI: llama-cpp-python compiles llama.cpp). Same venv as scripts/gguf_consumer.py:

    /work/venv-llama/bin/python scripts/gguf_trim_consumer.py --bin target/debug

Models are written as gguf_consumer.py writes them (one-block Llama-shaped models, n_embd 256,
with gguf.GGUFWriter; K-quants by llama.cpp's own quantizer): GPT-2's byte-level BPE (1000
tokens) F16 untied, Q8_0 tied, Q4_K_M (token_embd Q4_K, output Q6_K); a SentencePiece Llama
(sp_bpe_english.model) F16 untied; a Qwen2 (pre "qwen2") Q8_0 untied; a Gemma (SentencePiece,
tied, F16). Each is trimmed by our trim-vocab with the tokenizer it was made from to a corpus
(the first 40 lines of testdata/tokenizers/english.txt). Then, for each:
- gguf.GGUFReader reads it and agrees with our reader on every key and tensor;
- the kept rows' bytes are the original's at the new ids (token_embd, output);
- llama.cpp loads the original and the trimmed (use_extra_bufts off: AMX, see gguf_consumer);
- llama.cpp tokenizes every corpus line to the same token strings with both, and the trimmed ids
  are the map's image of the original ids;
- the trimmed model's logits on corpus lines equal the original's gathered at the kept ids (bit
  for bit, or the largest difference and whether gguf-py's copy of the trimmed file — same keys
  and tensors, gguf-py's writer — gives ours bit for bit: then it is llama.cpp's arithmetic on a
  head of another row count, not our bytes — for an untied head, shown directly: the original
  with its kept head rows moved to the front, same row count, gives the original's logits bit for
  bit and not the trimmed's);
- generation runs.
Exit 1 if any check fails.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_consumer as gc  # noqa: E402  (its import turns llama.cpp's extra buffer types off)

GPT2 = os.path.join(gc.TESTDATA, "gpt2", "tokenizer.json")
CASES = [
    ("gpt2_f16_untied", dict(embd_type="F16", tied=False), GPT2),
    ("gpt2_q8_0_tied", dict(embd_type="Q8_0", tied=True), GPT2),
    ("gpt2_q4_k_m", None, GPT2),
    ("sp_llama_f16_untied", dict(embd_type="F16", tied=False, vocab=gc.sp_vocab()), gc.SP_BASE),
    ("qwen2_q8_0_untied", dict(embd_type="Q8_0", tied=False, arch="qwen2", vocab=gc.gpt2_vocab("qwen2"),
                               out_type="Q8_0"), GPT2),
    ("gemma_sp_f16_tied", dict(embd_type="F16", tied=True, arch="gemma", vocab=gc.sp_vocab()), gc.SP_BASE),
]


def corpus(tmp):
    lines = open(os.path.join(gc.TESTDATA, "tokenizers", "english.txt"), encoding="utf-8").read().splitlines()[:40]
    p = os.path.join(tmp, "corpus.txt")
    with open(p, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return p, [l for l in lines if l.strip()]


def tokens_of(path):
    r = gguf.GGUFReader(path)
    return r.fields["tokenizer.ggml.tokens"].contents()


def rows_kept(base, trimmed, kept):
    a, b = gguf.GGUFReader(base), gguf.GGUFReader(trimmed)
    for name in ("token_embd.weight", "output.weight"):
        ta = [t for t in a.tensors if t.name == name]
        tb = [t for t in b.tensors if t.name == name]
        if not ta or not tb:
            if ta or tb:
                return False, f"{name} in one file only"
            continue
        da = np.asarray(ta[0].data).view(np.uint8).reshape(int(ta[0].shape[-1]), -1)
        db = np.asarray(tb[0].data).view(np.uint8).reshape(int(tb[0].shape[-1]), -1)
        if da.shape[1] != db.shape[1] or not np.array_equal(da[kept], db):
            return False, f"{name}: {da.shape} vs {db.shape}"
    return True, f"{len(kept)} rows of {types_of(trimmed)}"


def types_of(path):
    return gc.types_of(path)


def same_strings(name, b, t, tb, tt, mp, lines):
    bad = 0
    for line in lines:
        ib = b.tokenize(line.encode(), add_bos=False, special=False)
        it = t.tokenize(line.encode(), add_bos=False, special=False)
        if [tb[i] for i in ib] != [tt[i] for i in it] or [mp[i] for i in ib] != it:
            bad += 1
    gc.check(bad == 0, f"{name}: llama.cpp splits all {len(lines)} corpus lines into the same token strings"
             f" with both, ids the map's image ({bad} differ)")


def same_count_head(base, kept, out):
    """The original with its untied head's kept rows moved to the front (the rest as they were):
    the original's row count, the trimmed head's first rows. None when the head is tied."""
    import shutil
    r = gguf.GGUFReader(base)
    head = [t for t in r.tensors if t.name == "output.weight"]
    if not head:
        return None
    shutil.copy(base, out)
    rows = np.asarray(head[0].data).view(np.uint8).reshape(int(head[0].shape[-1]), -1)
    moved = rows.copy()
    moved[: len(kept)] = rows[kept]
    mm = np.memmap(out, dtype=np.uint8, mode="r+")
    mm[head[0].data_offset: head[0].data_offset + moved.size] = moved.reshape(-1)
    mm.flush()
    del mm
    return out


def row_count_explains(name, base, b, t, kept, line):
    """Not bit for bit: is it the head's row count? A head of the original's row count holding the
    kept rows first gives the original's logits bit for bit, and not the trimmed head's."""
    p = same_count_head(base, kept, base + ".samecount.gguf")
    if p is None:
        return
    s, _ = gc.load(p)
    ib = b.tokenize(line.encode(), add_bos=False, special=False)
    it = t.tokenize(line.encode(), add_bos=False, special=False)
    ls = gc.logits(s, ib)[:, : len(kept)]
    as_orig = np.array_equal(ls.view(np.uint32), gc.logits(b, ib)[:, kept].view(np.uint32))
    as_trim = np.array_equal(ls.view(np.uint32), gc.logits(t, it).view(np.uint32))
    gc.check(as_orig and not as_trim,
             f"{name}: the original's head with the kept rows moved to the front (same row count) gives the"
             f" original's logits bit for bit ({as_orig}) and not the trimmed's ({not as_trim}): llama.cpp's"
             " result for a row depends on the head's row count, not on the row's bytes or position")


def logits_at_kept(name, base, trimmed, b, t, kept, lines):
    worst, exact, twin_same = 0.0, True, True
    tw, _ = gc.load(gc.twin(trimmed, trimmed + ".twin.gguf"))
    for line in lines[:12]:
        ib = b.tokenize(line.encode(), add_bos=False, special=False)[:100]
        it = t.tokenize(line.encode(), add_bos=False, special=False)[:100]
        lb, lt = gc.logits(b, ib)[:, kept], gc.logits(t, it)
        exact &= np.array_equal(lb.view(np.uint32), lt.view(np.uint32))
        worst = max(worst, float(np.max(np.abs(lb - lt))))
        twin_same &= np.array_equal(gc.logits(tw, it).view(np.uint32), lt.view(np.uint32))
    gc.check(twin_same, f"{name}: logits equal gguf-py's copy of the trimmed file bit for bit")
    if exact:
        gc.check(True, f"{name}: logits at the {len(kept)} kept ids equal the original's bit for bit (12 lines)")
    else:
        row_count_explains(name, base, b, t, kept, lines[0])
        gc.check(twin_same and worst < 1e-4,
                 f"{name}: logits at the {len(kept)} kept ids differ from the original's by at most {worst:.3g}"
                 " (not bit for bit; gguf-py's copy gives ours bit for bit: llama.cpp's arithmetic on a head"
                 " of another row count, not our bytes)")
    return exact, worst


def judge(name, base, trimmed, bin_dir, lines):
    print(f"\n== {name}: {types_of(base)} -> {types_of(trimmed)}")
    mp = json.load(open(trimmed + ".token_map.json"))["old_to_new"]
    kept = [i for i, n in enumerate(mp) if n is not None]
    ok, why = gc.reader_agrees(trimmed, bin_dir)
    gc.check(ok, f"{name}: gguf.GGUFReader agrees with our reader ({why})")
    ok, why = rows_kept(base, trimmed, kept)
    gc.check(ok, f"{name}: kept rows' bytes are the original's at the new ids ({why})")
    b, e1 = gc.load(base)
    t, e2 = gc.load(trimmed)
    gc.check(b is not None and t is not None, f"{name}: llama.cpp loads the original and the trimmed ({e1 or e2 or 'both'})")
    if b is None or t is None:
        return None
    gc.check(t.n_vocab() == len(kept), f"{name}: n_vocab {b.n_vocab()} -> {t.n_vocab()}")
    same_strings(name, b, t, tokens_of(base), tokens_of(trimmed), mp, lines)
    res = logits_at_kept(name, base, trimmed, b, t, kept, lines)
    t.reset()
    out = t.create_completion(lines[0][:40], max_tokens=6, temperature=0.0)
    gc.check(out["usage"]["completion_tokens"] > 0, f"{name}: generation runs: {out['choices'][0]['text']!r}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(gc.ROOT, "target", "debug"))
    ap.add_argument("--keep", help="write the models here and keep them")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="gguf_trim_consumer_")
    os.makedirs(tmp, exist_ok=True)
    cp, lines = corpus(tmp)
    summary = []
    for name, kw, tok in CASES:
        base = os.path.join(tmp, f"{name}.gguf")
        if kw is None:
            f16 = os.path.join(tmp, "f16_for_quant.gguf")
            gc.write_llama(f16, "F16", tied=False)
            if not gc.quantize(f16, base, 15):
                gc.check(False, f"{name}: llama_model_quantize Q4_K_M")
                continue
        else:
            gc.write_llama(base, **kw)
        out = os.path.join(tmp, f"{name}_trimmed.gguf")
        for p in (out, out + ".token_map.json"):
            if os.path.exists(p):
                os.remove(p)
        rc, so, err = gc.run(bin_dir := a.bin, "trim-vocab", base, "--tokenizer", tok, "--keep-corpus", cp,
                             "--output", out, "--allow-shrink")
        gc.check(rc == 0, f"{name}: trim-vocab ({(err or so).strip().splitlines()[0] if (err or so).strip() else ''})")
        if rc == 0:
            summary.append((name, judge(name, base, out, bin_dir, lines)))
    print("\nlogits at the kept ids:")
    for name, r in summary:
        print(f"  {name}: " + ("not judged" if r is None else "bit for bit" if r[0] else f"max |diff| {r[1]:.3g}"))
    print(f"\n{len(gc.FAILED)} failed" + (": " + "; ".join(gc.FAILED) if gc.FAILED else ""))
    sys.exit(1 if gc.FAILED else 0)


if __name__ == "__main__":
    main()
