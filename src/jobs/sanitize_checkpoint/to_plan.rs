//! sanitize-checkpoint's [`Plan`] for each layout (a torch file, a Trainer folder, a DCP folder,
//! a ZeRO save root): its dry run's report with every tensor it resizes and every file beside
//! the tensors it changes.

use super::report::Report;
use super::{dcp, zero};
use super::{Options, RowsFrom};
use crate::formats::vocabulary::Entry;
use crate::formats::Checkpoint;
use crate::output::folder::Left;
use crate::plan::{KeyChange, Plan, Role, SideEdit, SideWhat};
use crate::rowmap::RowMap;
use std::path::{Path, PathBuf};

/// A torch training file or a Trainer folder.
pub fn to_plan(r: &Report, ckpt: &Checkpoint, output: &Path, opts: &Options) -> Plan {
    let folder = matches!(ckpt, Checkpoint::Trainer(_));
    let mut plan = Plan::new("sanitize-checkpoint", ckpt.path(), output, ckpt.layout(), r);
    let init = opts.method.name();
    for c in &r.model_changed {
        let role = Role::of_tensor(&c.tensor, &c.old_shape);
        let entry = Entry::weight(&c.tensor, role, &c.old_shape);
        let rows = c.new_shape.first().copied().unwrap_or(0);
        plan.edits
            .push(entry.edit(&RowMap::append(entry.rows(), rows), &init));
    }
    for o in &r.optimizers {
        plan.edits.extend(o.edits.iter().cloned());
    }
    plan.edits.extend(r.removed.iter().cloned());
    if folder {
        plan.side_files = folder_side_files(r, output, opts);
    }
    plan
}

/// Files of the input the output leaves out on purpose, as the plan's side files.
pub fn left_out_files(left: &[Left]) -> Vec<SideEdit> {
    left.iter()
        .map(|l| SideEdit::left_out(&l.name, &l.why))
        .collect()
}

/// A Trainer folder's JSON edits (config.json's vocabulary size) and the tokenizer written into
/// it.
fn folder_side_files(r: &Report, output: &Path, opts: &Options) -> Vec<SideEdit> {
    let mut side: Vec<SideEdit> = r
        .edited
        .iter()
        .map(|f| SideEdit {
            file: f.file.strip_prefix(output).unwrap_or(&f.file).to_path_buf(),
            what: SideWhat::Keys {
                changes: f
                    .changes
                    .iter()
                    .map(|c| KeyChange::from_text(&c.key, c.old.as_deref(), c.new.as_deref()))
                    .collect(),
            },
        })
        .collect();
    side.extend(left_out_files(&r.left_out));
    if let RowsFrom::Tokenizer(tk) = &opts.target {
        let name = match tk.extension().and_then(|e| e.to_str()) {
            Some("model") => "tokenizer.model",
            _ => "tokenizer.json",
        };
        side.push(SideEdit {
            file: PathBuf::from(name),
            what: SideWhat::Replaced { from: tk.clone() },
        });
    }
    side
}

/// A DCP folder: the edits its planner took from the row-surgery interface, and a new
/// `.metadata`.
pub fn dcp_plan(r: &dcp::Report, output: &Path) -> Plan {
    let mut plan = Plan::new(
        "sanitize-checkpoint",
        &r.input,
        output,
        crate::formats::Format::TorchDcp.name(),
        r,
    );
    plan.edits = r.edits.clone();
    if !r.resized.is_empty() {
        plan.side_files.push(SideEdit {
            file: PathBuf::from(crate::rows::layout::dcp::METADATA),
            what: SideWhat::Written {
                why: "the resized tensors' chunks (old rows' chunks where they were, new rows in a new data file)".into(),
            },
        });
    }
    plan
}

/// A ZeRO save root: the edits its planner took from the row-surgery interface (each
/// parameter's module weight on stages 1 and 2, its fp32 master copy on every rank, its moments).
pub fn zero_plan(r: &zero::Report, output: &Path) -> Plan {
    let mut plan = Plan::new(
        "sanitize-checkpoint",
        &r.input,
        output,
        crate::rows::layout::zero::LAYOUT,
        r,
    );
    plan.edits = r.edits.clone();
    plan
}

/// A Megatron checkpoint (either layout): each entry the run resizes (the vocabulary matrices at
/// their global shapes, TP ranks' rows stacked; the legacy layout's moments and master copies)
/// to `rows` rows, new rows by `init` (moments 0), and `relaid`: the optimizer's other edits
/// (torch_dist's re-laid buckets, each holding many parameters' rows; with `--optimizer drop`
/// the optimizer tensors left out). `side`: files beside the tensors the run
/// rewrites (torch_dist's `common.pt` with the new padded size).
pub fn megatron_plan(
    r: &impl serde::Serialize,
    (input, output): (&Path, &Path),
    layout: &str,
    (entries, relaid): (&[Entry], &[crate::plan::Edit]),
    (rows, init): (u64, &str),
    side: Vec<SideEdit>,
) -> Plan {
    let mut plan = Plan::new("sanitize-checkpoint", input, output, layout, r);
    for entry in entries.iter().filter(|e| e.rows() != rows) {
        plan.edits
            .push(entry.edit(&RowMap::append(entry.rows(), rows), init));
    }
    plan.edits.extend(relaid.iter().cloned());
    plan.side_files = side;
    plan
}
