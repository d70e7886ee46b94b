#!/usr/bin/env python3
"""Real consumers judge our GGUF outputs (issue 48; run by hand, not in CI).

Needs a venv with llama-cpp-python==0.3.36 (it compiles llama.cpp), gguf==0.19.0, numpy,
tokenizers and sentencepiece, and the ckpt-surgery binaries (cargo build; --bin names their folder):

    python3 -m venv /work/venv-llama
    /work/venv-llama/bin/pip install gguf==0.19.0 numpy tokenizers sentencepiece llama-cpp-python==0.3.36
    /work/venv-llama/bin/python scripts/gguf_consumer.py --bin target/debug

It writes tiny complete Llama models around testdata/gpt2's byte-level BPE tokenizer (1000 tokens)
with gguf.GGUFWriter: F16 untied, Q8_0 tied, and llama.cpp's own Q4_K_M and Q5_K_M of the F16 one
(llama_model_quantize; token_embd / output become K-quants). Each is grown by our
extend-embeddings with the merged tokenizer (testdata/tokenizers/gpt2_addition.txt merged by our
merge-tokenizers), repaired by check-vocab --fix. Then other shapes, written the same way: a
SentencePiece Llama (testdata/tokenizers/sp_bpe_english.model as convert_hf_to_gguf.py writes it,
F16, untied), a Qwen2 (arch qwen2, q/k/v biases, the GPT-2 tokenizer with pre "qwen2", untied,
Q8_0) and a Gemma (arch gemma, the SentencePiece tokenizer, tied, F16); the SentencePiece ones are
grown by merge-tokenizers' .model merge of sp_amharic.model into it, and new words' ids come from
sentencepiece. For each:
- llama.cpp loads it (llama_cpp.Llama, vocab_only=False);
- llama.cpp's tokenizer maps each new word to the merged tokenizer's ids (HF tokenizers) and
  English to the same ids as before;
- the logits at the old ids on English text equal the original model's bit for bit;
- generation runs;
- gguf.GGUFReader agrees with our reader (inspect-checkpoint --json) on every key and tensor, and
  the old rows' bytes are the input's.
Last, the open point: does llama.cpp load a padded table (more rows than tokens) with and without
`llama.vocab_size`? Exit 1 if any check fails.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp
from tokenizers import Tokenizer

# ggml's AMX path (extra buffer types) traps on machines whose CPU reports AMX that the kernel
# does not grant (SIGILL in tilezero): models are loaded without extra buffer types, the plain
# CPU kernels, the original and ours alike.
_default_params = llama_cpp.llama_cpp.llama_model_default_params


def _plain_params():
    p = _default_params()
    p.use_extra_bufts = False
    return p


llama_cpp.llama_cpp.llama_model_default_params = _plain_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "testdata")
ENGLISH = "The quick brown fox jumps over the lazy dog, and then it was time to go home."
NEW_WORDS = " checkpoint surgery with safetensors and a tokenizer embedding"
SP_BASE = os.path.join(TESTDATA, "tokenizers", "sp_bpe_english.model")
SP_ADD = os.path.join(TESTDATA, "tokenizers", "sp_amharic.model")
NEW_AMHARIC = "ሓሃ ሒሃ ሓሁሑ ሎሂለ ።"
FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def base_tokenizer():
    tok = json.load(open(os.path.join(TESTDATA, "gpt2", "tokenizer.json"), encoding="utf-8"))
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + [a["content"] for a in sorted(tok["added_tokens"], key=lambda a: a["id"])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    eot = tok["added_tokens"][0]["id"]
    return tokens, merges, eot


def gpt2_vocab(pre="gpt-2"):
    """GPT-2's first 1000 tokens (byte-level BPE) as GGUF tokenizer keys, with `pre`."""
    tokens, merges, eot = base_tokenizer()

    def add(wr):
        wr.add_tokenizer_model("gpt2")
        wr.add_tokenizer_pre(pre)
        wr.add_token_list(tokens)
        wr.add_token_types([gguf.TokenType.CONTROL if i == eot else gguf.TokenType.NORMAL
                            for i in range(len(tokens))])
        wr.add_token_merges(merges)
        wr.add_bos_token_id(eot)
        wr.add_eos_token_id(eot)
    return len(tokens), add


def sp_vocab():
    """testdata/tokenizers/sp_bpe_english.model (400 pieces) as convert_hf_to_gguf.py's
    _set_vocab_sentencepiece writes it: model "llama", scores, types, bos/eos/unk."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=SP_BASE)
    T = gguf.TokenType
    kinds = [T.UNKNOWN if sp.is_unknown(i) else T.CONTROL if sp.is_control(i) else T.UNUSED if sp.is_unused(i)
             else T.BYTE if sp.is_byte(i) else T.NORMAL for i in range(sp.vocab_size())]

    def add(wr):
        wr.add_tokenizer_model("llama")
        wr.add_tokenizer_pre("default")
        wr.add_token_list([sp.id_to_piece(i) for i in range(sp.vocab_size())])
        wr.add_token_scores([sp.get_score(i) for i in range(sp.vocab_size())])
        wr.add_token_types(kinds)
        wr.add_bos_token_id(sp.bos_id())
        wr.add_eos_token_id(sp.eos_id())
        wr.add_unk_token_id(sp.unk_id())
        wr.add_add_bos_token(True)
        wr.add_add_eos_token(False)
    return sp.vocab_size(), add


def write_llama(path, embd_type, tied, rows=None, vocab_size=None, seed=48, arch="llama", vocab=None,
                out_type="F16"):
    """A complete one-block model (n_embd 256, 4 heads, n_ff 512) of `arch` (llama; qwen2: q/k/v
    biases; gemma: always tied) around `vocab` (default GPT-2's first 1000 tokens).
    `embd_type`: F16 or Q8_0 for token_embd; `out_type` for output when untied."""
    n_vocab, add_vocab = vocab or gpt2_vocab()
    n_embd, n_ff = 256, 512
    rows = rows or n_vocab
    rng = np.random.default_rng(seed)

    def w(*shape, std=0.05):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def table(a, t):
        if t == "Q8_0":
            return gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
        return a.astype(np.float16), None

    wr = gguf.GGUFWriter(path, arch)
    wr.add_name(os.path.basename(path))
    wr.add_context_length(128)
    wr.add_embedding_length(n_embd)
    wr.add_block_count(1)
    wr.add_feed_forward_length(n_ff)
    wr.add_head_count(4)
    wr.add_head_count_kv(4)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_rope_dimension_count(n_embd // 4)
    if vocab_size is not None:
        wr.add_vocab_size(vocab_size)
    add_vocab(wr)
    a, raw = table(w(rows, n_embd, std=0.5), embd_type)
    wr.add_tensor("token_embd.weight", a, raw_dtype=raw)
    wr.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    if not tied:
        a, raw = table(w(rows, n_embd, std=0.5), out_type)
        wr.add_tensor("output.weight", a, raw_dtype=raw)
    b = "blk.0."
    wr.add_tensor(b + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        wr.add_tensor(b + name + ".weight", w(n_embd, n_embd).astype(np.float16))
    if arch == "qwen2":
        for name in ("attn_q", "attn_k", "attn_v"):
            wr.add_tensor(b + name + ".bias", w(n_embd))
    wr.add_tensor(b + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    wr.add_tensor(b + "ffn_gate.weight", w(n_ff, n_embd).astype(np.float16))
    wr.add_tensor(b + "ffn_up.weight", w(n_ff, n_embd).astype(np.float16))
    wr.add_tensor(b + "ffn_down.weight", w(n_embd, n_ff).astype(np.float16))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def quantize(src, dst, ftype):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    return rc == 0


def run(bin_dir, tool, *args):
    if "--output" in args:  # a kept folder from an earlier run: write afresh
        out = args[args.index("--output") + 1]
        if os.path.isfile(out):
            os.remove(out)
    p = subprocess.run([os.path.join(bin_dir, tool), *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def load(path):
    try:
        return llama_cpp.Llama(model_path=path, vocab_only=False, logits_all=True, n_ctx=128,
                               n_threads=1, verbose=False), None
    except Exception as e:  # llama.cpp's refusal (a ValueError naming the file)
        return None, str(e)


def logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def types_of(path):
    r = gguf.GGUFReader(path)
    return {t.name: t.tensor_type.name for t in r.tensors if t.name in ("token_embd.weight", "output.weight")}


def reader_agrees(path, bin_dir):
    """GGUFReader and our reader (inspect-checkpoint --json) on every key and tensor."""
    rc, out, err = run(bin_dir, "inspect-checkpoint", path, "--json")
    if rc != 0:
        return False, err
    ours = json.loads(out)["checkpoints"][0]
    r = gguf.GGUFReader(path)
    theirs = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        t = gguf.GGUFValueType(f.types[0])
        if t == gguf.GGUFValueType.ARRAY:
            vals = f.contents()
            theirs[name] = ("array", len(vals), vals[: 8])
        else:
            theirs[name] = (t.name.lower(), None, f.contents())
    mine = {}
    for m in ours["metadata"]:
        if m["type"] == "array":
            mine[m["key"]] = ("array", m["length"], m["first"])
        else:
            mine[m["key"]] = (m["type"], None, m["value"])
    if list(mine) != list(theirs):
        return False, f"keys differ: {set(mine) ^ set(theirs)}"
    for k in mine:
        a, b = mine[k], theirs[k]
        if a[0] != b[0] or a[1] != b[1]:
            return False, f"{k}: {a[:2]} vs {b[:2]}"
        if a[0] == "array":
            if list(a[2]) != list(b[2])[: len(a[2])]:
                return False, f"{k}: first elements {a[2]} vs {b[2]}"
        elif isinstance(b[2], float):
            if not np.isclose(a[2], b[2], rtol=1e-6):
                return False, f"{k}: {a[2]} vs {b[2]}"
        elif a[2] != b[2]:
            return False, f"{k}: {a[2]} vs {b[2]}"
    mt = [(t["name"], t["ggml_type"], t["shape"], t["bytes"], t["offset"]) for t in ours["tensors"]]
    tt = [(t.name, t.tensor_type.name, [int(x) for x in reversed(t.shape)], int(t.n_bytes), int(t.data_offset))
          for t in r.tensors]
    if mt != tt:
        return False, f"tensors differ:\n  ours   {mt}\n  theirs {tt}"
    return True, f"{len(mine)} keys, {len(mt)} tensors"


def old_rows_kept(base, grown, n_old):
    a, b = gguf.GGUFReader(base), gguf.GGUFReader(grown)
    for name in ("token_embd.weight", "output.weight"):
        ta = [t for t in a.tensors if t.name == name]
        tb = [t for t in b.tensors if t.name == name]
        if not ta:
            if tb:
                return False
            continue
        da, db = np.asarray(ta[0].data).reshape(-1), np.asarray(tb[0].data).reshape(-1)
        n = da.size * min(n_old, ta[0].shape[-1]) // ta[0].shape[-1]
        if not np.array_equal(da[:n].view(np.uint8), db[:n].view(np.uint8)):
            return False
    return True


def twin(path, out):
    """The same file written by gguf-py (gguf_new_metadata's copy: every key and tensor through
    GGUFReader and GGUFWriter): what llama.cpp computes from it is what our bytes mean."""
    from gguf.scripts.gguf_new_metadata import copy_with_new_metadata
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch=arch, endianess=r.endianess)
    align = r.fields.get("general.alignment")
    if align is not None:
        w.data_alignment = int(align.contents())
    copy_with_new_metadata(r, w, {}, [])
    return out


def hf_encoders(merged):
    """GPT-2 forms: the merged tokenizer.json's and the base's ids (HF tokenizers)."""
    m = Tokenizer.from_file(merged)
    b = Tokenizer.from_file(os.path.join(TESTDATA, "gpt2", "tokenizer.json"))
    return (lambda t: m.encode(t, add_special_tokens=False).ids,
            lambda t: b.encode(t, add_special_tokens=False).ids, NEW_WORDS)


def sp_encoders(merged):
    """SentencePiece forms: the merged .model's and the base .model's ids (sentencepiece)."""
    import sentencepiece as spm
    m = spm.SentencePieceProcessor(model_file=merged)
    b = spm.SentencePieceProcessor(model_file=SP_BASE)
    return m.encode, b.encode, NEW_AMHARIC


def judge(name, base, grown, merged, bin_dir, n_old, encoders=hf_encoders):
    print(f"\n== {name}: {types_of(base)} -> {types_of(grown)}")
    ok, why = reader_agrees(grown, bin_dir)
    check(ok, f"{name}: gguf.GGUFReader agrees with our reader ({why})")
    check(old_rows_kept(base, grown, n_old), f"{name}: old rows' bytes are the input's")
    b, e1 = load(base)
    g, e2 = load(grown)
    check(b is not None and g is not None, f"{name}: llama.cpp loads the original and the grown ({e1 or e2 or 'both'})")
    if b is None or g is None:
        return
    enc_merged, enc_base, new_text = encoders(merged)
    new_ids = g.tokenize(new_text.encode(), add_bos=False, special=False)
    want = enc_merged(new_text)
    check(new_ids == want and max(want) >= n_old,
          f"{name}: new words tokenize to the merged tokenizer's ids {want} (llama.cpp: {new_ids})")
    eng_b = b.tokenize(ENGLISH.encode(), add_bos=False, special=False)
    eng_g = g.tokenize(ENGLISH.encode(), add_bos=False, special=False)
    want = enc_base(ENGLISH)
    check(eng_b == eng_g == want, f"{name}: English tokenizes to the same {len(want)} ids before and after")
    lb, lg = logits(b, eng_b), logits(g, eng_g)
    same = np.array_equal(lb.view(np.uint32), lg[:, :n_old].view(np.uint32))
    diff = float(np.max(np.abs(lb - lg[:, :n_old])))
    t, _ = load(twin(grown, grown + ".twin.gguf"))
    lt = logits(t, eng_g)
    as_twin = np.array_equal(lt.view(np.uint32), lg.view(np.uint32))
    check(as_twin, f"{name}: logits equal, bit for bit, those of gguf-py's writing of the same keys and tensors")
    if same:
        check(lg.shape[1] > n_old, f"{name}: logits at the {n_old} old ids equal the original's bit for bit ({lb.shape} vs {lg.shape})")
    else:
        # Not a property of our bytes when gguf-py's copy computes the same: llama.cpp's matmul
        # takes another path for another row count.
        check(as_twin and diff < 1e-4,
              f"{name}: logits at the {n_old} old ids differ from the original's by at most {diff:.3g} "
              f"(not bit for bit; gguf-py's copy of the same content gives ours bit for bit, so it is llama.cpp's "
              f"arithmetic on a {lg.shape[1]}-row head, not our bytes)")
    g.reset()
    out = g.create_completion("The" + new_text, max_tokens=6, temperature=0.0)
    text = out["choices"][0]["text"]
    check(out["usage"]["completion_tokens"] > 0, f"{name}: generation runs: {text!r}")


def other_shapes(tmp, bin_dir, merged_json):
    """A SentencePiece Llama (F16, untied), a Qwen2 (GPT-2 tokenizer, pre "qwen2", untied, Q8_0)
    and a Gemma (the SentencePiece tokenizer, tied, F16), grown and judged like the Llamas."""
    merged_sp = os.path.join(tmp, "merged.model")
    rc, _, err = run(bin_dir, "merge-tokenizers", "--base", SP_BASE, "--add", SP_ADD, "--output", merged_sp)
    check(rc == 0, f"merge-tokenizers of the .model files ({err.strip()[:200]})")
    cases = [
        ("sp_llama_f16_untied", dict(embd_type="F16", tied=False, vocab=sp_vocab()), merged_sp, sp_encoders, 400),
        ("qwen2_q8_0_untied", dict(embd_type="Q8_0", tied=False, arch="qwen2", vocab=gpt2_vocab("qwen2"),
                                   out_type="Q8_0"), merged_json, hf_encoders, 1000),
        ("gemma_sp_f16_tied", dict(embd_type="F16", tied=True, arch="gemma", vocab=sp_vocab()),
         merged_sp, sp_encoders, 400),
    ]
    for name, kw, merged, encoders, n_old in cases:
        base = os.path.join(tmp, f"{name}.gguf")
        write_llama(base, **kw)
        grown = os.path.join(tmp, f"{name}_grown.gguf")
        rc, out, err = run(bin_dir, "extend-embeddings", base, "--tokenizer", merged, "--output", grown)
        check(rc == 0, f"{name}: extend-embeddings ({(err or out).strip().splitlines()[-1] if (err or out).strip() else ''})")
        if rc == 0:
            judge(name, base, grown, merged, bin_dir, n_old, encoders)


def open_point(tmp, bin_dir):
    print("\n== open point: a padded table (1024 rows, 1000 tokens)")
    for vs in (None, 1024, 1000):
        p = os.path.join(tmp, f"padded_{vs}.gguf")
        write_llama(p, "F16", tied=False, rows=1024, vocab_size=vs)
        llm, err = load(p)
        rc, out, _ = run(bin_dir, "check-vocab", p)
        verdict = out.strip().splitlines()[-1] if out.strip() else ""
        print(f"  llama.vocab_size={vs}: llama.cpp {'loads it' if llm else 'refuses it: ' + (err or '')[:200]};"
              f" check-vocab exit {rc} ({verdict})")
        if llm is not None:
            ids = llm.tokenize(ENGLISH.encode(), add_bos=False, special=False)
            print(f"    n_vocab {llm.n_vocab()}, logits width {logits(llm, ids).shape[1]}")
        fixed = p.replace(".gguf", "_fixed.gguf")
        rc, out, _ = run(bin_dir, "check-vocab", p, "--fix", "--output", fixed)
        llm, err = load(fixed)
        check(llm is not None and llm.n_vocab() == 1024,
              f"  its fix (check-vocab --fix: [PAD] tokens) loads: exit {rc}, n_vocab {llm.n_vocab() if llm else err}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug"))
    ap.add_argument("--keep", help="write the models here and keep them")
    a = ap.parse_args()
    print(f"llama-cpp-python {llama_cpp.__version__}, gguf {gguf.__version__ if hasattr(gguf, '__version__') else '0.19.0'}")
    tmp = a.keep or tempfile.mkdtemp(prefix="gguf_consumer_")
    os.makedirs(tmp, exist_ok=True)
    merged = os.path.join(tmp, "merged.json")
    rc, _, err = run(a.bin, "merge-tokenizers", "--base", os.path.join(TESTDATA, "gpt2", "tokenizer.json"),
                     "--add", os.path.join(TESTDATA, "tokenizers", "gpt2_addition.txt"), "--output", merged)
    check(rc == 0, f"merge-tokenizers ({err.strip()[:200]})")
    bases = {}
    bases["f16_untied"] = os.path.join(tmp, "f16_untied.gguf")
    write_llama(bases["f16_untied"], "F16", tied=False)
    bases["q8_0_tied"] = os.path.join(tmp, "q8_0_tied.gguf")
    write_llama(bases["q8_0_tied"], "Q8_0", tied=True)
    for ftype, name in ((15, "q4_k_m"), (17, "q5_k_m")):
        p = os.path.join(tmp, f"{name}.gguf")
        if quantize(bases["f16_untied"], p, ftype):
            bases[name] = p
        else:
            check(False, f"llama_model_quantize ftype {ftype}")
    for name, base in bases.items():
        grown = os.path.join(tmp, f"{name}_grown.gguf")
        rc, out, err = run(a.bin, "extend-embeddings", base, "--tokenizer", merged, "--output", grown)
        check(rc == 0, f"{name}: extend-embeddings ({(err or out).strip().splitlines()[-1] if (err or out).strip() else ''})")
        if rc == 0:
            judge(name, base, grown, merged, a.bin, 1000)
    other_shapes(tmp, a.bin, merged)
    # Repair: point eos at a token by its string and mark a token control; llama.cpp reads both.
    fixed = os.path.join(tmp, "f16_fixed.gguf")
    rc, out, err = run(a.bin, "check-vocab", bases["f16_untied"], "--fix", "--output", fixed,
                       "--special", "eos=the", "--token-type", "Ġthe=control")
    llm, e = load(fixed)
    check(rc == 0 and llm is not None and llm.token_eos() == llm.tokenize(b"the", add_bos=False)[0],
          f"check-vocab --fix: llama.cpp loads it, eos is 'the' ({e or 'eos ' + str(llm.token_eos() if llm else None)})")
    open_point(tmp, a.bin)
    print(f"\n{len(FAILED)} failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
