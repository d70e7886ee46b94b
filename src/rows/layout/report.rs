//! What sanitize-checkpoint answers for a torch training checkpoint file or a Trainer folder: the
//! report (findings, what changed, what was written) as `--json` prints it. Its rendering is the
//! job's.

use super::options::{OptimizerAction, SchedulerAction};
pub use crate::formats::torch::optimizer::matching::SameShape;
use crate::formats::Format;
use crate::output::folder::{Carried, Left};
use crate::output::json_text::EditedFile;
use crate::output::manifest::FileManifest;
use crate::ties::Tie;
use serde::Serialize;
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
    /// The tensors the output leaves out (a dropped optimizer's state, a dropped scheduler's
    /// tensors), as the plan's `removed` edits.
    #[serde(skip)]
    pub removed: Vec<crate::plan::Edit>,
}

/// One tensor of the planned output.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: crate::dtype::DType,
    pub shape: Vec<u64>,
}
