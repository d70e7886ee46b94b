#!/usr/bin/env python3
"""By-hand check of sanitize-checkpoint on the ZeRO fixtures with DeepSpeed itself (issue 36).

  python3 testdata/zero_verify.py ORIG GROWN ROWS STAGE [--bf16]

ORIG a fixture save root (testdata/zero/zero2_bf16), GROWN sanitize-checkpoint's output with
--vocab-rows ROWS. Checks, with DeepSpeed's zero_to_fp32: every non-vocabulary parameter equals
the original's, the vocabulary matrices' first min(999, ROWS) rows equal the original's and their
new rows equal the model's new rows (the module's, for stages 1/2); then resumes GROWN with
deepspeed (CPU, gloo, 2 ranks, torchrun) into a model of ROWS rows, dumps DeepSpeed's own view of
every parameter's fp32 weights and moments after load_checkpoint, checks old rows intact and new
rows' moments zero, and trains one step. Needs the venv's bin on PATH and DS_ACCELERATOR=cpu.
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

VOCAB = ("embed.weight", "head.weight")


def main():
    orig, grown, rows, stage = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    bf16 = "--bf16" in sys.argv
    keep = min(999, rows)
    a = get_fp32_state_dict_from_zero_checkpoint(orig)
    b = get_fp32_state_dict_from_zero_checkpoint(grown)
    assert a.keys() == b.keys()
    for k in a:
        if k in VOCAB:
            assert b[k].shape == (rows, 3), (k, b[k].shape)
            assert torch.equal(a[k][:keep], b[k][:keep]), k
        else:
            assert torch.equal(a[k], b[k]), k
    if stage <= 2:
        tag = open(os.path.join(grown, "latest")).read().strip()
        module = torch.load(os.path.join(grown, tag, "mp_rank_00_model_states.pt"), weights_only=False)["module"]
        for k in VOCAB:
            assert module[k].shape == (rows, 3), k
            # The grown model's rows are the master weights' rows (bf16: the new rows exactly).
            new = module[k][keep:].float()
            assert torch.equal(new, b[k][keep:]), k
    print(f"zero_to_fp32: {len(a)} parameters; old rows and other parameters identical; new rows = model rows")

    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dump.safetensors")
        here = os.path.dirname(os.path.abspath(__file__))
        cmd = ["torchrun", "--nproc_per_node", "2", "--master_port", "29650",
               os.path.join(here, "zero_train.py"), "--stage", str(stage), "--rows", str(rows),
               "--load", grown, "--dump", dump, "--steps", "1"]
        if bf16:
            cmd.append("--bf16")
        out = subprocess.run(cmd, env=dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1"),
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stdout[-3000:] + out.stderr[-3000:])
        d = load_file(dump)
    for k in a:
        assert torch.equal(d[k][:keep], a[k][:keep]) if k in VOCAB else torch.equal(d[k], a[k]), k
        if k in VOCAB:
            assert torch.equal(d[k], b[k]), k
            for m in ("exp_avg", "exp_avg_sq"):
                assert (d[f"{k}.{m}"][keep:] == 0).all(), (k, m)
    ref = orig.rstrip("/") + ".moments.safetensors"
    if os.path.exists(ref):
        mom = load_file(ref)
        for k, v in mom.items():
            n = keep if k.rsplit(".", 1)[0] in VOCAB else v.shape[0]
            assert torch.equal(d[k][:n], v[:n]), k
        print(f"deepspeed resume: {len(mom)} moments equal the original's (old rows)")
    loss = [l for l in out.stdout.splitlines() if l.startswith("step 0 loss")]
    print(f"deepspeed resume: loaded, old rows' state intact, new rows' moments zero; {loss[0]}")


if __name__ == "__main__":
    main()
