//! The distributed optimizer's bucket rule, megatron-core 0.16.1's `_ParamAndGradBuffer`: a
//! stage's parameters walked in reverse module order, each start rounded up to [`ALIGN`], a
//! bucket closed where `bucket_size` is reached or before a shared embedding, and each bucket's
//! data-parallel shards. Only the model's parameter list goes in ([`super::params`] reads it
//! from a save, the legacy layout from a rank file); proving it against a save is the parent's.

/// `_pad_start_of_param_if_needed`: with the distributed optimizer each parameter starts at a
/// multiple of 64 elements.
pub const ALIGN: u64 = 64;

/// One parameter of the model, in the module's order: its item, its layer (for the stacked
/// `decoder.layers.*` items) and its elements on one tensor-parallel rank. `shared`: the word
/// embeddings shared with the output layer over pipeline stages (megatron-core's
/// `shared_embedding`), which the distributed optimizer gives a bucket of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub fqn: String,
    pub layer: Option<u64>,
    pub numel: u64,
    pub shared: bool,
}

/// One piece of a bucket: a parameter's elements (`param`: its index in [`super::params`]'s list) or
/// an alignment gap (None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub len: u64,
    pub param: Option<usize>,
}

/// `_ParamAndGradBuffer`'s layout of the `members` of `params` in one bucket: walked in
/// reverse, each start rounded up to [`ALIGN`], a gap segment before it where that moved it; and
/// the bucket's unpadded length.
pub fn lay_out(params: &[Param], members: &[usize]) -> (Vec<Segment>, u64) {
    let mut segs = Vec::new();
    let mut at: u64 = 0;
    for &i in members.iter().rev() {
        let Some(p) = params.get(i).filter(|p| p.numel > 0) else {
            continue;
        };
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

/// What a bucket layout depends on besides the model: TP, the optimizer's data-parallel shard
/// count (DP x CP), the first pipeline stage's bucket size (None: one bucket per group),
/// whether the embedding is shared with the output layer over pipeline stages (see
/// [`super::params`]) and the model chunks per rank (virtual pipeline stages; 1 without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub tp: u64,
    pub shards: u64,
    pub bucket_size: Option<u64>,
    pub tied: bool,
    pub chunks: u64,
}

/// One bucket's members (module order), and whether it ends where the next parameter would
/// have started (aligned): Megatron closes the bucket before a shared embedding there.
type Split = (Vec<usize>, bool);

/// `_ParamAndGradBuffer`'s buckets of `members` (module order): walked in reverse, a bucket
/// closes after the parameter whose end, counted from the bucket's start, reaches `size`; a
/// `shared` parameter is a bucket of its own (the bucket before it closes at its aligned
/// start); each bucket's members in module order, bucket 0 (the last parameters) first.
pub fn split_buckets(params: &[Param], members: &[usize], size: Option<u64>) -> Vec<Split> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut at: u64 = 0;
    let mut close = |cur: &mut Vec<usize>, aligned| {
        let mut m = std::mem::take(cur);
        m.reverse();
        out.push((m, aligned));
    };
    for &i in members.iter().rev() {
        let shared = params.get(i).is_some_and(|p| p.shared);
        if shared && !cur.is_empty() {
            close(&mut cur, true);
            at = 0;
        }
        cur.push(i);
        let Some(p) = params.get(i).filter(|p| p.numel > 0) else {
            continue;
        };
        let end = at.next_multiple_of(ALIGN) + p.numel;
        if shared || size.is_some_and(|b| end >= b) {
            close(&mut cur, false);
            at = 0;
        } else {
            at = end;
        }
    }
    if !cur.is_empty() {
        close(&mut cur, false);
    }
    out
}

/// One bucket's derived layout: its members, segments and unpadded length.
pub type BucketLayout = (Vec<usize>, Vec<Segment>, u64);

/// The buckets of a stage holding `members`, split at `size`, each laid out (a bucket closed
/// before a shared embedding with a last gap to the aligned end, which Megatron counts in it).
pub fn group_layout(params: &[Param], members: &[usize], size: Option<u64>) -> Vec<BucketLayout> {
    split_buckets(params, members, size)
        .into_iter()
        .map(|(m, aligned)| {
            let (mut segs, mut unpadded) = lay_out(params, &m);
            let end = unpadded.next_multiple_of(ALIGN);
            if aligned && end > unpadded {
                segs.push(Segment {
                    start: unpadded,
                    len: end - unpadded,
                    param: None,
                });
                unpadded = end;
            }
            (m, segs, unpadded)
        })
        .collect()
}

/// Every parameter of `params`: what a single stage holds.
pub fn all(params: &[Param]) -> Vec<usize> {
    (0..params.len()).collect()
}

/// `members` grouped by `key`, the groups in the order their keys first appear, each in
/// `members`' order: a model chunk's buffers, as megatron-core's `DistributedDataParallel` groups
/// the chunk's parameters by dtype pair in the order `named_parameters` first has each.
pub fn by_first_seen<K: PartialEq>(
    members: impl IntoIterator<Item = usize>,
    key: impl Fn(usize) -> K,
) -> Vec<(K, Vec<usize>)> {
    let mut out: Vec<(K, Vec<usize>)> = Vec::new();
    for i in members {
        let k = key(i);
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some((_, v)) => v.push(i),
            None => out.push((k, vec![i])),
        }
    }
    out
}

/// The parameters a pipeline stage holds: the ones before the layers on the `first` stage,
/// after them on the `last`, and the layers in `layers`.
pub(super) fn stage_members(
    params: &[Param],
    layers: std::ops::Range<u64>,
    (first, last): (bool, bool),
) -> Vec<usize> {
    let first_layer = params.iter().position(|p| p.layer.is_some());
    let held = |i: usize, p: &Param| match (p.layer, first_layer) {
        (Some(l), _) => layers.contains(&l),
        (None, Some(f)) if i > f => last,
        (None, _) => first,
    };
    (0..params.len()).filter(|&i| held(i, &params[i])).collect()
}

/// `segs` as the distributed optimizer saves them: each cut where a data-parallel shard of
/// `shard` elements ends (one chunk per parameter and gap per replica; None: one shard).
pub fn split(segs: &[Segment], shard: Option<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(segs.len());
    for s in segs {
        let (mut at, end) = (s.start, s.start + s.len);
        while at < end {
            let next = shard
                .filter(|&n| n > 0)
                .map_or(end, |n| ((at / n + 1) * n).min(end));
            out.push((at, next - at));
            at = next;
        }
    }
    out
}

/// The first of `chunks` ((offset, length), sorted) that is not the derived one at its place
/// in `want` (or the place of a derived chunk no chunk is at): its index.
pub fn first_mismatch(chunks: &[(u64, u64)], want: &[(u64, u64)]) -> Option<usize> {
    let n = chunks.len().max(want.len());
    (0..n).find(|&i| chunks.get(i) != want.get(i))
}

#[cfg(test)]
/// An embedding, `layers` layers of a norm and a matrix, a final norm and an output layer.
pub(super) fn model(layers: u64) -> Vec<Param> {
    let p = |fqn: &str, layer, numel| Param {
        fqn: fqn.into(),
        layer,
        numel,
        shared: false,
    };
    let mut v = vec![p("embedding.word_embeddings.weight", None, 256)];
    for l in 0..layers {
        v.push(p("decoder.layers.norm", Some(l), 4));
        v.push(p("decoder.layers.fc", Some(l), 192));
    }
    v.push(p("decoder.final_layernorm.weight", None, 4));
    v.push(p("output_layer.weight", None, 256));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_embedding_is_a_bucket_of_its_own_closing_the_one_before_at_its_aligned_start() {
        // Tied embeddings over two stages (megatron-core's shared_embedding): no output layer
        // item; the embedding and the last stage's copy of it each a bucket of their own.
        let mut params = model(2);
        params.pop();
        params[0].shared = true;
        params.push(params[0].clone());
        let seg = |start, len, param| Segment { start, len, param };
        let first = stage_members(&params, 0..1, (true, false));
        assert_eq!(
            group_layout(&params, &first, None),
            [
                // Layer 0's fc at 0, its norm at 192..196 and the gap to 256, counted in it.
                (
                    vec![1, 2],
                    vec![
                        seg(0, 192, Some(2)),
                        seg(192, 4, Some(1)),
                        seg(196, 60, None)
                    ],
                    256
                ),
                (vec![0], vec![seg(0, 256, Some(0))], 256),
            ]
        );
        // The last stage: the copy is bucket 0; the bucket after it ends unaligned as usual.
        let last = stage_members(&params, 1..2, (false, true));
        let layout = group_layout(&params, &last, None);
        assert_eq!(layout[0], (vec![6], vec![seg(0, 256, Some(6))], 256));
        assert_eq!((layout[1].0.clone(), layout[1].2), (vec![3, 4, 5], 260));
        // With a bucket size the shared one still stands alone.
        let sized = split_buckets(&params, &first, Some(100));
        assert_eq!(sized, [(vec![2], false), (vec![1], true), (vec![0], false)]);
    }

    #[test]
    fn buckets_close_after_the_parameter_that_reaches_the_bucket_size() {
        // Walked in reverse: the output layer (256), the final norm (4), then each layer's fc
        // (192) and norm (4), each start aligned to 64. At 300: the output layer and final norm
        // end at 260, layer 1's fc at 512 >= 300 closes bucket 0; then layer 1's norm ends at
        // 4, layer 0's fc at 256, its norm at 260, the embedding at 576 >= 300 closes bucket 1.
        let params = model(2);
        let all = all(&params);
        let name = |i: usize| (params[i].fqn.as_str(), params[i].layer);
        let b = split_buckets(&params, &all, Some(300));
        assert!(b.iter().all(|(_, aligned)| !aligned));
        let names: Vec<Vec<_>> = b
            .iter()
            .map(|(m, _)| m.iter().map(|&i| name(i)).collect())
            .collect();
        assert_eq!(
            names,
            [
                vec![
                    ("decoder.layers.fc", Some(1)),
                    ("decoder.final_layernorm.weight", None),
                    ("output_layer.weight", None)
                ],
                vec![
                    ("embedding.word_embeddings.weight", None),
                    ("decoder.layers.norm", Some(0)),
                    ("decoder.layers.fc", Some(0)),
                    ("decoder.layers.norm", Some(1))
                ],
            ]
        );
        // At exactly a parameter's end (>=): 512 closes after the same fc; at 513 bucket 0 takes
        // layer 1's norm too (512..516).
        assert_eq!(split_buckets(&params, &all, Some(512))[0].0.len(), 3);
        assert_eq!(
            split_buckets(&params, &all, Some(513)),
            [(vec![3, 4, 5, 6], false), (vec![0, 1, 2], false)]
        );
        // No size: one bucket, all of them.
        assert_eq!(
            split_buckets(&params, &all, None),
            vec![(all.clone(), false)]
        );
        let layout = group_layout(&params, &all, Some(300));
        assert_eq!(layout.iter().map(|b| b.2).collect::<Vec<_>>(), [512, 576]);
    }
}
