//! What transplant-tokenizer says: the report (the plan's and the run's) and its human rendering.

use super::matching::Matching;
use crate::dtype::DType;
use crate::formats::Format;
use crate::output::folder::{Carried, Left};
use crate::output::json_text::{self, EditedFile};
use crate::output::manifest::FileManifest;
use crate::ties::{self, Tie};
use crate::vocab::Role;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// One changed tensor.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub name: String,
    pub role: Role,
    pub dtype: DType,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// Mean L2 norm of the old rows and of the made rows (2-D tensors with made rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_mean_row_norm: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_mean_row_norm: Option<f64>,
    /// The names tied to it: they get the same rows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
}

/// What the job did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    /// How `formats::open` saw the input, and whether it is a folder: for the Plan.
    #[serde(skip)]
    pub layout: (&'static str, bool),
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// The model's own tokenizer, matched against NEW.
    pub base_tokenizer: PathBuf,
    /// NEW, as given.
    pub tokenizer: PathBuf,
    pub old_rows: u64,
    pub new_rows: u64,
    /// Which row each new id takes: counts, role matches, dropped tokens.
    pub tokens: Matching,
    /// How rows of tokens the base lacks are made.
    pub init: String,
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_note: Option<String>,
    pub changed: Vec<Changed>,
    pub ties: Vec<Tie>,
    pub untouched_tensors: usize,
    /// Tokens whose subword-mean fell back to the column mean.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// `--init omp` / `knn`: the donor, the shared tokens, the pursuits, the tokens it lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub donor: Option<crate::rows::donor::DonorReport>,
    /// A training checkpoint's optimizer state tensors moved with their tokens.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub optimizer: Vec<crate::rows::moves::Moved>,
    /// The JSON files written as edits of the input's (config.json, generation_config.json,
    /// tokenizer_config.json, …) and what changed in each.
    pub edited: Vec<EditedFile>,
    /// The new tokenizer's files the output folder takes: (name, where from).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokenizer_sources: Vec<(String, PathBuf)>,
    /// Files of the input folder the plan leaves out on purpose (optimizer.pt with
    /// `--optimizer drop`), and why: the plan's `left-out` side files.
    #[serde(skip)]
    pub left_planned: Vec<(String, String)>,
    /// The row map every vocabulary tensor is gathered by (the Plan's edits carry it).
    #[serde(skip)]
    pub row_map: Option<crate::rowmap::RowMap>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub dry_run: bool,
    pub manifest: Vec<FileManifest>,
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let m = &r.tokens;
    let _ = writeln!(
        s,
        "{}: {}, {} → {} rows: the vocabulary of {}",
        r.input.display(),
        crate::formats::planned_name(r.format, r.layout.0),
        r.old_rows,
        r.new_rows,
        r.tokenizer.display()
    );
    let _ = writeln!(
        s,
        "  {} tokens the base has (rows copied bit for bit), {} by special role, {} made by {} ({} padding rows)",
        m.same_token,
        m.same_role.len(),
        m.made_rows,
        r.init,
        m.padding_rows
    );
    for rm in &m.same_role {
        let _ = writeln!(
            s,
            "  {}: new '{}' ({}) takes the row of '{}' ({})",
            rm.role, rm.new.token, rm.new.id, rm.base.token, rm.base.id
        );
    }
    if m.dropped_tokens + m.dropped_padding_rows > 0 {
        let first: Vec<String> = m
            .dropped_first
            .iter()
            .map(|t| format!("'{}'", t.token))
            .collect();
        let _ = writeln!(
            s,
            "  dropped: {} base tokens the new tokenizer lacks ({}{}), {} padding rows",
            m.dropped_tokens,
            first.join(", "),
            if m.dropped_tokens > first.len() as u64 {
                ", …"
            } else {
                ""
            },
            m.dropped_padding_rows
        );
    }
    render_outcome(&mut s, r);
    s
}

fn render_outcome(s: &mut String, r: &Report) {
    for c in &r.changed {
        let _ = write!(s, "  {} {:?} → {:?}", c.name, c.old_shape, c.new_shape);
        if let (Some(o), Some(n)) = (c.old_mean_row_norm, c.new_mean_row_norm) {
            let _ = write!(s, " (mean row norm: old {o:.4}, made {n:.4})");
        }
        let _ = writeln!(s);
    }
    for m in &r.optimizer {
        let _ = writeln!(
            s,
            "  optimizer {} {:?} → {:?}: moments follow their tokens, new ids {}",
            m.describe(),
            m.old_shape,
            m.new_shape,
            if m.master_copy {
                "the new weights".to_string()
            } else {
                m.fill.to_string()
            }
        );
    }
    for t in &r.ties {
        let _ = writeln!(s, "  {}", ties::render(t));
    }
    if let Some(d) = &r.donor {
        s.push_str(&crate::rows::donor::render(d, false));
    }
    if !r.fallbacks.is_empty() {
        let _ = writeln!(s, "  {} tokens fell back to the mean", r.fallbacks.len());
    }
    s.push_str(&json_text::render(&r.edited));
    if !r.tokenizer_sources.is_empty() {
        let names: Vec<&str> = r
            .tokenizer_sources
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let _ = writeln!(s, "  tokenizer: {}", names.join(", "));
    }
    for l in &r.left_out {
        let _ = writeln!(s, "  left out: {} ({})", l.name, l.why);
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    match (&r.output, r.dry_run) {
        (_, true) => s.push_str("dry run: nothing written\n"),
        (Some(o), false) => {
            let _ = writeln!(s, "wrote {}", o.display());
        }
        (None, false) => {}
    }
}

crate::rows::moves::planned_report!(Report);
