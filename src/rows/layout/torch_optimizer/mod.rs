//! The torch optimizer's planning that sanitize-checkpoint's file and Trainer-folder layouts
//! share ([`checks`]: findings and the rules that stop a write): the model's parameters as
//! an optimizer holds them, the target rows, matching optimizer indices to parameters, the
//! optimizer's report, and the repair of the matched moments in a torch plan.

pub(crate) mod checks;

use super::options::{OptimizerAction, Options, RowsFrom};
use super::report::{OptimizerReport, PlannedTensor, Resized};
use crate::error::{Error, Result};
use crate::formats::torch::optimizer::matching::{match_params, Matched, ModelParams, SameShape};
use crate::formats::torch::optimizer::state::{
    resize_filled_segments, state_entries, FoundOpt, Mapping, DROP_REMEDY,
};
use crate::formats::torch::value::Pickle;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::formats::{self, OpenOptions, Tensors};
use crate::plan::Role as PlanRole;
use crate::rowmap::RowMap;
use crate::rows::{self, InitOptions};
use crate::ties::{self, Tie};
use std::path::{Path, PathBuf};

/// The model's tensors as an optimizer holds them: a tie is one parameter, under its first name.
pub(super) struct Parameters {
    /// (name, shape) of each parameter, in the weights' order.
    pub list: Vec<(String, Vec<u64>)>,
    /// The vocabulary tensors' parameters, each once (a tied head is its embedding's).
    pub vocab: Vec<String>,
}

impl Parameters {
    pub fn new(model: &[(String, Vec<u64>)], vocab_names: &[String], ties: &[Tie]) -> Self {
        let tied_to = ties::followers(ties);
        let list = model
            .iter()
            .filter(|(n, _)| !tied_to.contains_key(n))
            .cloned()
            .collect();
        let mut vocab: Vec<String> = Vec::new();
        for n in vocab_names {
            let r = tied_to.get(n).unwrap_or(n);
            if !vocab.contains(r) {
                vocab.push(r.clone());
            }
        }
        Parameters { list, vocab }
    }

    /// A parameter's shape (empty when it is none of them).
    pub fn shape(&self, name: &str) -> Vec<u64> {
        self.list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
}

/// A target below the weights' rows cuts trained rows: refused without `--allow-shrink`
/// (moments are cut to their weights' rows freely; that never comes here).
pub(super) fn refuse_cut(
    path: &Path,
    v: &crate::vocab::Vocabulary,
    target: u64,
    opts: &Options,
) -> Result<()> {
    for t in &v.tensors {
        crate::rows::refuse_weight_cut(path, &t.name, v.rows, target, opts.allow_shrink)?;
    }
    Ok(())
}

/// The target rows (`--vocab-rows`, a tokenizer's, or a new model's), adding what is read to
/// `inputs` (outputs never overwrite them).
pub(super) fn target_rows(opts: &Options, inputs: &mut Vec<PathBuf>) -> Result<u64> {
    let target = match &opts.target {
        RowsFrom::Rows(n) => *n,
        RowsFrom::Tokenizer(tk) => {
            inputs.push(tk.clone());
            rows::tokenizer_rows(tk)?
        }
        RowsFrom::Model(m) => {
            inputs.push(m.clone());
            rows_of(m, &opts.open)?
        }
    };
    if target == 0 {
        // `--vocab-rows 0`, or a tokenizer or model that has no rows.
        return Err(match &opts.target {
            RowsFrom::Rows(_) => Error::arg("--vocab-rows", "target of 0 rows"),
            RowsFrom::Tokenizer(p) | RowsFrom::Model(p) => Error::format(p, "target of 0 rows"),
        });
    }
    Ok(target)
}

fn rows_of(path: &Path, open: &OpenOptions) -> Result<u64> {
    let ckpt =
        formats::open(path, open)?.into_tensors_for("--model", "its weights' file or folder")?;
    let sel = crate::formats::vocabulary::select_with_logits_bias(&ckpt, &[])?;
    sel.first()
        .and_then(|(n, _)| ckpt.tensor(n))
        .map(|t| t.shape[0])
        .ok_or_else(|| Error::format(path, "no vocabulary matrix found in the new model"))
}

/// The report of optimizer `k` of the matched ones: only the mappings the checkpoint establishes
/// are listed as such; a set of one shape nothing orders is listed as a set.
pub(super) fn optimizer_report(
    p: &Pickle,
    (k, o): (usize, &FoundOpt),
    m: &Matched,
    action: OptimizerAction,
) -> OptimizerReport {
    let same_shape = m.same_shape.get(k).cloned().unwrap_or_default();
    let known = |(i, _): &&(u64, String)| !same_shape.iter().any(|s| s.params.contains(i));
    OptimizerReport {
        key: o.key.clone(),
        action,
        param_groups: o.groups.len(),
        params: o.params.len(),
        vocabulary_params: m
            .mappings
            .get(k)
            .map(|v| v.iter().filter(known).cloned().collect())
            .unwrap_or_default(),
        same_shape,
        matched_by: m.how.clone(),
        repaired: Vec::new(),
        edits: Vec::new(),
        kept_state_entries: p
            .get(o.id, "state")
            .and_then(|s| p.dict_entries(s))
            .map_or(0, |e| e.len()),
    }
}

/// Grow (or truncate) every state tensor of the matched vocabulary parameters in the plan, as
/// the torch optimizer's entries say (`state_entries`): new rows at the optimizer's initial value;
/// a state that holds the vocabulary size some other way is refused by name. Each one's edit is
/// added to the report's `edits`. `file`: the pickle, the torch file and the checkpoint holding
/// the state.
#[allow(clippy::too_many_arguments)]
pub(super) fn repair<'a>(
    input: &Path,
    file: (&Pickle, &TorchFile, &'a Tensors),
    o: &FoundOpt,
    mapping: &Mapping,
    param_shape: &dyn Fn(&str) -> Vec<u64>,
    row_counts: &[u64],
    target: u64,
    segments: u64,
    plan: &mut TorchLayout<'a>,
    rep: &mut OptimizerReport,
) -> Result<()> {
    let (p, t, ckpt) = file;
    for (idx, name) in mapping {
        let ps = param_shape(name);
        let entries = state_entries(p, o, (*idx, name), &ps, row_counts).map_err(|(path, shape)| {
            Error::tensor(
                input,
                &path,
                format!(
                    "optimizer state of {} {ps:?} has shape {shape:?}, which holds the vocabulary size in a way this tool does not know how to grow (please report the optimizer); {DROP_REMEDY}",
                    SameShape::owner(&rep.same_shape, *idx, name)
                ),
            )
        })?;
        for (e, _) in entries {
            let Some(x) = ckpt.tensor(&e.tensor) else {
                continue;
            };
            if x.shape.first() == Some(&target) {
                continue;
            }
            let edit = e.edit(&RowMap::append(e.rows(), target), "");
            let fill = e.fill.unwrap_or(0.0);
            let payload = resize_filled_segments(&x, target, fill, segments)?;
            plan.replace_rows(t, &e.tensor, target, payload)
                .map_err(|err| Error::format(input, err))?;
            rep.repaired.push(Resized {
                tensor: e.tensor,
                old_shape: edit.from.clone(),
                new_shape: edit.to.clone(),
                fill: Some(fill),
            });
            rep.edits.push(edit);
        }
        rep.kept_state_entries = rep.kept_state_entries.saturating_sub(1);
    }
    Ok(())
}

/// The role of a torch optimizer's tensor that `--optimizer drop` leaves out (its `removed`
/// edit): Megatron's fp32 master copies (`fp32_from_fp16_params`) `master-copy`; per-parameter
/// state with rows (`of_state`: it lies in the optimizer's `state`; Adam's moments, SGD's
/// momentum) `moment`; anything else (Adam's 0-d `step`, a scheduler's tensors) `other`.
pub(crate) fn dropped_role(path: &str, shape: &[u64], of_state: bool) -> PlanRole {
    if path.contains("fp32_from_fp16_params") {
        PlanRole::MasterCopy
    } else if of_state && !shape.is_empty() {
        PlanRole::Moment
    } else {
        PlanRole::Other
    }
}

/// The tensors a torch plan will write, by their dotted paths.
pub(super) fn planned_tensors(input: &Path, plan: &TorchLayout<'_>) -> Result<Vec<PlannedTensor>> {
    let p = &plan.pickle;
    let paths = formats::torch::tensor_paths(p).map_err(|e| Error::format(input, e))?;
    Ok(paths
        .into_iter()
        .filter_map(|t| {
            p.tensor_of(t.node).map(|n| PlannedTensor {
                name: t.path,
                dtype: n.storage.dtype,
                shape: n.shape.clone(),
            })
        })
        .collect())
}

/// The optimizers' vocabulary parameters: matched (by names, position when `by_position`, or
/// shape), or nothing to match when the optimizer is dropped or there is none.
pub(super) fn matched(
    input: &Path,
    t: &TorchFile,
    found: &[FoundOpt],
    params: &Parameters,
    prefix: &str,
    by_position: bool,
    opts: &Options,
) -> Result<Matched> {
    // Dropping needs no matching (and must work when matching would be ambiguous).
    if opts.optimizer == OptimizerAction::Drop || found.is_empty() {
        return Ok(Matched {
            mappings: vec![Vec::new(); found.len()],
            same_shape: vec![Vec::new(); found.len()],
            how: "not needed (dropped)".to_string(),
            all: Vec::new(),
        });
    }
    let m = ModelParams {
        list: &params.list,
        vocab: &params.vocab,
        prefix,
    };
    match_params(input, t, found, &m, by_position, &opts.optimizer_params)
}

/// How the model's new rows are made: the same init and seed as extend-embeddings, its other
/// parameters at their defaults, the tokenizer the target rows come from.
pub(super) fn init_options(opts: &Options) -> InitOptions {
    InitOptions {
        tokenizer: match &opts.target {
            RowsFrom::Tokenizer(tk) => Some(tk.clone()),
            _ => None,
        },
        ..InitOptions::new(opts.method.clone(), opts.seed)
    }
}
