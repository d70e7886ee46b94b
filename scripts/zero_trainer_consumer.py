"""trim-vocab, transplant-tokenizer and sanitize-checkpoint (--vocab-rows 1064) on a real Hugging Face Trainer + DeepSpeed checkpoint (not in CI:
needs torch, transformers, accelerate and deepspeed; DS_ACCELERATOR=cpu, 2 gloo ranks via torchrun).

For ZeRO-2, ZeRO-3 with stage3_gather_16bit_weights_on_model_save (model.safetensors beside) and
ZeRO-3 without it (no weights beside: the tools plan on the ZeRO state) the real Trainer trains testdata/gpt2 (tied GPT-2, 1000 tokens) for 2 steps
with DeepSpeed and saves checkpoint-2/ (global_step2/, latest, zero_to_fp32.py, model.safetensors,
config, tokenizer, trainer_state.json, rng states, …). trim-vocab trims it to a corpus,
transplant-tokenizer gives it a tokenizer with 3 tokens gone and 2 new, sanitize-checkpoint grows it
to 1064 rows; then:
DeepSpeed's own zero_to_fp32 view of the output equals the input's at the kept ids (bit for bit),
every other parameter unchanged; model.safetensors' rows equal the input's at the kept ids (grown
rows: DeepSpeed's own new rows); config's
vocab_size is the new row count; the Trainer's and DeepSpeed's files carried byte for byte
(zero_to_fp32.py executable); and the real Trainer resumes the output with DeepSpeed (model from
from_pretrained, or from the config when no weights were saved) and steps 2 -> 4.

    python scripts/zero_trainer_consumer.py target/debug
"""
import json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TD = ROOT / "testdata"


def ds_config(stage, gather):
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                  "stage3_gather_16bit_weights_on_model_save": gather},
            "zero_allow_untested_optimizer": True, "bf16": {"enabled": False}}


def worker(a):
    """Run by torchrun: train from testdata/gpt2 and save (resume=None), or resume `resume`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments, default_data_collator
    src = a["resume"] or str(TD / "gpt2")
    tok = AutoTokenizer.from_pretrained(src)
    lines = [l for l in Path(a["corpus"]).read_text(encoding="utf-8").splitlines() if l.strip()][:16]
    pad = tok.eos_token_id if tok.eos_token_id is not None else 0
    data = []
    for l in lines:
        e = tok(l, truncation=True, max_length=16)["input_ids"]
        data.append({"input_ids": e + [pad] * (16 - len(e)), "labels": e + [-100] * (16 - len(e))})
    args = TrainingArguments(output_dir=a["out"], max_steps=a["steps"], save_steps=2, save_strategy="steps",
                             per_device_train_batch_size=2, learning_rate=1e-2, weight_decay=0.01,
                             report_to=[], seed=2, data_seed=2, deepspeed=ds_config(a["stage"], a["gather"]),
                             save_only_model=False)
    if (Path(src) / "model.safetensors").exists():
        model = AutoModelForCausalLM.from_pretrained(src)
    else:
        # ZeRO-3 saved no weights: the model is built from the config, its state from global_step*/.
        from transformers import AutoConfig
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
    t = Trainer(model=model, args=args, train_dataset=data, processing_class=tok, data_collator=default_data_collator)
    res = t.train(resume_from_checkpoint=a["resume"])
    assert res.global_step == a["steps"], res
    assert torch.isfinite(torch.tensor(res.training_loss)), res
    if int(os.environ.get("RANK", "0")) == 0:
        Path(a["out"], "result.json").write_text(json.dumps({"global_step": res.global_step, "loss": res.training_loss}))


def torchrun(args, port):
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc_per_node", "2",
           "--master_port", str(port), __file__, "--worker", json.dumps(args)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]


def check(bindir, stage, gather, corpus, tmp, tool):
    import torch
    from safetensors.torch import load_file
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    run = tmp / f"run{stage}{gather}"
    if not run.exists():
        torchrun({"stage": stage, "gather": gather, "corpus": str(corpus), "out": str(run), "steps": 2,
                  "resume": None}, 29700 + stage)
    ckpt = run / "checkpoint-2"
    out = tmp / f"{tool}{stage}{gather}"
    if tool == "sanitize-checkpoint":
        extra = ["--vocab-rows", "1064"]
    elif tool == "trim-vocab":
        extra = ["--keep-corpus", str(corpus)]
    else:
        # The new tokenizer: GPT-2's with three tokens removed (ids shift) and two made.
        t = json.loads((ckpt / "tokenizer.json").read_text())
        vocab = t["model"]["vocab"]
        for gone in list(vocab)[300:303]:
            del vocab[gone]
        parts = lambda m: m if isinstance(m, list) else m.split(" ")
        t["model"]["merges"] = [m for m in t["model"]["merges"]
                                if all(p in vocab for p in parts(m)) and "".join(parts(m)) in vocab]
        for w in ("zzqx", "qxzz"):
            vocab[w] = len(vocab)
        t["model"]["vocab"] = {w: i for i, w in enumerate(vocab)}
        nxt = len(vocab)
        for a in t["added_tokens"]:
            if a["content"] not in vocab:
                a["id"], nxt = nxt, nxt + 1
            else:
                a["id"] = t["model"]["vocab"][a["content"]]
        new_tok = tmp / f"new{stage}{gather}.json"
        new_tok.write_text(json.dumps(t))
        extra = ["--tokenizer", str(new_tok)]
    r = subprocess.run([str(bindir / tool), str(ckpt), "--output", str(out), "--allow-shrink", *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    old_to_new = json.loads((out / "token_map.json").read_text())["old_to_new"] if tool == "trim-vocab" else None
    plan_map = None
    if tool == "sanitize-checkpoint":
        plan_map = {n: (n if n < 1000 else None) for n in range(1064)}
    elif old_to_new is None:
        # transplant-tokenizer: new id -> old id by token text (the map the tool used, by text).
        a = json.loads((ckpt / "tokenizer.json").read_text())["model"]["vocab"]
        b = json.loads(new_tok.read_text())["model"]["vocab"]
        t_new = json.loads(new_tok.read_text())
        t_old = json.loads((ckpt / "tokenizer.json").read_text())
        a.update({x["content"]: x["id"] for x in t_old["added_tokens"]})
        b.update({x["content"]: x["id"] for x in t_new["added_tokens"]})
        plan_map = {n: a.get(w) for w, n in b.items()}
    else:
        plan_map = {n: o for o, n in enumerate(old_to_new) if n is not None}
    before = get_fp32_state_dict_from_zero_checkpoint(str(ckpt))
    after = get_fp32_state_dict_from_zero_checkpoint(str(out))
    assert before.keys() == after.keys()
    gathered = 0
    for k in before:
        if before[k].dim() == 2 and before[k].shape[0] == 1000:
            for n, o in plan_map.items():
                if o is not None:
                    assert torch.equal(after[k][n], before[k][o]), (k, n, o)
            gathered += 1
        else:
            assert torch.equal(before[k], after[k]), k
    beside = (ckpt / "model.safetensors").exists()
    assert beside == (out / "model.safetensors").exists()
    wb, wa = (load_file(ckpt / "model.safetensors"), load_file(out / "model.safetensors")) if beside else ({}, {})
    for k in wb:
        if wb[k].dim() == 2 and wb[k].shape[0] == 1000:
            for n, o in plan_map.items():
                if o is not None:
                    assert torch.equal(wa[k][n], wb[k][o]), (k, n, o)
                elif tool == "sanitize-checkpoint":
                    # A grown row: the weights beside hold the ZeRO model's own new row.
                    assert torch.equal(wa[k][n], after[k][n].to(wa[k].dtype)), (k, n)
        else:
            assert torch.equal(wa[k], wb[k]), k
    for same in ("trainer_state.json", "latest", "rng_state_0.pth", "scheduler.pt", "zero_to_fp32.py"):
        if (ckpt / same).exists():
            assert (ckpt / same).read_bytes() == (out / same).read_bytes(), same
    assert os.access(out / "zero_to_fp32.py", os.X_OK)
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == len(plan_map), config["vocab_size"]
    res = tmp / f"resume_{tool}{stage}{gather}"
    torchrun({"stage": stage, "gather": gather, "corpus": str(corpus), "out": str(res), "steps": 4,
              "resume": str(out)}, 29710 + stage)
    got = json.loads((res / "result.json").read_text())
    rows = len(plan_map)
    what = "model.safetensors beside" if beside else "no weights beside"
    print(f"ok  ZeRO-{stage} Trainer checkpoint ({what}), {tool}: 1000 -> {rows} rows; DeepSpeed's fp32 view "
          f"{'and model.safetensors ' if beside else ''}gathered bit for bit ({gathered} vocabulary parameter), resumed 2 -> {got['global_step']} "
          f"(loss {got['loss']:.4f})")


def main():
    if "--worker" in sys.argv:
        return worker(json.loads(sys.argv[sys.argv.index("--worker") + 1]))
    bindir = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target/release").resolve()
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        corpus = t / "corpus.txt"
        corpus.write_text("\n".join((TD / "tokenizers/english.txt").read_text(encoding="utf-8").splitlines()[:20]) + "\n")
        for stage, gather in ((2, False), (3, True), (3, False)):
            for tool in ("trim-vocab", "transplant-tokenizer", "sanitize-checkpoint"):
                check(bindir, stage, gather, corpus, t, tool)
    print("all ZeRO Trainer consumer checks passed")


if __name__ == "__main__":
    main()
