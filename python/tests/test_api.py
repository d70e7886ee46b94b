"""The Python package, installed from a wheel: every tool through the API on the committed
fixtures, compared with the same tool run from PATH (the console scripts); errors; the hook for
training scripts; the type stubs against the command lines. No torch needed."""

import ast
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ckpt_surgery as cs
from ckpt_surgery import _native

ROOT = Path(__file__).resolve().parents[2]
TD = ROOT / "testdata"
BIN = Path(sys.executable).parent
TOOLS = [
    "inspect-checkpoint",
    "merge-tokenizers",
    "extend-embeddings",
    "sanitize-checkpoint",
    "check-vocab",
    "vocab-blocks",
    "transplant-tokenizer",
    "trim-vocab",
]


def cli(tool, *args):
    """The tool from PATH (this venv's console script), as a user's shell runs it."""
    exe = BIN / tool
    assert exe.exists(), f"{tool} is not installed beside {sys.executable}"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)


def test_the_package_is_imported_from_the_installed_wheel_not_the_source_tree():
    # The tests must exercise what `pip install .` put in site-packages.
    assert "site-packages" in cs.__file__, cs.__file__
    assert _native.tools() == TOOLS


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_is_on_path_with_its_help(tool):
    r = cli(tool, "--help")
    assert r.returncode == 0, r.stderr
    assert "Examples:" in r.stdout and "--json" in r.stdout
    v = cli(tool, "--version")
    assert v.returncode == 0 and cs.__version__ in v.stdout


def test_the_amharic_pipeline_through_the_api_writes_the_bytes_the_command_line_writes(tmp_path):
    base = TD / "tokenizers/chatterbox_base.json"
    add = TD / "tokenizers/amharic_addition.json"
    texts = [TD / "tokenizers/english.txt", TD / "tokenizers/amharic.txt"]
    ckpt = TD / "chatterbox_t3/t3_bf16.safetensors"
    api, sh = tmp_path / "api", tmp_path / "cli"
    api.mkdir()
    sh.mkdir()

    m = cs.merge_tokenizers(base, add, api / "merged.json", check_text=texts)
    e = cs.extend_embeddings(ckpt, api / "t3.safetensors", tokenizer=api / "merged.json")

    r = cli("merge-tokenizers", "--base", base, "--add", add, "--output", sh / "merged.json",
            "--check-text", texts[0], "--check-text", texts[1], "--json")
    assert r.returncode == 0, r.stderr
    m_cli = json.loads(r.stdout)
    r = cli("extend-embeddings", ckpt, "--output", sh / "t3.safetensors",
            "--tokenizer", sh / "merged.json", "--json")
    assert r.returncode == 0, r.stderr
    e_cli = json.loads(r.stdout)

    for name in ["merged.json", "t3.safetensors"]:
        assert (api / name).read_bytes() == (sh / name).read_bytes(), name
    # The reports are the --json reports (paths aside).
    assert m["merged_size"] == m_cli["merged_size"] == 2535
    assert m["added"] == m_cli["added"] and len(m["added"]) == 81
    assert e["new_rows"] == e_cli["new_rows"] == 2535
    assert [t["digest"] for f in e["manifest"] for t in f["tensors"]] == [
        t["digest"] for f in e_cli["manifest"] for t in f["tensors"]
    ]


def test_inspect_reports_as_the_command_line_does():
    p = TD / "chatterbox_t3/t3_bf16.safetensors"
    api = cs.inspect_checkpoint(p, hash=True)
    r = cli("inspect-checkpoint", p, "--hash", "--json")
    assert r.returncode == 0, r.stderr
    assert api == json.loads(r.stdout)
    (c,) = api["checkpoints"]
    assert c["hash"] == "blake3"
    assert c["tensors"] and all(len(t["digest"]) == 64 for t in c["tensors"])


def test_sanitize_resizes_a_training_checkpoint_as_the_command_line_does(tmp_path):
    src = TD / "resume/opt_adamw.pt"
    # (One file name: a torch zip names its records after the file.)
    (tmp_path / "api").mkdir()
    (tmp_path / "cli").mkdir()
    rep = cs.sanitize_checkpoint(src, tmp_path / "api/out.pt", vocab_rows=40)
    r = cli("sanitize-checkpoint", src, "--output", tmp_path / "cli/out.pt", "--vocab-rows", 40)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "api/out.pt").read_bytes() == (tmp_path / "cli/out.pt").read_bytes()
    assert rep["optimizers"][0]["repaired"], rep


def test_vocab_blocks_split_then_join_gives_the_file_back(tmp_path):
    src = TD / "chatterbox_t3/t3_f32.safetensors"
    name = next(t["name"] for t in cs.inspect_checkpoint(src)["checkpoints"][0]["tensors"]
                if t["shape"][0] == 2454)
    s = cs.vocab_blocks(src, tmp_path / "split.safetensors", split=name, at=2000)
    assert [b["shape"][0] for b in s["to"]] == [2000, 454]
    cs.vocab_blocks(tmp_path / "split.safetensors", tmp_path / "joined.safetensors", join=name)
    assert (tmp_path / "joined.safetensors").read_bytes() == src.read_bytes()


def test_check_vocab_findings_carry_their_fix_command():
    findings = cs.check_vocab(TD / "check_vocab/seed002")
    errors = [f for f in findings if f["severity"] == "error"]
    assert errors and errors[0]["check"] == "tokenizer-vs-embedding"
    assert "extend-embeddings" in errors[0]["fix"]
    report = cs.check_vocab_report(TD / "check_vocab/seed002")
    assert report["findings"] == findings and report["errors"] == len(errors)


SEEDS = {
    "seed000": (TD / "check_vocab/seed000", {}),
    "seed001": (TD / "sanitize/adamw_24001.pt", {
        "config": TD / "check_vocab/seed001/config.json",
        "tokenizer": TD / "check_vocab/seed001/tokenizer.json",
        "allow_global": "argparse.Namespace",
    }),
    "seed002": (TD / "check_vocab/seed002", {}),
    "seed004": (None, {"token_ids": TD / "audio/batch_seed004.pt", "codebook_size": 1026}),
}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_assert_vocab_ok_raises_on_the_seed_cases_with_findings_and_fixes(seed):
    ckpt, opts = SEEDS[seed]
    with pytest.raises(cs.VocabError) as e:
        cs.assert_vocab_ok(ckpt, **opts)
    err = e.value
    assert isinstance(err, cs.CkptSurgeryError) and err.exit_code == 1
    assert err.findings and all(f["severity"] == "error" for f in err.findings)
    for f in err.findings:
        assert f["message"] in str(err)
        if f.get("fix"):
            assert f"fix: {f['fix']}" in str(err)
    # The command line agrees: exit 1, the same errors.
    args = [] if ckpt is None else [ckpt]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", v]
    r = cli("check-vocab", *args, "--json")
    assert r.returncode == 1, r.stderr
    cli_errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert cli_errors == err.findings


@pytest.mark.parametrize("case", [
    "check_vocab/consistent", "check_vocab/seed003", "gpt2", "bert_mlm",
    "chatterbox_t3/t3_bf16.safetensors", "torch/state_dict.pt",
])
def test_assert_vocab_ok_passes_on_the_consistent_fixtures(case):
    report = cs.assert_vocab_ok(TD / case)
    assert report["errors"] == 0


def test_bad_input_raises_with_the_command_lines_message_and_exit_code_2(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(cs.CkptSurgeryError) as e:
        cs.extend_embeddings(missing, tmp_path / "out.safetensors", new_rows=10)
    assert e.value.exit_code == 2
    r = cli("extend-embeddings", missing, "--output", tmp_path / "out.safetensors",
            "--new-rows", 10)
    assert r.returncode == 2
    assert e.value.message == r.stderr.strip() == str(e.value)
    assert "\n" not in e.value.message and str(missing) in e.value.message
    assert not (tmp_path / "out.safetensors").exists()


def test_a_refused_growth_names_the_tensor_and_raises_exit_2(tmp_path):
    # Shrinking without allow_shrink is refused: nothing written, one line naming sizes.
    src = TD / "chatterbox_t3/t3_f32.safetensors"
    with pytest.raises(cs.CkptSurgeryError) as e:
        cs.extend_embeddings(src, tmp_path / "o.safetensors", new_rows=100)
    assert e.value.exit_code == 2 and "2454" in e.value.message and "100" in e.value.message
    assert not (tmp_path / "o.safetensors").exists()


def test_missing_required_choice_and_bad_values_raise_exit_2():
    with pytest.raises(cs.CkptSurgeryError) as e:
        cs.extend_embeddings(TD / "gpt2", "/tmp/never-written")
    assert e.value.exit_code == 2
    assert e.value.message == (
        "extend-embeddings: the following required arguments were not provided: "
        "--new-rows <NEW_ROWS>"
    )
    with pytest.raises(cs.CkptSurgeryError) as e:
        cs.sanitize_checkpoint(TD / "resume/opt_adamw.pt", "/tmp/never.pt", vocab_rows=40,
                               optimizer="burn")
    assert e.value.exit_code == 2 and "burn" in e.value.message
    assert not Path("/tmp/never.pt").exists()


def test_unknown_options_and_wrong_kinds_are_type_errors():
    with pytest.raises(TypeError, match="new_rowz"):
        cs.extend_embeddings(TD / "gpt2", "/tmp/x", new_rowz=10)
    with pytest.raises(TypeError, match="flag"):
        cs.extend_embeddings(TD / "gpt2", "/tmp/x", new_rows=10, dry_run="yes")
    with pytest.raises(TypeError, match="one value"):
        cs.extend_embeddings(TD / "gpt2", "/tmp/x", new_rows=[10, 20])


def test_the_api_draws_no_progress_and_prints_nothing_on_success(tmp_path, capfd):
    cs.extend_embeddings(TD / "chatterbox_t3/t3_f32.safetensors", tmp_path / "o.safetensors",
                         new_rows=2535, device="cpu")
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_the_type_stubs_offer_exactly_each_command_lines_options():
    stubs = ast.parse((Path(cs.__file__).parent / "__init__.pyi").read_text())
    funcs = {f.name: f for f in stubs.body if isinstance(f, ast.FunctionDef)}
    tool_of = {
        "inspect_checkpoint": "inspect-checkpoint", "merge_tokenizers": "merge-tokenizers",
        "extend_embeddings": "extend-embeddings", "sanitize_checkpoint": "sanitize-checkpoint",
        "vocab_blocks": "vocab-blocks", "check_vocab": "check-vocab",
        "check_vocab_report": "check-vocab", "assert_vocab_ok": "check-vocab",
        "transplant_tokenizer": "transplant-tokenizer", "trim_vocab": "trim-vocab",
    }
    # check-vocab's --checkpoint is its positional argument under a flag's name: the API's first
    # argument covers both.
    same_as_positional = {"check-vocab": {"checkpoint"}}
    for name, tool in tool_of.items():
        f = funcs[name]
        got = {a.arg for a in f.args.args + f.args.kwonlyargs} - {"progress"}
        want = set()
        for opt, _takes, _repeat, positional in _native.options(tool):
            if opt == "json" or positional or opt in same_as_positional.get(tool, ()):
                continue
            want.add(opt.replace("-", "_"))
        positional_params = {a.arg for a in f.args.args}
        assert got - positional_params == want - positional_params, name
        assert want <= got, f"{name}: stub lacks {want - got}"
        # The implementation takes what the stub offers.
        impl = inspect.signature(getattr(cs, name))
        assert "progress" in impl.parameters or any(
            p.kind == p.VAR_KEYWORD for p in impl.parameters.values()), name


def test_stubs_and_module_export_the_same_names():
    stubs = ast.parse((Path(cs.__file__).parent / "__init__.pyi").read_text())
    declared = {n.name for n in stubs.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert set(cs.__all__) <= declared
    assert (Path(cs.__file__).parent / "py.typed").exists()


def test_each_error_kind_raises_its_own_exception_class(tmp_path):
    # A file that is not a checkpoint: bad input.
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{notjson")
    with pytest.raises(cs.BadInputError) as e:
        cs.extend_embeddings(junk, tmp_path / "o.safetensors", new_rows=10)
    assert isinstance(e.value, cs.CkptSurgeryError) and e.value.exit_code == 2
    assert e.value.report == {"error": e.value.message.split(": ", 1)[1], "kind": "bad-input"}
    # Options the tool refuses: usage (from the library and from the command-line parser).
    with pytest.raises(cs.UsageError):
        cs.extend_embeddings(TD / "chatterbox_t3/t3_f32.safetensors", tmp_path / "o.safetensors",
                             new_rows=100)
    with pytest.raises(cs.UsageError):
        cs.extend_embeddings(TD / "gpt2", tmp_path / "never")
    # A valid input the tool does not handle: unsupported.
    with pytest.raises(cs.UnsupportedError):
        cs.sanitize_checkpoint(TD / "gpt2/model.safetensors", tmp_path / "o.pt", vocab_rows=10)
    # A check that fails: exit 1, and check-vocab's own VocabError is one.
    assert issubclass(cs.VocabError, cs.CheckFailedError)
    assert not (tmp_path / "o.safetensors").exists() and not (tmp_path / "o.pt").exists()


def test_check_vocab_fix_writes_a_repaired_folder_that_checks_clean(tmp_path):
    out = tmp_path / "fixed"
    report = cs.check_vocab_report(TD / "check_vocab/seed000", fix=True, output=out)
    assert report["errors"] == 0 and report["executed"], report
    assert json.loads((out / "config.json").read_text())["n_vocab"] == 3000
    assert [f for f in cs.check_vocab(out) if f["severity"] == "error"] == []
    # Never over the input: a usage error, nothing written.
    with pytest.raises(cs.UsageError):
        cs.check_vocab_report(TD / "check_vocab/seed000", fix=True, output=TD / "check_vocab/seed000")


def test_sanitize_refuses_to_cut_trained_rows_unless_allow_shrink(tmp_path):
    src = TD / "resume/opt_adamw.pt"  # 30 rows
    out = tmp_path / "out.pt"
    with pytest.raises(cs.UsageError) as e:
        cs.sanitize_checkpoint(src, out, vocab_rows=20)
    assert "--allow-shrink" in e.value.message and "30" in e.value.message, e.value.message
    assert not out.exists()
    rep = cs.sanitize_checkpoint(src, out, vocab_rows=20, allow_shrink=True)
    assert rep["target_rows"] == 20 and out.exists(), rep


def test_an_output_inside_the_input_folder_is_refused(tmp_path):
    src = tmp_path / "gpt2"
    shutil.copytree(TD / "gpt2", src)
    with pytest.raises(cs.UsageError) as e:
        cs.extend_embeddings(src, src / "sub", new_rows=1010)
    assert "inside the input folder" in e.value.message, e.value.message
    assert sorted(p.name for p in src.iterdir()) == sorted(p.name for p in (TD / "gpt2").iterdir())


def test_help_documents_every_parameter_with_the_command_lines_text():
    # Issue 43 point 10: the docstrings were one line. Each function's help() now lists every
    # keyword its tool takes, with the text of the tool's --help.
    for name, tool in [("extend_embeddings", "extend-embeddings"),
                       ("sanitize_checkpoint", "sanitize-checkpoint"),
                       ("merge_tokenizers", "merge-tokenizers"),
                       ("inspect_checkpoint", "inspect-checkpoint"),
                       ("vocab_blocks", "vocab-blocks"),
                       ("transplant_tokenizer", "transplant-tokenizer"),
                       ("trim_vocab", "trim-vocab"),
                       ("check_vocab_report", "check-vocab")]:
        doc = getattr(cs, name).__doc__
        for opt, _takes, _repeat, _positional in _native.options(tool):
            if opt == "json":
                continue
            assert f"\n    {opt.replace('-', '_')} " in doc, (name, opt, doc)
        assert "\n    progress " in doc, name
    doc = cs.extend_embeddings.__doc__
    assert "allow_shrink" in doc and "pad_to_multiple_of" in doc
    line = next(l for l in doc.splitlines() if l.strip().startswith("init "))
    assert "omp" in line or "mean" in line, line


def test_merge_tokenizers_trains_with_no_addition(tmp_path):
    out = tmp_path / "m.json"
    rep = cs.merge_tokenizers(TD / "tokenizers/bytelevel_bpe.json", output=out,
                              train=TD / "tokenizers/amharic.txt", train_size=20)
    assert out.exists() and rep, rep
    with pytest.raises(TypeError):
        cs.merge_tokenizers(TD / "tokenizers/bytelevel_bpe.json", train=TD / "tokenizers/english.txt")
