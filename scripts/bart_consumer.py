"""BART's final_logits_bias [1, V] through trim-vocab and extend-embeddings, checked by transformers.

A tiny BartForConditionalGeneration (random weights, a non-zero final_logits_bias) over GPT-2's
1000-token testdata tokenizer, saved by transformers (safetensors) and as older transformers
did (torch.save of the state dict: pytorch_model.bin, tied names sharing a storage);
then, for each form:
- trim-vocab to a corpus: the output loads with from_pretrained (no missing, unexpected or
  mismatched key), its
  final_logits_bias is [1, kept] and holds the old values at the kept ids, and the logits of a
  corpus line (encoded by each model's own tokenizer) at the kept ids equal the old logits at the
  old ids, bit for bit;
- transplant-tokenizer onto the trimmed tokenizer: loads, bias and rows taken by token;
- extend-embeddings +10 rows: loads, bias [1, 1010], old logits unchanged at the old ids, the
  new entries the old bias' mean (transformers pads zeros: the same for the zeros BART saves);
- a Trainer run saved at step 2 whose tokenizer then gains a token: check-vocab's suggested fix
  (sanitize-checkpoint) runs, the bias grows to [1, 1001], and the real Trainer resumes and steps
  (its "missing keys" line about the tied embeddings and head is printed for an untouched
  checkpoint too: transformers 5 saves a tie once).
Not CI (needs torch + transformers): python scripts/bart_consumer.py target/release
"""

import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TD = os.path.join(ROOT, "testdata")


def run(tool, *args):
    r = subprocess.run([os.path.join(BIN, tool), *args, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{tool} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def load(folder):
    """from_pretrained, failing on any missing, unexpected or mismatched key (a size mismatch
    raises in transformers 5 anyway)."""
    m, info = BartForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{folder}: transformers reported {bad}")
    return m.eval()


def logits(model, tok, text):
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(input_ids=ids, decoder_input_ids=ids).logits[0], ids[0]


def trainer_case(work, model, tok, lines):
    """A Trainer run saved at step 2, its tokenizer then given a token: check-vocab's fix
    (sanitize-checkpoint) is run as suggested, the result resumes and steps with the real
    Trainer, and the bias has grown with the rows."""
    from transformers import Trainer, TrainingArguments, default_data_collator
    data = []
    for l in lines:
        e = tok(l, truncation=True, max_length=16)["input_ids"]
        pad = 16 - len(e)
        data.append({"input_ids": e + [0] * pad, "labels": e + [-100] * pad})
    run_dir = os.path.join(work, "run")

    def args(steps):
        return TrainingArguments(output_dir=run_dir, max_steps=steps, save_steps=2,
                                 per_device_train_batch_size=4, learning_rate=1e-2,
                                 report_to=[], use_cpu=True, seed=2, data_seed=2)
    Trainer(model=model, args=args(2), train_dataset=data, processing_class=tok,
            data_collator=default_data_collator).train()
    ckpt = os.path.join(run_dir, "checkpoint-2")
    tj = json.load(open(os.path.join(ckpt, "tokenizer.json")))
    tj["added_tokens"].append({"id": 1000, "content": "<|new|>", "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False,
                               "special": True})
    json.dump(tj, open(os.path.join(ckpt, "tokenizer.json"), "w"))
    r = subprocess.run([os.path.join(BIN, "check-vocab"), ckpt, "--json"], capture_output=True,
                       text=True)
    fixes = [f for f in json.loads(r.stdout)["findings"] if f.get("fix")]
    assert r.returncode == 1 and fixes, r.stdout[:2000]
    fix = fixes[0]["fix"]
    cmd = fix["command"] if isinstance(fix, dict) else fix
    argv = cmd if isinstance(cmd, list) else cmd.split()
    argv[0] = os.path.join(BIN, os.path.basename(argv[0]))
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fixed = argv[argv.index("--output") + 1]
    m = load(fixed)
    old = BartForConditionalGeneration.from_pretrained(ckpt)
    bias = m.final_logits_bias[0]
    assert bias.shape[0] == 1001 and torch.equal(bias[:1000], old.final_logits_bias[0][:1000])
    res = Trainer(model=m.train(), args=args(4), train_dataset=data, processing_class=tok,
                  data_collator=default_data_collator).train(resume_from_checkpoint=fixed)
    assert res.global_step == 4, res.global_step
    print(f"Trainer run: check-vocab's fix ({os.path.basename(argv[0])}) grew the bias to "
          f"[1, 1001]; resumed 2 → {res.global_step}, loss {res.training_loss:.3f}")


def main():
    work = tempfile.mkdtemp(prefix="bart-")
    tok = AutoTokenizer.from_pretrained(os.path.join(TD, "gpt2"))
    torch.manual_seed(0)
    cfg = BartConfig(vocab_size=1000, d_model=16, encoder_layers=1, decoder_layers=1,
                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                     decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=0,
                     bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    model = BartForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(1, 1000))
    lines = open(os.path.join(TD, "tokenizers/english.txt")).read().splitlines()[:10]
    corpus = os.path.join(work, "corpus.txt")
    open(corpus, "w").write("\n".join(lines))
    for form in ("safetensors", "bin"):
        src = os.path.join(work, f"bart_{form}")
        model.save_pretrained(src)
        if form == "bin":
            # transformers 5 writes safetensors only; older versions wrote torch.save of the
            # state dict (tied names sharing one storage), as here.
            os.remove(os.path.join(src, "model.safetensors"))
            torch.save(model.state_dict(), os.path.join(src, "pytorch_model.bin"))
        tok.save_pretrained(src)
        before = load(src)
        old_bias = before.final_logits_bias[0]

        trimmed = os.path.join(work, f"trimmed_{form}")
        doc = run("trim-vocab", src, "--output", trimmed, "--keep-corpus", corpus, "--allow-shrink")
        new_of = json.load(open(os.path.join(trimmed, "token_map.json")))["old_to_new"]
        kept = [(o, n) for o, n in enumerate(new_of) if n is not None]
        after = load(trimmed)
        tok2 = AutoTokenizer.from_pretrained(trimmed)
        assert tuple(after.final_logits_bias.shape) == (1, len(kept)), after.final_logits_bias.shape
        olds = torch.tensor([o for o, _ in kept])
        news = torch.tensor([n for _, n in kept])
        assert torch.equal(after.final_logits_bias[0][news], old_bias[olds])
        for line in lines:
            (a, ia), (b, ib) = logits(before, tok, line), logits(after, tok2, line)
            assert ia.tolist() and [new_of[i] for i in ia.tolist()] == ib.tolist(), line
            assert torch.equal(a[:, olds], b[:, news]), line
        print(f"{form}: trim kept {len(kept)} of 1000 ids; bias [1, {len(kept)}] gathered; "
              f"logits at the kept ids bit for bit on {len(lines)} lines ({doc['kept_tokens']} kept)")

        # transplant onto the trimmed tokenizer: every new id's token is an old one.
        moved = os.path.join(work, f"transplanted_{form}")
        run("transplant-tokenizer", src, "--tokenizer", os.path.join(trimmed, "tokenizer.json"),
            "--output", moved, "--allow-shrink")
        t = load(moved)
        assert torch.equal(t.final_logits_bias[0][news], old_bias[olds])
        assert torch.equal(t.model.shared.weight[news], before.model.shared.weight[olds])
        print(f"{form}: transplant onto the trimmed tokenizer loads; bias and rows by token")

        grown = os.path.join(work, f"grown_{form}")
        run("extend-embeddings", src, "--output", grown, "--new-rows", "1010")
        g = load(grown)
        bias = g.final_logits_bias[0]
        assert tuple(g.final_logits_bias.shape) == (1, 1010)
        assert torch.equal(bias[:1000], old_bias)
        mean = old_bias.double().mean().float()
        assert torch.all(bias[1000:] == mean), (bias[1000:], mean)
        (a, ia), (b, _) = logits(before, tok, lines[0]), logits(g, tok, lines[0])
        assert torch.equal(a, b[:, :1000]), "old logits changed"
        print(f"{form}: extend to 1010 rows loads; bias [1, 1010], new entries the mean; "
              "old logits bit for bit")
    trainer_case(work, model, tok, lines)
    print("all BART consumer checks passed")


if __name__ == "__main__":
    main()
