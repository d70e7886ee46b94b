"""trim-vocab's outputs as the real libraries use them (not in CI: needs torch and transformers).
Cases: GPT-2 (byte-level BPE), an untied Llama (SentencePiece BPE), a WordPiece BertForMaskedLM
and an untied Unigram Llama (testdata/families), a Unigram SentencePiece model named spiece.model.
For each case the tool trims shipped testdata to a corpus, then: the trimmed tokenizer loads in
`tokenizers` / transformers (and `sentencepiece` for a .model) and splits the corpus into the same
token strings; the trimmed model's logits on corpus text equal the original's gathered at the kept
ids (bit for bit, f32); re-extending the trimmed model with extend-embeddings keeps every kept row
bit for bit; a trimmed Trainer checkpoint resumes with the real Trainer.

    python scripts/trim_consumer.py target/release

Needs torch, transformers, tokenizers, safetensors, sentencepiece (without it transformers loads
the SentencePiece cases through tiktoken and fails) and accelerate >= 1.1 (the Trainer case).
"""
import json, subprocess, sys, tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
TD = ROOT / "testdata"


def trim(bindir: Path, model: Path, corpus: Path, out: Path, extra=()):
    r = subprocess.run([str(bindir / "trim-vocab"), str(model), "--keep-corpus", str(corpus),
                        "--output", str(out), "--allow-shrink", *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "token_map.json").read_text())["old_to_new"]


def check_model(bindir: Path, model: Path, corpus: Path, tmp: Path, auto=AutoModelForCausalLM):
    out = tmp / ("trim_" + model.name)
    old_to_new = trim(bindir, model, corpus, out)
    kept = [o for o, n in sorted(((o, n) for o, n in enumerate(old_to_new) if n is not None), key=lambda x: x[1])]
    t_old, t_new = AutoTokenizer.from_pretrained(model), AutoTokenizer.from_pretrained(out)
    m_old, m_new = auto.from_pretrained(model), auto.from_pretrained(out)
    lines = [l for l in corpus.read_text(encoding="utf-8").splitlines() if l.strip()]
    same = 0
    for l in lines:
        a, b = t_old(l).input_ids, t_new(l).input_ids
        assert t_old.convert_ids_to_tokens(a) == t_new.convert_ids_to_tokens(b), l
        assert [old_to_new[i] for i in a] == b, l
        with torch.no_grad():
            lo = m_old(torch.tensor([a])).logits[..., kept]
            ln = m_new(torch.tensor([b])).logits[..., : len(kept)]
        assert torch.equal(lo, ln), (l, (lo - ln).abs().max())
        same += 1
    # Re-extend to the old row count: every kept row comes back bit for bit.
    ext = tmp / ("ext_" + model.name)
    r = subprocess.run([str(bindir / "extend-embeddings"), str(out), "--output", str(ext),
                        "--new-rows", str(len(old_to_new))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    w_trim = load_file(next(out.glob("*.safetensors")))
    w_ext = load_file(next(ext.glob("*.safetensors")))
    grown = [k for k, v in w_ext.items() if v.shape[0] == len(old_to_new) and w_trim[k].shape[0] == len(kept)]
    assert grown
    for name in grown:
        assert torch.equal(w_ext[name][: len(kept)], w_trim[name]), name
    print(f"ok  {model.name} ({type(t_new).__name__}, {type(m_new).__name__}): {len(old_to_new)} → {len(kept)} tokens, {same} lines: same tokens, "
          f"logits equal at the kept ids (bit for bit), re-extended rows equal")


def check_sp(bindir: Path, model: Path, corpus: Path, tmp: Path):
    import sentencepiece as spm
    out = tmp / ("sp_" + model.name)
    old_to_new = trim(bindir, model, corpus, out)
    a = spm.SentencePieceProcessor(model_file=str(model / "tokenizer.model"))
    b = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    for l in corpus.read_text(encoding="utf-8").splitlines():
        assert a.encode(l, out_type=str) == b.encode(l, out_type=str), l
        assert [old_to_new[i] for i in a.encode(l)] == b.encode(l), l
    print(f"ok  {model.name} (sentencepiece): {a.get_piece_size()} → {b.get_piece_size()} pieces, same pieces and mapped ids")


def check_both(bindir: Path, corpus: Path, tmp: Path):
    """A Llama folder as transformers saves it (tokenizer.json and tokenizer.model): both trimmed,
    `sentencepiece` and `tokenizers` give the same ids on every line."""
    import shutil
    import sentencepiece as spm
    import tokenizers
    src = tmp / "llama_both"
    shutil.copytree(TD / "sp_only/llama", src)
    AutoTokenizer.from_pretrained(src).save_pretrained(src)
    out = tmp / "trim_both"
    trim(bindir, src, corpus, out)
    a = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    b = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    for l in corpus.read_text(encoding="utf-8").splitlines():
        assert a.encode(l) == b.encode(l, add_special_tokens=False).ids, l
    print(f"ok  llama with both forms: tokenizer.model and tokenizer.json trimmed to the same "
          f"{a.get_piece_size()} ids, the same ids on every line")


def check_spiece(bindir: Path, corpus: Path, tmp: Path):
    """A Unigram SentencePiece model (byte fallback) as T5 and ALBERT name it, spiece.model, beside
    an untied Llama made here: the trimmed spiece.model (under that name, no other .model) splits
    every line into the same pieces in `sentencepiece`, and the model's logits on those ids equal
    the original's gathered at the kept ids, bit for bit."""
    import sentencepiece as spm
    from transformers import LlamaConfig, LlamaForCausalLM
    src = tmp / "t5_style"
    src.mkdir()
    (src / "spiece.model").write_bytes((TD / "tokenizers/sp_english.model").read_bytes())
    a = spm.SentencePieceProcessor(model_file=str(src / "spiece.model"))
    torch.manual_seed(5)
    LlamaForCausalLM(LlamaConfig(vocab_size=a.get_piece_size(), hidden_size=16, intermediate_size=32,
                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 tie_word_embeddings=False, bos_token_id=a.bos_id(),
                                 eos_token_id=a.eos_id())).save_pretrained(src)
    out = tmp / "trim_t5_style"
    old_to_new = trim(bindir, src, corpus, out)
    assert sorted(p.name for p in out.glob("*.model")) == ["spiece.model"], list(out.iterdir())
    b = spm.SentencePieceProcessor(model_file=str(out / "spiece.model"))
    kept = [o for o, n in sorted(((o, n) for o, n in enumerate(old_to_new) if n is not None), key=lambda x: x[1])]
    m_old, m_new = LlamaForCausalLM.from_pretrained(src), LlamaForCausalLM.from_pretrained(out)
    for l in corpus.read_text(encoding="utf-8").splitlines():
        x, y = a.encode(l), b.encode(l)
        assert a.encode(l, out_type=str) == b.encode(l, out_type=str), l
        assert [old_to_new[i] for i in x] == y, l
        with torch.no_grad():
            assert torch.equal(m_old(torch.tensor([x])).logits[..., kept], m_new(torch.tensor([y])).logits), l
    print(f"ok  spiece.model (Unigram, sentencepiece): {a.get_piece_size()} → {b.get_piece_size()} pieces "
          f"under its own name, same pieces, logits equal at the kept ids (bit for bit)")


def check_trainer(bindir: Path, ckpt: Path, corpus: Path, tmp: Path):
    from transformers import Trainer, TrainingArguments, default_data_collator
    out = tmp / "trim_trainer"
    old_to_new = trim(bindir, ckpt, corpus, out)
    o_old = torch.load(ckpt / "optimizer.pt", weights_only=True, mmap=True)
    o_new = torch.load(out / "optimizer.pt", weights_only=True, mmap=True)
    kept = [o for o, n in enumerate(old_to_new) if n is not None]
    moved = 0
    for idx, st in o_new["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v) and v.dim() == 2 and v.shape[0] == len(kept):
                assert torch.equal(v, o_old["state"][idx][k][kept]), (idx, k)
                moved += 1
    tok = AutoTokenizer.from_pretrained(out)
    lines = [l for l in corpus.read_text(encoding="utf-8").splitlines() if l.strip()][:16]
    data = []
    for l in lines:
        e = tok(l, truncation=True, max_length=16)["input_ids"]
        data.append({"input_ids": e + [tok.eos_token_id] * (16 - len(e)), "labels": e + [-100] * (16 - len(e))})
    step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    args = TrainingArguments(output_dir=str(tmp / "resume"), max_steps=step + 2, save_strategy="no",
                             per_device_train_batch_size=4, learning_rate=1e-2, weight_decay=0.01,
                             report_to=[], use_cpu=True, seed=2, data_seed=2)
    res = Trainer(model=AutoModelForCausalLM.from_pretrained(out), args=args, train_dataset=data,
                  processing_class=tok, data_collator=default_data_collator).train(resume_from_checkpoint=str(out))
    assert res.global_step == step + 2
    print(f"ok  {ckpt.parent.name}: {moved} moments gathered with their tokens, resumed {step} → {res.global_step}")


def main():
    bindir = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target/release")
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        corpus = t / "corpus.txt"
        corpus.write_text("\n".join((TD / "tokenizers/english.txt").read_text(encoding="utf-8").splitlines()[:20]) + "\n")
        check_model(bindir, TD / "gpt2", corpus, t)
        check_model(bindir, TD / "sp_only/llama", corpus, t)
        check_sp(bindir, TD / "sp_only/llama", corpus, t)
        check_both(bindir, corpus, t)
        check_model(bindir, TD / "families/wordpiece_bert", corpus, t, AutoModelForMaskedLM)
        check_model(bindir, TD / "families/unigram_llama", corpus, t)
        check_spiece(bindir, corpus, t)
        check_trainer(bindir, TD / "trainer_untied/checkpoint-2", corpus, t)
    print("all trim consumer checks passed")


if __name__ == "__main__":
    main()
