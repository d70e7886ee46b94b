//! The model's parameters as a `torch_dist` save lists them: its tensor items in `.metadata`
//! order, the stacked `decoder.layers.*` items expanded layer by layer, each with its elements
//! on one tensor-parallel rank (the order the distributed optimizer's buffers walk).

use super::rule::Param;
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind, METADATA};

/// The prefix of the items of a model's transformer layers, stacked by layer on their first
/// dimension (one chunk per layer and TP rank).
const LAYERS: &str = "decoder.layers.";

/// The word embeddings' item: with tied embeddings over pipeline stages, the last stage's
/// output layer is a copy of it (saved under this key as a replica, no item of its own).
pub const EMBEDDING: &str = "embedding.word_embeddings.weight";

/// The output layer's weight (a parameter of the last stage; with tied embeddings over
/// pipeline stages, the embedding's copy).
pub const OUTPUT: &str = "output_layer.weight";

/// The model's parameters in module order (the order of the model's items in `.metadata`,
/// the stacked layer items expanded layer by layer), each with its elements on one TP rank.
/// `tied`: the embedding is shared with the output layer over pipeline stages, so it is
/// `shared`, and the last stage's output layer, its copy, is one more shared parameter at the
/// end (named as the embedding, whose weights it holds).
pub fn params(dcp: &Dcp, tied: bool) -> Result<Vec<Param>> {
    let mut out = model_params(dcp)?;
    if tied {
        if let Some(e) = out.iter_mut().find(|p| p.fqn == EMBEDDING) {
            e.shared = true;
            let copy = e.clone();
            out.push(copy);
        }
    }
    Ok(out)
}

/// [`params`] as the items list them.
fn model_params(dcp: &Dcp) -> Result<Vec<Param>> {
    let md = dcp.dir.join(METADATA);
    let (mut before, mut layered, mut after) = (Vec::new(), Vec::new(), Vec::new());
    let mut layers = None;
    for it in dcp
        .items
        .iter()
        .filter(|i| !i.fqn.starts_with("optimizer."))
    {
        let ItemKind::Tensor { shape, chunks, .. } = &it.kind else {
            continue;
        };
        let per = chunks.first().map_or(0, |c| c.elements());
        if chunks.iter().any(|c| c.elements() != per) {
            return Err(Error::unsupported(&md, format!("'{}': its chunks differ in size, so one tensor-parallel rank's share (its place in the optimizer's buckets) is not known; the distributed optimizer's state cannot be resized", it.fqn)));
        }
        if it.fqn.starts_with(LAYERS) {
            let n = shape.first().copied().unwrap_or(0);
            let rows = chunks
                .first()
                .and_then(|c| c.sizes.first())
                .copied()
                .unwrap_or(1);
            if layers.is_some_and(|l| l != n) || rows == 0 {
                return Err(Error::unsupported(&md, format!("'{}': stacked over {n} layers unlike the other layer items: the layer order of the optimizer's buckets is not known", it.fqn)));
            }
            layers = Some(n);
            layered.push((it.fqn.clone(), per / rows));
        } else {
            let list = if layered.is_empty() {
                &mut before
            } else {
                &mut after
            };
            list.push(Param {
                fqn: it.fqn.clone(),
                layer: None,
                numel: per,
                shared: false,
            });
        }
    }
    let mut out = before;
    for l in 0..layers.unwrap_or(0) {
        out.extend(layered.iter().map(|(fqn, numel)| Param {
            fqn: fqn.clone(),
            layer: Some(l),
            numel: *numel,
            shared: false,
        }));
    }
    out.extend(after);
    Ok(out)
}
