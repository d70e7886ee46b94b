//! The proof of a save's `dp_reshardable` buckets: its optimizer state items and saved sizes
//! read once ([`Model`]), layers fitted to each (virtual) pipeline stage's buffers, and every
//! chunk of every state of every bucket compared with the layout the rule gives; anything that
//! differs is refused by name.

use super::parameters::params;
use super::rule::{
    by_first_seen, first_mismatch, group_layout, split, stage_members, BucketLayout, Param, Rule,
    Segment, ALIGN,
};
use super::saved::{key, per_buffer_numel, why_buffers, BufferSizes};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind, METADATA};
use std::path::{Path, PathBuf};

/// The per-bucket states of Adam in the `dp_reshardable` layout (`param`: the fp32 main copy).
pub const STATES: [&str; 3] = ["param", "exp_avg", "exp_avg_sq"];

/// One bucket of one data-parallel group, its layout proven.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// `optimizer.distributed.dp_group_idx_N.gbuf_idx_0.dtype_(…).bucket_idx_0`: each state's
    /// item is this plus `.param`, `.exp_avg`, `.exp_avg_sq`.
    pub prefix: String,
    /// N of `dp_group_idx_N`: the model-parallel rank, `stage x TP + tp` (the TP rank when
    /// PP = 1).
    pub group: u64,
    /// N of `gbuf_idx_N`: the group's buffer in megatron-core's order, each model chunk's in
    /// turn (virtual pipeline stages), one per parameter dtype in the order the chunk's
    /// parameters first have it.
    pub buffer: u64,
    /// Whether its buffer's buckets close at the bucket size: Megatron-LM buckets only the
    /// first stage's first model chunk.
    pub sized: bool,
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

/// Whether one buffer's state items `its` are `layout`'s buckets ([`mismatch`] finds none).
fn matches(its: &[&StateItem], layout: &[BucketLayout]) -> bool {
    mismatch(its, layout).is_none()
}

/// Where one buffer's state items `its` are not `layout`'s buckets.
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

/// A state item of a bucket: its name, prefix, group, buffer, bucket index, chunks ((offset,
/// length), sorted) and data-parallel shard length (None: one shard).
struct StateItem {
    fqn: String,
    prefix: String,
    group: u64,
    buffer: u64,
    index: u64,
    chunks: Vec<(u64, u64)>,
    shard: Option<u64>,
}

/// Bucket `index` of buffer `b` of group `g`: its saved size with its end padding, of the
/// group's `saved` sizes.
fn padded_size(md: &Path, (g, b, index): (u64, u64, u64), saved: &[BufferSizes]) -> Result<u64> {
    let sizes = saved.get(b as usize).map_or(&[][..], |x| &x.sizes[..]);
    sizes.get(index as usize).copied().ok_or_else(|| {
        let at = key(g, "per_bucket_numel");
        Error::format(
            md,
            format!("'{at}' holds {sizes:?} for buffer {b}: no size of bucket {index}"),
        )
    })
}

/// The length of each of the `shards` data-parallel shards of `it`'s bucket: its saved size
/// (of its group's `saved` `per_bucket_numel`) over `shards` (None for one shard).
fn shard(md: &Path, it: &StateItem, saved: &[BufferSizes], shards: u64) -> Result<Option<u64>> {
    if shards <= 1 {
        return Ok(None);
    }
    match padded_size(md, (it.group, it.buffer, it.index), saved)? {
        n if n % shards == 0 => Ok(Some(n / shards)),
        n => Err(Error::unsupported(md, format!("'{}': buffer {}'s bucket {} of {n} elements has no size that {shards} data-parallel shards (the args' data_parallel_size x context_parallel_size over num_distributed_optimizer_instances) divide: where the optimizer's shards end is not known; give --optimizer drop", key(it.group, "per_bucket_numel"), it.buffer, it.index))),
    }
}

/// A save's parameters and optimizer state items, read once, that the layout is proven
/// against (`md`: the metadata file, named in refusals): each parameter's dtype as a buffer's
/// pair names it (`torch.bfloat16`), each group's saved `per_bucket_numel` and
/// `per_bucket_numel_unpadded`, the rule, TP and PP.
pub(super) struct Model {
    md: PathBuf,
    params: Vec<Param>,
    dtypes: Vec<String>,
    items: Vec<StateItem>,
    padded: Vec<Vec<BufferSizes>>,
    unpadded: Vec<Vec<BufferSizes>>,
    rule: Rule,
    tp: u64,
    pp: u64,
}

/// A model chunk's buffers, proven: each one's index and bucket layouts.
type ChunkBuffers = Vec<(u64, Vec<BucketLayout>)>;

impl Model {
    pub(super) fn read(dcp: &Dcp, rule: Rule) -> Result<Model> {
        let md = dcp.dir.join(METADATA);
        let params = params(dcp, rule.tied)?;
        let dtypes = param_dtypes(dcp, &params);
        let mut items = state_items(dcp)?;
        let mut groups: Vec<u64> = items.iter().map(|i| i.group).collect();
        groups.sort_unstable();
        groups.dedup();
        let tp = rule.tp.max(1);
        let pp = (groups.len() as u64 / tp).max(1);
        if !groups.iter().copied().eq(0..tp * pp) {
            return Err(Error::unsupported(md, format!("the optimizer has buckets for groups {groups:?}, not one per model-parallel rank 0..{} (TP {tp} x PP {pp}): which rank's parameters a bucket holds is not known; give --optimizer drop", tp * pp)));
        }
        if rule.tied && pp == 1 {
            return Err(Error::unsupported(md, format!("its args say tied embeddings over pipeline stages (untie_embeddings_and_output_weights false, pipeline_model_parallel_size > 1) but the optimizer has buckets for {} groups, TP {tp} x 1 stage: which stage's parameters a bucket holds is not known; give --optimizer drop", groups.len())));
        }
        // Each group's saved per_bucket_numel, read once.
        let saved = |what| {
            let each = groups.iter().map(|&g| per_buffer_numel(dcp, &key(g, what)));
            each.collect::<Result<Vec<_>>>()
        };
        let (padded, unpadded) = (
            saved("per_bucket_numel")?,
            saved("per_bucket_numel_unpadded")?,
        );
        for it in &mut items {
            it.shard = shard(&md, it, &padded[it.group as usize], rule.shards)?;
        }
        let model = Model {
            md,
            params,
            dtypes,
            items,
            padded,
            unpadded,
            rule,
            tp,
            pp,
        };
        for g in groups {
            model.check_buffer_count(g)?;
        }
        Ok(model)
    }

    /// Group `g`'s buffers must be at least one per model chunk, and exactly one per chunk when
    /// they all hold one dtype pair (what the args' virtual pipeline size gives, checked
    /// before layers are fitted to them).
    fn check_buffer_count(&self, g: u64) -> Result<()> {
        let saved = &self.padded[g as usize];
        let pairs: Vec<Vec<String>> = saved.iter().map(|b| b.pair.clone()).collect();
        let (n, chunks) = (saved.len() as u64, self.rule.chunks.max(1));
        let one_pair = pairs.windows(2).all(|w| w[0] == w[1]);
        let beyond = self.items.iter().find(|i| i.group == g && i.buffer >= n);
        if n >= chunks && (n == chunks || !one_pair) && beyond.is_none() {
            return Ok(());
        }
        let item = beyond.map_or(String::new(), |i| format!(" ('{}' is beyond them)", i.fqn));
        Err(Error::unsupported(&self.md, format!("group {g}'s optimizer state has {n} buffer(s){item}: {}, but the args give {chunks} model chunk(s) per rank (virtual_pipeline_model_parallel_size), each with a buffer per parameter dtype: which parameters a buffer holds is not known; give --optimizer drop", why_buffers(&pairs))))
    }

    /// Every bucket: the virtual stages' layers fitted, each group's buffers proven.
    pub(super) fn buckets(&self) -> Result<Vec<Bucket>> {
        let stages = self.virtual_stages()?;
        let mut out = Vec::new();
        for g in 0..self.tp * self.pp {
            out.extend(self.group(g, &stages)?);
        }
        Ok(out)
    }

    /// Group `g`'s state items of buffer `b`.
    fn items_of(&self, g: u64, b: u64) -> Vec<&StateItem> {
        let of = |i: &&StateItem| i.group == g && i.buffer == b;
        self.items.iter().filter(of).collect()
    }

    /// Whether group `g`'s buffer `b` holds parameters of `dtype`, as its saved pair says.
    fn pair_is(&self, g: u64, b: u64, dtype: &str) -> bool {
        let saved = self.padded.get(g as usize).and_then(|x| x.get(b as usize));
        saved.is_some_and(|x| x.pair.first().is_some_and(|d| d == dtype))
    }

    /// `members` (module order) split by dtype, in the order the members first have each:
    /// a model chunk's buffers (megatron-core groups a chunk's parameters by dtype pair).
    fn by_dtype(&self, members: &[usize]) -> Vec<(&str, Vec<usize>)> {
        let dtype = |i: usize| self.dtypes.get(i).map_or("", String::as_str);
        by_first_seen(members.iter().copied(), dtype)
    }

    /// Whether a model chunk holding `members` (at least one) is group `g`'s buffers from
    /// `first` on, split at `size`.
    fn fits(&self, g: u64, first: u64, members: &[usize], size: Option<u64>) -> bool {
        let bufs = self.by_dtype(members).into_iter().zip(first..);
        !members.is_empty()
            && bufs.into_iter().all(|((d, m), b)| {
                let layout = group_layout(&self.params, &m, size);
                self.pair_is(g, b, d) && matches(&self.items_of(g, b), &layout)
            })
    }

    /// A model chunk holding `members` proven to be group `g`'s buffers from `first` on, split
    /// at `size`: each buffer's index and layouts; refused by name where it is not.
    fn prove_chunk(
        &self,
        g: u64,
        first: u64,
        members: &[usize],
        size: Option<u64>,
    ) -> Result<ChunkBuffers> {
        let mut out = Vec::new();
        for ((d, m), b) in self.by_dtype(members).into_iter().zip(first..) {
            let layout = group_layout(&self.params, &m, size);
            if !self.pair_is(g, b, d) {
                let saved = self.padded.get(g as usize).and_then(|x| x.get(b as usize));
                let saved = saved.map_or("none".to_string(), |x| format!("{:?}", x.pair));
                return Err(Error::unsupported(&self.md, format!("group {g}: the model's parameters give a buffer of {d} parameters as gbuf_idx_{b}, but the save's per_bucket_numel has {saved} there: which parameters a buffer holds is not known; give --optimizer drop")));
            }
            prove_group(&self.md, &self.params, &self.items_of(g, b), &layout, size)?;
            out.push((b, layout));
        }
        Ok(out)
    }

    /// The bucket size virtual stage `vs`'s buffers are split at: Megatron-LM buckets the first
    /// stage's first model chunk only (`get_model`'s `disable_bucketing` for the others,
    /// `DistributedDataParallel`'s `bucket_size = None` past the first stage).
    fn size_of(&self, vs: u64) -> Option<u64> {
        self.rule.bucket_size.filter(|_| vs == 0)
    }

    /// Each virtual pipeline stage's parameters (stage `s`'s model chunk `v` is virtual stage
    /// `v x PP + s`; without VPP the pipeline stages), in order. Each holds the layers after the
    /// previous one's: as many as make its group's buffers the layout (the last all that are
    /// left); when no count does, the even split is refused by name.
    fn virtual_stages(&self) -> Result<Vec<Vec<usize>>> {
        let n = self.pp * self.rule.chunks.max(1);
        let layers = self
            .params
            .iter()
            .filter_map(|p| p.layer)
            .max()
            .map_or(0, |l| l + 1);
        // Each pipeline stage's next buffer.
        let mut first = vec![0u64; self.pp as usize];
        let (mut out, mut next) = (Vec::new(), 0);
        for vs in 0..n {
            let s = vs % self.pp;
            let (g, at) = (s * self.tp, first[s as usize]);
            let ends = (vs == 0, vs + 1 == n);
            let size = self.size_of(vs);
            let members = |k| stage_members(&self.params, next..next + k, ends);
            let from = if ends.1 { layers - next } else { 0 };
            let fit = (from..=layers - next).find(|&k| self.fits(g, at, &members(k), size));
            let Some(k) = fit else {
                // Refused against the even split (the last: what is left).
                let k = if ends.1 {
                    layers - next
                } else {
                    (layers / n).min(layers - next)
                };
                self.prove_chunk(g, at, &members(k), size)?;
                return Err(Error::format(
                    &self.md,
                    format!("group {g}, gbuf_idx_{at}: no layer count fits its buckets"),
                ));
            };
            let m = members(k);
            first[s as usize] += self.by_dtype(&m).len() as u64;
            out.push(m);
            next += k;
        }
        Ok(out)
    }

    /// Group `g`'s buckets: each of its model chunks' buffers proven (`stages`: each virtual
    /// stage's parameters), every saved buffer one of them, `per_bucket_numel_unpadded` their
    /// lengths.
    fn group(&self, g: u64, stages: &[Vec<usize>]) -> Result<Vec<Bucket>> {
        let s = g / self.tp;
        let saved_unpadded = &self.unpadded[g as usize];
        let mut out = Vec::new();
        let mut at = 0;
        for v in 0..self.rule.chunks.max(1) {
            let vs = v * self.pp + s;
            let (size, sized) = (self.size_of(vs), vs == 0);
            let members = stages.get(vs as usize).map_or(&[][..], |m| m);
            for (b, layout) in self.prove_chunk(g, at, members, size)? {
                check_unpadded(&self.md, (g, b), saved_unpadded.get(b as usize), &layout)?;
                let its = self.items_of(g, b);
                for (index, (members, segments, unpadded)) in (0u64..).zip(layout) {
                    let padded = padded_size(&self.md, (g, b, index), &self.padded[g as usize])?;
                    let prefix = its.iter().find(|i| i.index == index);
                    out.push(Bucket {
                        prefix: prefix.map_or(String::new(), |i| i.prefix.clone()),
                        group: g,
                        buffer: b,
                        index,
                        sized,
                        members,
                        segments,
                        unpadded,
                        padded,
                    });
                }
                at = b + 1;
            }
        }
        let saved = &self.padded[g as usize];
        if saved.len() as u64 != at || saved_unpadded.len() != saved.len() {
            let pairs: Vec<Vec<String>> = saved.iter().map(|b| b.pair.clone()).collect();
            return Err(Error::unsupported(&self.md, format!("group {g}'s optimizer state has {} buffers ({}), its per_bucket_numel_unpadded {}, but its model chunks' parameters make {at}: which parameters a buffer holds is not known; give --optimizer drop", saved.len(), why_buffers(&pairs), saved_unpadded.len())));
        }
        Ok(out)
    }
}

/// Each of `params`' dtype as a buffer's pair names it (`torch.bfloat16`; empty when its item
/// is not a tensor).
fn param_dtypes(dcp: &Dcp, params: &[Param]) -> Vec<String> {
    let by_name: std::collections::HashMap<&str, DType> = dcp
        .items
        .iter()
        .filter_map(|it| match &it.kind {
            ItemKind::Tensor { dtype, .. } => Some((it.fqn.as_str(), *dtype)),
            ItemKind::Bytes { .. } => None,
        })
        .collect();
    let name = |p: &Param| by_name.get(p.fqn.as_str()).map(|d| d.torch_name());
    let name = |p| name(p).map_or(String::new(), |n| format!("torch.{n}"));
    params.iter().map(name).collect()
}

/// One buffer's state items (`its`) proven to be `layout`'s buckets: one per bucket, each
/// item's chunks its bucket's segments split at the item's shards.
fn prove_group(
    md: &Path,
    params: &[Param],
    its: &[&StateItem],
    layout: &[BucketLayout],
    size: Option<u64>,
) -> Result<()> {
    match mismatch(its, layout) {
        None => Ok(()),
        Some(Mismatch::Chunk(it, segs, i)) => Err(disagrees(md, it, segs, params, i)),
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
            Err(Error::unsupported(md, format!("group {g}'s optimizer state has buckets {indices:?} but its parameters give {why}: which parameters a bucket holds cannot be proven; give --optimizer drop")))
        }
    }
}

/// The state items of every bucket.
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
        let buffer = prefix
            .split_once(".gbuf_idx_")
            .and_then(|(_, r)| r.split('.').next()?.parse().ok());
        let (Some(index), Some(buffer)) = (index, buffer) else {
            return Err(Error::unsupported(dcp.dir.join(METADATA), format!("'{}': no gbuf_idx_N and bucket_idx_N in its name: not a dp_reshardable bucket this reader knows; give --optimizer drop", it.fqn)));
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
            buffer,
            index,
            chunks: got,
            shard: None,
        });
    }
    Ok(out)
}

/// `optimizer.distributed.dp_group_idx_N.…` → N.
fn group_of(prefix: &str) -> Option<u64> {
    let rest = prefix.strip_prefix("optimizer.distributed.dp_group_idx_")?;
    rest.split('.').next()?.parse().ok()
}

/// The refusal of bucket item `it` whose chunk `i` is not the derived layout's (`segs`, split
/// at its shards).
fn disagrees(md: &Path, it: &StateItem, segs: &[Segment], params: &[Param], i: usize) -> Error {
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
        md,
        format!("'{}': {chunk} (chunk {i}) is not what the model's parameter order gives ({want}; megatron-core's rule: parameters in reverse order, starts aligned to {ALIGN}{shards}): which chunk is which parameter cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out", it.fqn),
    )
}

/// The saved `per_bucket_numel_unpadded` of group `g`'s buffer `b` (`saved`) must hold its
/// derived buckets' lengths.
fn check_unpadded(
    md: &Path,
    (g, b): (u64, u64),
    saved: Option<&BufferSizes>,
    layout: &[BucketLayout],
) -> Result<()> {
    let key = key(g, "per_bucket_numel_unpadded");
    let saved = saved.map_or(&[][..], |x| &x.sizes[..]);
    let want: Vec<u64> = layout.iter().map(|b| b.2).collect();
    if saved != want {
        let buffer = if b > 0 {
            format!(" for buffer {b}")
        } else {
            String::new()
        };
        return Err(Error::unsupported(
            md,
            format!("'{key}' holds {saved:?}{buffer} but the model's parameter order gives buckets of {want:?} elements: the bucket layout cannot be proven, so the optimizer state cannot be resized; give --optimizer drop to leave it out"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::megatron::buckets::rule::{all, model};

    /// The state item of bucket `index` whose chunks are `segs`.
    fn item_of(segs: &[Segment], index: u64) -> StateItem {
        StateItem {
            fqn: String::new(),
            prefix: String::new(),
            group: 0,
            buffer: 0,
            index,
            chunks: segs.iter().map(|s| (s.start, s.len)).collect(),
            shard: None,
        }
    }

    /// One saved buffer: its parameters' dtype, its members and the bucket size it was split at.
    type Saved<'a> = (&'a str, Vec<usize>, Option<u64>);

    /// A save (TP 1, one shard) of `params` whose group `g`'s buffers are `buffers[g]`, each laid
    /// out by the rule, its per_bucket_numel the unpadded sizes rounded up to 128.
    fn saved(params: &[Param], dtypes: &[&str], buffers: &[Vec<Saved>], chunks: u64) -> Model {
        let (mut items, mut padded, mut unpadded) = (Vec::new(), Vec::new(), Vec::new());
        for (g, bufs) in (0u64..).zip(buffers) {
            let (mut p, mut u) = (Vec::new(), Vec::new());
            for (b, (d, members, size)) in (0u64..).zip(bufs) {
                let layout = group_layout(params, members, *size);
                for (index, (_, segs, _)) in (0u64..).zip(&layout) {
                    let mut it = item_of(segs, index);
                    (it.group, it.buffer, it.prefix) = (g, b, format!("g{g}.b{b}.i{index}"));
                    items.push(it);
                }
                let pair = vec![d.to_string(), "torch.float32".to_string()];
                let sizes: Vec<u64> = layout.iter().map(|l| l.2).collect();
                let rounded = sizes.iter().map(|n| n.next_multiple_of(128)).collect();
                p.push(BufferSizes {
                    pair: pair.clone(),
                    sizes: rounded,
                });
                u.push(BufferSizes { pair, sizes });
            }
            padded.push(p);
            unpadded.push(u);
        }
        let size = buffers.first().and_then(|b| b.first()).and_then(|b| b.2);
        let rule = Rule {
            tp: 1,
            shards: 1,
            bucket_size: size,
            tied: false,
            chunks,
        };
        Model {
            md: PathBuf::from("save/.metadata"),
            params: params.to_vec(),
            dtypes: dtypes.iter().map(|d| d.to_string()).collect(),
            items,
            padded,
            unpadded,
            rule,
            tp: 1,
            pp: buffers.len() as u64,
        }
    }

    const F32: &str = "torch.float32";

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
        let last = stage_members(&params, 2..3, (false, true));
        assert_eq!(last.len(), 4);
        let dtypes = vec![F32; params.len()];
        // With buckets of 300 elements (overlap_grad_reduce) on the first stage, or none.
        for size in [None, Some(300)] {
            let bufs = [
                vec![(F32, first.clone(), size)],
                vec![(F32, last.clone(), None)],
            ];
            let m = saved(&params, &dtypes, &bufs, 1);
            assert_eq!(m.virtual_stages().unwrap(), [first.clone(), last.clone()]);
            assert!(m.group(0, &[first.clone(), last.clone()]).is_ok());
        }
        // Other sizes: no count fits, refused by name.
        let bufs = [
            vec![(F32, first.clone(), None)],
            vec![(F32, last.clone(), None)],
        ];
        let mut m = saved(&params, &dtypes, &bufs, 1);
        m.items[0].chunks[0].1 += 1;
        let e = m.virtual_stages().unwrap_err().to_string();
        assert!(
            e.contains("is not what the model's parameter order gives"),
            "{e}"
        );
    }

    #[test]
    fn virtual_pipeline_stages_go_round_the_ranks_and_only_the_first_chunk_is_bucketed() {
        // Five layers over PP 2 x 2 model chunks (Megatron-LM's interleaved schedule): virtual
        // stage v x PP + s is stage s's chunk v. Stage 0 holds chunks 0 (the embedding, layers 0
        // and 1) and 2 (layer 3); stage 1 chunks 1 (layer 2) and 3 (layer 4, the final norm and
        // output layer). The first chunk is split at 100 elements, chunk 2 is not.
        let params = model(5);
        let vs = [
            stage_members(&params, 0..2, (true, false)),
            stage_members(&params, 2..3, (false, false)),
            stage_members(&params, 3..4, (false, false)),
            stage_members(&params, 4..5, (false, true)),
        ];
        let dtypes = vec![F32; params.len()];
        let bufs = [
            vec![(F32, vs[0].clone(), Some(100)), (F32, vs[2].clone(), None)],
            vec![(F32, vs[1].clone(), None), (F32, vs[3].clone(), None)],
        ];
        let m = saved(&params, &dtypes, &bufs, 2);
        assert_eq!(m.virtual_stages().unwrap(), vs);
        let first = m.group(0, &vs).unwrap();
        let at: Vec<_> = first.iter().map(|b| (b.buffer, b.index, b.sized)).collect();
        assert_eq!(
            at,
            [(0, 0, true), (0, 1, true), (0, 2, true), (1, 0, false)]
        );
        assert_eq!(first[3].members, vs[2]);
        let last = m.group(1, &vs).unwrap();
        assert_eq!(last[1].members, vs[3]);
        assert_eq!((last[1].buffer, last[1].prefix.as_str()), (1, "g1.b1.i0"));
        // Chunk 2 split at the bucket size too: not what Megatron-LM saves, refused.
        let split = [
            vec![
                (F32, vs[0].clone(), Some(100)),
                (F32, vs[2].clone(), Some(100)),
            ],
            bufs[1].clone(),
        ];
        assert!(saved(&params, &dtypes, &split, 2).virtual_stages().is_err());
        // The same save read without the args' virtual pipeline size: refused before fitting,
        // naming the chunks.
        let e = saved(&params, &dtypes, &bufs, 1).check_buffer_count(0);
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("virtual pipeline stages: 2 model chunks per rank"),
            "{e}"
        );
        assert!(e.contains("the args give 1 model chunk(s)"), "{e}");
    }

    #[test]
    fn parameters_of_two_dtypes_are_two_buffers_in_the_order_the_model_first_has_them() {
        // A bf16 model whose norms stayed fp32: the chunk's bf16 parameters (the embedding
        // first) are buffer 0, its fp32 norms buffer 1, each laid out by the rule on its own.
        let params = model(2);
        let bf = "torch.bfloat16";
        let dtypes: Vec<&str> = params
            .iter()
            .map(|p| if p.fqn.contains("norm") { F32 } else { bf })
            .collect();
        let (mats, norms): (Vec<usize>, Vec<usize>) =
            all(&params).into_iter().partition(|&i| dtypes[i] == bf);
        let bufs = [vec![(bf, mats.clone(), None), (F32, norms.clone(), None)]];
        let m = saved(&params, &dtypes, &bufs, 1);
        let stages = m.virtual_stages().unwrap();
        assert_eq!(stages, [all(&params)]);
        let got = m.group(0, &stages).unwrap();
        let members: Vec<_> = got.iter().map(|b| (b.buffer, b.members.clone())).collect();
        assert_eq!(members, [(0, mats.clone()), (1, norms.clone())]);
        // Norms first in the save: not the order megatron-core gives the buffers, refused by name.
        let swapped = [vec![(F32, norms, None), (bf, mats, None)]];
        let e = saved(&params, &dtypes, &swapped, 1).virtual_stages();
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("a buffer of torch.bfloat16 parameters as gbuf_idx_0"),
            "{e}"
        );
        // With virtual pipeline stages each chunk has its two: stage 0's chunk 2 starts at
        // gbuf_idx_2 (PP 2 x 2 chunks, one layer each).
        let params = model(4);
        let dtypes: Vec<&str> = params
            .iter()
            .map(|p| if p.fqn.contains("norm") { F32 } else { bf })
            .collect();
        let ends = [(true, false), (false, false), (false, false), (false, true)];
        let vs: Vec<Vec<usize>> = (0..4)
            .map(|v| stage_members(&params, v..v + 1, ends[v as usize]))
            .collect();
        // A layer's norm comes before its matrix: a chunk without the embedding starts fp32.
        let two = |m: &[usize]| {
            let (a, b): (Vec<usize>, Vec<usize>) = m.iter().partition(|&&i| dtypes[i] == bf);
            match dtypes[m[0]] == bf {
                true => [(bf, a, None), (F32, b, None)],
                false => [(F32, b, None), (bf, a, None)],
            }
        };
        let bufs = [
            [two(&vs[0]), two(&vs[2])].concat(),
            [two(&vs[1]), two(&vs[3])].concat(),
        ];
        let m = saved(&params, &dtypes, &bufs, 2);
        assert_eq!(m.virtual_stages().unwrap(), vs);
        let got = m.group(0, &vs).unwrap();
        let at: Vec<_> = got.iter().map(|b| (b.buffer, b.members.len())).collect();
        assert_eq!(at, [(0, 2), (1, 1), (2, 1), (3, 1)]);
        assert_eq!(m.group(1, &vs).unwrap()[3].members.len(), 2);
    }
}
