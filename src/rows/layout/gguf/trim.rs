//! trim-vocab's GGUF mechanics: the file's tokens checked against the tokenizer it was made from,
//! and a pruned tokenizer's old → new map applied to the file — the tokenizer arrays (tokens,
//! token types, scores, merges as pruned) gathered, every token id the header names
//! (`tokenizer.ggml.*_token_id`) and `<arch>.vocab_size` moved, the rows of `token_embd.weight`
//! and `output.weight` (absent: tied) gathered in their own ggml type (a row's bytes are whole
//! blocks, copied, never requantized), every other key and tensor kept ([`trim`]), then written
//! ([`Trimmed::write`]). Which tokens are kept is the job's.

use crate::error::{Error, Result};
use crate::formats::gguf::edit::{follow_embedded_tokenizer, int_like};
use crate::formats::gguf::keys;
pub use crate::formats::gguf::keys::EMBEDDING;
pub use crate::formats::gguf::write::Written;
use crate::formats::gguf::write::{write_gguf, GgufOut, OutTensor, Part};
pub use crate::formats::gguf::{Gguf, GgufAt, LAYOUT};
use crate::formats::gguf::{TensorInfo, Value};
use crate::plan::Role;
use crate::tokenizer::base::Base;
use crate::tokenizer::trim::{tokens, Pruned, PrunedFile};
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;

/// One table trimmed.
#[derive(Debug, Clone, Serialize)]
pub struct TrimmedTable {
    pub name: String,
    /// token_embd is the embedding; output the head.
    #[serde(skip)]
    pub role: Role,
    pub ggml_type: &'static str,
    /// Rows first.
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    pub rows_saved: u64,
    pub bytes_saved: u64,
}

/// The GGUF file `at`, read, refused when it has no vocabulary table.
pub fn open(at: &GgufAt) -> Result<&Gguf> {
    let g = at.get()?;
    if g.tensor(keys::EMBEDDING).is_none() {
        return Err(Error::format(
            at.path(),
            format!("no {}: no vocabulary table to trim", keys::EMBEDDING),
        ));
    }
    Ok(g)
}

/// The table's rows (padding rows past the tokens included).
pub fn table_rows(g: &Gguf) -> u64 {
    g.tensor(keys::EMBEDDING).map_or(0, TensorInfo::rows)
}

/// No output.weight: the head is the embedding.
pub fn tied(g: &Gguf) -> bool {
    g.tensor(keys::HEAD).is_none()
}

/// The ids the header's token-id keys name (those that are non-negative integers): a pruned
/// tokenizer keeps them, as it keeps a config's.
pub fn named_ids(g: &Gguf) -> Vec<u64> {
    id_keys(g).into_iter().filter_map(|(_, _, id)| id).collect()
}

/// The header's chat templates' texts ([`keys::chat_templates`]): a trim keeps the tokens of
/// their literal text.
pub fn chat_templates(g: &Gguf) -> Vec<String> {
    keys::chat_templates(g)
        .into_iter()
        .map(|(_, t)| t.to_string())
        .collect()
}

/// The file as trimmed by a pruned tokenizer's map, to be written.
pub struct Trimmed<'g> {
    plan: GgufOut<'g>,
    pub tables: Vec<TrimmedTable>,
    /// Merges before and after, where the file has merges.
    pub merges: Option<[u64; 2]>,
    /// Header keys changed (`key: old -> new` for ids and sizes).
    pub keys: Vec<String>,
    /// The kept old ids, ascending.
    pub kept: Vec<u64>,
}

/// `g` trimmed by `p`'s old → new map: tables, tokenizer arrays, then the id keys.
pub fn trim<'g>(g: &'g Gguf, p: &Pruned) -> Result<Trimmed<'g>> {
    let kept: Vec<u64> = (0..p.map.len() as u64)
        .filter(|&i| p.map[i as usize].is_some())
        .collect();
    let mut plan = GgufOut::identity(g);
    let tables = tables(g, &mut plan, p.map.len() as u64, &kept)?;
    let merges = tokenizer_arrays(&mut plan, g, p)?;
    follow_embedded_tokenizer(&mut plan, g, || {
        Ok(match &p.file {
            PrunedFile::Json(text) => Some(text.clone()),
            PrunedFile::Sp(_) => None,
        })
    })?;
    let keys = moved_ids(&mut plan, g, &p.map, kept.len() as u64)?;
    Ok(Trimmed {
        plan,
        tables,
        merges,
        keys,
        kept,
    })
}

impl Trimmed<'_> {
    /// Write the trimmed file to `out` (verified by the writer).
    pub fn write(&self, out: &Path) -> Result<Written> {
        write_gguf(&self.plan, out)
    }
}

/// The file's tokens must be the tokenizer's, id by id, and its merges the tokenizer's merges:
/// refused naming both files and the first id (or merge) that differs.
pub fn same_vocab(g: &Gguf, tok_path: &Path, tok: &Base) -> Result<()> {
    let have = keys::tokens(g).ok_or_else(|| {
        Error::format(
            g.path(),
            format!("{} is missing or not an array of strings", keys::TOKENS),
        )
    })?;
    let ours = tokens(tok);
    let n = have.len().max(ours.len());
    let differs = |what: String| {
        Error::arg(
            "--tokenizer",
            format!(
                "{} does not match {}: {what}: give the tokenizer the GGUF was made from",
                tok_path.display(),
                g.path().display()
            ),
        )
    };
    if let Some(i) = keys::token_not_utf8(g) {
        return Err(differs(format!(
            "id {i} in {} is bytes that are not UTF-8 (shown {:?}), which no tokenizer file holds",
            keys::TOKENS,
            have[i]
        )));
    }
    let shown = |t: Option<&str>, none: &str| t.map_or(none.into(), |t| format!("{t:?}"));
    if let Some(i) = (0..n).find(|&i| ours.get(i).copied().flatten() != have.get(i).copied()) {
        return Err(differs(format!(
            "id {i} is {} in the tokenizer but {} in {}",
            shown(ours.get(i).copied().flatten(), "no token"),
            shown(have.get(i).copied(), "no token"),
            keys::TOKENS
        )));
    }
    let (Some(theirs), Base::Hf(t)) = (gguf_merges(g), tok) else {
        return Ok(());
    };
    let ours: Vec<String> = t.merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let n = theirs.len().max(ours.len());
    match (0..n).find(|&i| ours.get(i).map(String::as_str) != theirs.get(i).copied()) {
        Some(i) => Err(differs(format!(
            "merge {i} is {} in the tokenizer but {} in {}",
            shown(ours.get(i).map(String::as_str), "no merge"),
            shown(theirs.get(i).copied(), "no merge"),
            keys::MERGES
        ))),
        None => Ok(()),
    }
}

/// The file's merges as strings, where it has them.
fn gguf_merges(g: &Gguf) -> Option<Vec<&str>> {
    let a = g.get(keys::MERGES)?.as_array()?;
    Some(a.iter().filter_map(Value::as_str).collect())
}

/// The file's merges that the pruned tokenizer keeps, in their order: a tokenizer.json's pruned
/// merges; for a `.model` (no merges of its own), those whose parts and result are kept.
fn kept_merges(g: &Gguf, p: &Pruned, kept: &HashSet<&str>) -> Result<Option<Vec<Value>>> {
    let Some(all) = gguf_merges(g) else {
        return Ok(None);
    };
    let keep: Box<dyn Fn(&str) -> bool + '_> = match &p.file {
        PrunedFile::Json(text) => {
            let doc: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| Error::format(g.path(), format!("the pruned tokenizer: {e}")))?;
            let set: HashSet<String> = doc["model"]["merges"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| match m {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Array(p) => Some(
                        p.iter()
                            .filter_map(serde_json::Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => None,
                })
                .collect();
            Box::new(move |m| set.contains(m))
        }
        PrunedFile::Sp(_) => Box::new(|m: &str| {
            m.split_once(' ').is_some_and(|(a, b)| {
                kept.contains(a) && kept.contains(b) && kept.contains(format!("{a}{b}").as_str())
            })
        }),
    };
    Ok(Some(
        all.into_iter()
            .filter(|m| keep(m))
            .map(|m| Value::String(m.to_string()))
            .collect(),
    ))
}

/// The array `key` (one entry per token) with the entries of the kept ids, in order.
fn gathered(g: &Gguf, key: &str, map: &[Option<u32>]) -> Result<Option<Value>> {
    let Some(v) = g.get(key) else { return Ok(None) };
    let Value::Array(t, items) = v else {
        return Err(Error::format(g.path(), format!("{key} is not an array")));
    };
    if items.len() != map.len() {
        return Err(Error::format(
            g.path(),
            format!(
                "{key} has {} entries for {} tokens: fix the file first (check-vocab)",
                items.len(),
                map.len()
            ),
        ));
    }
    let kept = items
        .iter()
        .zip(map)
        .filter(|(_, m)| m.is_some())
        .map(|(v, _)| v.clone())
        .collect();
    Ok(Some(Value::Array(*t, kept)))
}

/// Every token-id key of the header (`tokenizer.ggml.*_token_id`: the roles llama.cpp names —
/// bos, eos, pad, unk, sep, cls, mask, the FIM ids and their older prefix/suffix/middle names —
/// and any other) with its id (None: not a non-negative integer).
fn id_keys(g: &Gguf) -> Vec<(&str, &Value, Option<u64>)> {
    g.kv.iter()
        .filter(|kv| kv.key.starts_with("tokenizer.ggml.") && kv.key.ends_with("_token_id"))
        .map(|kv| (kv.key.as_str(), &kv.value, kv.value.as_u64()))
        .collect()
}

/// Every token-id key moved by the map, and `<arch>.vocab_size` set to `rows`: the keys changed.
/// An id that is not a kept token is refused (exit 2).
fn moved_ids(plan: &mut GgufOut, g: &Gguf, map: &[Option<u32>], rows: u64) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    for (key, old, id) in id_keys(g) {
        let new = id
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| map.get(i).copied().flatten());
        let Some(new) = new else {
            return Err(Error::format(
                g.path(),
                format!("{key} = {}: that token is not kept (it is not a token of the tokenizer): fix the id first (check-vocab --fix)", old.to_json()),
            ));
        };
        if id != Some(u64::from(new)) {
            plan.set(key, int_like(Some(old), u64::from(new)));
            changed.push(format!("{key}: {} -> {new}", old.to_json()));
        }
    }
    if let Some(key) = keys::vocab_size_key(g) {
        if let Some(old) = g.get(&key) {
            plan.set(&key, int_like(Some(old), rows));
            changed.push(format!("{key}: {} -> {rows}", old.to_json()));
        }
    }
    Ok(changed)
}

/// Table `t` with the rows of the kept ids (`kept`, ascending), in its own ggml type: each run
/// of consecutive rows one byte range of the input; a row must be whole blocks.
fn gather_table<'a>(g: &Gguf, t: &'a TensorInfo, kept: &[u64]) -> Result<OutTensor<'a>> {
    let row_bytes = match t.ne.as_slice() {
        [width, _] => t.ggml.bytes_for(*width),
        _ => None,
    };
    let row_bytes = row_bytes.ok_or_else(|| {
        Error::unsupported(
            g.path(),
            format!(
                "{} is {} {:?}: trim-vocab gathers the rows of a 2-D table whose rows are whole {} blocks ({} elements)",
                t.name,
                t.ggml.name,
                t.shape(),
                t.ggml.name,
                t.ggml.block
            ),
        )
    })?;
    let mut parts: Vec<Part> = Vec::new();
    for &r in kept {
        let start = r * row_bytes;
        match parts.last_mut() {
            Some(Part::Input { start: s, len }) if *s + *len == start => *len += row_bytes,
            _ => parts.push(Part::Input {
                start,
                len: row_bytes,
            }),
        }
    }
    Ok(OutTensor {
        name: t.name.clone(),
        ggml: t.ggml,
        ne: vec![t.ne[0], kept.len() as u64],
        from: Some(t),
        parts,
    })
}

/// The tables gathered into `plan`, and their lines of the report; the table's rows before.
fn tables<'a>(
    g: &'a Gguf,
    plan: &mut GgufOut<'a>,
    tokens: u64,
    kept: &[u64],
) -> Result<Vec<TrimmedTable>> {
    let mut out = Vec::new();
    for name in [keys::EMBEDDING, keys::HEAD] {
        let Some(t) = g.tensor(name) else { continue };
        if t.rows() < tokens {
            return Err(Error::format(
                g.path(),
                format!(
                    "{name} has {} rows for {tokens} tokens: fix that first (check-vocab)",
                    t.rows()
                ),
            ));
        }
        let gathered = gather_table(g, t, kept)?;
        let saved = t.rows() - kept.len() as u64;
        out.push(TrimmedTable {
            name: name.to_string(),
            role: if name == keys::EMBEDDING {
                Role::Embedding
            } else {
                Role::Head
            },
            ggml_type: t.ggml.name,
            old_shape: t.shape(),
            new_shape: gathered.ne.iter().rev().copied().collect(),
            rows_saved: saved,
            bytes_saved: saved * (t.bytes / t.rows().max(1)),
        });
        if let Some(slot) = plan.tensor_mut(name) {
            *slot = gathered;
        }
    }
    Ok(out)
}

/// The tokenizer arrays of `plan` gathered by the map (merges as pruned): the merges before and
/// after, where the file has them.
fn tokenizer_arrays(plan: &mut GgufOut, g: &Gguf, p: &Pruned) -> Result<Option<[u64; 2]>> {
    for key in [keys::TOKENS, keys::TOKEN_TYPE, keys::SCORES] {
        if let Some(v) = gathered(g, key, &p.map)? {
            plan.set(key, v);
        }
    }
    let all = keys::tokens(g).unwrap_or_default();
    let kept: HashSet<&str> = all
        .iter()
        .zip(&p.map)
        .filter(|(_, m)| m.is_some())
        .map(|(t, _)| *t)
        .collect();
    let Some(merges) = kept_merges(g, p, &kept)? else {
        return Ok(None);
    };
    let before = gguf_merges(g).map_or(0, |m| m.len()) as u64;
    let after = merges.len() as u64;
    plan.set(
        keys::MERGES,
        Value::Array(crate::formats::gguf::ValueType::String, merges),
    );
    Ok(Some([before, after]))
}
