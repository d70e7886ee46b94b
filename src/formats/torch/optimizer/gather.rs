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
    follows, gathered_moment, initial_accumulator, is_optimizer, state_path, state_tensors,
    Follows, FoundOpt,
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
    let mut moved = Vec::new();
    let old_rows = map.old_rows();
    for (idx, name) in &matched.mappings[0] {
        let shape = list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        let fill_sum = initial_accumulator(p, p.root, *idx);
        for (mname, s) in state_tensors(p, p.root, *idx) {
            let tensor = state_path("", *idx, &mname);
            match follows(&s, &shape, &[old_rows]) {
                Follows::No => continue,
                Follows::Rows if s.first() == Some(&old_rows) => {}
                _ => return Err(refusal(path, &tensor, name, &s, old_rows)),
            }
            let Some(x) = optim(&tensor) else {
                continue;
            };
            let fill = if mname == "sum" { fill_sum } else { 0.0 };
            let payload = gathered_moment(&x, map, fill)?;
            layout
                .replace_rows(torch, &tensor, map.new_rows(), payload)
                .map_err(|e| Error::format(path, e))?;
            let mut new_shape = s.clone();
            new_shape[0] = map.new_rows();
            moved.push(Moved {
                tensor,
                of: name.clone(),
                old_shape: s,
                new_shape,
                fill,
            });
        }
    }
    Ok((layout, moved))
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
