//! trim-vocab on a GGUF file. The tokenizer the file was made from (`--tokenizer`: tokenizer.json
//! or a SentencePiece `.model`) must hold the header's `tokenizer.ggml.tokens` at their ids (the
//! strings compared as the file stores them: byte-level BPE tokens in GPT-2's byte-to-unicode
//! form, SentencePiece pieces as they are) and, for BPE, its merges. That tokenizer is pruned and
//! checked on the keep corpus as for any other layout; then the file is written with the
//! tokenizer arrays (tokens, token types, scores, merges as pruned) gathered by the old → new map,
//! every token id the header names (`tokenizer.ggml.*_token_id`) and `<arch>.vocab_size` moved, and the rows of
//! `token_embd.weight` and `output.weight` (absent: tied) gathered in their own ggml type — a
//! row's bytes are whole blocks, copied, never requantized. Every other key and tensor is kept.
//! The map file goes beside the output (`OUT.token_map.json`).

use super::execute::map_beside;
use super::files;
use super::keep::{keep_set, read_lines, Asked};
use super::options::Options;
use super::plan::{beyond, pruned, refuse_drop};
use super::report::render_checks;
use crate::error::{Error, Result};
use crate::formats::gguf::edit::int_like;
use crate::formats::gguf::write::{write_gguf, GgufOut, OutTensor, Part, Written};
use crate::formats::gguf::{keys, Gguf, TensorInfo, Value};
use crate::output;
use crate::plan::{Gathered, Plan, Role};
use crate::rowmap::RowMap;
use crate::tokenizer::base::{load_tokenizer, Base};
use crate::tokenizer::trim::{tokens, CorpusCheck, CorpusPass, Pruned, PrunedFile};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// One table trimmed.
#[derive(Debug, Clone, Serialize)]
pub struct TrimmedTable {
    pub name: String,
    pub ggml_type: &'static str,
    /// Rows first.
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    pub rows_saved: u64,
    pub bytes_saved: u64,
}

/// What trim-vocab did to a GGUF file (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GgufReport {
    pub input: PathBuf,
    pub format: &'static str,
    pub output: Option<PathBuf>,
    pub tokenizer: PathBuf,
    pub old_tokens: u64,
    /// The table's rows before (padding rows past the tokens included) and after.
    pub old_rows: u64,
    pub new_rows: u64,
    pub kept_tokens: u64,
    pub dropped_tokens: u64,
    pub dropped_padding_rows: u64,
    pub asked: Asked,
    pub kept_beyond: BTreeMap<&'static str, u64>,
    /// No output.weight: the head is the embedding.
    pub tied: bool,
    pub tables: Vec<TrimmedTable>,
    /// Merges before and after, where the file has merges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merges: Option<[u64; 2]>,
    /// Header keys changed (`key: old -> new` for ids and sizes).
    pub keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corpus_check: Option<CorpusCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_check: Option<CorpusCheck>,
    pub map_file: PathBuf,
    pub dry_run: bool,
    pub written: Option<Written>,
    /// Old id → new id as rows (kept rows in order): the plan's row source.
    #[serde(skip)]
    pub row_map: Option<RowMap>,
}

/// Refuse the flags that do not apply to a GGUF file, naming the first; and a missing
/// `--tokenizer`.
fn refuse_flags(input: &Path, opts: &Options) -> Result<PathBuf> {
    let bad = [
        (!opts.tensors.is_empty(), "--tensor"),
        (opts.pad_to_multiple_of.is_some(), "--pad-to-multiple-of"),
        (opts.config.is_some(), "--config"),
        (opts.link, "--link"),
        (opts.file_sha256, "--file-hash"),
        (!opts.optimizer_params.is_empty(), "--optimizer-param"),
        (opts.drop_optimizer, "--optimizer"),
    ];
    if let Some((_, flag)) = bad.iter().find(|(set, _)| *set) {
        return Err(Error::arg(
            flag,
            format!("{flag} is not supported for a GGUF file (its tables are token_embd.weight and output.weight, gathered in their own ggml type; its config is its header)"),
        ));
    }
    opts.tokenizer.clone().ok_or_else(|| {
        Error::arg(
            "--tokenizer",
            format!(
                "{} is a GGUF file: name the tokenizer it was made from with --tokenizer (tokenizer.json or a SentencePiece .model; its tokens must be the file's tokenizer.ggml.tokens)",
                input.display()
            ),
        )
    })
}

/// The file's tokens must be the tokenizer's, id by id, and its merges the tokenizer's merges:
/// refused naming both files and the first id (or merge) that differs.
fn same_vocab(g: &Gguf, tok_path: &Path, tok: &Base) -> Result<()> {
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
    if let Some(i) = (0..n).find(|&i| ours.get(i).copied().flatten() != have.get(i).copied()) {
        return Err(differs(format!(
            "id {i} is {:?} in the tokenizer but {:?} in {}",
            ours.get(i).copied().flatten(),
            have.get(i),
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
            "merge {i} is {:?} in the tokenizer but {:?} in {}",
            ours.get(i),
            theirs.get(i),
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

/// The keep set, the pruned tokenizer and its checks (as for any other layout), the header's
/// token ids kept as a config's are.
fn prune_checked(
    g: &Gguf,
    tok_path: &Path,
    tok: &Base,
    opts: &Options,
    checks: (&mut Option<CorpusCheck>, &mut Option<CorpusCheck>),
) -> Result<(Pruned, Asked)> {
    let corpus = read_lines(&opts.keep_corpus)?;
    let pass = match opts.keep_corpus.is_empty() {
        true => None,
        false => Some(CorpusPass::new(tok_path, &corpus)?),
    };
    let named: Vec<u64> = id_keys(g).into_iter().filter_map(|(_, _, id)| id).collect();
    let keep = keep_set(tok_path, tok, opts, &named, pass.as_ref())?;
    let (p, _) = pruned(tok_path, &keep, (&corpus, pass.as_ref()), opts, checks)?;
    Ok((p, keep.asked))
}

/// Trim the GGUF file at `input` into `out` (or plan it, `--dry-run`); the map file beside it.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<GgufReport> {
    let tok_path = refuse_flags(input, opts)?;
    let inputs = opts.input_paths(input);
    crate::output::atomic::refuse_overlap(out, &inputs)?;
    let map_path = map_beside(out);
    if !opts.dry_run {
        output::folder::file_destination(out, &inputs, "GGUF", &["gguf"], opts.overwrite)?;
        output::folder::file_destination(&map_path, &inputs, "JSON", &["json"], opts.overwrite)?;
    }
    let g = Gguf::open(input)?;
    if g.tensor(keys::EMBEDDING).is_none() {
        return Err(Error::format(
            input,
            format!("no {}: no vocabulary table to trim", keys::EMBEDDING),
        ));
    }
    let tok = load_tokenizer(&tok_path)?;
    same_vocab(&g, &tok_path, &tok)?;
    let (mut corpus_check, mut text_check) = (None, None);
    let (p, asked) = prune_checked(
        &g,
        &tok_path,
        &tok,
        opts,
        (&mut corpus_check, &mut text_check),
    )?;
    let old_rows = g.tensor(keys::EMBEDDING).map_or(0, TensorInfo::rows);
    refuse_drop(g.path(), keys::EMBEDDING, old_rows, &p, &tok, opts)?;
    let kept: Vec<u64> = (0..p.map.len() as u64)
        .filter(|&i| p.map[i as usize].is_some())
        .collect();
    let mut plan = GgufOut::identity(&g);
    let tables = tables(&g, &mut plan, p.map.len() as u64, &kept)?;
    let merges = tokenizer_arrays(&mut plan, &g, &p)?;
    let new_rows = kept.len() as u64;
    let keys = moved_ids(&mut plan, &g, &p.map, new_rows)?;
    let written = match opts.dry_run {
        true => None,
        false => Some(write_all(&plan, out, &map_path, &p.map, &inputs)?),
    };
    Ok(GgufReport {
        input: input.to_path_buf(),
        format: crate::formats::gguf::LAYOUT,
        output: written.as_ref().map(|w| w.path.clone()),
        tokenizer: tok_path,
        old_tokens: p.map.len() as u64,
        old_rows,
        new_rows,
        kept_tokens: new_rows,
        dropped_tokens: p.map.len() as u64 - new_rows,
        dropped_padding_rows: old_rows.saturating_sub(p.map.len() as u64),
        asked,
        kept_beyond: beyond(&p),
        tied: g.tensor(keys::HEAD).is_none(),
        tables,
        merges,
        keys,
        corpus_check,
        text_check,
        map_file: map_path,
        dry_run: opts.dry_run,
        written,
        row_map: kept_rows(&kept, old_rows, g.path()),
    })
}

/// The kept old rows in order as a row map (None only if an id lies past the table, which the
/// pruning cannot give).
fn kept_rows(kept: &[u64], old_rows: u64, input: &Path) -> Option<RowMap> {
    let ids: Vec<Option<u64>> = kept.iter().map(|&i| Some(i)).collect();
    RowMap::from_ids(&ids, old_rows, input).ok()
}

/// The run's [`Plan`]: each table gathered by the row map in its own ggml type; the header
/// keys it moves are the report's `keys`, the map file beside the output its `map_file`.
pub fn to_plan(r: &GgufReport, input: &Path, output: &Path) -> Plan {
    let mut plan = Plan::new("trim-vocab", input, output, r.format, r);
    let tables = r.tables.iter().map(|t| Gathered {
        tensor: &t.name,
        role: if t.name == keys::EMBEDDING {
            Role::Embedding
        } else {
            Role::Head
        },
        from: &t.old_shape,
        to: &t.new_shape,
        tied: &[],
    });
    plan.push_gathered(r.row_map.as_ref(), tables, []);
    plan
}

/// Write the GGUF (verified by the writer) and then the map file beside it.
fn write_all(
    plan: &GgufOut,
    out: &Path,
    map_path: &Path,
    map: &[Option<u32>],
    inputs: &[&Path],
) -> Result<Written> {
    let new_rows = map.iter().flatten().count() as u64;
    let written = write_gguf(plan, out)?;
    let bytes = files::map_file(map, new_rows);
    output::write_bytes(map_path, inputs, &bytes, |tmp| {
        let back = std::fs::read(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
        serde_json::from_slice::<serde_json::Value>(&back)
            .map(|_| ())
            .map_err(|e| Error::format(tmp, e.to_string()))
    })?;
    Ok(written)
}

/// The human report.
pub fn render(r: &GgufReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}): {} tokens, {} → {} rows: {} tokens kept, {} dropped ({} padding rows dropped){}",
        r.input.display(),
        r.format,
        r.old_tokens,
        r.old_rows,
        r.new_rows,
        r.kept_tokens,
        r.dropped_tokens,
        r.dropped_padding_rows,
        if r.tied { "; tied head" } else { "" }
    );
    let a = &r.asked;
    let beyond: Vec<String> = r
        .kept_beyond
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(
        s,
        "  asked: {} from the corpus, {} by script, {} listed, {} special ids of the header{}",
        a.corpus,
        a.script,
        a.list,
        a.config,
        match beyond.is_empty() {
            true => String::new(),
            false => format!("; kept with them: {}", beyond.join(", ")),
        }
    );
    for t in &r.tables {
        let _ = writeln!(
            s,
            "  {} {} {:?} → {:?}: {} rows, {} bytes saved (rows copied, not requantized)",
            t.name, t.ggml_type, t.old_shape, t.new_shape, t.rows_saved, t.bytes_saved
        );
    }
    if let Some([before, after]) = r.merges {
        let _ = writeln!(s, "  merges: {before} → {after}");
    }
    for k in &r.keys {
        let _ = writeln!(s, "  {k}");
    }
    render_checks(&mut s, (r.corpus_check.as_ref(), r.text_check.as_ref()));
    match &r.written {
        None => s.push_str("dry run: nothing written\n"),
        Some(w) => {
            let _ = writeln!(
                s,
                "wrote {} ({} bytes) and {}",
                w.path.display(),
                w.bytes,
                r.map_file.display()
            );
        }
    }
    s
}
