"""Type stubs: every keyword is the tool's command-line option of the same name (``_`` for ``-``);
see each tool's ``--help``. A test checks these signatures against the command lines."""

import os
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

__version__: str

StrPath = Union[str, os.PathLike[str]]
OneOrMore = Union[str, Sequence[str]]
PathOrPaths = Union[StrPath, Sequence[StrPath]]
Report = Dict[str, Any]
Finding = Dict[str, Any]

class CkptSurgeryError(Exception):
    message: str
    exit_code: int
    report: Optional[Report]
    def __init__(self, message: str, exit_code: int, report: Optional[Report] = ...) -> None: ...

class IoError(CkptSurgeryError): ...
class BadInputError(CkptSurgeryError): ...
class UnsupportedError(CkptSurgeryError): ...
class UsageError(CkptSurgeryError): ...
class DeviceError(CkptSurgeryError): ...
class CheckFailedError(CkptSurgeryError): ...
class VerifyError(CkptSurgeryError): ...

class VocabError(CheckFailedError):
    findings: List[Finding]
    def __init__(self, message: str, findings: List[Finding], report: Report) -> None: ...

def run(tool: str, *, progress: bool = ..., **options: Any) -> Tuple[int, Report]: ...
def inspect_checkpoint(
    *paths: StrPath,
    hash: bool = ...,
    filter: Optional[str] = ...,
    allow_global: Optional[OneOrMore] = ...,
    sha256: bool = ...,
    progress: bool = ...,
) -> Report: ...
def merge_tokenizers(
    base: StrPath,
    add: Optional[PathOrPaths] = ...,
    output: Optional[StrPath] = ...,
    *,
    check_text: Optional[PathOrPaths] = ...,
    score: Optional[float] = ...,
    dry_run: bool = ...,
    allow_unreachable: bool = ...,
    allow_base_change: bool = ...,
    special: Optional[OneOrMore] = ...,
    train: Optional[PathOrPaths] = ...,
    train_size: Optional[int] = ...,
    train_across_words: bool = ...,
    overwrite: bool = ...,
    progress: bool = ...,
) -> Report: ...
def extend_embeddings(
    checkpoint: StrPath,
    output: StrPath,
    *,
    segments: Optional[int] = ...,
    overwrite: bool = ...,
    new_rows: Optional[int] = ...,
    tokenizer: Optional[StrPath] = ...,
    pad_to_multiple_of: Optional[int] = ...,
    tensor: Optional[OneOrMore] = ...,
    init: Optional[str] = ...,
    scale: Optional[float] = ...,
    std: Optional[float] = ...,
    seed: Optional[int] = ...,
    base_tokenizer: Optional[StrPath] = ...,
    config: Optional[StrPath] = ...,
    allow_shrink: bool = ...,
    link: bool = ...,
    file_hash: bool = ...,
    device: Optional[Literal["cpu", "cuda", "auto"]] = ...,
    allow_global: Optional[OneOrMore] = ...,
    dry_run: bool = ...,
    sha256: bool = ...,
    progress: bool = ...,
    donor: Optional[StrPath] = ...,
    donor_tokenizer: Optional[StrPath] = ...,
    omp_k: Optional[int] = ...,
    verbose: bool = ...,
) -> Report: ...
def sanitize_checkpoint(
    input: StrPath,
    output: StrPath,
    *,
    overwrite: bool = ...,
    tensor: Optional[OneOrMore] = ...,
    segments: Optional[int] = ...,
    vocab_rows: Optional[int] = ...,
    tokenizer: Optional[StrPath] = ...,
    model: Optional[StrPath] = ...,
    optimizer: Optional[Literal["repair", "drop", "keep"]] = ...,
    scheduler: Optional[Literal["keep", "drop"]] = ...,
    init: Optional[str] = ...,
    seed: Optional[int] = ...,
    fail_on_nonfinite: bool = ...,
    allow_global: Optional[OneOrMore] = ...,
    keep: Optional[OneOrMore] = ...,
    optimizer_param: Optional[OneOrMore] = ...,
    allow_shrink: bool = ...,
    dry_run: bool = ...,
    sha256: bool = ...,
    progress: bool = ...,
) -> Report: ...
def vocab_blocks(
    input: StrPath,
    output: StrPath,
    *,
    split: Optional[str] = ...,
    at: Optional[int] = ...,
    join: Optional[str] = ...,
    names: Optional[Sequence[str]] = ...,
    overwrite: bool = ...,
    allow_global: Optional[OneOrMore] = ...,
    dry_run: bool = ...,
    sha256: bool = ...,
    progress: bool = ...,
) -> Report: ...
def transplant_tokenizer(
    checkpoint: StrPath,
    output: StrPath,
    *,
    tokenizer: StrPath,
    base_tokenizer: Optional[StrPath] = ...,
    init: Optional[str] = ...,
    seed: Optional[int] = ...,
    pad_to_multiple_of: Optional[int] = ...,
    tensor: Optional[OneOrMore] = ...,
    config: Optional[StrPath] = ...,
    allow_shrink: bool = ...,
    overwrite: bool = ...,
    link: bool = ...,
    file_hash: bool = ...,
    device: Optional[Literal["cpu", "cuda", "auto"]] = ...,
    allow_global: Optional[OneOrMore] = ...,
    dry_run: bool = ...,
    donor: Optional[StrPath] = ...,
    donor_tokenizer: Optional[StrPath] = ...,
    omp_k: Optional[int] = ...,
    optimizer_param: Optional[OneOrMore] = ...,
    optimizer: Optional[Literal["move", "drop"]] = ...,
    sha256: bool = ...,
    progress: bool = ...,
) -> Report: ...
def trim_vocab(
    checkpoint: StrPath,
    output: StrPath,
    *,
    tokenizer: Optional[StrPath] = ...,
    keep_corpus: Optional[PathOrPaths] = ...,
    min_count: Optional[int] = ...,
    keep_script: Optional[OneOrMore] = ...,
    keep_top: Optional[int] = ...,
    keep_list: Optional[StrPath] = ...,
    check_text: Optional[PathOrPaths] = ...,
    pad_to_multiple_of: Optional[int] = ...,
    tensor: Optional[OneOrMore] = ...,
    config: Optional[StrPath] = ...,
    allow_shrink: bool = ...,
    overwrite: bool = ...,
    link: bool = ...,
    file_hash: bool = ...,
    allow_global: Optional[OneOrMore] = ...,
    dry_run: bool = ...,
    optimizer_param: Optional[OneOrMore] = ...,
    optimizer: Optional[Literal["trim", "drop"]] = ...,
    sha256: bool = ...,
    progress: bool = ...,
) -> Report: ...
def check_vocab_report(
    checkpoint: Optional[StrPath] = ...,
    *,
    tokenizer: Optional[PathOrPaths] = ...,
    config: Optional[StrPath] = ...,
    freeze_until: Optional[int] = ...,
    base_tokenizer: Optional[StrPath] = ...,
    training_checkpoint: Optional[StrPath] = ...,
    token_ids: Optional[StrPath] = ...,
    token_ids_dtype: Optional[Literal["u16", "u32", "i32", "i64"]] = ...,
    codebook_size: Optional[int] = ...,
    allow_global: Optional[OneOrMore] = ...,
    fix: bool = ...,
    output: Optional[StrPath] = ...,
    fix_only: Optional[int] = ...,
    dry_run: bool = ...,
    special: Optional[OneOrMore] = ...,
    token_type: Optional[OneOrMore] = ...,
    chat_template: Optional[StrPath] = ...,
    vocab_size: Optional[int] = ...,
    remove_key: Optional[OneOrMore] = ...,
    pad_tokens: bool = ...,
    progress: bool = ...,
) -> Report: ...
def check_vocab(
    checkpoint: Optional[StrPath] = ...,
    *,
    tokenizer: Optional[PathOrPaths] = ...,
    config: Optional[StrPath] = ...,
    freeze_until: Optional[int] = ...,
    base_tokenizer: Optional[StrPath] = ...,
    training_checkpoint: Optional[StrPath] = ...,
    token_ids: Optional[StrPath] = ...,
    token_ids_dtype: Optional[Literal["u16", "u32", "i32", "i64"]] = ...,
    codebook_size: Optional[int] = ...,
    allow_global: Optional[OneOrMore] = ...,
    fix: bool = ...,
    output: Optional[StrPath] = ...,
    fix_only: Optional[int] = ...,
    dry_run: bool = ...,
    special: Optional[OneOrMore] = ...,
    token_type: Optional[OneOrMore] = ...,
    chat_template: Optional[StrPath] = ...,
    vocab_size: Optional[int] = ...,
    remove_key: Optional[OneOrMore] = ...,
    pad_tokens: bool = ...,
    progress: bool = ...,
) -> List[Finding]: ...
def assert_vocab_ok(
    checkpoint: Optional[StrPath] = ...,
    *,
    tokenizer: Optional[PathOrPaths] = ...,
    config: Optional[StrPath] = ...,
    freeze_until: Optional[int] = ...,
    base_tokenizer: Optional[StrPath] = ...,
    training_checkpoint: Optional[StrPath] = ...,
    token_ids: Optional[StrPath] = ...,
    token_ids_dtype: Optional[Literal["u16", "u32", "i32", "i64"]] = ...,
    codebook_size: Optional[int] = ...,
    allow_global: Optional[OneOrMore] = ...,
    fix: bool = ...,
    output: Optional[StrPath] = ...,
    fix_only: Optional[int] = ...,
    dry_run: bool = ...,
    special: Optional[OneOrMore] = ...,
    token_type: Optional[OneOrMore] = ...,
    chat_template: Optional[StrPath] = ...,
    vocab_size: Optional[int] = ...,
    remove_key: Optional[OneOrMore] = ...,
    pad_tokens: bool = ...,
    progress: bool = ...,
) -> Report: ...
