//! The keep set: the tokens a corpus uses (`--keep-corpus`, `--min-count`, `--keep-top`), the
//! tokens of some Unicode scripts (`--keep-script`), a list (`--keep-list`), and always every id
//! config.json and generation_config.json name and the tokens of the chat template's literal text.
//! What each family must keep beyond it (specials, bytes, merge closure) is the pruner's
//! (`tokenizer::trim`).

use super::options::Options;
use crate::error::{Error, Result};
use crate::tokenizer::base::Base;
use crate::tokenizer::chat_template::literals;
use crate::tokenizer::trim::{script_ids, CorpusPass};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How many ids each source asked to keep (before the pruner's additions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Asked {
    pub corpus: u64,
    pub script: u64,
    pub list: u64,
    pub config: u64,
    /// Ids the chat template's literal text uses (turn markers, role headers, the generation
    /// prompt), kept whatever --keep-top and --min-count say.
    pub template: u64,
    /// That text's pieces ([`crate::tokenizer::chat_template::literals`]), each tokenized alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub template_pieces: Vec<String>,
}

/// The ids to keep, and why.
pub(super) struct KeepSet {
    pub ids: Vec<u32>,
    pub asked: Asked,
    /// The ids the tokenizer uses ([`Base::size`]).
    pub size: u64,
}

/// The keep corpus's lines, then the chat templates' literal pieces (`templates`): the lines the
/// base encodes once ([`CorpusPass::with_always`], from the returned index on kept whole).
pub(super) fn corpus_and_templates(
    opts: &Options,
    templates: &[String],
) -> Result<(Vec<String>, usize)> {
    let mut lines = read_lines(&opts.keep_corpus)?;
    let corpus = lines.len();
    for t in templates {
        for piece in literals(t) {
            if !lines[corpus..].contains(&piece) {
                lines.push(piece);
            }
        }
    }
    Ok((lines, corpus))
}

/// The base's pass over `lines` (the corpus lines before `corpus`, the template's after), None
/// when there are none.
pub(super) fn corpus_pass<'l>(
    tok_path: &Path,
    (lines, corpus): (&'l [String], usize),
) -> Result<Option<CorpusPass<'l>>> {
    match lines.is_empty() {
        true => Ok(None),
        false => CorpusPass::with_always(tok_path, lines, corpus).map(Some),
    }
}

/// The lines of text files (blank lines included: the check skips them).
pub(super) fn read_lines(files: &[PathBuf]) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| Error::io(f, "read", e))?;
        lines.extend(text.lines().map(str::to_string));
    }
    Ok(lines)
}

/// The keep set of `opts` over the tokenizer at `path` (`tok`, loaded), with `named` the ids the
/// config files name and `pass` the tokenizer's pass over the keep corpus (None: no corpus).
pub(super) fn keep_set(
    path: &Path,
    tok: &Base,
    opts: &Options,
    named: &[u64],
    pass: Option<&CorpusPass>,
) -> Result<KeepSet> {
    if opts.keep_corpus.is_empty() && opts.keep_script.is_empty() && opts.keep_list.is_none() {
        return Err(Error::arg(
            "--keep-corpus",
            "say what to keep: --keep-corpus FILE (the tokens a corpus uses), --keep-script NAME, or --keep-list FILE",
        ));
    }
    let mut ids: BTreeSet<u32> = BTreeSet::new();
    let mut asked = Asked::default();
    if let Some(pass) = pass.filter(|_| !opts.keep_corpus.is_empty()) {
        let mut counted = pass.ids(opts.min_count.max(1));
        if counted.is_empty() {
            return Err(Error::format(
                &opts.keep_corpus[0],
                format!("no token of {} covers this corpus (at --min-count {}): is it the right corpus and tokenizer?", path.display(), opts.min_count.max(1)),
            ));
        }
        if let Some(n) = opts.keep_top {
            if n == 0 {
                return Err(Error::arg(
                    "--keep-top",
                    "--keep-top 0 keeps none of the corpus's tokens: give at least 1",
                ));
            }
            counted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            counted.truncate(n);
        }
        asked.corpus = counted.len() as u64;
        ids.extend(counted.into_iter().map(|(i, _)| i));
    }
    if !opts.keep_script.is_empty() {
        let scripts: Vec<&str> = opts.keep_script.iter().map(String::as_str).collect();
        let s = script_ids(path, &scripts)?;
        asked.script = s.len() as u64;
        ids.extend(s);
    }
    if let Some(list) = &opts.keep_list {
        let l = list_ids(list, tok)?;
        if l.is_empty() {
            return Err(Error::format(
                list,
                "--keep-list names no token (the file is empty): is it the right file?",
            ));
        }
        asked.list = l.len() as u64;
        ids.extend(l);
    }
    let size = tok.size();
    let named: Vec<u32> = named
        .iter()
        .filter(|&&i| i < size)
        .filter_map(|&i| u32::try_from(i).ok())
        .collect();
    asked.config = named.len() as u64;
    ids.extend(named);
    if let Some(pass) = pass {
        let template = pass.always_ids();
        asked.template = template.len() as u64;
        asked.template_pieces = pass.always_lines().to_vec();
        ids.extend(template);
    }
    Ok(KeepSet {
        ids: ids.into_iter().collect(),
        asked,
        size,
    })
}

/// `--keep-list`: one token per line, as the tokenizer writes it, or its id.
fn list_ids(list: &Path, tok: &Base) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(list).map_err(|e| Error::io(list, "read", e))?;
    let ids = tok.ids();
    let size = tok.size();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_end_matches(['\r', '\n']);
        if t.is_empty() {
            continue;
        }
        let id = match (ids.get(t), t.parse::<u64>()) {
            (Some(&i), _) => i,
            (None, Ok(i)) if i < size => i as u32,
            _ => {
                return Err(Error::arg(
                    "--keep-list",
                    format!(
                    "{} line {}: '{t}' is neither a token of the tokenizer nor an id below {size}",
                    list.display(),
                    n + 1
                ),
                ))
            }
        };
        out.push(id);
    }
    Ok(out)
}
