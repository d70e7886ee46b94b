//! What a Megatron `torch_dist` folder's DCP items mean: the vocabulary matrices and their
//! tensor-parallel row chunks, and which of the distributed optimizer's layouts holds its state.

use super::common::Common;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Chunk, Dcp, ItemKind, METADATA};
use std::collections::BTreeSet;

/// The vocabulary matrices of a Megatron GPT model, with their roles.
pub const VOCAB: [(&str, &str); 2] = [
    ("embedding.word_embeddings.weight", "embedding"),
    ("output_layer.weight", "head"),
];

/// One tensor-parallel rank's rows of a vocabulary matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowChunk {
    /// Rows `start..end` of the global matrix.
    pub start: u64,
    pub end: u64,
    /// The data file holding it.
    pub file: String,
}

/// A vocabulary matrix: its global shape and its row chunks, one per tensor-parallel rank, in
/// row order.
#[derive(Debug, Clone)]
pub struct VocabTensor {
    pub name: &'static str,
    pub role: &'static str,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub chunks: Vec<RowChunk>,
}

/// Which of the distributed optimizer's checkpoint layouts holds the optimizer state, and what
/// it holds.
#[derive(Debug, Clone, Default)]
pub struct Optimizer {
    /// Megatron's name for the layout (`dp_reshardable`, `fully_reshardable`,
    /// `fully_sharded_model_space`, `dp_zero_gather_scatter`); None when no optimizer state.
    pub form: Option<String>,
    /// Where the form was read: `common.pt` or the item names.
    pub source: &'static str,
    /// The state kept per parameter (`param` is the fp32 main copy; `exp_avg`, `exp_avg_sq`).
    pub states: Vec<String>,
    /// Model-parallel groups (TP x PP) with their own buckets (`dp_group_idx_N`), for the flat
    /// bucket layout.
    pub groups: u64,
    /// The optimizer's tensors.
    pub tensors: Vec<String>,
}

/// Every tensor's chunks must tile it: the reader checked each lies inside and that they hold
/// as many elements as the tensor; no two may overlap.
pub fn check_tiling(dcp: &Dcp) -> Result<()> {
    for it in &dcp.items {
        let ItemKind::Tensor { chunks, shape, .. } = &it.kind else {
            continue;
        };
        for (i, a) in chunks.iter().enumerate() {
            if let Some(b) = chunks[i + 1..].iter().find(|b| overlap(a, b)) {
                return Err(Error::format(
                    dcp.dir.join(METADATA),
                    format!(
                        "'{}': chunks at {:?} and {:?} overlap, so the chunks do not tile the tensor {shape:?}: the metadata is corrupt (a rank's plan from another save?)",
                        it.fqn, a.offsets, b.offsets
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn overlap(a: &Chunk, b: &Chunk) -> bool {
    (0..a.offsets.len()).all(|d| {
        a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d]
    }) && a.elements() > 0
        && b.elements() > 0
}

/// A rows x hidden item's chunks as whole-width slabs of rows, in row order, tiling it from row
/// 0 (as Megatron's tensor parallelism splits a vocabulary); else why not.
fn row_slabs(
    name: &str,
    shape: &[u64],
    chunks: &[Chunk],
) -> std::result::Result<Vec<RowChunk>, String> {
    let mut rows: Vec<RowChunk> = Vec::with_capacity(chunks.len());
    let mut sorted: Vec<&Chunk> = chunks.iter().collect();
    sorted.sort_by_key(|c| c.offsets[0]);
    for c in sorted {
        let at = rows.last().map_or(0, |r| r.end);
        if c.offsets[1] != 0 || c.sizes[1] != shape[1] || c.offsets[0] != at {
            return Err(format!("'{name}' {shape:?}: the chunk at {:?} of size {:?} is not the whole-width slab of rows from {at}: its chunks do not tile it by rows as Megatron's tensor parallelism splits a vocabulary", c.offsets, c.sizes));
        }
        rows.push(RowChunk {
            start: at,
            end: at + c.sizes[0],
            file: c.stored.file.clone(),
        });
    }
    Ok(rows)
}

/// The vocabulary matrices present and the tensor-parallel size their row chunks show (each
/// rank holds a whole-width slab of rows; every matrix split alike); none: `(vec![], 0)`.
pub fn vocabulary(dcp: &Dcp) -> Result<(Vec<VocabTensor>, u64)> {
    let md = dcp.dir.join(METADATA);
    let mut out = Vec::new();
    for (name, role) in VOCAB {
        let Some(it) = dcp.item(name) else { continue };
        let ItemKind::Tensor {
            dtype,
            shape,
            chunks,
        } = &it.kind
        else {
            return Err(Error::format(&md, format!("'{name}' is not a tensor")));
        };
        if shape.len() != 2 {
            return Err(Error::format(
                &md,
                format!("'{name}' has shape {shape:?}, not rows x hidden"),
            ));
        }
        let rows = row_slabs(name, shape, chunks).map_err(|why| Error::format(&md, why))?;
        out.push(VocabTensor {
            name,
            role,
            dtype: *dtype,
            shape: shape.clone(),
            chunks: rows,
        });
    }
    let Some(first) = out.first() else {
        return Ok((out, 0));
    };
    let tp = first.chunks.len() as u64;
    if let Some(v) = out.iter().find(|v| v.chunks.len() as u64 != tp) {
        return Err(Error::format(
            &md,
            format!("'{}' is split into {tp} row chunks but '{}' into {}: the vocabulary matrices must share one tensor-parallel split", first.name, v.name, v.chunks.len()),
        ));
    }
    Ok((out, tp))
}

/// The distributed optimizer's layout, from `common.pt` when it says and else from the item
/// names; the two must agree.
pub fn optimizer(dcp: &Dcp, common: Option<&Common>) -> Result<Optimizer> {
    let tensors: Vec<&str> = dcp
        .items
        .iter()
        .filter(|i| matches!(i.kind, ItemKind::Tensor { .. }) && i.fqn.starts_with("optimizer."))
        .map(|i| i.fqn.as_str())
        .collect();
    let mut states = BTreeSet::new();
    let mut groups = BTreeSet::new();
    let mut inferred = None;
    for fqn in &tensors {
        if let Some(rest) = fqn.strip_prefix("optimizer.distributed.dp_group_idx_") {
            if let (Some((group, _)), Some((_, state))) =
                (rest.split_once('.'), rest.rsplit_once('.'))
            {
                groups.insert(group.to_string());
                if rest.contains(".bucket_idx_") {
                    states.insert(state.to_string());
                    inferred = Some("dp_reshardable");
                }
            }
        } else if let Some(rest) = fqn.strip_prefix("optimizer.state.") {
            if let Some((state, _)) = rest.split_once('.') {
                states.insert(state.to_string());
                inferred.get_or_insert("fully_sharded_model_space");
            }
        }
    }
    let stated = common.and_then(|c| c.sharding_type.clone());
    let model_space = ["fully_sharded_model_space", "fully_reshardable"];
    if let (Some(s), Some(i)) = (&stated, inferred) {
        let agree = s == i || (model_space.contains(&s.as_str()) && model_space.contains(&i));
        if !agree {
            return Err(Error::format(
                dcp.dir.join(super::common::COMMON),
                format!("says the optimizer state is '{s}' but the tensors are laid out as '{i}': the folder mixes two saves"),
            ));
        }
    }
    let source = if stated.is_some() {
        "common.pt"
    } else {
        "item names"
    };
    Ok(Optimizer {
        form: stated.or(inferred.map(str::to_string)),
        source,
        states: states.into_iter().collect(),
        groups: groups.len() as u64,
        tensors: tensors.into_iter().map(str::to_string).collect(),
    })
}

/// Megatron's name for the layout that keeps every parameter's optimizer state in model space
/// (`sharded_param_state_fully_reshardable`): items `optimizer.state.STATE.NAME`, each laid out
/// (shape and chunks) as the weight `NAME`.
pub const FULLY_RESHARDABLE: &str = "fully_reshardable";

/// The states a `fully_reshardable` save may hold: the fp32 main copy (`param`, or
/// `fp32_param` with a precision-aware optimizer) and Adam's moments.
const MODEL_SPACE_STATES: [&str; 4] = ["param", "fp32_param", "exp_avg", "exp_avg_sq"];

/// Whether a model-space state is the main copy of the weights (its new rows are the new
/// weights; a moment's are zero).
pub fn is_main_copy(state: &str) -> bool {
    matches!(state, "param" | "fp32_param")
}

/// One vocabulary matrix's state in the `fully_reshardable` layout.
#[derive(Debug, Clone)]
pub struct VocabState {
    /// The weight it belongs to (`output_layer.weight`).
    pub weight: &'static str,
    /// `param`, `exp_avg`, …
    pub state: String,
    /// The item: `optimizer.state.STATE.WEIGHT`.
    pub fqn: String,
    pub dtype: DType,
    /// Its weight's shape, and its own.
    pub shape: Vec<u64>,
}

impl VocabState {
    /// Its row-surgery entry: a main copy (its new rows made as its weight's) or a moment (new
    /// rows zero).
    pub fn entry(&self) -> crate::plan::Entry {
        let role = if is_main_copy(&self.state) {
            crate::plan::Role::MasterCopy
        } else {
            crate::plan::Role::Moment
        };
        crate::plan::Entry::state(&self.fqn, role, &self.shape, self.weight)
    }
}

/// Every state of every vocabulary matrix in a `fully_reshardable` save, each a float tensor
/// of its weight's shape cut into the same row chunks; a state not of Adam's, or a matrix
/// missing one of the states the others hold, is refused (`why`: the fix to name).
pub fn vocab_states(
    dcp: &Dcp,
    vocab: &[VocabTensor],
    o: &Optimizer,
    why: &str,
) -> Result<Vec<VocabState>> {
    let md = dcp.dir.join(METADATA);
    if let Some(s) = o
        .states
        .iter()
        .find(|s| !MODEL_SPACE_STATES.contains(&s.as_str()))
    {
        return Err(Error::unsupported(
            &md,
            format!("its {FULLY_RESHARDABLE} optimizer state holds '{s}', not one of Adam's states ({}): what its new rows should hold is unknown; {why}", MODEL_SPACE_STATES.join(", ")),
        ));
    }
    if let Some(a) = states_apart(dcp, o).first() {
        return Err(Error::unsupported(
            &md,
            format!("its {FULLY_RESHARDABLE} optimizer state '{}' is {:?} but its weight '{}' is {:?}: the optimizer state does not follow the weights; {why}", a.fqn, a.shape, a.weight, a.weight_shape),
        ));
    }
    let mut out = Vec::new();
    for v in vocab {
        for state in &o.states {
            let fqn = format!("optimizer.state.{state}.{}", v.name);
            let Some(ItemKind::Tensor {
                dtype,
                shape,
                chunks,
            }) = dcp.item(&fqn).map(|i| &i.kind)
            else {
                return Err(Error::unsupported(
                    &md,
                    format!("its {FULLY_RESHARDABLE} optimizer state holds '{state}' but no tensor '{fqn}' for '{}': the optimizer state does not follow the weights; {why}", v.name),
                ));
            };
            // Cut as its weight: the same whole-width row slabs (checked once the shapes agree).
            let span = |c: &RowChunk| (c.start, c.end);
            let same_cut = || {
                row_slabs(&fqn, shape, chunks)
                    .is_ok_and(|s| s.iter().map(span).eq(v.chunks.iter().map(span)))
            };
            if *shape != v.shape || !same_cut() || !dtype.is_convertible_float() {
                return Err(Error::unsupported(
                    &md,
                    format!("'{fqn}' is {dtype} {shape:?} in {} chunks, its weight '{}' {:?} in {} row chunks: the optimizer state is not laid out as its weight; {why}", chunks.len(), v.name, v.shape, v.chunks.len()),
                ));
            }
            out.push(VocabState {
                weight: v.name,
                state: state.clone(),
                fqn,
                dtype: *dtype,
                shape: shape.clone(),
            });
        }
    }
    Ok(out)
}

/// A `fully_reshardable` state whose shape is not its weight's.
#[derive(Debug, Clone)]
pub struct StateApart<'a> {
    pub fqn: &'a str,
    pub shape: &'a [u64],
    pub weight: &'a str,
    pub weight_shape: &'a [u64],
}

/// Every model-space state (`optimizer.state.STATE.NAME`) whose weight `NAME` is a tensor of
/// another shape: Megatron's loader asks for each state at its parameter's shape.
pub fn states_apart<'a>(dcp: &'a Dcp, o: &'a Optimizer) -> Vec<StateApart<'a>> {
    let shape = |fqn: &str| match dcp.item(fqn).map(|i| &i.kind) {
        Some(ItemKind::Tensor { shape, .. }) => Some(shape.as_slice()),
        _ => None,
    };
    let mut out = Vec::new();
    for fqn in &o.tensors {
        let weight = fqn
            .strip_prefix("optimizer.state.")
            .and_then(|r| r.split_once('.'));
        let Some((_, weight)) = weight else { continue };
        if let (Some(s), Some(w)) = (shape(fqn), shape(weight)) {
            if s != w {
                out.push(StateApart {
                    fqn,
                    shape: s,
                    weight,
                    weight_shape: w,
                });
            }
        }
    }
    out
}
