//! trim-vocab on a GGUF file (its mechanics `rows::layout::gguf::trim`'s). The tokenizer the file was made from (`--tokenizer`: tokenizer.json
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
use super::keep::{corpus_and_templates, corpus_pass, keep_set, Asked};
use super::options::Options;
use super::plan::{beyond, pruned, refuse_drop};
use super::report::render_checks;
use crate::error::{Error, Result};
use crate::output;
use crate::plan::{Gathered, Plan};
use crate::rowmap::RowMap;
pub use crate::rows::layout::gguf::trim::TrimmedTable;
use crate::rows::layout::gguf::trim::{
    chat_templates, named_ids, open, same_vocab, table_rows, tied, trim, Gguf, GgufAt, Trimmed,
    Written, EMBEDDING, LAYOUT,
};
use crate::tokenizer::base::{load_tokenizer, Base};
use crate::tokenizer::trim::{CorpusCheck, Pruned};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// The keep set, the pruned tokenizer and its checks (as for any other layout), the header's
/// token ids kept as a config's are.
fn prune_checked(
    g: &Gguf,
    tok_path: &Path,
    tok: &Base,
    opts: &Options,
    checks: (&mut Option<CorpusCheck>, &mut Option<CorpusCheck>),
) -> Result<(Pruned, Asked)> {
    let (corpus, n) = corpus_and_templates(opts, &chat_templates(g))?;
    let pass = corpus_pass(tok_path, (&corpus, n))?;
    let named = named_ids(g);
    let keep = keep_set(tok_path, tok, opts, &named, pass.as_ref())?;
    let (p, _) = pruned(tok_path, &keep, (&corpus, pass.as_ref()), opts, checks)?;
    Ok((p, keep.asked))
}

/// Trim the GGUF file `formats::open` found (`at`) into `out` (or plan it, `--dry-run`); the map file beside it.
/// The caller refused an `out` that overlaps the inputs.
pub fn run(at: &GgufAt, out: &Path, opts: &Options) -> Result<GgufReport> {
    let input = at.path();
    let tok_path = refuse_flags(input, opts)?;
    let inputs = opts.input_paths(input);
    let map_path = map_beside(out);
    if !opts.dry_run {
        output::folder::file_destination(out, &inputs, "GGUF", &["gguf"], opts.overwrite)?;
        output::folder::file_destination(&map_path, &inputs, "JSON", &["json"], opts.overwrite)?;
    }
    let g = open(at)?;
    let tok = load_tokenizer(&tok_path)?;
    same_vocab(g, &tok_path, &tok)?;
    let (mut corpus_check, mut text_check) = (None, None);
    let (p, asked) = prune_checked(
        g,
        &tok_path,
        &tok,
        opts,
        (&mut corpus_check, &mut text_check),
    )?;
    let old_rows = table_rows(g);
    refuse_drop(g.path(), EMBEDDING, old_rows, &p, &tok, opts)?;
    let trimmed = trim(g, &p)?;
    let new_rows = trimmed.kept.len() as u64;
    let written = match opts.dry_run {
        true => None,
        false => Some(write_all(&trimmed, out, &map_path, &p.map, &inputs)?),
    };
    Ok(GgufReport {
        input: input.to_path_buf(),
        format: LAYOUT,
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
        tied: tied(g),
        tables: trimmed.tables,
        merges: trimmed.merges,
        keys: trimmed.keys,
        corpus_check,
        text_check,
        map_file: map_path,
        dry_run: opts.dry_run,
        written,
        row_map: kept_rows(&trimmed.kept, old_rows, g.path()),
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
        role: t.role,
        from: &t.old_shape,
        to: &t.new_shape,
        tied: &[],
    });
    plan.push_gathered(r.row_map.as_ref(), tables, []);
    plan
}

/// Write the GGUF (verified by the writer) and then the map file beside it.
fn write_all(
    trimmed: &Trimmed<'_>,
    out: &Path,
    map_path: &Path,
    map: &[Option<u32>],
    inputs: &[&Path],
) -> Result<Written> {
    let new_rows = map.iter().flatten().count() as u64;
    let written = trimmed.write(out)?;
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
        "  asked: {} from the corpus, {} by script, {} listed, {} special ids of the header, {} by the chat template{}",
        a.corpus,
        a.script,
        a.list,
        a.config,
        a.template,
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
