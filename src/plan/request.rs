//! What a plan asks for, when a tool has not planned it yet: which tool on which input with which
//! target, or which JSON keys to set (check-vocab's findings carry it). The command line a report
//! prints is rendered from it ([`super::Plan::command`]), and `check-vocab --fix` (in the cli)
//! hands it to the same planners the tools run.

use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Set one key of a JSON file (`text_config.vocab_size`: a key inside `text_config`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyEdit {
    pub file: PathBuf,
    pub key: String,
    pub value: Value,
}

impl KeyEdit {
    pub fn describe(&self) -> String {
        format!(
            "set \"{}\": {} in {}",
            self.key,
            self.value,
            self.file.display()
        )
    }
}

/// One edit of a GGUF file's metadata, named by token string (`check-vocab FILE.gguf --fix`):
/// the flag that asks for it is [`GgufEdit::flag`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "edit", rename_all = "kebab-case")]
pub enum GgufEdit {
    /// `tokenizer.ggml.<role>_token_id` set to the id of `token` (`--special ROLE=TOKEN`).
    Special { role: String, token: String },
    /// The token's type set (`--token-type TOKEN=control`; also `user-defined`, `normal`).
    TokenType { token: String, kind: String },
    /// `tokenizer.chat_template` set to the text of `file` (`--chat-template FILE`).
    ChatTemplate { file: PathBuf },
    /// `<arch>.vocab_size` set to `rows` (`--vocab-size N`).
    VocabSize { rows: u64 },
    /// A key removed (`--remove-key KEY`).
    Remove { key: String },
    /// `[PAD{id}]` tokens (type unused) appended until every row of the table has a token, as
    /// convert_hf_to_gguf.py pads a vocabulary (`--pad-tokens`): llama.cpp takes n_vocab from the
    /// token count and refuses a table of other rows.
    PadTokens,
}

impl GgufEdit {
    /// The command-line flag that asks for this edit, its value quoted for a POSIX shell.
    pub fn flag(&self) -> String {
        match self {
            GgufEdit::Special { role, token } => {
                format!("--special {}", quoted(&format!("{role}={token}")))
            }
            GgufEdit::TokenType { token, kind } => {
                format!("--token-type {}", quoted(&format!("{token}={kind}")))
            }
            GgufEdit::ChatTemplate { file } => {
                format!("--chat-template {}", quoted(&file.display().to_string()))
            }
            GgufEdit::VocabSize { rows } => format!("--vocab-size {rows}"),
            GgufEdit::Remove { key } => format!("--remove-key {}", quoted(key)),
            GgufEdit::PadTokens => "--pad-tokens".to_string(),
        }
    }
}

/// `s` as one POSIX shell word: as it is when plain, else in single quotes.
pub fn quoted(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What following a finding's fix does. `output` is where the printed command writes (beside
/// the input, never over it); `check-vocab --fix --output OUT` writes to OUT instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "tool", rename_all = "kebab-case")]
pub enum Request {
    /// extend-embeddings: the vocabulary matrices to `rows` rows (the tokenizer's size when
    /// `tokenizer` is given; a folder output then holds that tokenizer).
    #[serde(rename = "extend-embeddings")]
    Extend {
        input: PathBuf,
        output: PathBuf,
        rows: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        tokenizer: Option<PathBuf>,
        allow_shrink: bool,
        /// Another config.json than the one beside the input, for a folder output.
        #[serde(skip_serializing_if = "Option::is_none")]
        config: Option<PathBuf>,
        /// The tensors to grow (instead of the detected vocabulary matrices).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tensors: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        allow_global: Vec<String>,
    },
    /// sanitize-checkpoint: weights and the optimizer moments that belong to them to
    /// `vocab_rows` rows (`drop_optimizer`: a fresh optimizer instead).
    #[serde(rename = "sanitize-checkpoint")]
    Sanitize {
        input: PathBuf,
        output: PathBuf,
        vocab_rows: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        tokenizer: Option<PathBuf>,
        drop_optimizer: bool,
        /// The target is below the weights' rows: trained rows are cut (`--allow-shrink`).
        allow_shrink: bool,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        allow_global: Vec<String>,
    },
    /// JSON key edits.
    EditJson { edits: Vec<KeyEdit> },
    /// A GGUF file's metadata edits, written to `output` (tensor bytes copied).
    #[serde(rename = "check-vocab")]
    EditGguf {
        input: PathBuf,
        output: PathBuf,
        edits: Vec<GgufEdit>,
    },
    /// A change outside the checkpoint (the training script's settings): done by hand.
    Manual { text: String },
}

impl Request {
    /// The command line (or edits, or instruction) the report prints.
    pub fn text(&self) -> String {
        match self {
            Request::Extend {
                input,
                output,
                rows,
                tokenizer,
                allow_shrink,
                config,
                tensors,
                allow_global,
            } => {
                let how = match tokenizer {
                    Some(t) => format!("--tokenizer {}", t.display()),
                    None => format!("--new-rows {rows}"),
                };
                let shrink = if *allow_shrink { " --allow-shrink" } else { "" };
                let cfg = config
                    .as_ref()
                    .map(|c| format!(" --config {}", c.display()))
                    .unwrap_or_default();
                let tensors: String = tensors.iter().map(|t| format!(" --tensor {t}")).collect();
                format!(
                    "extend-embeddings {} --output {} {how}{shrink}{cfg}{tensors}{}",
                    input.display(),
                    output.display(),
                    globals_flags(allow_global)
                )
            }
            Request::Sanitize {
                input,
                output,
                vocab_rows,
                tokenizer,
                drop_optimizer,
                allow_shrink,
                allow_global,
            } => {
                let how = match tokenizer {
                    Some(t) => format!("--tokenizer {}", t.display()),
                    None => format!("--vocab-rows {vocab_rows}"),
                };
                let drop = if *drop_optimizer {
                    " --optimizer drop"
                } else {
                    ""
                };
                let shrink = if *allow_shrink { " --allow-shrink" } else { "" };
                format!(
                    "sanitize-checkpoint {} --output {} {how}{}{drop}{shrink}",
                    input.display(),
                    output.display(),
                    globals_flags(allow_global)
                )
            }
            Request::EditJson { edits } => {
                let text: Vec<String> = edits.iter().map(KeyEdit::describe).collect();
                text.join("; ")
            }
            Request::EditGguf {
                input,
                output,
                edits,
            } => {
                let flags: String = edits.iter().map(|e| format!(" {}", e.flag())).collect();
                format!(
                    "check-vocab {} --fix --output {}{flags}",
                    quoted(&input.display().to_string()),
                    quoted(&output.display().to_string())
                )
            }
            Request::Manual { text } => text.clone(),
        }
    }

    /// Does the fix cut trained rows of the weights (`--allow-shrink`)? `--fix` carries such a
    /// fix out only when the user names it (`--fix-only N`).
    pub fn cuts_weights(&self) -> bool {
        matches!(
            self,
            Request::Extend {
                allow_shrink: true,
                ..
            } | Request::Sanitize {
                allow_shrink: true,
                ..
            }
        )
    }

    /// The rows the weights get, for a fix that changes them.
    pub fn rows(&self) -> Option<u64> {
        match self {
            Request::Extend { rows, .. } => Some(*rows),
            Request::Sanitize { vocab_rows, .. } => Some(*vocab_rows),
            _ => None,
        }
    }

    /// The same fix writing to `out` (what `check-vocab --fix --output OUT` runs in its place):
    /// a tool's output is `out`, an edited file the one of its name in the folder `out`; by-hand
    /// fixes as they are.
    pub fn writing_to(&self, out: &Path) -> Request {
        let mut f = self.clone();
        match &mut f {
            Request::Extend { output, .. }
            | Request::Sanitize { output, .. }
            | Request::EditGguf { output, .. } => {
                *output = out.to_path_buf();
            }
            Request::EditJson { edits } => {
                for e in edits {
                    e.file = out.join(e.file.file_name().unwrap_or_default());
                }
            }
            Request::Manual { .. } => {}
        }
        f
    }

    /// The checkpoint a fix that changes the weights reads.
    pub fn input(&self) -> Option<&Path> {
        match self {
            Request::Extend { input, .. }
            | Request::Sanitize { input, .. }
            | Request::EditGguf { input, .. } => Some(input),
            _ => None,
        }
    }
}

/// The `--allow-global` flags of a fix command (the user's, sorted), so it opens the torch files
/// as the check did.
fn globals_flags(globals: &[String]) -> String {
    globals
        .iter()
        .map(|g| format!(" --allow-global {g}"))
        .collect()
}
