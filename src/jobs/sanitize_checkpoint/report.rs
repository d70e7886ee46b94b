//! What sanitize-checkpoint answers: the report (findings, what changed, what was written) as
//! `--json` prints it, and its human rendering.

use super::options::{OptimizerAction, SchedulerAction};
pub use crate::formats::torch::optimizer::matching::SameShape;
use crate::formats::Format;
use crate::output::folder::{Carried, Left};
use crate::output::json_text::EditedFile;
use crate::output::manifest::FileManifest;
use crate::ties::{self, Tie};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// A shape found where another was expected.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub tensor: String,
    pub expected_rows: u64,
    pub found_shape: Vec<u64>,
    /// Optimizer state (a moment), not a model weight.
    pub optimizer_state: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub tensor: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// Optimizer state: the value its new rows got (0; Adagrad's `sum`: its group's
    /// `initial_accumulator_value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NonFinite {
    pub tensor: String,
    pub nan: u64,
    pub inf: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OptimizerReport {
    pub key: String,
    pub action: OptimizerAction,
    pub param_groups: usize,
    pub params: usize,
    /// Optimizer parameter index → model tensor, for the vocabulary parameters whose index the
    /// checkpoint establishes.
    pub vocabulary_params: Vec<(u64, String)>,
    /// Vocabulary parameters of one shape whose indices nothing tells apart (same edit): the
    /// indices and the names, each in some order, never a mapping.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub same_shape: Vec<SameShape>,
    /// How the indices were matched: `param_names`, `position`, or `shape` (with what the
    /// moments say, or why nothing orders a set).
    pub matched_by: String,
    pub repaired: Vec<Resized>,
    /// The repaired moments' edits, as the torch optimizer's entries gave them (the plan's).
    #[serde(skip)]
    pub edits: Vec<crate::plan::Edit>,
    /// Per-parameter state entries left byte-identical.
    pub kept_state_entries: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    pub model_key: String,
    /// The model's tied names (one storage): one parameter for the optimizer, grown once.
    pub ties: Vec<Tie>,
    pub old_rows: u64,
    pub target_rows: u64,
    pub freeze_until_index: u64,
    /// What did not fit before: each tensor, the rows expected, the shape found.
    pub inconsistent_before: Vec<Finding>,
    pub model_changed: Vec<Resized>,
    /// Every optimizer found (Lightning's `optimizer_states` may hold several).
    pub optimizers: Vec<OptimizerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<(String, SchedulerAction)>,
    pub nonfinite: Vec<NonFinite>,
    pub warnings: Vec<String>,
    pub dry_run: bool,
    /// True when --fail-on-nonfinite found NaN/Inf: nothing was written, exit 1.
    pub failed: bool,
    /// A checkpoint folder's files carried into the output folder, and how.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// Files of the checkpoint folder not carried, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    /// A folder's JSON files written as edits (config.json's vocabulary size, the merged
    /// tokenizer's tokens in tokenizer_config.json) and what changed in each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<EditedFile>,
    /// Every tensor of the output with its dtype and shape, from the plan (`--dry-run --json`
    /// prints it before anything is written): a file's tensors by their dotted paths; a Trainer
    /// folder's weights by their names and its optimizer.pt's by their dotted paths.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<PlannedTensor>,
    pub manifest: Vec<FileManifest>,
}

/// One tensor of the planned output.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: crate::dtype::DType,
    pub shape: Vec<u64>,
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, model under '{}', vocabulary {} rows → target {}",
        r.input.display(),
        r.format.name(),
        r.model_key,
        r.old_rows,
        r.target_rows
    );
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
    render_before(&mut s, r);
    for c in &r.model_changed {
        let _ = writeln!(
            s,
            "model: {} {:?} → {:?}",
            c.tensor, c.old_shape, c.new_shape
        );
    }
    for o in &r.optimizers {
        render_optimizer(&mut s, o);
    }
    if let Some((k, a)) = &r.scheduler {
        let _ = writeln!(
            s,
            "scheduler '{k}': {}",
            if *a == SchedulerAction::Drop {
                "dropped"
            } else {
                "kept"
            }
        );
    }
    for n in &r.nonfinite {
        let _ = writeln!(
            s,
            "non-finite: {} has {} NaN, {} Inf",
            n.tensor, n.nan, n.inf
        );
    }
    let _ = writeln!(s, "freeze_until_index: {}", r.freeze_until_index);
    render_outcome(&mut s, r);
    s
}

/// What did not fit the target before.
fn render_before(s: &mut String, r: &Report) {
    if r.inconsistent_before.is_empty() {
        let _ = writeln!(s, "before: consistent with the target");
        return;
    }
    let _ = writeln!(
        s,
        "before: {} tensors do not fit {} rows:",
        r.inconsistent_before.len(),
        r.target_rows
    );
    for f in &r.inconsistent_before {
        let _ = writeln!(s, "  {} {:?}", f.tensor, f.found_shape);
    }
}

/// One optimizer: its parameters, then what was done to it.
fn render_optimizer(s: &mut String, o: &OptimizerReport) {
    let mut map: Vec<String> = o
        .vocabulary_params
        .iter()
        .map(|(i, n)| format!("param {i} = {n}"))
        .collect();
    map.extend(o.same_shape.iter().map(SameShape::describe));
    let map = if map.is_empty() {
        "no vocabulary parameter".to_string()
    } else {
        map.join(", ")
    };
    // A dropped optimizer is not matched: nothing to say about its parameters.
    let how = if o.action == OptimizerAction::Drop {
        String::new()
    } else {
        format!("; {map} (matched by {})", o.matched_by)
    };
    let _ = writeln!(
        s,
        "optimizer '{}': {} groups, {} params{how}",
        o.key, o.param_groups, o.params
    );
    match o.action {
        OptimizerAction::Repair => {
            for c in &o.repaired {
                let _ = writeln!(
                    s,
                    "  repaired {} {:?} → {:?} ({})",
                    c.tensor,
                    c.old_shape,
                    c.new_shape,
                    repaired_rows(c)
                );
            }
            let _ = writeln!(s, "  kept byte-identical: the state of {} other parameters, step counts, param_groups", o.kept_state_entries);
        }
        OptimizerAction::Drop => {
            let _ = writeln!(
                s,
                "  dropped (with the scheduler): the training script starts a fresh optimizer"
            );
        }
        OptimizerAction::Keep => {
            let _ = writeln!(s, "  kept as it was");
        }
    }
}

/// What a repaired moment's rows became: cut, or new rows at their fill.
fn repaired_rows(c: &Resized) -> String {
    let rows = |v: &[u64]| v.first().copied().unwrap_or(0);
    if rows(&c.new_shape) < rows(&c.old_shape) {
        return "rows past the target cut".to_string();
    }
    match c.fill {
        Some(f) if f != 0.0 => format!("new rows at {f}, its group's initial_accumulator_value"),
        _ => "new rows at 0".to_string(),
    }
}

/// Files carried, warnings, and whether (and what) anything was written.
fn render_outcome(s: &mut String, r: &Report) {
    s.push_str(&crate::output::json_text::render(&r.edited));
    s.push_str(&crate::output::folder::render_carried(
        &r.carried,
        &r.left_out,
    ));
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    if r.failed {
        let _ = writeln!(
            s,
            "failed: non-finite values found (--fail-on-nonfinite); nothing written"
        );
    } else if r.dry_run {
        let _ = writeln!(s, "dry run: nothing written");
    }
    for m in &r.manifest {
        let _ = writeln!(s, "{}", m.wrote());
    }
}
