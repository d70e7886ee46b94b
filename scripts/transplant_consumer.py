"""transplant-tokenizer's outputs as transformers uses them (not in CI: needs torch and
transformers). For each case: the tool runs on shipped testdata, then `AutoTokenizer` and
`AutoModelForCausalLM.from_pretrained` load the output folder, a sentence is encoded and run
forward; every id is inside the table, the logits are finite, the tokenizer's special ids are
config.json's, and `len(tokenizer)` fits the table (a token past it is the device-side assert).

    python scripts/transplant_consumer.py target/release/transplant-tokenizer
"""
import json, os, subprocess, sys, tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

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


def check(tool: str, model: Path, new: Path, out: Path, extra=()):
    r = subprocess.run([tool, str(model), "--tokenizer", str(new), "--output", str(out),
                        "--allow-shrink", *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tok = AutoTokenizer.from_pretrained(out)
    m = AutoModelForCausalLM.from_pretrained(out)
    rows = m.get_input_embeddings().weight.shape[0]
    cfg = json.loads((out / "config.json").read_text())
    assert len(tok) <= rows, (len(tok), rows)
    for role in ["bos", "eos"]:
        tid = getattr(tok, f"{role}_token_id")
        if cfg.get(f"{role}_token_id") is not None and tid is not None:
            assert tid == cfg[f"{role}_token_id"], (role, tid, cfg[f"{role}_token_id"])
    ids = tok(TEXT, return_tensors="pt").input_ids
    assert int(ids.max()) < rows
    with torch.no_grad():
        logits = m(ids).logits
    assert torch.isfinite(logits).all()
    assert logits.shape[-1] == rows
    print(f"ok  {model.name:>6} → {new.name:<22} rows {rows}, len(tokenizer) {len(tok)}, "
          f"{ids.shape[1]} ids, logits finite")


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/transplant-tokenizer")
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        check(tool, TD / "gpt2", TD / "tokenizers/bytelevel_bpe.json", t / "a")
        check(tool, TD / "gpt2", TD / "tokenizers/bytelevel_bpe.json", t / "b", ["--pad-to-multiple-of", "64"])
        check(tool, TD / "sp_only/llama", TD / "tokenizers/sp_bpe_english.model", t / "c")
        check(tool, TD / "gpt2", sp_folder(t), t / "d")
        check(tool, TD / "sp_only/llama", TD / "gpt2", t / "e")
    print("all consumer checks passed")


if __name__ == "__main__":
    main()
