"""trim-vocab's chat-template pieces against real chat templates as transformers renders them (not
in CI: needs transformers, and PyPI to fetch the templates).

The templates: llama.cpp's collection, `models/templates/*.jinja` in the llama-cpp-python source
package (it vendors llama.cpp; from PyPI, pinned by hash below), or the .jinja files of `--templates DIR`.
For each: trim-vocab --dry-run --json on a copy of testdata/gpt2 whose tokenizer_config.json holds
the template reports the pieces of its literal text (`asked.template_pieces`, the tokens trim-vocab
keeps); transformers' own Jinja environment renders the template for short conversations (with and
without a system message, with and without the generation prompt) whose contents, bos/eos tokens
and date are placeholders; every fragment of each render outside the placeholders and the role
names must be a concatenation of the pieces. A template no conversation renders (one that needs
tools, say) is listed and skipped.

    /work/venv/bin/python scripts/chat_template_check.py target/release [--templates DIR]

Exit 0 when every template that renders is covered; 1 otherwise (each uncovered text printed).
"""
import hashlib, json, re, shutil, subprocess, sys, tarfile, tempfile, urllib.request
from pathlib import Path

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = Path(__file__).resolve().parent.parent
SDIST = ("llama_cpp_python-0.3.36.tar.gz",
         "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
CONTENTS = ["QQS1", "QQU2", "QQA3", "QQU4"]
FIXED = {"bos_token": "QQBOS", "eos_token": "QQEOS"}
ROLES = ["system", "user", "assistant"]


def templates(work: Path, given):
    """name -> template text, CRLF kept."""
    if given:
        files = sorted(Path(given).glob("*.jinja"))
    else:
        # From PyPI's simple index (pip download would build the package's build tools first).
        name, sha = SDIST
        index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60)
        url = next(u for u in re.findall(r'href="([^"#]+)', index.read().decode()) if u.endswith(name))
        data = urllib.request.urlopen(url, timeout=300).read()
        assert hashlib.sha256(data).hexdigest() == sha, f"{name}: not the pinned file"
        (work / name).write_bytes(data)
        with tarfile.open(work / name) as t:
            members = [m for m in t.getmembers()
                       if "/models/templates/" in m.name and m.name.endswith(".jinja")]
            t.extractall(work / "src", members=members, filter="data")
        files = sorted((work / "src").rglob("*.jinja"))
    return {f.stem: f.read_bytes().decode("utf-8") for f in files}


def pieces(bindir: Path, work: Path, template: str):
    """trim-vocab's pieces of `template`, from its dry-run report on a gpt2 copy."""
    model = work / "gpt2"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(ROOT / "testdata" / "gpt2", model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    keep = work / "keep.txt"
    keep.write_text("the\n")
    r = subprocess.run([str(bindir / "trim-vocab"), str(model), "--keep-list", str(keep),
                        "--output", str(work / "out"), "--allow-shrink", "--dry-run", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return json.loads(r.stdout)["asked"].get("template_pieces", [])


def renders(template: str):
    t = _compile_jinja_template(template)
    out = []
    for system in (True, False):
        msgs = [{"role": r, "content": c} for r, c in zip(ROLES[1:] * 2, CONTENTS[1:])]
        if system:
            msgs.insert(0, {"role": "system", "content": CONTENTS[0]})
        for agp in (True, False):
            try:
                out.append(t.render(messages=msgs, add_generation_prompt=agp, tools=None,
                                    strftime_now=lambda fmt: "QQDATE", **FIXED))
            except Exception:
                pass
    return out


def uncovered(text: str, parts):
    """The stretches of `text` that no concatenation of `parts` writes (fewest characters left)."""
    n, best, pick = len(text), [0] * (len(text) + 1), [None] * (len(text) + 1)
    for i in range(n - 1, -1, -1):
        best[i], pick[i] = 1 + best[i + 1], None
        for p in parts:
            if p and text.startswith(p, i) and best[i + len(p)] < best[i]:
                best[i], pick[i] = best[i + len(p)], p
    gaps, cur, i = [], "", 0
    while i < n:
        if pick[i] is None:
            cur, i = cur + text[i], i + 1
        else:
            gaps, cur, i = gaps + [cur] if cur else gaps, "", i + len(pick[i])
    return gaps + [cur] if cur else gaps


def main():
    args = sys.argv[1:]
    given = None
    if "--templates" in args:
        k = args.index("--templates")
        given = args[k + 1]
        del args[k:k + 2]
    bindir = Path(args[0] if args else ROOT / "target" / "release")
    failed, skipped, checked = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, template in templates(work, given).items():
            out = renders(template)
            if not out:
                skipped.append(name)
                continue
            parts = pieces(bindir, work, template) + ROLES
            gaps = set()
            for r in out:
                for p in CONTENTS + list(FIXED.values()) + ["QQDATE"]:
                    r = r.replace(p, "\0")
                for fragment in r.split("\0"):
                    gaps.update(uncovered(fragment, parts))
            checked += 1
            if gaps:
                failed.append(name)
                print(f"{name}: not covered: {sorted(gaps)!r}")
    print(f"{checked} templates checked, {len(failed)} not covered; "
          f"{len(skipped)} render no plain conversation: {', '.join(skipped) or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
