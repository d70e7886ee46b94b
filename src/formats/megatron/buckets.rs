//! The distributed optimizer's `dp_reshardable` buckets: which chunk of a bucket is which
//! parameter. Nothing in the checkpoint names it; it follows from the model's parameter order
//! and megatron-core 0.16.1's `_ParamAndGradBuffer` rule (parameters in reverse order, each start
//! rounded up to 64 elements, one chunk per parameter and per alignment gap). [`buckets`] derives
//! that layout and proves it against EVERY chunk of every state of every bucket and against the
//! saved `per_bucket_numel_unpadded`; anything it cannot prove is refused by name.

use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind, METADATA};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Node, Pickle};

/// `_pad_start_of_param_if_needed`: with the distributed optimizer each parameter starts at a
/// multiple of 64 elements.
pub const ALIGN: u64 = 64;

/// The per-bucket states of Adam in the `dp_reshardable` layout (`param`: the fp32 main copy).
pub const STATES: [&str; 3] = ["param", "exp_avg", "exp_avg_sq"];

/// The prefix of the items of a model's transformer layers, stacked by layer on their first
/// dimension (one chunk per layer and TP rank).
const LAYERS: &str = "decoder.layers.";

/// One parameter of the model, in the module's order: its item, its layer (for the stacked
/// `decoder.layers.*` items) and its elements on one tensor-parallel rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub fqn: String,
    pub layer: Option<u64>,
    pub numel: u64,
}

/// One piece of a bucket: a parameter's elements (`param`: its index in [`params`]'s list) or
/// an alignment gap (None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub len: u64,
    pub param: Option<usize>,
}

/// One bucket of one data-parallel group, its layout proven.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// `optimizer.distributed.dp_group_idx_N.gbuf_idx_0.dtype_(…).bucket_idx_0`: each state's
    /// item is this plus `.param`, `.exp_avg`, `.exp_avg_sq`.
    pub prefix: String,
    /// N of `dp_group_idx_N`: the model-parallel rank (the TP rank when PP = 1).
    pub group: u64,
    pub segments: Vec<Segment>,
    /// The bucket's elements before its end padding (`per_bucket_numel_unpadded`).
    pub unpadded: u64,
}

/// The model's parameters in module order (the order of the model's items in `.metadata`,
/// the stacked layer items expanded layer by layer), each with its elements on one TP rank.
pub fn params(dcp: &Dcp) -> Result<Vec<Param>> {
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
            });
        }
    }
    let mut out = before;
    for l in 0..layers.unwrap_or(0) {
        out.extend(layered.iter().map(|(fqn, numel)| Param {
            fqn: fqn.clone(),
            layer: Some(l),
            numel: *numel,
        }));
    }
    out.extend(after);
    Ok(out)
}

/// `_ParamAndGradBuffer`'s layout of `params` in one bucket: walked in reverse, each start
/// rounded up to [`ALIGN`], a gap segment before it where that moved it; and the bucket's
/// unpadded length.
pub fn lay_out(params: &[Param]) -> (Vec<Segment>, u64) {
    let mut segs = Vec::new();
    let mut at: u64 = 0;
    for (i, p) in params.iter().enumerate().rev().filter(|(_, p)| p.numel > 0) {
        let start = at.next_multiple_of(ALIGN);
        if start > at {
            segs.push(Segment {
                start: at,
                len: start - at,
                param: None,
            });
        }
        segs.push(Segment {
            start,
            len: p.numel,
            param: Some(i),
        });
        at = start + p.numel;
    }
    (segs, at)
}

/// The first of `chunks` ((offset, length), sorted) that is not the derived segment at its
/// place (or the place of a segment no chunk is at): its index.
pub fn first_mismatch(chunks: &[(u64, u64)], segs: &[Segment]) -> Option<usize> {
    let n = chunks.len().max(segs.len());
    (0..n).find(|&i| match (chunks.get(i), segs.get(i)) {
        (Some(&(o, l)), Some(s)) => o != s.start || l != s.len,
        _ => true,
    })
}

/// Every `dp_reshardable` bucket of `dcp`, its chunks proven to be [`lay_out`] of [`params`]
/// for all three states, its length the saved `per_bucket_numel_unpadded`.
pub fn buckets(dcp: &Dcp) -> Result<Vec<Bucket>> {
    let params = params(dcp)?;
    let (segments, unpadded) = lay_out(&params);
    let mut out: Vec<Bucket> = Vec::new();
    for it in &dcp.items {
        let Some((prefix, _)) = STATES
            .iter()
            .find_map(|s| Some((it.fqn.strip_suffix(&format!(".{s}"))?, s)))
        else {
            continue;
        };
        let Some(group) = group_of(prefix) else {
            continue;
        };
        let ItemKind::Tensor { chunks, .. } = &it.kind else {
            continue;
        };
        if !prefix.contains(".gbuf_idx_0.") || !prefix.ends_with(".bucket_idx_0") {
            return Err(Error::unsupported(dcp.dir.join(METADATA), format!("'{}': a second buffer or bucket (several param dtypes, or bucket_size splitting the parameters): only one buffer of one bucket per group is derived so far", it.fqn)));
        }
        let mut got: Vec<(u64, u64)> = chunks
            .iter()
            .map(|c| (c.offsets.first().copied().unwrap_or(0), c.elements()))
            .collect();
        got.sort_unstable();
        if let Some(i) = first_mismatch(&got, &segments) {
            return Err(disagrees(dcp, &it.fqn, &got, &segments, &params, i));
        }
        if !out.iter().any(|b| b.prefix == prefix) {
            out.push(Bucket {
                prefix: prefix.to_string(),
                group,
                segments: segments.clone(),
                unpadded,
            });
        }
    }
    for b in &out {
        check_unpadded(dcp, b)?;
    }
    Ok(out)
}

/// `optimizer.distributed.dp_group_idx_N.…` → N.
fn group_of(prefix: &str) -> Option<u64> {
    let rest = prefix.strip_prefix("optimizer.distributed.dp_group_idx_")?;
    rest.split('.').next()?.parse().ok()
}

/// The refusal of bucket `fqn` whose chunk `i` is not the derived layout's.
fn disagrees(
    dcp: &Dcp,
    fqn: &str,
    got: &[(u64, u64)],
    segs: &[Segment],
    params: &[Param],
    i: usize,
) -> Error {
    let chunk = got.get(i).map_or("no chunk".to_string(), |(o, l)| {
        format!("the chunk at {o} of {l} elements")
    });
    let want = segs.get(i).map_or("no segment".to_string(), |s| {
        let what =
            s.param
                .and_then(|p| params.get(p))
                .map_or("an alignment gap".to_string(), |p| {
                    format!(
                        "'{}'{}",
                        p.fqn,
                        p.layer.map(|l| format!(" layer {l}")).unwrap_or_default()
                    )
                });
        format!("{what} at {} of {} elements", s.start, s.len)
    });
    Error::unsupported(
        dcp.dir.join(METADATA),
        format!("'{fqn}': {chunk} (chunk {i}) is not what the model's parameter order gives ({want}; megatron-core's rule: parameters in reverse order, starts aligned to {ALIGN}): which chunk is which parameter cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out"),
    )
}

/// The saved `per_bucket_numel_unpadded` of `b`'s group must hold `b`'s derived length.
fn check_unpadded(dcp: &Dcp, b: &Bucket) -> Result<()> {
    let key = format!(
        "optimizer.distributed.dp_group_idx_{}.per_bucket_numel_unpadded",
        b.group
    );
    let saved = per_bucket_numel(dcp, &key)?;
    if saved != [b.unpadded] {
        return Err(Error::unsupported(
            dcp.dir.join(METADATA),
            format!("'{key}' holds {saved:?} but the model's parameter order gives one bucket of {} elements: the bucket layout cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out", b.unpadded),
        ));
    }
    Ok(())
}

/// The numbers of a `per_bucket_numel*` sharded object (`[[{(dtype, dtype): [n, …]}]]`, one
/// dict per model chunk), read from its DCP byte item (`KEY/shard_0_1`).
pub fn per_bucket_numel(dcp: &Dcp, key: &str) -> Result<Vec<u64>> {
    let (p, path, _) = object_pickle(dcp, key)?;
    let bad = || {
        Error::format(&path, format!("'{key}' is not [[{{(dtype, dtype): [numel, …]}}]]: not megatron-core's per-bucket sizes"))
    };
    let ints = numel_list(&p).ok_or_else(bad)?;
    ints.iter()
        .map(|&id| match p.node(id) {
            Node::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        })
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(bad)
}

/// The list of numbers inside `[[{key: [n, …]}]]`, when that is the pickle's shape with one
/// model chunk of one buffer.
pub fn numel_list(p: &Pickle) -> Option<Vec<crate::formats::torch::value::Id>> {
    let one = |id| match p.node(id) {
        Node::List(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    };
    let d = one(one(p.root)?)?;
    let entries = p.dict_entries(d)?;
    let [(_, list)] = entries else { return None };
    match p.node(*list) {
        Node::List(v) => Some(v.clone()),
        _ => None,
    }
}

/// The pickle of the sharded object `key` (its DCP byte item `KEY/shard_…`, a `torch.save`
/// archive), the data file it is in and the item's name.
pub fn object_pickle(dcp: &Dcp, key: &str) -> Result<(Pickle, std::path::PathBuf, String)> {
    let md = dcp.dir.join(METADATA);
    let it = dcp
        .items
        .iter()
        .find(|i| {
            i.fqn
                .strip_prefix(key)
                .is_some_and(|r| r.starts_with("/shard_"))
        })
        .ok_or_else(|| {
            Error::format(
                &md,
                format!("no '{key}': the distributed optimizer's per-bucket sizes are missing"),
            )
        })?;
    let ItemKind::Bytes { stored } = &it.kind else {
        return Err(Error::format(
            &md,
            format!("'{}' is not a pickled object", it.fqn),
        ));
    };
    let raw = dcp.item_bytes(&it.fqn, stored)?;
    let path = dcp.map(stored)?.path.clone();
    let (_, p, ..) = crate::formats::torch::open_zip(&path, raw, &GlobalPolicy::default())?;
    Ok((p, path, it.fqn.clone()))
}
