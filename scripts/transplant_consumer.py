"""transplant-tokenizer's outputs as transformers uses them (not in CI: needs torch and
transformers). For each case: the tool runs on shipped testdata, then `AutoTokenizer` and
`AutoModelForCausalLM.from_pretrained` load the output folder, a sentence is encoded and run
forward; every id is inside the table, the logits are finite, the tokenizer's special ids are
config.json's, and `len(tokenizer)` fits the table (a token past it is the device-side assert).
The WordPiece BertForMaskedLM (testdata/families) also has every same-string row of its embedding
and decoder bias checked bit for bit against the base's.

    python scripts/transplant_consumer.py target/release/transplant-tokenizer
"""
import json, os, subprocess, sys, tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
TD = ROOT / "testdata"
TEXT = "The quick brown fox jumps over the lazy dog. Hello world!"


def sp_folder(tmp: Path) -> Path:
    d = tmp / "sp_new"
    d.mkdir()
    (d / "tokenizer.model").write_bytes((TD / "tokenizers/sp_bpe_english.model").read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True}))
    return d


def check(tool: str, model: Path, new: Path, out: Path, extra=(), auto=AutoModelForCausalLM):
    r = subprocess.run([tool, str(model), "--tokenizer", str(new), "--output", str(out),
                        "--allow-shrink", *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tok = AutoTokenizer.from_pretrained(out)
    m = auto.from_pretrained(out)
    rows = m.get_input_embeddings().weight.shape[0]
    cfg = json.loads((out / "config.json").read_text())
    assert len(tok) <= rows, (len(tok), rows)
    for role in ["bos", "eos"]:
        tid = getattr(tok, f"{role}_token_id")
        if cfg.get(f"{role}_token_id") is not None and tid is not None:
            assert tid == cfg[f"{role}_token_id"], (role, tid, cfg[f"{role}_token_id"])
    ids = tok(TEXT, return_tensors="pt").input_ids
    assert int(ids.max()) < rows
    if new.is_file() and new.suffix == ".json":
        # The output's AutoTokenizer tokenizes as NEW's tokenizer.json itself does (the base's
        # tokenizer class must not rebuild a normaliser or special-token template over it).
        from tokenizers import Tokenizer
        own = Tokenizer.from_file(str(new))
        for line in [TEXT, "The Quick Brown fox, jumping.", "hello world"]:
            assert tok(line).input_ids == own.encode(line).ids, (line, tok(line).input_ids, own.encode(line).ids)
    with torch.no_grad():
        logits = m(ids).logits
    assert torch.isfinite(logits).all()
    assert logits.shape[-1] == rows
    print(f"ok  {model.name:>6} → {new.name:<22} rows {rows}, len(tokenizer) {len(tok)}, "
          f"{ids.shape[1]} ids, logits finite")
    return m


def same_string_rows(base: Path, out: Path, m_new, auto):
    """Every token of the output's vocabulary that the base has: its embedding row and head bias
    at the new id equal the base's at the old id, bit for bit."""
    old_v, new_v = AutoTokenizer.from_pretrained(base).get_vocab(), AutoTokenizer.from_pretrained(out).get_vocab()
    m_old = auto.from_pretrained(base)
    same = [(old_v[t], i) for t, i in new_v.items() if t in old_v]
    o, n = zip(*same)
    o, n = list(o), list(n)
    e_old, e_new = m_old.get_input_embeddings().weight, m_new.get_input_embeddings().weight
    b_old, b_new = m_old.get_output_embeddings().bias, m_new.get_output_embeddings().bias
    assert torch.equal(e_new[n], e_old[o]) and torch.equal(b_new[n], b_old[o])
    cont = sum(t.startswith("##") for t in new_v if t in old_v)
    print(f"ok  {base.name} → {out.name}: {len(same)} same-string rows ({cont} ## pieces) and biases bit for bit")


def check_trainer(tool: str, ckpt: Path, new: Path, out: Path, tmp: Path, extra=()):
    """A Trainer checkpoint transplanted: each kept token's moments at its new id are its old
    ones, new ids' moments zero; then the real Trainer resumes from it for 2 more steps."""
    from transformers import Trainer, TrainingArguments, default_data_collator
    r = subprocess.run([tool, str(ckpt), "--tokenizer", str(new), "--output", str(out),
                        "--allow-shrink", *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    def vocab(p):
        d = json.loads(p.read_text())
        v = dict(d["model"]["vocab"])
        v.update({a["content"]: a["id"] for a in d["added_tokens"]})
        return v
    old_tok, new_tok = vocab(ckpt / "tokenizer.json"), vocab(new)
    old_o = torch.load(ckpt / "optimizer.pt", weights_only=True, mmap=True)
    new_o = torch.load(out / "optimizer.pt", weights_only=True, mmap=True)
    rows = AutoModelForCausalLM.from_pretrained(out).get_input_embeddings().weight.shape[0]
    moved = 0
    for idx, st in new_o["state"].items():
        for k, v in st.items():
            if not torch.is_tensor(v) or v.dim() == 0 or v.shape[0] != rows:
                continue
            old = old_o["state"][idx][k]
            for t, nid in new_tok.items():
                if t in old_tok:
                    assert torch.equal(v[nid], old[old_tok[t]]), (idx, k, t)
                else:
                    assert not v[nid].any(), (idx, k, t)
            moved += 1
    assert moved >= 2, moved
    tok = AutoTokenizer.from_pretrained(out)
    lines = (TD / "tokenizers/english.txt").read_text(encoding="utf-8").splitlines()[:16]
    pad = tok.eos_token_id if tok.eos_token_id is not None else 0
    data = []
    for l in lines:
        e = tok(l, truncation=True, max_length=16)["input_ids"]
        data.append({"input_ids": e + [pad] * (16 - len(e)), "labels": e + [-100] * (16 - len(e))})
    step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    args = TrainingArguments(output_dir=str(tmp / "resume"), max_steps=step + 2, save_strategy="no",
                             per_device_train_batch_size=4, learning_rate=1e-2, weight_decay=0.01,
                             report_to=[], use_cpu=True, logging_steps=1, seed=2, data_seed=2)
    model = AutoModelForCausalLM.from_pretrained(out)
    tr = Trainer(model=model, args=args, train_dataset=data, processing_class=tok,
                 data_collator=default_data_collator)
    res = tr.train(resume_from_checkpoint=str(out))
    assert res.global_step == step + 2 and torch.isfinite(torch.tensor(res.training_loss))
    print(f"ok  {ckpt.parent.name}/{ckpt.name} → {new.name}: {moved} moments moved with their tokens, "
          f"resumed at step {step} → {res.global_step}, loss {res.training_loss:.3f}")


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/transplant-tokenizer")
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        check(tool, TD / "gpt2", TD / "tokenizers/bytelevel_bpe.json", t / "a")
        check(tool, TD / "gpt2", TD / "tokenizers/bytelevel_bpe.json", t / "b", ["--pad-to-multiple-of", "64"])
        check(tool, TD / "sp_only/llama", TD / "tokenizers/sp_bpe_english.model", t / "c")
        check(tool, TD / "gpt2", sp_folder(t), t / "d")
        check(tool, TD / "sp_only/llama", TD / "gpt2", t / "e")
        bert = TD / "families/wordpiece_bert"
        for name, new in [("h", TD / "tokenizers/wordpiece.json"), ("i", TD / "tokenizers/bert_uncased.json")]:
            m = check(tool, bert, new, t / name, auto=AutoModelForMaskedLM)
            same_string_rows(bert, t / name, m, AutoModelForMaskedLM)
        new = TD / "tokenizers/bytelevel_bpe.json"
        check_trainer(tool, TD / "trainer/checkpoint-2", new, t / "f", t)
        check_trainer(tool, TD / "trainer_untied/checkpoint-2", new, t / "g", t)
    print("all consumer checks passed")


if __name__ == "__main__":
    main()
