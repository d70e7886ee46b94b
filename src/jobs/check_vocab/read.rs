//! What the checks read and share: tokenizers, JSON files, folders, the `--allow-global` names
//! a fix repeats, and the rows the weights should have.

use crate::error::{Error, Result};
use crate::formats::OpenOptions;
use crate::tokenizer::base::load_tokenizer;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A loaded tokenizer: its path, the ids it needs, token → id.
pub(super) struct Tok {
    pub(super) path: PathBuf,
    pub(super) needed: u64,
    pub(super) ids: HashMap<String, u32>,
}

pub(super) fn load_tok(path: &Path) -> Result<Tok> {
    let base = load_tokenizer(path)?;
    let needed = base.size();
    let ids = base
        .ids()
        .into_iter()
        .map(|(t, id)| (t.to_string(), id))
        .collect();
    Ok(Tok {
        path: path.to_path_buf(),
        needed,
        ids,
    })
}

pub(super) fn dir_of(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.to_path_buf()
    } else {
        p.parent().map_or(PathBuf::from("."), Path::to_path_buf)
    }
}

/// The `--allow-global` names the user gave (sorted), for fix commands that open the same torch
/// files.
pub(super) fn allowed_globals(open: &OpenOptions) -> Vec<String> {
    let mut g: Vec<String> = open.globals.extra.iter().cloned().collect();
    g.sort();
    g
}

/// A tokenizer file, or the tokenizer of a model folder (tokenizer.json, else tokenizer.model).
pub(super) fn tokenizer_in(p: &Path) -> Result<PathBuf> {
    if !p.is_dir() {
        return Ok(p.to_path_buf());
    }
    ["tokenizer.json", "tokenizer.model"]
        .iter()
        .map(|n| p.join(n))
        .find(|f| f.is_file())
        .ok_or_else(|| Error::format(p, "a folder with no tokenizer.json or tokenizer.model"))
}

pub(super) fn read_json(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(p, format!("not valid JSON: {e}")))
}

/// Rows past a tokenizer's ids that look like padding: transformers and training scripts pad
/// the table to a multiple of 8 or more (Gemma: 262144 ids, 262208 rows).
fn looks_padded(rows: u64) -> bool {
    rows.is_multiple_of(8)
}

/// The rows the weights should have, and why: the tokenizer's need when the table is too small
/// for it, or when the rows past it are not padding (not a multiple of 8, and config.json does
/// not say that many: rows of an older tokenizer, seed 001's 24001 for 24000 ids); otherwise the
/// rows the weights have (the weights are the evidence; padding rows are normal).
pub(super) fn target_rows(rows: u64, needed: Option<u64>, config_rows: Option<u64>) -> u64 {
    match needed {
        Some(n) if n > rows => n,
        Some(n) if n < rows && !looks_padded(rows) && config_rows != Some(rows) => n,
        _ => rows,
    }
}
