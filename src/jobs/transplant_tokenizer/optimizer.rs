//! A training checkpoint's optimizer state follows the tokens: each vocabulary parameter's
//! moments are gathered by the same row map as its weights (a kept token's moments move to its
//! new id, new ids start at the optimizer's initial value, dropped ids' moments go). Which
//! optimizer index holds which parameter is the torch optimizer knowledge's answer
//! (`formats::torch::optimizer::matching`: by the names torch stored, else by shape and what
//! the moments show, refusing parameters of one shape that need different edits, such as a
//! position table shaped like the vocabulary that nothing tells apart); a state that holds the vocabulary size in a way that
//! cannot follow a row map (Adafactor's factored rows, anything unknown) is refused by name.

use super::report::Report;
use crate::error::{Error, Result};
use crate::formats::torch::optimizer::matching::{match_params, ModelParams};
use crate::formats::torch::optimizer::state::{
    follows, gathered_moment, initial_accumulator, is_optimizer, state_path, state_tensors,
    Follows, FoundOpt,
};
use crate::formats::torch::writer::TorchLayout;
use crate::formats::trainer::Trainer;
use crate::rowmap::RowMap;
use crate::ties;
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

/// The model's parameters as the optimizer holds them (a tie once) and the vocabulary ones.
fn params(t: &Trainer, r: &Report) -> (Vec<(String, Vec<u64>)>, Vec<String>) {
    let followers = ties::followers(&r.ties);
    let list = t
        .model
        .tensors()
        .filter(|x| !followers.contains_key(x.name))
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let vocab = r.changed.iter().map(|c| c.name.clone()).collect();
    (list, vocab)
}

/// optimizer.pt with every vocabulary parameter's state gathered by `map`, and what moved.
pub(super) fn plan<'t>(
    t: &'t Trainer,
    r: &Report,
    map: &RowMap,
    pinned: &[(String, u64)],
) -> Result<(TorchLayout<'t>, Vec<Moved>)> {
    let torch = t.optimizer()?;
    let optim = t.optim()?;
    let (p, path) = (&torch.pickle, t.optim_path.as_path());
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
    let (list, vocab) = params(t, r);
    let model = ModelParams {
        list: &list,
        vocab: &vocab,
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
            let Some(x) = optim.tensor(&tensor) else {
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
