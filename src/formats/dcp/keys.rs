//! What a torch Distributed Checkpoint's flattened keys mean: model weights, their optimizer
//! moments, the vocabulary among them. Knowledge the DCP jobs and inspect share (no job).

use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, Item, ItemKind};
use crate::formats::vocabulary::{self as interface, Entry};
use crate::plan::Role;
use crate::vocab::{self, Detection};

/// An item's global shape, for tensors.
pub fn shape(item: &Item) -> Option<&[u64]> {
    match &item.kind {
        ItemKind::Tensor { shape, .. } => Some(shape),
        ItemKind::Bytes { .. } => None,
    }
}

/// The parameter an optimizer-state key belongs to and the state's name:
/// `optim.state.tok_embeddings.weight.exp_avg` → (`tok_embeddings.weight`, `exp_avg`).
pub fn state_of(fqn: &str) -> Option<(&str, &str)> {
    let (_, rest) = fqn.split_once(".state.")?;
    let (param, moment) = rest.rsplit_once('.')?;
    Some((param, moment))
}

/// Is this key optimizer state (`….state.…` or `….param_groups.…`)?
pub fn is_optimizer(fqn: &str) -> bool {
    state_of(fqn).is_some() || fqn.contains(".param_groups.")
}

/// The model weight a parameter name of the optimizer state refers to: `model.<param>`
/// (`get_state_dict` under a "model" key) or `<param>` itself (torchtitan flattens the model
/// to the top level).
pub fn weight_of<'a>(dcp: &'a Dcp, param: &str) -> Option<&'a Item> {
    dcp.item(&format!("model.{param}"))
        .or_else(|| dcp.item(param))
        .filter(|i| !is_optimizer(&i.fqn))
}

/// The optimizer states with one row per row of `weight` (same shape): the moments.
pub fn moments_of<'a>(dcp: &'a Dcp, weight: &'a Item) -> impl Iterator<Item = &'a Item> {
    dcp.items.iter().filter(move |i| {
        state_of(&i.fqn)
            .is_some_and(|(param, _)| weight_of(dcp, param).is_some_and(|w| w.fqn == weight.fqn))
            && shape(i).is_some_and(|s| !s.is_empty())
    })
}

/// The vocabulary matrices among the model's tensors (optimizer state excluded).
pub fn vocabulary(dcp: &Dcp) -> Detection {
    vocab::detect(
        dcp.items
            .iter()
            .filter(|i| !is_optimizer(&i.fqn))
            .filter_map(|i| Some((i.fqn.as_str(), shape(i)?))),
    )
}

/// The interface's answer for a DCP folder: each vocabulary matrix, then each of its moments
/// (optimizer state with one row per row of the weight). Refused: no vocabulary, an ambiguous
/// one, or a moment that is not per-row (its trailing shape is not its weight's).
pub fn entries(d: &Dcp) -> Result<Vec<(&Item, Entry)>> {
    let det = vocabulary(d);
    if det.vocabulary.is_none() {
        let what = if det.ambiguous.is_empty() {
            "no vocabulary matrix found among the model's tensors".to_string()
        } else {
            let groups: Vec<String> = det.ambiguous.iter().map(|g| g.rows.to_string()).collect();
            format!(
                "vocabulary is ambiguous (candidate row counts {})",
                groups.join(", ")
            )
        };
        return Err(Error::format(&d.dir, what));
    }
    let mut out = Vec::new();
    for w in interface::weights(&det) {
        let item = d
            .item(&w.tensor)
            .ok_or_else(|| Error::format(&d.dir, format!("no tensor '{}'", w.tensor)))?;
        let moments: Vec<&Item> = moments_of(d, item).collect();
        for m in &moments {
            let mshape = shape(m).unwrap_or(&[]);
            if mshape.get(1..) != w.shape.get(1..) {
                return Err(Error::tensor(
                    d.dir.join(crate::formats::dcp::METADATA),
                    &m.fqn,
                    format!(
                        "moment is {mshape:?} but its weight '{}' is {:?}: not a per-row moment; refusing",
                        w.tensor, w.shape
                    ),
                ));
            }
        }
        let moments: Vec<(&Item, Entry)> = moments
            .into_iter()
            .map(|m| {
                let e = Entry::state(&m.fqn, Role::Moment, shape(m).unwrap_or(&[]), &w.tensor);
                (m, e)
            })
            .collect();
        out.push((item, w));
        out.extend(moments);
    }
    Ok(out)
}
