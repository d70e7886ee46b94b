//! The output folder's tokenizer: NEW's. Given as a folder, NEW's tokenizer files replace the
//! base's (the base's that NEW lacks are left out); given as one file, that file is the
//! tokenizer and the base's tokenizer_config.json / special_tokens_map.json stay, their added
//! tokens re-keyed to NEW's ids, every token they name checked to be NEW's (a token NEW lacks
//! would be added by transformers past the table: refused, nothing written).

use crate::error::{Error, Result};
use crate::output::json_text::{self, JsonEdit};
use crate::tokenizer::base::Base;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The files a tokenizer is made of in a model folder (chat templates are the model's: carried
/// from the base unless NEW has its own).
const TOKENIZER_FILES: [&str; 10] = [
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
];

/// Chat templates: NEW's replace the base's when NEW has them.
const TEMPLATE_FILES: [&str; 2] = ["chat_template.jinja", "chat_template.json"];

/// What the output folder's tokenizer is made of.
pub(super) struct TokenizerOut {
    /// Files copied whole: (name in the output, source).
    pub copied: Vec<(String, PathBuf)>,
    /// The base's files edited: (name, new text and changes).
    pub edited: Vec<(String, JsonEdit)>,
    /// The base's files left out, with why.
    pub stale: Vec<(String, String)>,
}

/// NEW's tokenizer file: NEW itself, or the tokenizer in NEW's folder.
pub(super) fn tokenizer_file(new: &Path) -> Result<PathBuf> {
    if !new.is_dir() {
        return Ok(new.to_path_buf());
    }
    ["tokenizer.json", "tokenizer.model", "spiece.model"]
        .iter()
        .map(|n| new.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::arg(
                "--tokenizer",
                format!(
                    "{}: the folder has no tokenizer.json or tokenizer.model",
                    new.display()
                ),
            )
        })
}

/// The tokenizer of the output folder, from NEW (`new`: the folder or file given; `tok` its
/// tokenizer loaded) and the base folder `base_dir`.
pub(super) fn plan(new: &Path, tok: &Base, base_dir: &Path) -> Result<TokenizerOut> {
    let mut out = TokenizerOut {
        copied: Vec::new(),
        edited: Vec::new(),
        stale: Vec::new(),
    };
    if new.is_dir() {
        for n in TOKENIZER_FILES.iter().chain(&TEMPLATE_FILES) {
            if new.join(n).is_file() {
                out.copied.push((n.to_string(), new.join(n)));
            }
        }
    } else {
        let name = match tok {
            Base::Hf(_) => "tokenizer.json",
            Base::Sp(_) => "tokenizer.model",
        };
        out.copied.push((name.into(), new.to_path_buf()));
        for n in ["tokenizer_config.json", "special_tokens_map.json"] {
            let p = base_dir.join(n);
            if p.is_file() {
                let generic = n == "tokenizer_config.json" && matches!(tok, Base::Hf(_));
                out.edited.push((n.into(), rekeyed(&p, tok, new, generic)?));
            }
        }
    }
    let why = format!(
        "the base's tokenizer file: the output's tokenizer is {}",
        new.display()
    );
    for n in TOKENIZER_FILES {
        let kept = out.copied.iter().any(|(c, _)| c == n) || out.edited.iter().any(|(e, _)| e == n);
        if !kept && base_dir.join(n).exists() {
            out.stale.push((n.to_string(), why.clone()));
        }
    }
    Ok(out)
}

/// Keys of a tokenizer_config.json that any tokenizer class reads the same way: kept when the
/// base's class gives way to the generic one (every other key is the base class's own).
const GENERIC_KEYS: [&str; 19] = [
    "added_tokens_decoder",
    "additional_special_tokens",
    "extra_special_tokens",
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "chat_template",
    "model_max_length",
    "padding_side",
    "truncation_side",
    "model_input_names",
    "clean_up_tokenization_spaces",
    "split_special_tokens",
    "backend",
    "tokenizer_class",
];

/// The class transformers builds a tokenizer from its tokenizer.json alone with.
const GENERIC_CLASS: &str = "PreTrainedTokenizerFast";

/// A base tokenizer_config.json (or special_tokens_map.json) for NEW: `added_tokens_decoder`
/// re-keyed to NEW's ids (entries by their content) and completed with NEW's added tokens; every
/// token it names (roles, special-token lists, the decoder's entries) must be NEW's. `generic`
/// (a tokenizer_config.json beside NEW's tokenizer.json): the base's tokenizer class and its own
/// settings give way to [`GENERIC_CLASS`] — transformers rebuilds a named class's normaliser and
/// special-token template from those settings (a BertTokenizer lowercases and adds `[CLS]`/`[SEP]`
/// whatever NEW's tokenizer.json says), while NEW's tokenizer.json is the tokenizer.
fn rekeyed(p: &Path, tok: &Base, new: &Path, generic: bool) -> Result<JsonEdit> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    let mut cfg: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(p, format!("not valid JSON: {e}")))?;
    if let (true, Some(o)) = (generic, cfg.as_object_mut()) {
        o.retain(|k, _| GENERIC_KEYS.contains(&k.as_str()));
        o.insert("tokenizer_class".into(), Value::from(GENERIC_CLASS));
    }
    let ids = tok.ids();
    let lacks = |key: &str, t: &str| {
        Error::format(
            p,
            format!(
                "{key} names '{t}', which the new tokenizer {} lacks (transformers would add it past the embedding table); give --tokenizer as a folder with its own tokenizer_config.json, or add the token to the new tokenizer",
                new.display()
            ),
        )
    };
    for (key, t) in named_tokens(&cfg) {
        if !ids.contains_key(t.as_str()) {
            return Err(lacks(&key, &t));
        }
    }
    if let Some(Value::Object(dec)) = cfg.get("added_tokens_decoder") {
        let mut out = serde_json::Map::new();
        for (_, entry) in dec {
            let content = entry.get("content").and_then(Value::as_str).unwrap_or("");
            let id = ids
                .get(content)
                .ok_or_else(|| lacks("added_tokens_decoder", content))?;
            out.insert(id.to_string(), entry.clone());
        }
        if let Base::Hf(h) = tok {
            for a in &h.added {
                out.entry(a.id.to_string()).or_insert_with(|| {
                    let mut entry = a.raw.clone();
                    if let Some(o) = entry.as_object_mut() {
                        o.remove("id");
                    }
                    entry
                });
            }
        }
        let mut sorted: Vec<(String, Value)> = out.into_iter().collect();
        sorted.sort_by_key(|(k, _)| k.parse::<u64>().unwrap_or(u64::MAX));
        cfg["added_tokens_decoder"] = Value::Object(sorted.into_iter().collect());
    }
    json_text::rewrite(&text, &cfg).map_err(|e| Error::format(p, e))
}

/// Every token a tokenizer_config-like object names by text: roles (`eos_token`) and the lists
/// of special tokens, as (key, text).
fn named_tokens(cfg: &Value) -> Vec<(String, String)> {
    let Some(obj) = cfg.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in obj {
        if !(k.ends_with("_token") || k.ends_with("special_tokens")) {
            continue;
        }
        let items = match v {
            Value::Array(a) => a.clone(),
            v => vec![v.clone()],
        };
        for it in items {
            let text = match it {
                Value::String(s) => Some(s),
                v => v.get("content").and_then(Value::as_str).map(String::from),
            };
            out.extend(text.map(|t| (k.clone(), t)));
        }
    }
    out
}
