//! extend-embeddings' planning and writing for a GGUF file: the merged tokenizer's new tokens appended to the header's
//! tokenizer arrays (tokens, token types, scores, merges; from tokenizer.json or a SentencePiece
//! `.model`), and rows to `token_embd.weight` and
//! `output.weight` (absent: tied, one table) in their own ggml type. Old rows' bytes are copied;
//! the new rows are the column mean of the tokens' dequantized rows, computed in f64, quantized
//! by the type's reference quantizer ([`quant`]), on a thread of its own while the writer
//! copies everything else. `<arch>.vocab_size` follows the table. A
//! padded table (more rows than tokens) gives its padding rows to the new tokens, re-initialised.

use crate::error::{Error, Result};
use crate::formats::gguf::edit::{follow_embedded_tokenizer, int_like};
use crate::formats::gguf::write::{write_gguf, GgufOut, Part, Written};
pub use crate::formats::gguf::GgufAt;
use crate::formats::gguf::{keys, quant, Gguf, TensorInfo, Value, ValueType};
use crate::output::later::{FailUnset, Later};
use crate::plan::Role;
use crate::tokenizer::sentencepiece;
use serde::Serialize;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// Score of an added token (convert_hf_to_gguf.py gives added tokens -1000).
const ADDED_SCORE: f32 = -1000.0;
/// llama.cpp's token types for new tokens.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// What the GGUF file grows to: the merged tokenizer's tokens (and their rows), or a row count.
pub enum GrowTo {
    Tokenizer(PathBuf),
    Rows(u64),
}

/// One grown table.
#[derive(Debug, Clone, Serialize)]
pub struct GrownTable {
    pub name: String,
    /// token_embd is the embedding; output the head.
    #[serde(skip)]
    pub role: Role,
    pub ggml_type: &'static str,
    /// Rows first.
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// The rows given the init: `[first, end)`.
    pub init_rows: [u64; 2],
}

/// What extend-embeddings did to a GGUF file.
#[derive(Debug, Clone, Serialize)]
pub struct GgufReport {
    pub input: PathBuf,
    pub format: &'static str,
    pub output: Option<PathBuf>,
    pub old_tokens: u64,
    pub new_tokens: u64,
    /// The first new tokens (at most 20).
    pub added: Vec<String>,
    pub merges_added: u64,
    /// `[PAD{id}]` tokens added for table rows past the new tokens.
    pub padding_tokens: u64,
    pub init: &'static str,
    /// No output.weight: the head is the embedding.
    pub tied: bool,
    pub tables: Vec<GrownTable>,
    /// Header keys set or appended to.
    pub keys: Vec<String>,
    pub nothing_to_do: bool,
    pub dry_run: bool,
    pub written: Option<Written>,
}

/// One new token: its string, llama.cpp type, and score (None: an added token's).
struct NewToken {
    text: String,
    kind: i32,
    score: Option<f32>,
}

/// What the merged tokenizer adds: its tokens past the file's, and its merges past the file's.
struct Addition {
    tokens: Vec<NewToken>,
    merges: Vec<String>,
}

/// The merged tokenizer's tokens by id, and its merges (see [`read_merged`]).
type Merged = (Vec<NewToken>, Vec<String>);

/// A token of tokenizer.json and, for an added token, its `special`.
type Token = (String, Option<bool>);

/// The merged tokenizer's tokens by id as new tokens (string, type, score), and its merges as
/// "a b": a SentencePiece `.model` (what merge-tokenizers writes for a `.model` base) gives each
/// piece its own score and type and has no merges; tokenizer.json gives model-vocab tokens NORMAL,
/// added tokens CONTROL (special) or USER_DEFINED, and no scores.
fn read_merged(path: &Path) -> Result<(Vec<NewToken>, Vec<String>)> {
    if path.extension().is_some_and(|e| e == "model") {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
        let model = sentencepiece::parse(bytes)
            .map_err(|e| Error::format(path, format!("not a SentencePiece model: {e}")))?;
        let tokens = model
            .pieces
            .into_iter()
            .map(|p| NewToken {
                text: p.piece,
                kind: i32::try_from(p.kind.code()).unwrap_or(i32::MAX),
                score: Some(p.score),
            })
            .collect();
        return Ok((tokens, Vec::new()));
    }
    let (tokens, merges) = read_tokenizer(path)?;
    let tokens = tokens
        .into_iter()
        .map(|(text, special)| NewToken {
            text,
            kind: match special {
                Some(true) => CONTROL,
                Some(false) => USER_DEFINED,
                None => NORMAL,
            },
            score: None,
        })
        .collect();
    Ok((tokens, merges))
}

/// tokenizer.json's tokens by id (model vocab and added tokens), and its merges as "a b".
fn read_tokenizer(path: &Path) -> Result<(Vec<Token>, Vec<String>)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
    let doc: Json = serde_json::from_str(&text)
        .map_err(|e| Error::format(path, format!("not valid JSON: {e}")))?;
    let vocab = doc["model"]["vocab"].as_object();
    let added = doc["added_tokens"].as_array();
    // Ids are 0..n without a gap: one past the n entries there are is a gap, refused before
    // the table is sized by it.
    let entries = vocab.map_or(0, |v| v.len()) + added.map_or(0, |a| a.len());
    let mut by_id: Vec<Option<Token>> = Vec::new();
    let mut put = |id: u64, text: &str, special: Option<bool>| -> Result<()> {
        let i = usize::try_from(id).ok().filter(|&i| i < entries).ok_or_else(|| {
            Error::format(
                path,
                format!("token '{text}' has id {id}, but there are {entries} tokens: the ids have a gap"),
            )
        })?;
        if by_id.len() <= i {
            by_id.resize(i + 1, None);
        }
        by_id[i] = Some((text.to_string(), special));
        Ok(())
    };
    for (t, id) in vocab.into_iter().flatten() {
        if let Some(id) = id.as_u64() {
            put(id, t, None)?;
        }
    }
    for a in added.into_iter().flatten() {
        if let (Some(id), Some(t)) = (a["id"].as_u64(), a["content"].as_str()) {
            put(id, t, Some(a["special"].as_bool().unwrap_or(false)))?;
        }
    }
    let tokens = by_id
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.ok_or_else(|| Error::format(path, format!("no token has id {i}: the ids have a gap")))
        })
        .collect::<Result<Vec<_>>>()?;
    let merges = doc["model"]["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            Json::String(s) => Some(s.clone()),
            Json::Array(p) => Some(
                p.iter()
                    .filter_map(Json::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        })
        .collect();
    Ok((tokens, merges))
}

/// The merged tokenizer's addition to the file's vocabulary: it must hold the file's tokens at
/// their ids (and its merges first, where the file has merges).
fn addition(g: &Gguf, path: &Path, merged: Merged) -> Result<Addition> {
    let (mut merged, merges) = merged;
    let have = keys::tokens(g).ok_or_else(|| {
        Error::format(
            g.path(),
            format!("{} is missing or not an array of strings", keys::TOKENS),
        )
    })?;
    let not_utf8 = keys::token_not_utf8(g);
    let first_differing = not_utf8.or_else(|| {
        (0..have.len()).find(|&i| merged.get(i).map(|t| t.text.as_str()) != Some(have[i]))
    });
    if let Some(i) = first_differing {
        let bytes = if not_utf8 == Some(i) {
            " (bytes that are not UTF-8, which no tokenizer file holds)"
        } else {
            ""
        };
        return Err(Error::arg(
            "--tokenizer",
            format!(
                "{}: id {i} is {} there but {:?}{bytes} in {}: give the tokenizer that extends this file's vocabulary (merge-tokenizers --base …)",
                path.display(),
                merged
                    .get(i)
                    .map_or("no token".into(), |t| format!("{:?}", t.text)),
                have[i],
                g.path().display()
            ),
        ));
    }
    let old_merges: Vec<&str> = g
        .get(keys::MERGES)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let new_merges = if g.get(keys::MERGES).is_some() {
        if merges.len() < old_merges.len() || merges.iter().zip(&old_merges).any(|(a, b)| a != b) {
            return Err(Error::arg(
                "--tokenizer",
                format!("{}: its merges do not begin with the file's {} merges: give the tokenizer that extends this file's", path.display(), old_merges.len()),
            ));
        }
        merges[old_merges.len()..].to_vec()
    } else {
        Vec::new()
    };
    let tokens = merged.split_off(have.len());
    Ok(Addition {
        tokens,
        merges: new_merges,
    })
}

/// The rows of a table given the init, and its rows after: `(first, end, rows_out)`. New
/// tokens take the padding rows past the tokens (`padding`); a row target appends.
fn row_span(t: &TensorInfo, tokens: u64, target: u64, padding: bool) -> (u64, u64, u64) {
    let rows = t.rows();
    let first = if padding { rows.min(tokens) } else { rows };
    let end = target.max(first);
    (first, end, rows.max(end))
}

/// A table's new rows, to be computed: the column mean of rows `0..mean_of` of `data`
/// (dequantized, summed in f64 in row order), quantized once and repeated `copies` times.
struct NewRows<'a> {
    t: &'a TensorInfo,
    data: &'a [u8],
    mean_of: u64,
    copies: u64,
}

impl NewRows<'_> {
    fn row_bytes(&self) -> u64 {
        self.t.bytes / self.t.rows().max(1)
    }

    fn len(&self) -> u64 {
        self.copies * self.row_bytes()
    }

    /// The new rows' bytes; Err naming the first old row holding NaN or Inf, which the mean
    /// would carry into every new row.
    fn compute(&self) -> std::result::Result<Vec<u8>, String> {
        let (t, row_bytes) = (self.t, self.row_bytes() as usize);
        let width = t.ne[0] as usize;
        let mut sum = vec![0f64; width];
        let mut row = vec![0f32; width];
        let rows = || {
            self.data
                .chunks_exact(row_bytes)
                .take(self.mean_of as usize)
        };
        for b in rows() {
            quant::dequantize_row(t.ggml, b, &mut row);
            for (s, v) in sum.iter_mut().zip(&row) {
                *s += f64::from(*v);
            }
        }
        // Finite f32 values cannot overflow an f64 sum: a sum that is not finite means an old
        // value is not, found (and named) by a second pass only then.
        if sum.iter().any(|s| !s.is_finite()) {
            let bad = rows().enumerate().find_map(|(r, b)| {
                quant::dequantize_row(t.ggml, b, &mut row);
                row.iter().position(|v| !v.is_finite()).map(|c| (r, c))
            });
            let at = bad.map_or(String::new(), |(r, c)| {
                format!(": old row {r} holds NaN or Inf (column {c})")
            });
            return Err(format!("its new rows would hold NaN or Inf{at}, and the mean (a GGUF table's only init) carries it into them; repair that row first"));
        }
        let mean: Vec<f32> = sum
            .iter()
            .map(|s| (s / self.mean_of.max(1) as f64) as f32)
            .collect();
        let mut one = Vec::with_capacity(row_bytes);
        quant::quantize_row(t.ggml, &mean, &mut one);
        Ok(one.repeat(self.copies as usize))
    }
}

/// A table to grow: its old rows (the first `first`) copied, rows `first..end` the column mean
/// of rows `0..mean_of` (see [`NewRows`]), the rows past `end` copied.
fn new_rows<'a>(
    g: &'a Gguf,
    t: &'a TensorInfo,
    mean_of: u64,
    (first, end, _): (u64, u64, u64),
) -> Result<NewRows<'a>> {
    if t.ne.len() != 2 || !quant::growable(t.ggml) {
        let names: Vec<&str> = quant::GROWABLE.iter().map(|(_, n)| *n).collect();
        return Err(Error::unsupported(
            g.path(),
            format!(
                "{} is {} {:?}: extend-embeddings grows 2-D tables of {} only",
                t.name,
                t.ggml.name,
                t.shape(),
                names.join(", ")
            ),
        ));
    }
    let r = NewRows {
        t,
        data: g.data(t)?,
        mean_of,
        copies: end - first,
    };
    // The new rows are made in memory: refused before, where they could not be.
    let need = r.copies.checked_mul(r.row_bytes());
    crate::rows::resize::refuse_past_memory(g.path(), &t.name, r.copies, t.ne[0], need)?;
    Ok(r)
}

/// The grown table's output: old rows copied around the new rows (`rows`, computed later).
fn grow_table<'a>(
    t: &'a TensorInfo,
    rows: &'a Later,
    (first, end, rows_out): (u64, u64, u64),
) -> crate::formats::gguf::write::OutTensor<'a> {
    let row_bytes = t.bytes / t.rows().max(1);
    let mut parts = vec![Part::Input {
        start: 0,
        len: first * row_bytes,
    }];
    parts.push(Part::Later(rows));
    if t.rows() > end {
        parts.push(Part::Input {
            start: end * row_bytes,
            len: (t.rows() - end) * row_bytes,
        });
    }
    crate::formats::gguf::write::OutTensor {
        name: t.name.clone(),
        ggml: t.ggml,
        ne: vec![t.ne[0], rows_out],
        from: Some(t),
        parts,
    }
}

/// Write `plan` to `out` while `rows` are computed into `laters` on a thread of lower priority:
/// the writer copies everything else first (see `output::direct`), so the disk is not idle
/// while the mean is taken.
fn write_while_computing(
    plan: &GgufOut,
    (input, out): (&Path, &Path),
    rows: &[NewRows],
    laters: &[Later],
) -> Result<Written> {
    let refused = std::sync::OnceLock::new();
    let written = std::thread::scope(|s| {
        let init = s.spawn(|| {
            let _unset = FailUnset(laters);
            crate::output::priority::lower_this_thread();
            for (r, later) in rows.iter().zip(laters) {
                match r.compute() {
                    Ok(bytes) => later.set(bytes),
                    Err(why) => {
                        let _ = refused.set(Error::tensor(input, &r.t.name, why));
                        return;
                    }
                }
            }
        });
        let written = write_gguf(plan, out);
        // A panic there failed the rows (FailUnset), and so the write; an input the rows
        // cannot be made from failed it too, and is what the user is told.
        let _ = init.join();
        written
    });
    match refused.into_inner() {
        Some(e) => Err(e),
        None => written,
    }
}

/// The merged tokenizer's text for a GGUF's embedded tokenizer.json
/// ([`follow_embedded_tokenizer`]): None for a SentencePiece `.model`.
fn merged_json(merged: &Path) -> Result<Option<String>> {
    if !crate::tokenizer::base::is_json_file(merged) {
        return Ok(None);
    }
    std::fs::read_to_string(merged)
        .map(Some)
        .map_err(|e| Error::io(merged, "read", e))
}

/// Append the new tokens to the tokenizer arrays (and merges) of `plan`; the keys changed.
fn append_tokens(plan: &mut GgufOut, g: &Gguf, add: &Addition) -> Result<Vec<String>> {
    let old = keys::tokens(g).map_or(0, |t| t.len());
    for key in [keys::TOKEN_TYPE, keys::SCORES] {
        let n = g.get(key).and_then(Value::as_array).map(<[Value]>::len);
        if n.is_some_and(|n| n != old) {
            return Err(Error::format(
                g.path(),
                format!(
                    "{key} has {} entries for {old} tokens: fix the file first (check-vocab)",
                    n.unwrap_or(0)
                ),
            ));
        }
    }
    let mut changed = vec![keys::TOKENS.to_string()];
    let strings = add
        .tokens
        .iter()
        .map(|t| Value::String(t.text.clone()))
        .collect();
    plan.append(keys::TOKENS, strings)?;
    if let Some(Value::Array(kind, _)) = g.get(keys::TOKEN_TYPE) {
        let kinds = add
            .tokens
            .iter()
            .map(|t| match kind {
                ValueType::U32 => Value::U32(t.kind as u32),
                _ => Value::I32(t.kind),
            })
            .collect();
        plan.append(keys::TOKEN_TYPE, kinds)?;
        changed.push(keys::TOKEN_TYPE.to_string());
    }
    if g.get(keys::SCORES).is_some() {
        let scores = add
            .tokens
            .iter()
            .map(|t| Value::F32(t.score.unwrap_or(ADDED_SCORE)))
            .collect();
        plan.append(keys::SCORES, scores)?;
        changed.push(keys::SCORES.to_string());
    }
    if !add.merges.is_empty() {
        let merges = add
            .merges
            .iter()
            .map(|m| Value::String(m.clone()))
            .collect();
        plan.append(keys::MERGES, merges)?;
        changed.push(keys::MERGES.to_string());
    }
    Ok(changed)
}

/// The target: the token count after (the merged tokenizer's, `merged` when already read, or the
/// file's) and the rows every table must reach.
fn target(g: &Gguf, to: &GrowTo, merged: Option<Merged>) -> Result<(Option<Addition>, u64, u64)> {
    let old = keys::tokens(g).map_or(0, |t| t.len()) as u64;
    match to {
        GrowTo::Tokenizer(path) => {
            let merged = match merged {
                Some(m) => m,
                None => read_merged(path)?,
            };
            let add = addition(g, path, merged)?;
            let n = old + add.tokens.len() as u64;
            Ok((Some(add), n, n))
        }
        GrowTo::Rows(n) => Ok((None, old, *n)),
    }
}

/// The GGUF file and the merged tokenizer (when the target is one), parsed at the same time:
/// for a large vocabulary each is a few hundred milliseconds before anything can be written.
/// An error about the GGUF file comes first.
fn open_both<'g>(at: &'g GgufAt, to: &GrowTo) -> Result<(&'g Gguf, Option<Merged>)> {
    std::thread::scope(|s| {
        let merged = match to {
            GrowTo::Tokenizer(path) => Some(s.spawn(|| read_merged(path))),
            GrowTo::Rows(_) => None,
        };
        let g = at.get();
        let merged = merged.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        Ok((g?, merged.transpose()?))
    })
}

/// A table to grow has rows; with `--new-rows` (`new_rows`: the file's tokens and the rows asked
/// for) it is not cut, and not grown past the tokens (llama.cpp takes n_vocab from them and
/// refuses such a table).
fn check_table(input: &Path, t: &TensorInfo, new_rows: Option<(u64, u64)>) -> Result<()> {
    let (name, have) = (t.name.as_str(), t.rows());
    if have == 0 || t.bytes == 0 {
        return Err(Error::tensor(
            input,
            name,
            "has no rows (a dimension of 0): there is no table to grow",
        ));
    }
    let Some((tokens, rows)) = new_rows else {
        return Ok(());
    };
    if rows < have {
        return Err(Error::arg(
            "--new-rows",
            format!("--new-rows {rows}: {name} has {have} rows, and a GGUF table is not cut: give at least {have}"),
        ));
    }
    let most = tokens.max(have);
    if tokens > 0 && rows > most {
        return Err(Error::arg(
            "--new-rows",
            format!("--new-rows {rows}: {name} would have {rows} rows for the file's {tokens} tokens, and llama.cpp takes n_vocab from the tokens and refuses a table of other rows: give --new-rows {most} at most here (then check-vocab --fix --pad-tokens names padding rows), or --tokenizer to add tokens with their rows"),
        ));
    }
    Ok(())
}

/// Grow the GGUF file `at` into `out` (or plan it, `dry_run`), `out` already checked.
pub fn grow(at: &GgufAt, out: &Path, to: &GrowTo, dry_run: bool) -> Result<GgufReport> {
    let input = at.path();
    let (g, merged) = open_both(at, to)?;
    let old_tokens = keys::tokens(g).map_or(0, |t| t.len()) as u64;
    let (add, new_tokens, rows) = target(g, to, merged)?;
    let mut plan = GgufOut::identity(g);
    let mut changed_keys = match &add {
        Some(a) if !a.tokens.is_empty() => append_tokens(&mut plan, g, a)?,
        _ => Vec::new(),
    };
    if let (GrowTo::Tokenizer(merged), Some(_)) = (to, &add) {
        if follow_embedded_tokenizer(&mut plan, g, || merged_json(merged))? {
            changed_keys.push(keys::HF_JSON.to_string());
        }
    }
    if g.tensor(keys::EMBEDDING).is_none() {
        return Err(Error::format(
            input,
            format!("no {}: no vocabulary table to grow", keys::EMBEDDING),
        ));
    }
    let mut grow = Vec::new();
    let mut rows_out = 0;
    for name in [keys::EMBEDDING, keys::HEAD] {
        let Some(t) = g.tensor(name) else { continue };
        check_table(input, t, add.is_none().then_some((old_tokens, rows)))?;
        let span = row_span(t, old_tokens, rows, add.is_some());
        rows_out = rows_out.max(span.2);
        if span.0 == span.1 {
            continue;
        }
        grow.push((new_rows(g, t, t.rows().min(old_tokens), span)?, span));
    }
    let laters: Vec<Later> = grow.iter().map(|(r, _)| Later::new(r.len())).collect();
    let mut tables = Vec::new();
    for ((r, span), later) in grow.iter().zip(&laters) {
        let grown = grow_table(r.t, later, *span);
        tables.push(GrownTable {
            name: r.t.name.clone(),
            role: table_role(&r.t.name),
            ggml_type: r.t.ggml.name,
            old_shape: r.t.shape(),
            new_shape: grown.ne.iter().rev().copied().collect(),
            init_rows: [span.0, span.1],
        });
        if let Some(slot) = plan.tensor_mut(&r.t.name) {
            *slot = grown;
        }
    }
    // A padded table not filled by the new tokens: its remaining rows named [PAD{id}] (llama.cpp
    // refuses a table with more rows than tokens).
    let padding = match &add {
        Some(_) if rows_out > new_tokens => {
            crate::formats::gguf::edit::pad_tokens(&mut plan, g, new_tokens, rows_out)?;
            changed_keys.push(format!(
                "{} (+{} [PAD] tokens)",
                keys::TOKENS,
                rows_out - new_tokens
            ));
            rows_out - new_tokens
        }
        _ => 0,
    };
    if let Some(key) = keys::vocab_size_key(g).filter(|k| g.get(k).is_some()) {
        if g.get(&key).and_then(Value::as_u64) != Some(rows_out) {
            plan.set(&key, int_like(g.get(&key), rows_out));
            changed_keys.push(key);
        }
    }
    let nothing_to_do = tables.is_empty() && changed_keys.is_empty();
    let written = if nothing_to_do || dry_run {
        None
    } else {
        let pending: Vec<NewRows> = grow.into_iter().map(|(r, _)| r).collect();
        Some(write_while_computing(
            &plan,
            (input, out),
            &pending,
            &laters,
        )?)
    };
    Ok(GgufReport {
        input: input.to_path_buf(),
        format: crate::formats::gguf::LAYOUT,
        output: written.as_ref().map(|w| w.path.clone()),
        old_tokens,
        new_tokens,
        added: add
            .as_ref()
            .map(|a| a.tokens.iter().take(20).map(|t| t.text.clone()).collect())
            .unwrap_or_default(),
        merges_added: add.as_ref().map_or(0, |a| a.merges.len() as u64),
        padding_tokens: padding,
        init: "mean",
        tied: g.tensor(keys::HEAD).is_none(),
        tables,
        keys: changed_keys,
        nothing_to_do,
        dry_run,
        written,
    })
}

/// token_embd is the embedding; output (or any other table named) the head.
fn table_role(name: &str) -> Role {
    if name == keys::EMBEDDING {
        Role::Embedding
    } else {
        Role::Head
    }
}
