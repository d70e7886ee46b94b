"""ckpt-surgery in Python: the tools run in process, their reports as dicts.

Each function takes the tool's options as keyword arguments, named as the command line names them
with ``_`` for ``-`` (``--new-rows 2535`` is ``new_rows=2535``; a flag is ``True``; a repeatable
option takes a list). It returns the tool's ``--json`` report as a dict. Bad input raises
:class:`CkptSurgeryError` with the same one-line message the command line prints and its exit
code. Progress bars are off unless ``progress=True``.

The first line of a training script::

    import ckpt_surgery
    ckpt_surgery.assert_vocab_ok("out/model", tokenizer="out/model/tokenizer.json")

raises :class:`VocabError` (its ``findings`` each carry the fix) before CUDA's device-side assert
would.
"""

import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import _native

__version__ = _native.__version__

__all__ = [
    "BadInputError",
    "CheckFailedError",
    "CkptSurgeryError",
    "DeviceError",
    "IoError",
    "UnsupportedError",
    "UsageError",
    "VerifyError",
    "VocabError",
    "assert_vocab_ok",
    "check_vocab",
    "check_vocab_report",
    "extend_embeddings",
    "inspect_checkpoint",
    "merge_tokenizers",
    "run",
    "sanitize_checkpoint",
    "transplant_tokenizer",
    "trim_vocab",
    "vocab_blocks",
]


class CkptSurgeryError(Exception):
    """A tool refused its input (``exit_code`` 2) or stopped on a failed check (1).

    ``message`` is the one line the command line prints; ``report`` the JSON report when the
    tool wrote one (e.g. inspect-checkpoint with some paths unreadable), else None.
    """

    def __init__(self, message: str, exit_code: int, report: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.report = report


class IoError(CkptSurgeryError):
    """The operating system refused a read or a write (``kind`` ``io``, exit code 2)."""


class BadInputError(CkptSurgeryError):
    """A file's structure or one of its tensors is wrong (``bad-input``, exit code 2)."""


class UnsupportedError(CkptSurgeryError):
    """A valid input holding something the tool does not handle (``unsupported``, exit code 2)."""


class UsageError(CkptSurgeryError):
    """The options cannot be carried out as given (``usage``, exit code 2)."""


class DeviceError(CkptSurgeryError):
    """The compute device (CUDA) could not be used or failed (``device``, exit code 2)."""


class CheckFailedError(CkptSurgeryError):
    """A check ran and found the result wrong; nothing was written (``check-failed``, exit 1)."""


class VerifyError(CkptSurgeryError):
    """The written output did not read back as planned; it was not put in place
    (``verify-failed``, exit code 2)."""


# The tools' `--json` error kinds (Rust `Error::kind`) → the exception raised for them.
_KINDS = {
    "io": IoError,
    "bad-input": BadInputError,
    "unsupported": UnsupportedError,
    "usage": UsageError,
    "device": DeviceError,
    "check-failed": CheckFailedError,
    "verify-failed": VerifyError,
}


class VocabError(CheckFailedError):
    """:func:`assert_vocab_ok` found errors: ``findings`` lists them, each with its ``fix``."""

    def __init__(self, message: str, findings: List[Dict[str, Any]], report: Dict[str, Any]):
        super().__init__(message, 1, report)
        self.findings = findings


# tool -> {python name: (long name, takes a value, repeatable, positional)}
_SPECS: Dict[str, Dict[str, Tuple[str, bool, bool, bool]]] = {}


def _spec(tool: str) -> Dict[str, Tuple[str, bool, bool, bool]]:
    if tool not in _SPECS:
        _SPECS[tool] = {
            name.replace("-", "_"): (name, takes, repeat, positional)
            for name, takes, repeat, positional in _native.options(tool)
            if name != "json"
        }
    return _SPECS[tool]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError(f"expected a value, got {value!r}")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _argv(tool: str, options: Dict[str, Any]) -> List[str]:
    """The command line for ``options`` (positional arguments by their field names)."""
    spec = _spec(tool)
    argv: List[str] = []
    rest: List[str] = []
    for name, value in options.items():
        if name not in spec:
            known = ", ".join(sorted(spec))
            raise TypeError(f"{tool}: unknown option {name!r} (options: {known})")
        long, takes, repeat, positional = spec[name]
        if value is None or value is False:
            continue
        if not takes:
            if value is not True:
                raise TypeError(f"{tool}: {name} is a flag: give True or False, not {value!r}")
            argv.append(f"--{long}")
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(values) > 1 and not repeat:
            raise TypeError(f"{tool}: {name} takes one value, got {len(values)}")
        for v in values:
            if positional:
                rest.append(_text(v))
            else:
                argv += [f"--{long}", _text(v)]
    # Positional values after "--", so a path that starts with "-" is still a path.
    return argv + (["--"] + rest if rest else [])


def _message(tool: str, err: str, report: Any, code: int) -> str:
    """The one line naming what is wrong: the tool's own line, or a usage error's first
    paragraph on one line."""
    lines = err.splitlines()
    for line in lines:
        if line.startswith(f"{tool}: "):
            return line
    para: List[str] = []
    for line in lines:
        if line.strip():
            para.append(line.strip())
        elif para:
            break
    if para:
        return f"{tool}: " + " ".join(para).removeprefix("error: ")
    if isinstance(report, dict) and report.get("error"):
        return f"{tool}: {report['error']}"
    if tool == "sanitize-checkpoint" and isinstance(report, dict):
        return f"{tool}: NaN or Inf found with fail_on_nonfinite (nothing written)"
    return f"{tool}: exit code {code}"


def run(tool: str, *, progress: bool = False, **options: Any) -> Tuple[int, Dict[str, Any]]:
    """Run ``tool`` (a binary name, e.g. ``"extend-embeddings"``) with ``options``.

    Returns (exit code, report) for exit code 0, and for check-vocab's 1 (findings with errors);
    raises :class:`CkptSurgeryError` otherwise. Whatever the tool prints on stderr besides an
    error (warnings) goes to ``sys.stderr``.
    """
    argv = _argv(tool, options)
    argv.insert(0, "--json")
    code, out, err = _native.run(tool, argv, progress)
    text = err.decode("utf-8", errors="replace")
    try:
        report = json.loads(out) if out.strip() else None
    except ValueError:
        report = None
    if code == 0 or (code == 1 and tool == "check-vocab" and isinstance(report, dict)):
        if text:
            sys.stderr.write(text)
        return code, report if isinstance(report, dict) else {}
    raise _error_class(text, report)(_message(tool, text, report, code), code,
                                     report if isinstance(report, dict) else None)


def _error_class(err: str, report: Any) -> type:
    """The exception for a failed run: by the error's ``kind`` in the JSON report; a command
    line the tool's parser refused (no report, "error: ..." on stderr) is a usage error."""
    if isinstance(report, dict) and report.get("kind") in _KINDS:
        return _KINDS[report["kind"]]
    if report is None and err.lstrip().startswith("error:"):
        return UsageError
    return CkptSurgeryError


def inspect_checkpoint(*paths: "os.PathLike[str] | str", progress: bool = False,
                       **options: Any) -> Dict[str, Any]:
    """inspect-checkpoint PATH…: ``{"checkpoints": [...], "errors": [...]}``."""
    return run("inspect-checkpoint", paths=list(paths), progress=progress, **options)[1]


def merge_tokenizers(base: "os.PathLike[str] | str", add: Any = None,
                     output: "os.PathLike[str] | str | None" = None, *, progress: bool = False,
                     **options: Any) -> Dict[str, Any]:
    """merge-tokenizers --base BASE [--add ADD…] --output OUT (``add`` may be left out when
    ``train`` gives a corpus)."""
    if output is None:
        raise TypeError("merge_tokenizers: output is required")
    return run("merge-tokenizers", base=base, add=add, output=output, progress=progress,
               **options)[1]


def extend_embeddings(checkpoint: "os.PathLike[str] | str", output: "os.PathLike[str] | str",
                      *, progress: bool = False, **options: Any) -> Dict[str, Any]:
    """extend-embeddings CHECKPOINT --output OUT (give new_rows or tokenizer)."""
    return run("extend-embeddings", checkpoint=checkpoint, output=output, progress=progress,
               **options)[1]


def sanitize_checkpoint(input: "os.PathLike[str] | str", output: "os.PathLike[str] | str",
                        *, progress: bool = False, **options: Any) -> Dict[str, Any]:
    """sanitize-checkpoint INPUT --output OUT (give vocab_rows, tokenizer or model)."""
    return run("sanitize-checkpoint", input=input, output=output, progress=progress,
               **options)[1]


def vocab_blocks(input: "os.PathLike[str] | str", output: "os.PathLike[str] | str",
                 *, progress: bool = False, **options: Any) -> Dict[str, Any]:
    """vocab-blocks INPUT --output OUT (split=NAME, at=N, or join=NAME)."""
    return run("vocab-blocks", input=input, output=output, progress=progress, **options)[1]


def transplant_tokenizer(checkpoint: "os.PathLike[str] | str", output: "os.PathLike[str] | str",
                         *, progress: bool = False, **options: Any) -> Dict[str, Any]:
    """transplant-tokenizer CHECKPOINT --output OUT (give tokenizer=NEW)."""
    return run("transplant-tokenizer", checkpoint=checkpoint, output=output, progress=progress,
               **options)[1]


def trim_vocab(checkpoint: "os.PathLike[str] | str", output: "os.PathLike[str] | str",
               *, progress: bool = False, **options: Any) -> Dict[str, Any]:
    """trim-vocab CHECKPOINT --output OUT (give keep_corpus, keep_script or keep_list)."""
    return run("trim-vocab", checkpoint=checkpoint, output=output, progress=progress,
               **options)[1]


def check_vocab_report(checkpoint: "os.PathLike[str] | str | None" = None, *,
                       progress: bool = False, **options: Any) -> Dict[str, Any]:
    """check-vocab's whole report (findings, counts of errors, warnings, infos, files read)."""
    return run("check-vocab", input=checkpoint, progress=progress, **options)[1]


def check_vocab(checkpoint: "os.PathLike[str] | str | None" = None, *, progress: bool = False,
                **options: Any) -> List[Dict[str, Any]]:
    """check-vocab's findings: dicts with severity, check, message, numbers and, where one
    exists, ``fix`` (a command, or the config key and value to set) and ``edits``."""
    return check_vocab_report(checkpoint, progress=progress, **options).get("findings", [])


def assert_vocab_ok(checkpoint: "os.PathLike[str] | str | None" = None, **options: Any
                    ) -> Dict[str, Any]:
    """Raise :class:`VocabError` when check-vocab finds an error (the message lists each with its
    fix); return the report otherwise. Meant as the first line of a training script."""
    report = check_vocab_report(checkpoint, **options)
    errors = [f for f in report.get("findings", []) if f.get("severity") == "error"]
    if not errors:
        return report
    where = report.get("checkpoint") or checkpoint or options.get("token_ids")
    lines = [f"check-vocab: {len(errors)} error{'s' if len(errors) > 1 else ''} in {where}:"]
    for f in errors:
        lines.append(f"  - {f.get('message')}")
        if f.get("fix"):
            lines.append(f"    fix: {f['fix']}")
    raise VocabError("\n".join(lines), errors, report)


def _document(func: Any, tool: str) -> None:
    """Append every parameter of ``tool``, as ``help(func)`` shows them, to ``func``'s
    docstring: the command line's own help text, so the two cannot drift apart."""
    params = [(n.replace("-", "_"), d) for n, d in _native.option_help(tool) if n != "json"]
    width = max([len(n) for n, _ in params] + [len("progress")])
    lines = [f"    {n:<{width}}  {d}" for n, d in params]
    lines.append(f"    {'progress':<{width}}  Show progress on stderr (off by default in Python)")
    func.__doc__ = (func.__doc__ or "").rstrip() + (
        "\n\nParameters (keyword arguments named as the command line's flags, ``_`` for ``-``; "
        "a flag is ``True``, a repeatable option takes a list):\n\n" + "\n".join(lines) + "\n")


for _func, _tool in [
    (inspect_checkpoint, "inspect-checkpoint"),
    (merge_tokenizers, "merge-tokenizers"),
    (extend_embeddings, "extend-embeddings"),
    (sanitize_checkpoint, "sanitize-checkpoint"),
    (vocab_blocks, "vocab-blocks"),
    (transplant_tokenizer, "transplant-tokenizer"),
    (trim_vocab, "trim-vocab"),
    (check_vocab_report, "check-vocab"),
    (check_vocab, "check-vocab"),
    (assert_vocab_ok, "check-vocab"),
]:
    _document(_func, _tool)
