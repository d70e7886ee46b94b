//! The distributed optimizer's `dp_reshardable` buckets re-laid for a resized vocabulary: the
//! layout [`buckets`] proved, with each vocabulary parameter's TP shard grown or cut, every
//! offset after it recomputed with the 64-alignment, every chunk of every state re-cut, and
//! `per_bucket_numel` / `per_bucket_numel_unpadded` rewritten. Old rows keep their bytes (a row
//! that moves to another TP rank takes its state along), new rows' `param` (the fp32 main copy)
//! is the new weights' row, their `exp_avg` / `exp_avg_sq` zero.

use super::buckets::{self, Bucket, Param, Rule, Segment, STATES};
use super::common::{self, BucketArgs};
use super::Megatron;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::write::{object_archive, ChunkOut, ObjectEdit, TensorEdit};
use crate::formats::dcp::{ItemKind, METADATA};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::Node;

/// A resized vocabulary matrix: its item, old and new (padded) rows, width, and all its rows'
/// bytes as float32 (row-major; a bf16 weight's rows converted, exactly).
#[derive(Debug, Clone, Copy)]
pub struct NewVocab<'a> {
    pub fqn: &'a str,
    pub old_rows: u64,
    pub rows: u64,
    pub cols: u64,
    pub bytes: &'a [u8],
}

/// The re-laid buckets: every state's new tensor, the per-bucket size objects, each re-laid
/// bucket's sizes (the buckets of pipeline stages that hold no vocabulary matrix are left as
/// they are).
#[derive(Debug, Clone)]
pub struct Relaid {
    pub edits: Vec<TensorEdit>,
    pub objects: Vec<ObjectEdit>,
    pub sizes: Vec<RelaidSize>,
}

/// One re-laid bucket: its group and index, its unpadded elements before and after, its padded
/// ones after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelaidSize {
    pub group: u64,
    pub index: u64,
    pub unpadded: (u64, u64),
    pub padded: u64,
}

/// The re-lay's layout, decided from the metadata alone: the buckets in group order, the old
/// parameters, and each bucket holding a vocabulary matrix with its new segments and sizes.
struct Layout {
    bs: Vec<Bucket>,
    old_params: Vec<Param>,
    relaid: Vec<NewBucket>,
}

/// A bucket's new layout: its index in the ordered buckets, its segments, sizes and
/// the length of each data-parallel shard (None: one shard).
struct NewBucket {
    at: usize,
    segs: Vec<Segment>,
    size: RelaidSize,
    shard: Option<u64>,
}

/// Whether `m`'s proven buckets `bs` can be re-laid for `vocab` (only its names, sizes and
/// types are read), checked without reading a state: what [`relay`] refuses before it reads
/// the buckets, all but the main params' proof.
pub fn check(m: &Megatron, bs: &[Bucket], vocab: &[NewVocab<'_>], args: BucketArgs) -> Result<()> {
    layout(m, bs, vocab, args).map(|_| ())
}

/// The bucket layout rule of `m`'s run (`a`: its bucket args): with `overlap_grad_reduce` the
/// first stage's buckets close at `ddp_bucket_size` (Megatron's default max(4e7, 1e6 x DP)).
pub fn rule(m: &Megatron, a: BucketArgs) -> Rule {
    let dp = a.data_parallel_size.unwrap_or(1);
    let size = (a.overlap_grad_reduce == Some(true))
        .then(|| a.ddp_bucket_size.unwrap_or(40_000_000.max(1_000_000 * dp)));
    Rule {
        tp: m.tp,
        shards: m.optimizer_shards(),
        bucket_size: size,
    }
}

/// The bucket args of `m`'s run from `common.pt` (Megatron's defaults without one; `policy`:
/// the globals the user allowed).
pub fn run_args(m: &Megatron, policy: &GlobalPolicy) -> Result<BucketArgs> {
    match &m.common {
        Some(c) => common::bucket_args(c, policy),
        None => Ok(BucketArgs::default()),
    }
}

fn layout(m: &Megatron, bs: &[Bucket], vocab: &[NewVocab<'_>], args: BucketArgs) -> Result<Layout> {
    let bs = groups(m, bs, vocab)?;
    let old_params = buckets::params(&m.dcp)?;
    let new_params: Vec<Param> = old_params
        .iter()
        .map(|p| match vocab.iter().find(|v| v.fqn == p.fqn) {
            Some(v) => Param {
                numel: v.rows / m.tp * v.cols,
                ..p.clone()
            },
            None => p.clone(),
        })
        .collect();
    let how = How {
        m,
        args,
        rule: rule(m, args),
        multiple: pad_multiple(m, &bs)?,
        is_vocab: old_params
            .iter()
            .map(|p| vocab.iter().any(|v| v.fqn == p.fqn))
            .collect(),
        new_params,
    };
    let mut relaid = Vec::new();
    for g in 0..bs.last().map_or(0, |b| b.group + 1) {
        relaid.extend(how.group(&bs, g)?);
    }
    Ok(Layout {
        bs,
        old_params,
        relaid,
    })
}

/// What a group's re-lay needs: the run, its bucket args and rule, the end padding, which
/// parameters are vocabulary matrices, and every parameter at its new size.
struct How<'a> {
    m: &'a Megatron,
    args: BucketArgs,
    rule: Rule,
    multiple: u64,
    is_vocab: Vec<bool>,
    new_params: Vec<Param>,
}

impl How<'_> {
    /// Group `g`'s buckets (of the ordered `bs`) that change: split by the rule at the new
    /// sizes (as many as the save has), each holding a vocabulary matrix or other parameters
    /// than before; none when the group holds no vocabulary matrix.
    fn group(&self, bs: &[Bucket], g: u64) -> Result<Vec<NewBucket>> {
        let m = self.m;
        let vocab = |i: &usize| self.is_vocab.get(*i).copied().unwrap_or(false);
        let olds: Vec<(usize, &Bucket)> = bs
            .iter()
            .enumerate()
            .filter(|(_, b)| b.group == g)
            .collect();
        if !olds.iter().any(|(_, b)| b.members.iter().any(vocab)) {
            return Ok(Vec::new());
        }
        // The stage's parameters in module order: bucket 0 holds the last ones.
        let stage: Vec<usize> = olds
            .iter()
            .rev()
            .flat_map(|(_, b)| b.members.clone())
            .collect();
        let first = g < m.tp;
        let size = self.rule.bucket_size.filter(|_| first);
        let news = buckets::group_layout(&self.new_params, &stage, size);
        if news.len() != olds.len() {
            let at = size.map_or("without a bucket_size".to_string(), |b| {
                format!("at bucket_size {b}")
            });
            return Err(Error::unsupported(m.dir.join(METADATA), format!("group {g}: re-laid {at}, its parameters make {} buckets, not the save's {}: Megatron would ask for another number of bucket items, which is not written; give --optimizer drop", news.len(), olds.len())));
        }
        let mut out = Vec::new();
        for ((at, old), (members, segs, unpadded)) in olds.iter().zip(news) {
            if old.members == members && !members.iter().any(vocab) {
                continue;
            }
            if first && size.is_none() && self.args.overlap_grad_reduce.is_none() {
                // Without args saying, Megatron's default bucket size may split it.
                check_bucket_size(m, &self.new_params, &segs, self.args)?;
            }
            let size = RelaidSize {
                group: g,
                index: old.index,
                unpadded: (old.unpadded, unpadded),
                padded: unpadded.next_multiple_of(self.multiple),
            };
            let shards = m.optimizer_shards();
            out.push(NewBucket {
                at: *at,
                segs,
                size,
                shard: (shards > 1).then_some(size.padded / shards),
            });
        }
        Ok(out)
    }
}

/// `m`'s proven buckets `bs` re-laid for `vocab` (`args`: the run's bucket args): the buckets
/// that hold a vocabulary matrix (every one when PP = 1; the first and last stages' with
/// pipeline stages), the others left as they are.
pub fn relay(
    m: &Megatron,
    bs: &[Bucket],
    vocab: &[NewVocab<'_>],
    args: BucketArgs,
) -> Result<Relaid> {
    let Layout {
        bs,
        old_params,
        relaid,
    } = layout(m, bs, vocab, args)?;
    let mut edits = Vec::new();
    for s in STATES {
        // Indexed as `bs`: the re-laid buckets only. A parameter that moves to another bucket
        // (where a boundary moved) leaves its old bucket with other members, so that one is
        // re-laid too; the others are left as they are, unread: memory follows what changes,
        // not the model.
        let mut old = vec![Vec::new(); bs.len()];
        for n in &relaid {
            old[n.at] = state_bytes(m, &format!("{}.{s}", bs[n.at].prefix))?;
        }
        if s == "param" {
            prove_main_params(m, (&bs, &old_params), &old, vocab)?;
        }
        let ctx = Ctx {
            bs: &bs,
            old: &old,
            params: &old_params,
            vocab,
            tp: m.tp,
            state: s,
        };
        for n in &relaid {
            edits.push(ctx.new_state(&bs[n.at], n));
        }
    }
    let mut objects = Vec::new();
    let mut groups: Vec<u64> = relaid.iter().map(|n| n.size.group).collect();
    groups.dedup();
    for g in groups {
        // Every bucket's sizes of the group, in index order: the re-laid ones' new.
        let of = |b: &Bucket| {
            relaid
                .iter()
                .find(|n| n.size.group == g && n.size.index == b.index)
        };
        let (mut padded, mut unpadded) = (Vec::new(), Vec::new());
        for b in bs.iter().filter(|b| b.group == g) {
            padded.push(of(b).map_or(b.padded, |n| n.size.padded));
            unpadded.push(of(b).map_or(b.unpadded, |n| n.size.unpadded.1));
        }
        objects.push(numel_object(m, g, "per_bucket_numel", &padded)?);
        objects.push(numel_object(m, g, "per_bucket_numel_unpadded", &unpadded)?);
    }
    Ok(Relaid {
        edits,
        objects,
        sizes: relaid.iter().map(|n| n.size).collect(),
    })
}

/// Tied embeddings over pipeline stages, refused by name before the layout proof (which would
/// only say that the buckets are not the derived ones): the shared embedding has a bucket of
/// its own on the first and last stages, and the last stage's copy is no model item.
pub fn refuse_tied_pipelined(m: &Megatron) -> Result<()> {
    let args = m.common.as_ref().and_then(|c| c.args.as_ref());
    let tied = args.is_some_and(|a| a.untie_embeddings_and_output_weights == Some(false));
    match args.and_then(|a| a.pipeline_model_parallel_size) {
        Some(pp) if tied && pp > 1 => Err(Error::unsupported(m.dir.join(METADATA), format!("tied embeddings (untie_embeddings_and_output_weights false) over {pp} pipeline stages: the shared embedding has a bucket of its own on the first and last stages and the last stage's copy is no model item, so its dp_reshardable state is not re-laid; give --optimizer drop"))),
        _ => Ok(()),
    }
}

/// The buckets in group order (`dp_group_idx_N` is the model-parallel rank `stage x TP + tp`;
/// [`buckets::buckets`] proved them `0..TP x PP`), as many pipeline stages as the run's args
/// say; float vocabulary weights (their main copy is checked against them).
fn groups(m: &Megatron, bs: &[Bucket], vocab: &[NewVocab<'_>]) -> Result<Vec<Bucket>> {
    let path = m.dir.join(METADATA);
    let mut v = bs.to_vec();
    v.sort_by_key(|b| (b.group, b.index));
    let pp = v.last().map_or(0, |b| b.group + 1) / m.tp.max(1);
    let args = m.common.as_ref().and_then(|c| c.args.as_ref());
    if let Some(p) = args
        .and_then(|a| a.pipeline_model_parallel_size)
        .filter(|&p| p.max(1) != pp)
    {
        return Err(Error::unsupported(&path, format!("its args say pipeline_model_parallel_size {p} but the optimizer has buckets for {} groups, TP {} x PP {pp}: which stage's parameters a bucket holds is not known; give --optimizer drop", v.len(), m.tp)));
    }
    for x in vocab {
        let dt = m.vocab.iter().find(|t| t.name == x.fqn).map(|t| t.dtype);
        if !matches!(dt, Some(DType::F32 | DType::BF16 | DType::F16)) {
            return Err(Error::unsupported(&path, format!("'{}' is {dt:?}, not float32, bfloat16 or float16: its fp32 main params cannot be checked against it; give --optimizer drop", x.fqn)));
        }
    }
    Ok(v)
}

/// A bucket boundary must not move: with `overlap_grad_reduce` (unless the args say it is off)
/// a bucket of the first pipeline stage closes once it reaches `ddp_bucket_size` (Megatron's
/// default: max(4e7, 1e6 x DP)), so every parameter but the last must end below it.
fn check_bucket_size(
    m: &Megatron,
    params: &[Param],
    segs: &[Segment],
    a: BucketArgs,
) -> Result<()> {
    if a.overlap_grad_reduce == Some(false) {
        return Ok(());
    }
    let dp = a.data_parallel_size.unwrap_or(1);
    let size = a.ddp_bucket_size.unwrap_or(40_000_000.max(1_000_000 * dp));
    let last = segs
        .iter()
        .rev()
        .find(|s| s.param.is_some())
        .map(|s| s.start);
    let over = segs
        .iter()
        .find(|s| s.param.is_some() && Some(s.start) != last && s.start + s.len >= size);
    if let Some(s) = over {
        let p = s
            .param
            .and_then(|i| params.get(i))
            .map_or("?", |p| p.fqn.as_str());
        return Err(Error::unsupported(m.dir.join(METADATA), format!("re-laid, the bucket reaches its bucket_size {size} at '{p}' (ending at {}), so Megatron would split it into two buckets there: moving a bucket boundary is not done; give --optimizer drop", s.start + s.len)));
    }
    Ok(())
}

/// The bucket end padding (`lcm(DP, 128)`, or `lcm(DP, 128, 2^16)` with
/// `pad_buckets_for_high_nccl_busbw`; DP: the optimizer's shard count,
/// `Megatron::optimizer_shards`) that turns every saved unpadded size into its saved
/// `per_bucket_numel`.
fn pad_multiple(m: &Megatron, bs: &[Bucket]) -> Result<u64> {
    let dp = m.optimizer_shards();
    let l = lcm(dp, 128);
    let saved: Vec<(u64, u64)> = bs.iter().map(|b| (b.unpadded, b.padded)).collect();
    [l, lcm(l, 1 << 16)]
        .into_iter()
        .find(|&c| saved.iter().all(|(u, s)| *s == u.next_multiple_of(c)))
        .ok_or_else(|| Error::unsupported(m.dir.join(METADATA), format!("the saved per_bucket_numel {saved:?} (unpadded, saved) is not the unpadded size rounded up to lcm(DP {dp}, 128) nor to lcm(DP, 128, 65536): the bucket end padding is not known; give --optimizer drop")))
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x.max(1) * b
}

/// A 1-D state item's bytes (float32).
fn state_bytes(m: &Megatron, fqn: &str) -> Result<Vec<u8>> {
    let it = m
        .dcp
        .item(fqn)
        .ok_or_else(|| Error::format(m.dir.join(METADATA), format!("no '{fqn}'")))?;
    if !matches!(
        &it.kind,
        ItemKind::Tensor {
            dtype: DType::F32,
            ..
        }
    ) {
        return Err(Error::unsupported(
            m.dir.join(METADATA),
            format!("'{fqn}' is not float32: not Adam's fp32 state"),
        ));
    }
    m.dcp.verify_item_crcs(it)?;
    m.dcp.tensor_bytes(it)
}

/// The main copy (`param` state) of each vocabulary shard must be the weight's rows of that
/// TP rank: bit for bit for a float32 weight, rounded to its type for a bf16/fp16 one (Megatron
/// copies the fp32 main params into the model's weights after each step); and one bucket of
/// each TP rank must hold it. The proof that group `stage x TP + N` holds TP rank N's rows.
/// `old`: each bucket's `param` bytes (empty where not read: no vocabulary matrix there);
/// `params`: the model's parameters the buckets' segments index.
fn prove_main_params(
    m: &Megatron,
    (bs, params): (&[Bucket], &[Param]),
    old: &[Vec<u8>],
    vocab: &[NewVocab<'_>],
) -> Result<()> {
    for v in vocab {
        let it = m
            .dcp
            .item(v.fqn)
            .ok_or_else(|| Error::format(&m.dir, format!("no '{}'", v.fqn)))?;
        let w = m.dcp.tensor_bytes(it)?;
        let dtype = match &it.kind {
            ItemKind::Tensor { dtype, .. } => *dtype,
            ItemKind::Bytes { .. } => DType::F32,
        };
        let per = dtype.bytes_for(v.old_rows / m.tp * v.cols).unwrap_or(0) as usize;
        let mut held = 0;
        for (b, bytes) in bs.iter().zip(old) {
            let Some(s) = segment_of(b, params, v.fqn) else {
                continue;
            };
            let g = (b.group % m.tp.max(1)) as usize;
            let main = bytes.get(s.start as usize * 4..(s.start + s.len) as usize * 4);
            let weight = w.get(g * per..(g + 1) * per);
            if !main
                .zip(weight)
                .is_some_and(|(f, w)| rounds_to(f, w, dtype))
            {
                return Err(Error::unsupported(m.dir.join(METADATA), format!("'{}.param': its '{}' chunk is not that weight's rows of TP rank {g} ({dtype}, the main params rounded to it): which rows the optimizer state holds cannot be proven; give --optimizer drop", b.prefix, v.fqn)));
            }
            held += 1;
        }
        if held != m.tp {
            return Err(Error::unsupported(m.dir.join(METADATA), format!("'{}' is in {held} of the optimizer's buckets, not one per tensor-parallel rank ({}): which rows the optimizer state holds cannot be proven; give --optimizer drop", v.fqn, m.tp)));
        }
    }
    Ok(())
}

/// Whether fp32 main params (`main`) rounded to `dtype` (to nearest, ties to even, as torch
/// copies them into the model) are the weight's bytes `weight`; float32: bit for bit.
fn rounds_to(main: &[u8], weight: &[u8], dtype: DType) -> bool {
    crate::dtype::recode(main, DType::F32, dtype).is_ok_and(|r| r == weight)
}

/// The segment of bucket `b` holding parameter `fqn` (not layered).
fn segment_of(b: &Bucket, params: &[Param], fqn: &str) -> Option<Segment> {
    b.segments.iter().copied().find(|s| {
        s.param
            .and_then(|i| params.get(i))
            .is_some_and(|p| p.fqn == fqn && p.layer.is_none())
    })
}

/// What one state's re-lay reads: every group's old bytes of that state.
struct Ctx<'a> {
    bs: &'a [Bucket],
    old: &'a [Vec<u8>],
    params: &'a [Param],
    vocab: &'a [NewVocab<'a>],
    tp: u64,
    state: &'a str,
}

impl Ctx<'_> {
    /// Bucket `b`'s state re-laid as `n` says: one chunk per parameter and per gap, cut where
    /// each data-parallel shard ends (as Megatron saves it).
    fn new_state(&self, b: &Bucket, n: &NewBucket) -> TensorEdit {
        let (g, segs) = (b.group, &n.segs);
        let mut chunks = Vec::with_capacity(segs.len());
        for (i, s) in segs.iter().enumerate() {
            let bytes = match s.param {
                Some(j) => match self.vocab.iter().find(|v| self.params[j].fqn == v.fqn) {
                    Some(v) => self.vocab_rows(v, b.group),
                    None => self.old_segment(g, |x| x.param == Some(j)),
                },
                None => {
                    let next = segs.get(i + 1).and_then(|n| n.param);
                    let old = self
                        .old_gap(g, next)
                        .filter(|o| o.len() as u64 == s.len * 4);
                    old.unwrap_or_else(|| vec![0; s.len as usize * 4])
                }
            };
            for (at, len) in buckets::split(std::slice::from_ref(s), n.shard) {
                let from = (at - s.start) as usize * 4;
                chunks.push(ChunkOut::New {
                    offsets: vec![at],
                    sizes: vec![len],
                    bytes: bytes
                        .get(from..from + len as usize * 4)
                        .unwrap_or(&[])
                        .to_vec(),
                });
            }
        }
        TensorEdit {
            fqn: format!("{}.{}", b.prefix, self.state),
            shape: vec![n.size.unpadded.1],
            chunks,
        }
    }

    /// Group `g`'s old bytes of the segment `which` picks (empty when none).
    fn old_segment(&self, g: u64, which: impl Fn(&Segment) -> bool) -> Vec<u8> {
        self.bs
            .iter()
            .zip(self.old)
            .filter(|(b, _)| b.group == g)
            .find_map(|(b, old)| {
                let s = b.segments.iter().find(|s| which(s))?;
                old.get(s.start as usize * 4..(s.start + s.len) as usize * 4)
            })
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// Group `g`'s old gap before parameter `next`, in the bucket that held it.
    fn old_gap(&self, g: u64, next: Option<usize>) -> Option<Vec<u8>> {
        let (b, old) = self
            .bs
            .iter()
            .zip(self.old)
            .find(|(b, _)| b.group == g && b.segments.iter().any(|s| s.param == next))?;
        let i = b.segments.iter().position(|s| s.param == next)?;
        let gap = b
            .segments
            .get(i.checked_sub(1)?)
            .filter(|s| s.param.is_none())?;
        old.get(gap.start as usize * 4..(gap.start + gap.len) as usize * 4)
            .map(<[u8]>::to_vec)
    }

    /// Group `group`'s new shard of `v` (its TP rank's rows): global rows below the old table
    /// from the group of the same stage that held them, new rows the new weights (`param`) or
    /// zero (the moments).
    fn vocab_rows(&self, v: &NewVocab<'_>, group: u64) -> Vec<u8> {
        let row = v.cols as usize * 4;
        let (per_new, per_old) = (v.rows / self.tp, v.old_rows / self.tp);
        let (first, rank) = (group / self.tp * self.tp, group % self.tp);
        let mut out = Vec::with_capacity(per_new as usize * row);
        for r in rank * per_new..(rank + 1) * per_new {
            if r < v.old_rows {
                let (g, local) = (first + r / per_old, (r % per_old) as usize);
                let seg = self.old_segment(g, |s| {
                    s.param
                        .and_then(|i| self.params.get(i))
                        .is_some_and(|p| p.fqn == v.fqn)
                });
                out.extend_from_slice(seg.get(local * row..(local + 1) * row).unwrap_or(&[]));
            } else if self.state == "param" {
                out.extend_from_slice(
                    v.bytes
                        .get(r as usize * row..(r as usize + 1) * row)
                        .unwrap_or(&[]),
                );
            } else {
                out.extend(std::iter::repeat_n(0u8, row));
            }
        }
        out
    }
}

/// Group `g`'s sharded object `…per_bucket_numel*` with its numbers (one per bucket) set to `ns`.
fn numel_object(m: &Megatron, g: u64, what: &str, ns: &[u64]) -> Result<ObjectEdit> {
    let key = format!("optimizer.distributed.dp_group_idx_{g}.{what}");
    let (mut p, path, fqn) = buckets::object_pickle(&m.dcp, &key)?;
    let bad = |e: String| Error::format(&path, format!("'{key}': cannot rewrite it: {e}"));
    let ids =
        buckets::numel_list(&p).ok_or_else(|| bad("not [[{(dtype, dtype): [numel]}]]".into()))?;
    if ids.len() != ns.len() {
        return Err(bad(format!("{} buckets, not {}", ids.len(), ns.len())));
    }
    for (id, &n) in ids.into_iter().zip(ns) {
        *p.node_mut(id) = Node::Int(i64::try_from(n).map_err(|e| bad(e.to_string()))?);
    }
    Ok(ObjectEdit {
        fqn,
        bytes: object_archive(&p).map_err(bad)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{open, Checkpoint};

    fn fixture() -> Megatron {
        fixture_at("testdata/megatron/tp2")
    }

    fn fixture_at(rel: &str) -> Megatron {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        match open(&p, &Default::default()) {
            Ok(Checkpoint::Megatron(m)) => *m,
            _ => panic!("{rel} is not read as Megatron"),
        }
    }

    fn args(size: u64, overlap: Option<bool>) -> BucketArgs {
        BucketArgs {
            overlap_grad_reduce: overlap,
            ddp_bucket_size: Some(size),
            data_parallel_size: None,
        }
    }

    /// `m`'s buckets and its vocabulary grown 128 -> 256 rows (old rows the
    /// weights' as f32, new zero).
    fn grown(m: &Megatron) -> (Vec<Bucket>, Vec<Vec<u8>>) {
        let a = run_args(m, &GlobalPolicy::default()).unwrap();
        let bs = buckets::buckets(&m.dcp, rule(m, a)).unwrap();
        let bytes = m
            .vocab
            .iter()
            .map(|v| {
                let b = m.dcp.tensor_bytes(m.dcp.item(v.name).unwrap()).unwrap();
                let mut b = crate::dtype::recode(&b, v.dtype, DType::F32).unwrap();
                b.resize(256 * 4 * 4, 0);
                b
            })
            .collect();
        (bs, bytes)
    }

    fn new_vocab<'a>(m: &'a Megatron, bytes: &'a [Vec<u8>]) -> Vec<NewVocab<'a>> {
        m.vocab
            .iter()
            .zip(bytes)
            .map(|(v, b)| NewVocab {
                fqn: v.name,
                old_rows: 128,
                rows: 256,
                cols: 4,
                bytes: b,
            })
            .collect()
    }

    #[test]
    fn only_the_first_pipeline_stages_buckets_are_split_at_the_bucket_size() {
        // TP 2 x PP 2 x DP 3, overlap_grad_reduce at bucket_size 200, grown 128 -> 256 rows.
        // Stage 0's parameters are in two buckets, its embedding in bucket_idx_1 (re-laid);
        // stage 1's output layer (0..512) would close a bucket at 200, but Megatron sets
        // bucket_size None past the first stage: one bucket, re-laid. At 500 stage 0's
        // parameters would make one bucket, not the save's two: refused.
        let m = fixture_at("testdata/megatron/tp2_pp2_dp3_bf16");
        let a = run_args(&m, &GlobalPolicy::default()).unwrap();
        assert_eq!(rule(&m, a).bucket_size, Some(200));
        let (bs, bytes) = grown(&m);
        let vocab = new_vocab(&m, &bytes);
        let r = relay(&m, &bs, &vocab, a).unwrap();
        let at: Vec<(u64, u64)> = r.sizes.iter().map(|x| (x.group, x.index)).collect();
        assert_eq!(at, [(0, 1), (1, 1), (2, 0), (3, 0)]);
        let err = relay(&m, &bs, &vocab, args(500, Some(true)))
            .unwrap_err()
            .line();
        assert!(
            err.contains("group 0: re-laid at bucket_size 500")
                && err.contains("make 1 buckets, not the save's 2"),
            "{err}"
        );
    }

    #[test]
    fn a_relay_reads_only_the_buckets_that_change() {
        // The relay reads the re-laid buckets only. Stage 0's bucket_idx_0 (fc2, fc1, norm,
        // qkv) keeps its parameters and holds no vocabulary matrix: not re-laid, so not read.
        // On tp2 (one bucket per group) both are.
        let m = fixture_at("testdata/megatron/tp2_pp2_dp3_bf16");
        let a = run_args(&m, &GlobalPolicy::default()).unwrap();
        let (bs, bytes) = grown(&m);
        let vocab = new_vocab(&m, &bytes);
        let l = layout(&m, &bs, &vocab, a).unwrap();
        let at: Vec<(u64, u64)> = l.bs.iter().map(|b| (b.group, b.index)).collect();
        assert_eq!(at, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]);
        let relaid = |l: &Layout| {
            let at: Vec<usize> = l.relaid.iter().map(|n| n.at).collect();
            (0..l.bs.len()).map(|i| at.contains(&i)).collect::<Vec<_>>()
        };
        assert_eq!(relaid(&l), [false, true, false, true, true, true]);
        let m = fixture();
        let (bs, bytes) = grown(&m);
        let vocab = new_vocab(&m, &bytes);
        let l = layout(&m, &bs, &vocab, args(300, Some(false))).unwrap();
        assert_eq!(relaid(&l), [true, true]);
    }

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

    #[test]
    fn a_relay_that_would_move_a_bucket_boundary_is_refused_naming_the_parameter() {
        // The fixture's vocabulary grown 128 -> 256 rows (old rows the weights', new zero):
        // Megatron closes a bucket after the parameter that reaches ddp_bucket_size, so a size
        // reached by any parameter but the last would split the re-laid bucket: refused at
        // exactly that end (`>=`), not one element past it, nor when overlap_grad_reduce is off.
        let m = fixture();
        let bs = buckets::buckets(&m.dcp, rule(&m, BucketArgs::default())).unwrap();
        let bytes: Vec<Vec<u8>> = m
            .vocab
            .iter()
            .map(|v| {
                let mut b = m.dcp.tensor_bytes(m.dcp.item(v.name).unwrap()).unwrap();
                b.resize(256 * 4 * 4, 0);
                b
            })
            .collect();
        let vocab = new_vocab(&m, &bytes);
        let mut params = buckets::params(&m.dcp).unwrap();
        for p in params
            .iter_mut()
            .filter(|p| vocab.iter().any(|v| v.fqn == p.fqn))
        {
            p.numel = 128 * 4;
        }
        let (segs, unpadded) = buckets::lay_out(&params, &buckets::all(&params));
        assert_eq!(unpadded, 1600);
        let last = segs.iter().rev().find(|s| s.param.is_some()).unwrap().start;
        let end = segs
            .iter()
            .filter(|s| s.param.is_some() && s.start != last)
            .map(|s| s.start + s.len)
            .max()
            .unwrap();
        let err = relay(&m, &bs, &vocab, args(end, None)).unwrap_err().line();
        assert!(
            err.contains(&format!("bucket_size {end} at '"))
                && err.contains(&format!("(ending at {end})"))
                && err.contains("--optimizer drop"),
            "{err}"
        );
        assert!(relay(&m, &bs, &vocab, args(end, Some(true))).is_err());
        assert!(relay(&m, &bs, &vocab, args(end, Some(false))).is_ok());
        assert!(relay(&m, &bs, &vocab, args(end + 1, None)).is_ok());
    }
}
