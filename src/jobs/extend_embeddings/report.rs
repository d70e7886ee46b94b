//! What extend-embeddings says: the report (the plan's and the run's), every output tensor's
//! action, and the human rendering.

use super::donor;
use crate::dtype::DType;
use crate::formats::{Format, Tensors};
use crate::model::config::ConfigChange;
use crate::output::folder::{self, Carried, Left};
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
    /// Mean L2 norm of the old rows and of the new rows (2-D tensors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_mean_row_norm: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_mean_row_norm: Option<f64>,
    /// The names tied to it (same storage, or same bytes): they get the same new rows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
}

/// One segment (codebook) of a segmented matrix: its old rows, where they are now, and its new
/// rows, as half-open ranges.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentMap {
    pub segment: u64,
    pub old: [u64; 2],
    pub now: [u64; 2],
    pub new_rows: [u64; 2],
}

pub(super) fn segment_map(n: u64, old_rows: u64, new_rows: u64) -> Vec<SegmentMap> {
    if n <= 1 || !old_rows.is_multiple_of(n) || !new_rows.is_multiple_of(n) {
        return Vec::new();
    }
    let (s, s2) = (old_rows / n, new_rows / n);
    (0..n)
        .map(|c| SegmentMap {
            segment: c,
            old: [c * s, (c + 1) * s],
            now: [c * s2, c * s2 + s],
            new_rows: [c * s2 + s, (c + 1) * s2],
        })
        .collect()
}

/// What the job did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    /// How `formats::open` saw the input (`Checkpoint::layout`), and whether it is a folder: for
    /// the Plan, not printed in the report.
    #[serde(skip)]
    pub layout: (&'static str, bool),
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    pub old_rows: u64,
    pub new_rows: u64,
    /// Rows 0..freeze_until_index are the old ones: what a training script freezes (without
    /// --segments; with them, see `segments`).
    pub freeze_until_index: u64,
    /// --segments: where each segment's rows went (`old_id = c·S + j` → `c·S' + j`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<SegmentMap>,
    pub init: String,
    /// Where the new rows were computed (`cpu`, `cuda (sm_90)`), and why when not as asked.
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_note: Option<String>,
    pub changed: Vec<Changed>,
    /// Ties among the changed tensors (see [`crate::ties`]): the names after the first follow it.
    pub ties: Vec<Tie>,
    pub untouched_tensors: usize,
    /// New tokens whose subword-mean fell back to the column mean.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// `--init omp`: the donor, the shared tokens, the pursuits and the tokens the donor lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub donor: Option<donor::DonorReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    pub config_changes: Vec<ConfigChange>,
    /// The JSON files written as edits of the input's (config.json, tokenizer_config.json,
    /// special_tokens_map.json) and what changed in each: every other value is as it was.
    pub edited: Vec<EditedFile>,
    /// The merged tokenizer written into the output folder (`--tokenizer`, folder inputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// Files of the input folder carried into the output folder, and how.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// Files of the input folder not carried, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    pub warnings: Vec<String>,
    /// What was chosen for the user (a folder's own tokenizer as the base's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The checkpoint already has the target rows: nothing was written.
    pub nothing_to_do: bool,
    pub dry_run: bool,
    /// Every tensor of the output, in the input's order, and what the run does to it: the plan
    /// (`--dry-run --json` prints it before anything is written).
    pub tensors: Vec<PlannedTensor>,
    pub manifest: Vec<FileManifest>,
}

/// One tensor of the output and how it is made.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// `copy` (bytes as they are), `grow` (old rows kept, new rows by the init) or `tied` (the
    /// same new rows as `follows`).
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follows: Option<String>,
}

/// Every tensor of the checkpoint with its action and output shape.
pub(super) fn planned_tensors(
    ckpt: &Tensors,
    ties: &[Tie],
    changed: &[Changed],
    new_rows: u64,
) -> Vec<PlannedTensor> {
    let followers = ties::followers(ties);
    ckpt.tensors()
        .map(|t| {
            let name = t.name().to_string();
            let grown = changed.iter().any(|c| c.name == name);
            let follows = followers.get(&name).map(|f| f.to_string());
            let mut shape = t.shape.to_vec();
            if grown || follows.is_some() {
                shape[0] = new_rows;
            }
            let action = match (&follows, grown) {
                (Some(_), _) => "tied",
                (None, true) => "grow",
                (None, false) => "copy",
            };
            PlannedTensor {
                name,
                dtype: t.dtype,
                shape,
                action,
                follows,
            }
        })
        .collect()
}

/// The human report.
pub fn render(r: &Report) -> String {
    render_verbose(r, false)
}

/// The human report; with `verbose`, also what is long (the donor init's decompositions).
pub fn render_verbose(r: &Report, verbose: bool) -> String {
    let mut s = String::new();
    render_changed(&mut s, r);
    render_rows(&mut s, r);
    render_sources(&mut s, r, verbose);
    render_outcome(&mut s, r);
    s
}

/// The first line, the device, and each changed tensor with its norms and ties.
fn render_changed(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "{}: {}, {} → {} rows, init {}",
        r.input.display(),
        r.format.name(),
        r.old_rows,
        r.new_rows,
        r.init
    );
    if let Some(n) = &r.device_note {
        let _ = writeln!(s, "info: device {}: {n}", r.device);
    } else if r.device != "cpu" {
        let _ = writeln!(s, "device: {}", r.device);
    }
    for c in &r.changed {
        let norms = match (c.old_mean_row_norm, c.new_mean_row_norm) {
            (Some(a), Some(b)) => format!("; mean row norm old {a:.4}, new {b:.4}"),
            _ => String::new(),
        };
        let tied = if c.tied.is_empty() {
            String::new()
        } else {
            format!(" (tied: {})", c.tied.join(", "))
        };
        let _ = writeln!(
            s,
            "  {} ({:?}) {} {:?} → {:?}{norms}{tied}",
            c.name, c.role, c.dtype, c.old_shape, c.new_shape
        );
    }
}

/// The untouched count and where the old rows are: freeze_until_index, or each segment's map.
fn render_rows(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "untouched tensors: {} (copied byte for byte)",
        r.untouched_tensors
    );
    if r.segments.is_empty() {
        let _ = writeln!(s, "freeze_until_index: {}", r.freeze_until_index);
        return;
    }
    let (s0, s1) = (
        r.segments[0].old[1] - r.segments[0].old[0],
        r.segments[0].new_rows[1] - r.segments[0].now[0],
    );
    let _ = writeln!(
        s,
        "{} segments of {s0} → {s1} rows: old id c·{s0} + j is now c·{s1} + j",
        r.segments.len()
    );
    for m in &r.segments {
        let _ = writeln!(
            s,
            "  segment {}: rows {}..{} → {}..{}, new rows {}..{}",
            m.segment, m.old[0], m.old[1], m.now[0], m.now[1], m.new_rows[0], m.new_rows[1]
        );
    }
}

/// Where the new rows and the side files came from: fallbacks, the donor, config.json, ties,
/// the tokenizer, the folder's other files.
fn render_sources(s: &mut String, r: &Report, verbose: bool) {
    if !r.fallbacks.is_empty() {
        let _ = writeln!(
            s,
            "subword-mean fell back to the mean for {} tokens: {}",
            r.fallbacks.len(),
            r.fallbacks.join(" ")
        );
    }
    if let Some(d) = &r.donor {
        s.push_str(&donor::render(d, verbose));
    }
    // The config's changes are listed with the other edited files; said here when none.
    if let Some(c) = r.config.as_ref().filter(|_| r.config_changes.is_empty()) {
        let _ = writeln!(s, "config: {} (no vocabulary key found)", c.display());
    }
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
    if let Some(t) = &r.tokenizer {
        let _ = writeln!(s, "tokenizer: {}", t.display());
    }
    s.push_str(&json_text::render(&r.edited));
    s.push_str(&folder::render_carried(&r.carried, &r.left_out));
}

/// Notes, warnings, and what was written (or why nothing was).
fn render_outcome(s: &mut String, r: &Report) {
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    if r.nothing_to_do {
        let _ = writeln!(
            s,
            "nothing to do: the checkpoint already has {} rows; nothing written",
            r.old_rows
        );
    } else if r.dry_run {
        let _ = writeln!(s, "dry run: nothing written");
    }
    for m in &r.manifest {
        let _ = writeln!(s, "{}", m.wrote());
    }
}
