//! The distributed optimizer's `dp_reshardable` buckets: which chunk of a bucket is which
//! parameter. Nothing in the checkpoint names it; it follows from the model's parameter order
//! and megatron-core 0.16.1's `_ParamAndGradBuffer` rule (parameters in reverse order, each start
//! rounded up to 64 elements, one chunk per parameter and per alignment gap). With pipeline
//! stages, group `pp x TP + tp` holds stage `pp`'s parameters: the embedding on the first, the
//! final norm and output layer on the last, and a run of layers each (how many is read off the
//! chunks). [`buckets`] derives that layout and proves it against EVERY chunk of every state of
//! every bucket and against the saved `per_bucket_numel_unpadded`; anything it cannot prove is
//! refused by name.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind, METADATA};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};

mod rule;
#[cfg(test)]
use rule::model;
use rule::stage_members;
pub use rule::{
    all, first_mismatch, group_layout, lay_out, split, split_buckets, BucketLayout, Param, Rule,
    Segment, ALIGN,
};

/// The per-bucket states of Adam in the `dp_reshardable` layout (`param`: the fp32 main copy).
pub const STATES: [&str; 3] = ["param", "exp_avg", "exp_avg_sq"];

/// Whether fp32 main params (the `param` state) (`main`) rounded to `dtype` (to nearest, ties to even, as torch
/// copies them into the model) are the weight's bytes `weight`; float32: bit for bit.
pub fn rounds_to(main: &[u8], weight: &[u8], dtype: DType) -> bool {
    crate::dtype::recode(main, DType::F32, dtype).is_ok_and(|r| r == weight)
}

/// A resized vocabulary matrix: its item, old and new (padded, global) rows, width, and its new
/// rows' main params: rows `old_rows..rows` as float32 (a bf16 weight's converted, exactly;
/// none when it shrinks).
#[derive(Debug, Clone, Copy)]
pub struct NewVocab<'a> {
    pub fqn: &'a str,
    pub old_rows: u64,
    pub rows: u64,
    pub cols: u64,
    pub new_rows: &'a [u8],
}

/// The prefix of the items of a model's transformer layers, stacked by layer on their first
/// dimension (one chunk per layer and TP rank).
const LAYERS: &str = "decoder.layers.";

/// The word embeddings' item: with tied embeddings over pipeline stages, the last stage's
/// output layer is a copy of it (saved under this key as a replica, no item of its own).
pub const EMBEDDING: &str = "embedding.word_embeddings.weight";

/// The output layer's weight (a parameter of the last stage; with tied embeddings over
/// pipeline stages, the embedding's copy).
pub const OUTPUT: &str = "output_layer.weight";

/// One bucket of one data-parallel group, its layout proven.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// `optimizer.distributed.dp_group_idx_N.gbuf_idx_0.dtype_(…).bucket_idx_0`: each state's
    /// item is this plus `.param`, `.exp_avg`, `.exp_avg_sq`.
    pub prefix: String,
    /// N of `dp_group_idx_N`: the model-parallel rank, `stage x TP + tp` (the TP rank when
    /// PP = 1).
    pub group: u64,
    /// N of `bucket_idx_N`: with `overlap_grad_reduce` the first stage's parameters are split
    /// into buckets of `bucket_size` elements (bucket 0 holds the last parameters).
    pub index: u64,
    /// The parameters it holds: indices into [`params`]' list, in module order.
    pub members: Vec<usize>,
    pub segments: Vec<Segment>,
    /// The bucket's elements before its end padding (`per_bucket_numel_unpadded`).
    pub unpadded: u64,
    /// Its saved size with the end padding (`per_bucket_numel`).
    pub padded: u64,
}

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

/// How many layers from `next` (of `layers`) make a stage's buckets (split at `size`) the
/// state items `its` of its first group (the last stage takes all that are left); None when
/// no count does.
fn fit_layers(
    params: &[Param],
    its: &[&StateItem],
    (next, layers): (u64, u64),
    ends: (bool, bool),
    size: Option<u64>,
) -> Option<u64> {
    let from = if ends.1 { layers - next } else { 0 };
    (from..=layers - next).find(|&k| {
        let layout = group_layout(params, &stage_members(params, next..next + k, ends), size);
        matches(its, &layout)
    })
}

/// Whether one group's state items `its` are `layout`'s buckets ([`mismatch`] finds none).
fn matches(its: &[&StateItem], layout: &[BucketLayout]) -> bool {
    mismatch(its, layout).is_none()
}

/// Where one group's state items `its` are not `layout`'s buckets.
enum Mismatch<'a> {
    /// The bucket indices the items have, not one per bucket of the layout.
    Indices(Vec<u64>),
    /// An item, its bucket's segments and the first of its chunks that is not theirs.
    Chunk(&'a StateItem, &'a [Segment], usize),
}

/// The first way `its` are not `layout`'s buckets: one item per bucket index, each item's
/// chunks its bucket's segments split at its shards.
fn mismatch<'a>(its: &[&'a StateItem], layout: &'a [BucketLayout]) -> Option<Mismatch<'a>> {
    let mut indices: Vec<u64> = its.iter().map(|i| i.index).collect();
    indices.sort_unstable();
    indices.dedup();
    if !indices.iter().copied().eq(0..layout.len() as u64) {
        return Some(Mismatch::Indices(indices));
    }
    its.iter().find_map(|it| {
        let (_, segs, _) = layout.get(it.index as usize)?;
        let i = first_mismatch(&it.chunks, &split(segs, it.shard))?;
        Some(Mismatch::Chunk(it, segs, i))
    })
}

/// A state item of a bucket: its name, prefix, group, bucket index, chunks ((offset, length),
/// sorted) and data-parallel shard length (None: one shard).
struct StateItem {
    fqn: String,
    prefix: String,
    group: u64,
    index: u64,
    chunks: Vec<(u64, u64)>,
    shard: Option<u64>,
}

/// The saved `per_bucket_numel` of group `g`: each bucket's size with its end padding.
fn padded_sizes(dcp: &Dcp, g: u64) -> Result<Vec<u64>> {
    per_bucket_numel(
        dcp,
        &format!("optimizer.distributed.dp_group_idx_{g}.per_bucket_numel"),
    )
}

/// Bucket `index`'s saved size with its end padding, of its group's `saved` sizes.
fn padded_size(dcp: &Dcp, (g, index): (u64, u64), saved: &[u64]) -> Result<u64> {
    saved.get(index as usize).copied().ok_or_else(|| {
        Error::format(
            dcp.dir.join(METADATA),
            format!("'optimizer.distributed.dp_group_idx_{g}.per_bucket_numel' holds {saved:?}: no size of bucket {index}"),
        )
    })
}

/// The length of each of the `shards` data-parallel shards of `it`'s bucket: its saved size
/// (of its group's `saved` `per_bucket_numel`) over `shards` (None for one shard).
fn shard(dcp: &Dcp, it: &StateItem, saved: &[u64], shards: u64) -> Result<Option<u64>> {
    if shards <= 1 {
        return Ok(None);
    }
    let key = format!(
        "optimizer.distributed.dp_group_idx_{}.per_bucket_numel",
        it.group
    );
    match saved.get(it.index as usize) {
        Some(&n) if n % shards == 0 => Ok(Some(n / shards)),
        _ => Err(Error::unsupported(dcp.dir.join(METADATA), format!("'{key}' holds {saved:?}: bucket {} has no size that {shards} data-parallel shards (the args' data_parallel_size x context_parallel_size) divide: where the optimizer's shards end is not known; give --optimizer drop", it.index))),
    }
}

/// Every `dp_reshardable` bucket of `dcp`, its chunks proven to be [`lay_out`] of the
/// parameters `rule` puts in it ([`split_buckets`] of its stage's [`params`]), [`split`] at the
/// data-parallel shards' ends (the saved `per_bucket_numel` over `rule.shards`), for all three
/// states, its length the saved `per_bucket_numel_unpadded`. The groups must be `0..TP x PP`.
pub fn buckets(dcp: &Dcp, rule: Rule) -> Result<Vec<Bucket>> {
    let params = params(dcp, rule.tied)?;
    let mut items = state_items(dcp)?;
    let mut groups: Vec<u64> = items.iter().map(|i| i.group).collect();
    groups.sort_unstable();
    groups.dedup();
    let tp = rule.tp.max(1);
    let pp = (groups.len() as u64 / tp).max(1);
    if !groups.iter().copied().eq(0..tp * pp) {
        return Err(Error::unsupported(dcp.dir.join(METADATA), format!("the optimizer has buckets for groups {groups:?}, not one per model-parallel rank 0..{} (TP {tp} x PP {pp}): which rank's parameters a bucket holds is not known; give --optimizer drop", tp * pp)));
    }
    if rule.tied && pp == 1 {
        return Err(Error::unsupported(dcp.dir.join(METADATA), format!("its args say tied embeddings over pipeline stages (untie_embeddings_and_output_weights false, pipeline_model_parallel_size > 1) but the optimizer has buckets for {} groups, TP {tp} x 1 stage: which stage's parameters a bucket holds is not known; give --optimizer drop", groups.len())));
    }
    // Each group's saved per_bucket_numel, read once.
    let padded: Vec<Vec<u64>> = groups
        .iter()
        .map(|&g| padded_sizes(dcp, g))
        .collect::<Result<_>>()?;
    for it in &mut items {
        it.shard = shard(dcp, it, &padded[it.group as usize], rule.shards)?;
    }
    let stages = stages(dcp, &params, &items, rule, pp)?;
    let mut out: Vec<Bucket> = Vec::new();
    for g in 0..tp * pp {
        let size = rule.bucket_size.filter(|_| g < tp);
        let layout = group_layout(&params, &stages[(g / tp) as usize], size);
        let its: Vec<&StateItem> = items.iter().filter(|i| i.group == g).collect();
        prove_group(dcp, &params, &its, &layout, size)?;
        check_unpadded(dcp, g, &layout)?;
        for (index, (members, segments, unpadded)) in (0u64..).zip(layout) {
            let padded = padded_size(dcp, (g, index), &padded[g as usize])?;
            let prefix = its
                .iter()
                .find(|i| i.index == index)
                .map_or(String::new(), |i| i.prefix.clone());
            out.push(Bucket {
                prefix,
                group: g,
                index,
                members,
                segments,
                unpadded,
                padded,
            });
        }
    }
    Ok(out)
}

/// One group's state items (`its`) proven to be `layout`'s buckets: one per bucket, each
/// item's chunks its bucket's segments split at the item's shards.
fn prove_group(
    dcp: &Dcp,
    params: &[Param],
    its: &[&StateItem],
    layout: &[BucketLayout],
    size: Option<u64>,
) -> Result<()> {
    match mismatch(its, layout) {
        None => Ok(()),
        Some(Mismatch::Chunk(it, segs, i)) => Err(disagrees(dcp, it, segs, params, i)),
        Some(Mismatch::Indices(indices)) => {
            let g = its.first().map_or(0, |i| i.group);
            let mut why = size.map_or("no bucket_size: overlap_grad_reduce off".to_string(), |b| {
                format!("bucket_size {b}")
            });
            let shared = layout.iter().flat_map(|b| &b.0);
            if shared.filter_map(|&i| params.get(i)).any(|p| p.shared) {
                why.push_str("; the embedding tied to the output layer a bucket of its own");
            }
            let why = format!("{} bucket(s) ({why})", layout.len());
            Err(Error::unsupported(dcp.dir.join(METADATA), format!("group {g}'s optimizer state has buckets {indices:?} but its parameters give {why}: which parameters a bucket holds cannot be proven; give --optimizer drop")))
        }
    }
}

/// The state items of every bucket; a second buffer is refused.
fn state_items(dcp: &Dcp) -> Result<Vec<StateItem>> {
    let mut out = Vec::new();
    for it in &dcp.items {
        let Some(prefix) = STATES
            .iter()
            .find_map(|s| it.fqn.strip_suffix(&format!(".{s}")))
        else {
            continue;
        };
        let Some(group) = group_of(prefix) else {
            continue;
        };
        let ItemKind::Tensor { chunks, .. } = &it.kind else {
            continue;
        };
        let index = prefix
            .rsplit_once(".bucket_idx_")
            .and_then(|(_, n)| n.parse().ok());
        let Some(index) = index.filter(|_| prefix.contains(".gbuf_idx_0.")) else {
            let why = second_buffer(dcp, group);
            return Err(Error::unsupported(dcp.dir.join(METADATA), format!("'{}': a second buffer ({why}): only one buffer per group is derived so far; give --optimizer drop", it.fqn)));
        };
        let mut got: Vec<(u64, u64)> = chunks
            .iter()
            .map(|c| (c.offsets.first().copied().unwrap_or(0), c.elements()))
            .collect();
        got.sort_unstable();
        out.push(StateItem {
            fqn: it.fqn.clone(),
            prefix: prefix.to_string(),
            group,
            index,
            chunks: got,
            shard: None,
        });
    }
    Ok(out)
}

/// Each pipeline stage's parameters. One stage holds them all. With more, stage `s` holds the
/// layers after the previous stage's: as many as make its first group's buckets the layout
/// (the last stage all that are left); when no count does, the even split is refused by name.
fn stages(
    dcp: &Dcp,
    params: &[Param],
    items: &[StateItem],
    rule: Rule,
    pp: u64,
) -> Result<Vec<Vec<usize>>> {
    if pp == 1 {
        return Ok(vec![all(params)]);
    }
    let layers = params
        .iter()
        .filter_map(|p| p.layer)
        .max()
        .map_or(0, |l| l + 1);
    let mut out = Vec::new();
    let mut next = 0;
    for s in 0..pp {
        let ends = (s == 0, s + 1 == pp);
        let g = s * rule.tp.max(1);
        let its: Vec<&StateItem> = items.iter().filter(|i| i.group == g).collect();
        let size = rule.bucket_size.filter(|_| s == 0);
        let Some(k) = fit_layers(params, &its, (next, layers), ends, size) else {
            // Refused against the even split (the last stage: what is left).
            let k = if ends.1 {
                layers - next
            } else {
                (layers / pp).min(layers - next)
            };
            let layout = group_layout(params, &stage_members(params, next..next + k, ends), size);
            prove_group(dcp, params, &its, &layout, size)?;
            return Err(Error::format(
                dcp.dir.join(METADATA),
                format!("group {g}: no layer count fits its buckets"),
            ));
        };
        out.push(stage_members(params, next..next + k, ends));
        next += k;
    }
    Ok(out)
}

/// Why group `g` has a second buffer, as its `per_bucket_numel` shows ([`buffer_pairs`]).
fn second_buffer(dcp: &Dcp, g: u64) -> String {
    let key = format!("optimizer.distributed.dp_group_idx_{g}.per_bucket_numel");
    let pairs = object_pickle(dcp, &key).ok();
    match pairs.and_then(|(p, ..)| buffer_pairs(&p)) {
        Some(pairs) => why_buffers(&pairs),
        None => "parameters of several dtypes, or several model chunks".to_string(),
    }
}

/// The dtype pair of each buffer a `per_bucket_numel` pickle lists: `[[{(param dtype, grad
/// dtype): sizes}, …]]`, one one-key dict per buffer (megatron-core's `self.buffers`: each model
/// chunk's buffers, one per dtype pair).
fn buffer_pairs(p: &Pickle) -> Option<Vec<Vec<String>>> {
    let Node::List(outer) = p.node(p.root) else {
        return None;
    };
    let Node::List(buffers) = p.node(*outer.first()?) else {
        return None;
    };
    let pair = |d: Id| {
        let [(k, _)] = p.dict_entries(d)? else {
            return None;
        };
        let Node::Tuple(v) = p.node(*k) else {
            return None;
        };
        v.iter()
            .map(|&x| p.global_name(x))
            .collect::<Option<Vec<_>>>()
    };
    buffers.iter().map(|&d| pair(d)).collect()
}

/// What several buffers of a group are: a dtype pair listed twice means virtual pipeline
/// stages' model chunks; several pairs, parameters of several dtypes (or both).
fn why_buffers(pairs: &[Vec<String>]) -> String {
    let mut dtypes = pairs.to_vec();
    dtypes.sort();
    dtypes.dedup();
    let (n, d) = (pairs.len(), dtypes.len());
    match (n > d, d > 1) {
        (true, false) => format!(
            "virtual pipeline stages: {n} model chunks per rank, each with a buffer of its own"
        ),
        (false, true) => format!("parameters of {d} dtypes, a buffer each"),
        (true, true) => {
            format!("virtual pipeline stages and parameters of {d} dtypes: {n} buffers")
        }
        (false, false) => format!("its per_bucket_numel lists {n} buffer(s)"),
    }
}

/// `optimizer.distributed.dp_group_idx_N.…` → N.
fn group_of(prefix: &str) -> Option<u64> {
    let rest = prefix.strip_prefix("optimizer.distributed.dp_group_idx_")?;
    rest.split('.').next()?.parse().ok()
}

/// The refusal of bucket item `it` whose chunk `i` is not the derived layout's (`segs`, split
/// at its shards).
fn disagrees(dcp: &Dcp, it: &StateItem, segs: &[Segment], params: &[Param], i: usize) -> Error {
    let chunk = it.chunks.get(i).map_or("no chunk".to_string(), |(o, l)| {
        format!("the chunk at {o} of {l} elements")
    });
    let want = split(segs, it.shard)
        .get(i)
        .map_or("no segment".to_string(), |&(o, l)| {
            let seg = segs.iter().find(|s| s.start <= o && o < s.start + s.len);
            let what = seg
                .and_then(|s| s.param)
                .and_then(|p| params.get(p))
                .map_or("an alignment gap".to_string(), |p| {
                    let layer = p.layer.map(|l| format!(" layer {l}")).unwrap_or_default();
                    format!("'{}'{layer}", p.fqn)
                });
            format!("{what} at {o} of {l} elements")
        });
    let shards = it
        .shard
        .map(|n| format!(", cut where each data-parallel shard of {n} ends"))
        .unwrap_or_default();
    Error::unsupported(
        dcp.dir.join(METADATA),
        format!("'{}': {chunk} (chunk {i}) is not what the model's parameter order gives ({want}; megatron-core's rule: parameters in reverse order, starts aligned to {ALIGN}{shards}): which chunk is which parameter cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out", it.fqn),
    )
}

/// The saved `per_bucket_numel_unpadded` of group `g` must hold its derived buckets' lengths.
fn check_unpadded(dcp: &Dcp, g: u64, layout: &[BucketLayout]) -> Result<()> {
    let key = format!("optimizer.distributed.dp_group_idx_{g}.per_bucket_numel_unpadded");
    let saved = per_bucket_numel(dcp, &key)?;
    let want: Vec<u64> = layout.iter().map(|b| b.2).collect();
    if saved != want {
        return Err(Error::unsupported(
            dcp.dir.join(METADATA),
            format!("'{key}' holds {saved:?} but the model's parameter order gives buckets of {want:?} elements: the bucket layout cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_params_prove_a_bf16_weight_by_rounding_to_it_and_a_f32_one_bit_for_bit() {
        let f = |xs: &[f32]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let bf = |xs: &[u16]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // 1 + 2^-8 lies halfway between bf16 1.0 (0x3F80) and 1.0078125 (0x3F81): to even.
        let tie = f32::from_bits(0x3F80_8000);
        let above = f32::from_bits(0x3F80_8001);
        assert!(rounds_to(
            &f(&[tie, 2.0]),
            &bf(&[0x3F80, 0x4000]),
            DType::BF16
        ));
        assert!(rounds_to(&f(&[above]), &bf(&[0x3F81]), DType::BF16));
        assert!(!rounds_to(&f(&[above]), &bf(&[0x3F80]), DType::BF16));
        // Truncating would pass this one: 1.0078125 - 2^-16 rounds up to 0x3F81.
        let below = f32::from_bits(0x3F81_0000 - 1);
        assert!(rounds_to(&f(&[below]), &bf(&[0x3F81]), DType::BF16));
        assert!(!rounds_to(&f(&[below]), &bf(&[0x3F80]), DType::BF16));
        assert!(rounds_to(&f(&[tie]), &f(&[tie]), DType::F32));
        assert!(!rounds_to(&f(&[tie]), &f(&[1.0]), DType::F32));
        assert!(!rounds_to(&f(&[1.0, 2.0]), &bf(&[0x3F80]), DType::BF16));
    }

    /// The state item of bucket `index` whose chunks are `segs`.
    fn item_of(segs: &[Segment], index: u64) -> StateItem {
        StateItem {
            fqn: String::new(),
            prefix: String::new(),
            group: 0,
            index,
            chunks: segs.iter().map(|s| (s.start, s.len)).collect(),
            shard: None,
        }
    }

    /// The state item of bucket `index` laid out as `members`.
    fn item(params: &[Param], members: &[usize], index: u64) -> StateItem {
        item_of(&lay_out(params, members).0, index)
    }

    /// The state items of a group whose buckets are `members` split at `size`.
    fn items(params: &[Param], members: &[usize], size: Option<u64>) -> Vec<StateItem> {
        (0u64..)
            .zip(group_layout(params, members, size))
            .map(|(index, (_, segs, _))| item_of(&segs, index))
            .collect()
    }

    #[test]
    fn a_second_buffer_is_named_as_chunks_or_dtypes_by_the_pairs_per_bucket_numel_lists() {
        // [[{(f32, f32): [768]}, {(f32, f32): [512]}]]: a virtual pipeline save's group (two
        // model chunks); [[{(bf16, f32): [896]}, {(f32, f32): [256]}]]: a bf16 run whose norms
        // stayed fp32. Both as megatron-core 0.16.1 wrote them (the session's by-hand saves).
        let mut p = Pickle {
            nodes: Vec::new(),
            root: 0,
        };
        let global = |p: &mut Pickle, name: &str| {
            p.push(Node::Global {
                module: "torch".into(),
                name: name.into(),
            })
        };
        let mut buffers = Vec::new();
        for (a, b) in [("float32", "float32"), ("float32", "float32")] {
            let (a, b) = (global(&mut p, a), global(&mut p, b));
            let k = p.push(Node::Tuple(vec![a, b]));
            let v = p.push(Node::List(Vec::new()));
            buffers.push(p.push(Node::Dict(vec![(k, v)])));
        }
        let inner = p.push(Node::List(buffers));
        p.root = p.push(Node::List(vec![inner]));
        let pairs = buffer_pairs(&p).unwrap();
        assert_eq!(pairs, vec![vec!["torch.float32".to_string(); 2]; 2]);
        assert!(why_buffers(&pairs).starts_with("virtual pipeline stages: 2 model chunks"));
        let mixed = [
            pairs[0].clone(),
            vec!["torch.bfloat16".into(), "torch.float32".into()],
        ];
        assert_eq!(why_buffers(&mixed), "parameters of 2 dtypes, a buffer each");
        let both = [mixed.to_vec(), mixed.to_vec()].concat();
        assert!(why_buffers(&both).contains("and parameters of 2 dtypes: 4 buffers"));
        // Two chunks, only one with fp32 parameters: still both causes.
        let uneven = [both[0].clone(), both[1].clone(), both[0].clone()];
        assert!(why_buffers(&uneven).contains("and parameters of 2 dtypes: 3 buffers"));
        assert_eq!(
            why_buffers(&pairs[..1]),
            "its per_bucket_numel lists 1 buffer(s)"
        );
    }

    #[test]
    fn a_stages_layer_count_is_read_off_its_chunks_not_assumed_even() {
        // Three layers over two stages, split 2 + 1 (Megatron-LM's
        // --decoder-first-pipeline-num-layers 2): an even split would give the first stage 1.
        let params = model(3);
        let first = stage_members(&params, 0..2, (true, false));
        let names: Vec<_> = first
            .iter()
            .map(|&i| (params[i].fqn.as_str(), params[i].layer))
            .collect();
        assert_eq!(names[0], ("embedding.word_embeddings.weight", None));
        assert_eq!(names.len(), 5);
        assert!(!names
            .iter()
            .any(|n| n.0.starts_with("output") || n.1 == Some(2)));
        let fit = |members: &[usize], from, ends, size| {
            let its = items(&params, members, size);
            let refs: Vec<&StateItem> = its.iter().collect();
            fit_layers(&params, &refs, from, ends, size)
        };
        assert_eq!(fit(&first, (0, 3), (true, false), None), Some(2));
        let one = stage_members(&params, 0..1, (true, false));
        assert_eq!(fit(&one, (0, 3), (true, false), None), Some(1));
        // With buckets of 300 elements (overlap_grad_reduce) the count is read the same way.
        assert_eq!(fit(&first, (0, 3), (true, false), Some(300)), Some(2));
        // The last stage takes what is left, its final norm and output layer with it.
        let last = stage_members(&params, 2..3, (false, true));
        assert_eq!(last.len(), 4);
        assert_eq!(fit(&last, (2, 3), (false, true), None), Some(1));
        // A last stage that would need fewer layers than are left, or other sizes: no count.
        assert_eq!(fit(&last, (1, 3), (false, true), None), None);
        let mut other = item(&params, &first, 0);
        other.chunks[0].1 += 1;
        assert_eq!(
            fit_layers(&params, &[&other], (0, 3), (true, false), None),
            None
        );
    }
}
