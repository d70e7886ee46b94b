"""The console scripts: each tool's command line, run in process by the Rust library.

Same arguments, output, progress bars and exit codes as the Rust binaries of the same names.
"""

import signal
import sys

from . import _native


def _main(tool: str) -> None:
    # Ctrl-C stops the process as it stops the binary (outputs are atomic: nothing partial stays).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(_native.main(tool, sys.argv[1:]))


def inspect_checkpoint() -> None:
    _main("inspect-checkpoint")


def merge_tokenizers() -> None:
    _main("merge-tokenizers")


def extend_embeddings() -> None:
    _main("extend-embeddings")


def sanitize_checkpoint() -> None:
    _main("sanitize-checkpoint")


def check_vocab() -> None:
    _main("check-vocab")


def vocab_blocks() -> None:
    _main("vocab-blocks")


def transplant_tokenizer() -> None:
    _main("transplant-tokenizer")


def trim_vocab() -> None:
    _main("trim-vocab")
