//! A training checkpoint's optimizer state follows the tokens (a vocabulary transplanted or
//! trimmed): each vocabulary parameter's
//! moments are gathered by the same row map as its weights (a kept token's moments move to its
//! new id, new ids start at the optimizer's initial value, dropped ids' moments go). Which
//! optimizer index holds which parameter is the torch optimizer knowledge's answer
//! (`formats::torch::optimizer::matching`: by the names torch stored, else by shape and what
//! the moments show, refusing parameters of one shape that need different edits, such as a
//! position table shaped like the vocabulary that nothing tells apart); a state that holds the vocabulary size in a way that
//! cannot follow a row map (Adafactor's factored rows, anything unknown) is refused by name.

use super::matching::{match_params, ModelParams};
use super::state::{
    find_optimizers, gathered_moment, is_optimizer, state_entries, Follows, FoundOpt,
};
use crate::error::{Error, Result};
use crate::formats::tensor::TensorRef;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::rowmap::RowMap;
use serde::Serialize;
use std::path::Path;

/// One optimizer state tensor gathered.
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub tensor: String,
    pub of: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// The value of rows of new ids.
    pub fill: f64,
    /// A ZeRO parameter's fp32 master copy (its new ids' rows are the new weights', not `fill`);
    /// false for a moment.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub master_copy: bool,
}

impl Moved {
    /// Its entry in a row-map job's Plan: (tensor, role, old shape, new shape).
    pub fn plan_entry(&self) -> (&str, crate::plan::Role, &[u64], &[u64]) {
        let role = if self.master_copy {
            crate::plan::Role::MasterCopy
        } else {
            crate::plan::Role::Moment
        };
        (&self.tensor, role, &self.old_shape, &self.new_shape)
    }

    /// How the human reports name it: `state.0.exp_avg (of embed.weight)`; a ZeRO parameter's
    /// entries (named by the parameter) as its master copy or moments on every rank.
    pub fn describe(&self) -> String {
        if self.master_copy {
            format!("fp32 master copy of {} (every rank)", self.of)
        } else if self.tensor == self.of {
            format!("moments of {} (every rank)", self.of)
        } else {
            format!("{} (of {})", self.tensor, self.of)
        }
    }
}

/// The model as the optimizer holds it: every parameter (name, shape; a tie once, under its
/// first name) and the vocabulary parameters among them.
pub(crate) struct Params<'a> {
    pub list: &'a [(String, Vec<u64>)],
    pub vocab: &'a [String],
}

/// An optimizer file: its torch file, its tensors by name, its path.
pub(crate) type OptimizerFile<'t, 'f> = (
    &'t TorchFile,
    &'f dyn Fn(&str) -> Option<TensorRef<'t>>,
    &'f Path,
);

/// A bare optimizer state dict file (a Trainer folder's optimizer.pt: its torch file, its
/// tensors by name, its path) with every vocabulary parameter's state gathered by `map` (`pinned`:
/// optimizer indices the user named, `--optimizer-param`), and what moved.
pub(crate) fn gather_trainer<'t>(
    (torch, optim, path): OptimizerFile<'t, '_>,
    params: &Params<'_>,
    map: &RowMap,
    pinned: &[(String, u64)],
) -> Result<(TorchLayout<'t>, Vec<Moved>)> {
    let p = &torch.pickle;
    if !is_optimizer(p, p.root) {
        return Err(Error::format(
            path,
            "not an optimizer state dict ({\"state\": …, \"param_groups\": […]})",
        ));
    }
    let found = [FoundOpt::new(
        p,
        p.root,
        String::new(),
        (p.root, String::new()),
    )];
    let list = params.list;
    let model = ModelParams {
        list,
        vocab: params.vocab,
        prefix: "",
    };
    let matched = match_params(path, torch, &found, &model, false, pinned)?;
    let mut layout = TorchLayout::try_identity(torch)?;
    let file = (torch, optim, path);
    let moved = gather_matched(
        file,
        &found[0],
        &matched.mappings[0],
        list,
        map,
        &mut layout,
    )?;
    Ok((layout, moved))
}

/// A torch training checkpoint file (the model under `model_key`, its optimizers beside it:
/// `optimizer`, Lightning's `optimizer_states`, …) with every optimizer's vocabulary
/// parameters' state gathered by `map` into `layout` (the file's own tree, where the weights'
/// gathers go too); `drop`: the optimizers removed instead (a fresh optimizer). `params.list`
/// holds the model's names as the file has them (`model.…`).
pub(crate) fn gather_file<'t>(
    file: OptimizerFile<'t, '_>,
    model_key: &str,
    params: &Params<'_>,
    (map, pinned, drop): (&RowMap, &[(String, u64)], bool),
    layout: &mut TorchLayout<'t>,
) -> Result<Vec<Moved>> {
    let (torch, _, path) = file;
    let p = &torch.pickle;
    let found = find_optimizers(p, p.get(p.root, model_key));
    if drop {
        let mut dropped: Vec<&(crate::formats::torch::value::Id, String)> = Vec::new();
        for o in &found {
            if !dropped.contains(&&o.drop) {
                layout.pickle.remove_key(o.drop.0, &o.drop.1);
                dropped.push(&o.drop);
            }
        }
        return Ok(Vec::new());
    }
    let prefix = format!("{model_key}.");
    let model = ModelParams {
        list: params.list,
        vocab: params.vocab,
        prefix: &prefix,
    };
    let matched = match_params(path, torch, &found, &model, true, pinned)?;
    let mut moved = Vec::new();
    for (o, mapping) in found.iter().zip(&matched.mappings) {
        moved.extend(gather_matched(file, o, mapping, params.list, map, layout)?);
    }
    Ok(moved)
}

/// One optimizer's state of each matched vocabulary parameter gathered by `map` into `layout`.
fn gather_matched<'t>(
    (torch, optim, path): OptimizerFile<'t, '_>,
    o: &FoundOpt,
    mapping: &[(u64, String)],
    list: &[(String, Vec<u64>)],
    map: &RowMap,
    layout: &mut TorchLayout<'t>,
) -> Result<Vec<Moved>> {
    let p = &torch.pickle;
    let mut moved = Vec::new();
    let old_rows = map.old_rows();
    for (idx, name) in mapping {
        let shape = list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        let entries = state_entries(p, o, (*idx, name), &shape, &[old_rows])
            .map_err(|(tensor, s)| refusal(path, &tensor, name, &s, old_rows))?;
        for (e, how) in entries {
            if how != Follows::Rows || e.rows() != old_rows {
                return Err(refusal(path, &e.tensor, name, &e.shape, old_rows));
            }
            let Some(x) = optim(&e.tensor) else {
                continue;
            };
            let fill = e.fill.unwrap_or(0.0);
            let payload = gathered_moment(&x, map, fill)?;
            layout
                .replace_rows(torch, &e.tensor, map.new_rows(), payload)
                .map_err(|err| Error::format(path, err))?;
            let mut new_shape = e.shape.clone();
            new_shape[0] = map.new_rows();
            moved.push(Moved {
                tensor: e.tensor,
                of: name.clone(),
                old_shape: e.shape,
                new_shape,
                fill,
                master_copy: false,
            });
        }
    }
    Ok(moved)
}

fn refusal(path: &Path, tensor: &str, of: &str, shape: &[u64], rows: u64) -> Error {
    Error::tensor(
        path,
        tensor,
        format!(
            "optimizer state of {of} has shape {shape:?}, which holds the vocabulary size ({rows}) in a way a row map cannot move (factored or unknown); transplant the model folder inside and start the optimizer afresh"
        ),
    )
}
