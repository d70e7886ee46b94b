//! What GGUF's names mean (llama.cpp's `llama-arch.cpp` and gguf-py's `constants.py`): the
//! vocabulary matrices (`token_embd.weight`, the embedding; `output.weight`, the head — absent
//! when the head is tied to the embedding), the tokenizer's keys, and the special-token ids.

use super::{Gguf, Value};
use crate::formats::vocabulary::Entry;
use crate::plan::Role;
use serde::Serialize;
use std::collections::BTreeMap;

pub const ARCHITECTURE: &str = "general.architecture";
/// The token embedding: `ne = [hidden, rows]`.
pub const EMBEDDING: &str = "token_embd.weight";
/// The output head: absent when tied to the embedding (llama.cpp then uses `token_embd`).
pub const HEAD: &str = "output.weight";
pub const MODEL: &str = "tokenizer.ggml.model";
pub const PRE: &str = "tokenizer.ggml.pre";
pub const TOKENS: &str = "tokenizer.ggml.tokens";
pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub const SCORES: &str = "tokenizer.ggml.scores";
pub const MERGES: &str = "tokenizer.ggml.merges";
pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
/// The tokenizer.json a converter may embed whole (llama.cpp's convert scripts can).
pub const HF_JSON: &str = "tokenizer.huggingface.json";

/// The special-token ids a GGUF may name: (role, key). `seperator` is llama.cpp's spelling.
pub const SPECIAL_IDS: [(&str, &str); 14] = [
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"),
    ("eom", "tokenizer.ggml.eom_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
    ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("mask", "tokenizer.ggml.mask_token_id"),
    ("fim_pre", "tokenizer.ggml.fim_pre_token_id"),
    ("fim_suf", "tokenizer.ggml.fim_suf_token_id"),
    ("fim_mid", "tokenizer.ggml.fim_mid_token_id"),
    ("fim_pad", "tokenizer.ggml.fim_pad_token_id"),
    ("fim_rep", "tokenizer.ggml.fim_rep_token_id"),
    ("fim_sep", "tokenizer.ggml.fim_sep_token_id"),
];

/// llama.cpp's token types (`llama_token_type`), by number.
pub const TOKEN_TYPES: [&str; 7] = [
    "undefined",
    "normal",
    "unknown",
    "control",
    "user-defined",
    "unused",
    "byte",
];

/// The architecture's vocabulary-size key (`llama.vocab_size`), when the file names its
/// architecture.
pub fn vocab_size_key(g: &Gguf) -> Option<String> {
    let arch = g.get(ARCHITECTURE)?.as_str()?;
    Some(format!("{arch}.vocab_size"))
}

/// The vocabulary matrices, as the row-surgery interface lists them: the embedding, and the
/// head when it is not tied. Shapes rows first.
pub fn entries(g: &Gguf) -> Vec<Entry> {
    [(EMBEDDING, Role::Embedding), (HEAD, Role::Head)]
        .into_iter()
        .filter_map(|(name, role)| {
            g.tensor(name)
                .map(|t| Entry::weight(name, role, &t.shape()))
        })
        .collect()
}

/// The token strings, when the file has them as an array of strings.
pub fn tokens(g: &Gguf) -> Option<Vec<&str>> {
    g.get(TOKENS)?
        .as_array()?
        .iter()
        .map(Value::as_str)
        .collect()
}

/// The id of the first token whose bytes are not UTF-8 (held shown with U+FFFD: such a token
/// equals no tokenizer file's text), if any.
pub fn token_not_utf8(g: &Gguf) -> Option<usize> {
    g.kv.iter().find(|kv| kv.key == TOKENS)?.not_utf8
}

/// The special-token ids present: (role, key, id). An id that is not a non-negative integer is
/// given as None.
pub fn special_ids(g: &Gguf) -> Vec<(&'static str, &'static str, Option<u64>)> {
    SPECIAL_IDS
        .iter()
        .filter_map(|&(role, key)| g.get(key).map(|v| (role, key, v.as_u64())))
        .collect()
}

/// The chat templates: the default (`tokenizer.chat_template`) and named ones
/// (`tokenizer.chat_template.<name>`), as (key, text).
pub fn chat_templates(g: &Gguf) -> Vec<(&str, &str)> {
    g.kv.iter()
        .filter(|kv| kv.key == CHAT_TEMPLATE || kv.key.starts_with(&format!("{CHAT_TEMPLATE}.")))
        .filter_map(|kv| kv.value.as_str().map(|t| (kv.key.as_str(), t)))
        .collect()
}

/// The tokenizer as the header describes it.
#[derive(Debug, Clone, Serialize)]
pub struct Tokenizer {
    /// `tokenizer.ggml.model` (`gpt2`, `llama`, `bert`, …).
    pub model: Option<String>,
    /// `tokenizer.ggml.pre` (the pre-tokenizer llama.cpp picks).
    pub pre: Option<String>,
    pub tokens: Option<u64>,
    /// How many tokens of each type (`normal`, `control`, `byte`, …).
    pub token_types: BTreeMap<String, u64>,
    pub scores: bool,
    pub merges: Option<u64>,
    /// Special-token ids by role (`bos`, `eos`, `pad`, `unk`, …).
    pub special_ids: BTreeMap<String, Option<u64>>,
    /// Keys of the chat templates present.
    pub chat_templates: Vec<String>,
}

/// The tokenizer's summary.
pub fn tokenizer(g: &Gguf) -> Tokenizer {
    let len = |key| g.get(key).and_then(Value::as_array).map(|a| a.len() as u64);
    let mut token_types = BTreeMap::new();
    for t in g.get(TOKEN_TYPE).and_then(Value::as_array).unwrap_or(&[]) {
        let name = match t.as_u64() {
            Some(n) => TOKEN_TYPES
                .get(n as usize)
                .map_or_else(|| format!("type {n}"), |s| s.to_string()),
            None => format!("{t:?}"),
        };
        *token_types.entry(name).or_insert(0) += 1;
    }
    Tokenizer {
        model: g.get(MODEL).and_then(Value::as_str).map(str::to_string),
        pre: g.get(PRE).and_then(Value::as_str).map(str::to_string),
        tokens: len(TOKENS),
        token_types,
        scores: g.get(SCORES).is_some(),
        merges: len(MERGES),
        special_ids: special_ids(g)
            .into_iter()
            .map(|(role, _, id)| (role.to_string(), id))
            .collect(),
        chat_templates: chat_templates(g)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect(),
    }
}
