//! What trim-vocab says: the report (the plan's and the run's) and its human rendering.

use super::keep::Asked;
use crate::dtype::DType;
use crate::formats::Format;
use crate::output::folder::{Carried, Left};
use crate::output::json_text::{self, EditedFile};
use crate::output::manifest::FileManifest;
use crate::rows::moves::Moved;
use crate::ties::{self, Tie};
use crate::tokenizer::trim::CorpusCheck;
use crate::vocab::Role;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// One trimmed tensor and what it saves.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub name: String,
    pub role: Role,
    pub dtype: DType,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    pub rows_saved: i64,
    pub bytes_saved: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
}

/// What the job did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    #[serde(skip)]
    pub layout: (&'static str, bool),
    /// The output is a folder (a model or Trainer folder, a sharded set's, a DeepSpeed run's):
    /// the trimmed tokenizer and the map file go into it.
    #[serde(skip)]
    pub folder_out: bool,
    /// Files of the input folder the plan leaves out on purpose (optimizer.pt with
    /// `--optimizer drop`), and why: the plan's `left-out` side files.
    #[serde(skip)]
    pub left_planned: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    pub tokenizer: PathBuf,
    pub old_rows: u64,
    pub new_rows: u64,
    /// Tokens kept and dropped (of the tokenizer's), padding rows dropped and added.
    pub kept_tokens: u64,
    pub dropped_tokens: u64,
    pub dropped_padding_rows: u64,
    pub padding_rows: u64,
    /// Ids each source asked to keep.
    pub asked: Asked,
    /// Tokens the pruner kept beyond them, by reason (merge closure, byte alphabet, specials, …).
    pub kept_beyond: BTreeMap<&'static str, u64>,
    pub changed: Vec<Changed>,
    pub ties: Vec<Tie>,
    /// The keep corpus and the chat template's literal pieces tokenized by the trimmed tokenizer:
    /// the same token strings, line by line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corpus_check: Option<CorpusCheck>,
    /// `--check-text`: text outside the keep set, checked for new unknown tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_check: Option<CorpusCheck>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub optimizer: Vec<Moved>,
    pub edited: Vec<EditedFile>,
    /// The map file (old id → new id) written with the output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    pub warnings: Vec<String>,
    pub dry_run: bool,
    pub manifest: Vec<FileManifest>,
    #[serde(skip)]
    pub row_map: Option<crate::rowmap::RowMap>,
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, {} → {} rows: {} tokens kept, {} dropped ({} padding rows dropped, {} added)",
        r.input.display(),
        crate::formats::planned_name(r.format, r.layout.0),
        r.old_rows,
        r.new_rows,
        r.kept_tokens,
        r.dropped_tokens,
        r.dropped_padding_rows,
        r.padding_rows
    );
    let a = &r.asked;
    let _ = write!(
        s,
        "  asked: {} from the corpus, {} by script, {} listed, {} named by the config, {} by the chat template",
        a.corpus, a.script, a.list, a.config, a.template
    );
    let beyond: Vec<String> = r
        .kept_beyond
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if !beyond.is_empty() {
        let _ = write!(s, "; kept with them: {}", beyond.join(", "));
    }
    let _ = writeln!(s);
    for c in &r.changed {
        let _ = writeln!(
            s,
            "  {} {:?} → {:?}: {} rows, {} bytes saved",
            c.name, c.old_shape, c.new_shape, c.rows_saved, c.bytes_saved
        );
    }
    for t in &r.ties {
        let _ = writeln!(s, "  {}", ties::render(t));
    }
    render_checks(&mut s, (r.corpus_check.as_ref(), r.text_check.as_ref()));
    for m in &r.optimizer {
        let _ = writeln!(
            s,
            "  optimizer {} {:?} → {:?}",
            m.describe(),
            m.old_shape,
            m.new_shape
        );
    }
    s.push_str(&json_text::render(&r.edited));
    for l in &r.left_out {
        let _ = writeln!(s, "  left out: {} ({})", l.name, l.why);
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    match (&r.output, r.dry_run) {
        (_, true) => s.push_str("dry run: nothing written\n"),
        (Some(o), false) => {
            let _ = writeln!(s, "wrote {}", o.display());
        }
        (None, false) => {}
    }
    s
}

crate::rows::moves::planned_report!(Report);

/// The report lines of the corpus check on the keep corpus and on `--check-text`.
pub(super) fn render_checks(
    s: &mut String,
    (corpus, text): (Option<&CorpusCheck>, Option<&CorpusCheck>),
) {
    for (what, c) in [("keep corpus", corpus), ("check text", text)] {
        if let Some(c) = c {
            let _ = writeln!(
                s,
                "  {what}: {} lines, {} tokens: {} lines split differently, {} with new unknown tokens",
                c.lines, c.tokens, c.mismatches, c.new_unknown
            );
        }
    }
}
