//! A GGUF file's metadata edits, named by token string ([`GgufEdit`]: special ids, token types,
//! the chat template, `<arch>.vocab_size`, a key removed), made into a [`GgufOut`] that keeps
//! every tensor's bytes. A token the vocabulary lacks, a role or type GGUF does not name, is
//! refused naming the flag (exit 2).

use super::keys;
use super::write::GgufOut;
use super::{Gguf, Value};
use crate::error::{Error, Result};
use crate::plan::GgufEdit;

/// The token types an edit may set, by llama.cpp's numbering.
const SETTABLE_TYPES: [(&str, i32); 3] = [("normal", 1), ("control", 3), ("user-defined", 4)];

/// The id of `token` in the file's vocabulary (the first, if it appears twice).
fn id_of(g: &Gguf, token: &str, flag: &'static str) -> Result<u64> {
    let tokens = keys::tokens(g).ok_or_else(|| {
        Error::format(
            g.path(),
            format!("{} is missing or not an array of strings", keys::TOKENS),
        )
    })?;
    tokens
        .iter()
        .position(|t| *t == token)
        .map(|i| i as u64)
        .ok_or_else(|| {
            Error::arg(
                flag,
                format!(
                    "{flag}: {token:?} is not a token of {} ({} tokens): name a token it has",
                    g.path().display(),
                    tokens.len()
                ),
            )
        })
}

/// A converter's embedded tokenizer.json (`tokenizer.huggingface.json`) made to follow a job's
/// new tokenizer: `json` gives the new tokenizer.json's text, or None when the new tokenizer is
/// not a tokenizer.json (then the key is removed: kept, it would describe the old vocabulary
/// beside the new arrays). Whether the header had the key.
pub fn follow_embedded_tokenizer(
    plan: &mut GgufOut,
    g: &Gguf,
    json: impl FnOnce() -> Result<Option<String>>,
) -> Result<bool> {
    if g.get(keys::HF_JSON).is_none() {
        return Ok(false);
    }
    match json()? {
        Some(text) => plan.set(keys::HF_JSON, Value::String(text)),
        None => {
            plan.remove(keys::HF_JSON);
        }
    }
    Ok(true)
}

/// `v` as an integer of the type `like` has (a key keeps its type), else u32.
pub fn int_like(like: Option<&Value>, v: u64) -> Value {
    match like {
        Some(Value::U64(_)) => Value::U64(v),
        Some(Value::I64(_)) => Value::I64(v as i64),
        Some(Value::I32(_)) => Value::I32(v as i32),
        _ => Value::U32(v as u32),
    }
}

/// The special-id key of `role` (`eos` → `tokenizer.ggml.eos_token_id`).
fn role_key(role: &str) -> Result<&'static str> {
    keys::SPECIAL_IDS
        .iter()
        .find(|(r, _)| *r == role)
        .map(|(_, k)| *k)
        .ok_or_else(|| {
            let roles: Vec<&str> = keys::SPECIAL_IDS.iter().map(|(r, _)| *r).collect();
            Error::arg(
                "--special",
                format!(
                    "--special {role}=…: the role is one of {}",
                    roles.join(", ")
                ),
            )
        })
}

/// Set the type of token `id` in `plan`'s token-type array.
fn set_type(plan: &mut GgufOut, g: &Gguf, id: u64, kind: &str) -> Result<()> {
    let n = SETTABLE_TYPES
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, n)| *n)
        .ok_or_else(|| {
            Error::arg(
                "--token-type",
                format!("--token-type TOKEN={kind}: the type is normal, control or user-defined"),
            )
        })?;
    let Some(Value::Array(t, mut types)) = plan.get(keys::TOKEN_TYPE).map(|v| v.into_owned())
    else {
        return Err(Error::format(
            g.path(),
            format!("{} is missing: no token types to set", keys::TOKEN_TYPE),
        ));
    };
    let slot = types.get_mut(id as usize).ok_or_else(|| {
        Error::format(
            g.path(),
            format!("{} has no entry for token {id}", keys::TOKEN_TYPE),
        )
    })?;
    *slot = match t {
        super::ValueType::U32 => Value::U32(n as u32),
        _ => Value::I32(n),
    };
    plan.set(keys::TOKEN_TYPE, Value::Array(t, types));
    Ok(())
}

/// `[PAD{id}]` tokens for ids `from..to`, typed unused (score -1000 where the file has scores),
/// as convert_hf_to_gguf.py pads a vocabulary to its table.
pub fn pad_tokens(plan: &mut GgufOut, g: &Gguf, from: u64, to: u64) -> Result<()> {
    let n = to.saturating_sub(from) as usize;
    let names = (from..to)
        .map(|i| Value::String(format!("[PAD{i}]")))
        .collect();
    plan.append(keys::TOKENS, names)?;
    if let Some(Value::Array(t, _)) = g.get(keys::TOKEN_TYPE) {
        let unused = match t {
            super::ValueType::U32 => Value::U32(5),
            _ => Value::I32(5),
        };
        plan.append(keys::TOKEN_TYPE, vec![unused; n])?;
    }
    if g.get(keys::SCORES).is_some() {
        plan.append(keys::SCORES, vec![Value::F32(-1000.0); n])?;
    }
    Ok(())
}

/// Make one edit on `plan`.
fn edit(plan: &mut GgufOut, g: &Gguf, e: &GgufEdit) -> Result<()> {
    match e {
        GgufEdit::Special { role, token } => {
            let key = role_key(role)?;
            let id = id_of(g, token, "--special")?;
            let v = int_like(g.get(key), id);
            plan.set(key, v);
        }
        GgufEdit::TokenType { token, kind } => {
            let id = id_of(g, token, "--token-type")?;
            set_type(plan, g, id, kind)?;
        }
        GgufEdit::ChatTemplate { file } => {
            let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, "read", e))?;
            plan.set(keys::CHAT_TEMPLATE, Value::String(text));
        }
        GgufEdit::VocabSize { rows } => {
            let key = keys::vocab_size_key(g).ok_or_else(|| {
                Error::arg(
                    "--vocab-size",
                    format!(
                        "--vocab-size: {} names no {}",
                        g.path().display(),
                        keys::ARCHITECTURE
                    ),
                )
            })?;
            let v = int_like(g.get(&key), *rows);
            plan.set(&key, v);
        }
        GgufEdit::PadTokens => {
            let tokens = keys::tokens(g).map_or(0, |t| t.len()) as u64;
            let rows = g.tensor(keys::EMBEDDING).map_or(0, |t| t.rows());
            if rows <= tokens {
                return Err(Error::arg(
                    "--pad-tokens",
                    format!(
                        "--pad-tokens: {}: {} has {rows} rows for {tokens} tokens: no padding rows to name",
                        g.path().display(),
                        keys::EMBEDDING
                    ),
                ));
            }
            pad_tokens(plan, g, tokens, rows)?;
        }
        GgufEdit::Remove { key } => {
            if !plan.remove(key) {
                return Err(Error::arg(
                    "--remove-key",
                    format!("--remove-key {key}: {} has no such key", g.path().display()),
                ));
            }
        }
    }
    Ok(())
}

/// The file `g` with `edits` made, every tensor kept.
pub fn apply<'a>(g: &'a Gguf, edits: &[GgufEdit]) -> Result<GgufOut<'a>> {
    let mut plan = GgufOut::identity(g);
    for e in edits {
        edit(&mut plan, g, e)?;
    }
    Ok(plan)
}
