//! The distributed optimizer's saved bucket sizes: each group's `per_bucket_numel` and
//! `per_bucket_numel_unpadded` sharded objects, `[[{(param dtype, grad dtype): [numel, …]}, …]]`
//! with one one-key dict per buffer (megatron-core's `self.buffers`: each model chunk's buffers
//! in turn, one per dtype pair), read from their DCP byte items.

use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind, METADATA};
use crate::formats::megatron::common::uint;
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};

/// One buffer's saved entry: its dtype pair (`torch.bfloat16`, …: the parameters', then the
/// gradients') and each bucket's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferSizes {
    pub pair: Vec<String>,
    pub sizes: Vec<u64>,
}

/// The `per_bucket_numel` key of group `g` (`what`: `per_bucket_numel` or
/// `per_bucket_numel_unpadded`).
pub fn key(g: u64, what: &str) -> String {
    format!("optimizer.distributed.dp_group_idx_{g}.{what}")
}

/// Each buffer's dict in a `per_bucket_numel*` pickle: its dtype pair and the ids of its
/// numbers; None when the pickle is not `[[{(dtype, dtype): [n, …]}, …]]`.
pub fn numel_lists(p: &Pickle) -> Option<Vec<(Vec<String>, Vec<Id>)>> {
    let Node::List(outer) = p.node(p.root) else {
        return None;
    };
    let [inner] = outer.as_slice() else {
        return None;
    };
    let Node::List(buffers) = p.node(*inner) else {
        return None;
    };
    let buffer = |d: Id| {
        let [(k, v)] = p.dict_entries(d)? else {
            return None;
        };
        let Node::Tuple(pair) = p.node(*k) else {
            return None;
        };
        let pair = pair
            .iter()
            .map(|&x| p.global_name(x))
            .collect::<Option<_>>()?;
        let Node::List(ids) = p.node(*v) else {
            return None;
        };
        Some((pair, ids.clone()))
    };
    buffers.iter().map(|&d| buffer(d)).collect()
}

/// A `per_bucket_numel*` pickle's numbers set to `ns` (one list per buffer, one number per
/// bucket); an error when it is not that shape or holds other counts.
pub fn set_numels(p: &mut Pickle, ns: &[Vec<u64>]) -> std::result::Result<(), String> {
    let lists = numel_lists(p).ok_or("not [[{(dtype, dtype): [numel, …]}, …]]")?;
    let have: Vec<usize> = lists.iter().map(|l| l.1.len()).collect();
    let want: Vec<usize> = ns.iter().map(Vec::len).collect();
    if have != want {
        return Err(format!("buckets per buffer {have:?}, not {want:?}"));
    }
    for (id, &n) in lists.into_iter().flat_map(|l| l.1).zip(ns.iter().flatten()) {
        *p.node_mut(id) = Node::Int(i64::try_from(n).map_err(|e| e.to_string())?);
    }
    Ok(())
}

/// Each buffer's sizes in the sharded object `key` (a group's `…per_bucket_numel*`).
pub fn per_buffer_numel(dcp: &Dcp, key: &str) -> Result<Vec<BufferSizes>> {
    let (p, path, _) = object_pickle(dcp, key)?;
    let bad = || {
        Error::format(&path, format!("'{key}' is not [[{{(dtype, dtype): [numel, …]}}, …]]: not megatron-core's per-bucket sizes"))
    };
    let lists = numel_lists(&p).ok_or_else(bad)?;
    lists
        .into_iter()
        .map(|(pair, ids)| {
            let sizes = ids.iter().map(|&id| uint(&p, id)).collect::<Option<_>>();
            Ok(BufferSizes {
                pair,
                sizes: sizes.ok_or_else(bad)?,
            })
        })
        .collect()
}

/// What a group's buffers are, from their pairs: a dtype pair listed twice means virtual
/// pipeline stages' model chunks; several pairs, parameters of several dtypes (or both).
pub fn why_buffers(pairs: &[Vec<String>]) -> String {
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

    /// `[[{(a, b): [sizes]}, …]]` as megatron-core pickles it, one dict per `(pair, sizes)`.
    fn pickle(buffers: &[((&str, &str), &[i64])]) -> Pickle {
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
        let mut dicts = Vec::new();
        for ((a, b), sizes) in buffers {
            let (a, b) = (global(&mut p, a), global(&mut p, b));
            let k = p.push(Node::Tuple(vec![a, b]));
            let ns = sizes.iter().map(|&n| p.push(Node::Int(n))).collect();
            let v = p.push(Node::List(ns));
            dicts.push(p.push(Node::Dict(vec![(k, v)])));
        }
        let inner = p.push(Node::List(dicts));
        p.root = p.push(Node::List(vec![inner]));
        p
    }

    #[test]
    fn each_buffer_of_a_group_is_read_with_its_pair_and_the_buffers_are_named_by_their_pairs() {
        // [[{(f32, f32): [768]}, {(f32, f32): [452, 64]}]]: a virtual pipeline save's group (two
        // model chunks, as megatron-core 0.16.1 wrote it; the second split at a bucket size).
        let f = ("float32", "float32");
        let p = pickle(&[(f, &[768]), (f, &[452, 64])]);
        let lists = numel_lists(&p).unwrap();
        let f32s = vec!["torch.float32".to_string(); 2];
        assert_eq!(lists.len(), 2);
        assert_eq!(lists[0].0, f32s);
        let ints: Vec<_> = lists[1].1.iter().map(|&i| uint(&p, i)).collect();
        assert_eq!(ints, [Some(452), Some(64)]);
        let pairs: Vec<_> = lists.into_iter().map(|l| l.0).collect();
        assert!(why_buffers(&pairs).starts_with("virtual pipeline stages: 2 model chunks"));
        // A bf16 run whose norms stayed fp32: two pairs.
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
        // Not that shape: a second outer entry, or a dict of two pairs.
        let mut two = pickle(&[(f, &[1])]);
        let Node::List(outer) = two.node(two.root).clone() else {
            panic!()
        };
        two.root = two.push(Node::List([outer.clone(), outer].concat()));
        assert_eq!(numel_lists(&two), None);
        let mut wide = pickle(&[(f, &[1])]);
        let Node::List(outer) = wide.node(wide.root).clone() else {
            panic!()
        };
        let Node::List(dicts) = wide.node(outer[0]).clone() else {
            panic!()
        };
        let Node::Dict(e) = wide.node(dicts[0]).clone() else {
            panic!()
        };
        *wide.node_mut(dicts[0]) = Node::Dict([e.clone(), e].concat());
        assert_eq!(numel_lists(&wide), None);
    }

    #[test]
    fn each_buffers_numbers_are_rewritten_in_place_and_other_counts_refused() {
        let (f, b) = (("float32", "float32"), ("bfloat16", "float32"));
        let mut p = pickle(&[(b, &[384, 512]), (f, &[64]), (b, &[772])]);
        set_numels(&mut p, &[vec![384, 640], vec![64], vec![1028]]).unwrap();
        let got: Vec<Vec<Option<u64>>> = numel_lists(&p)
            .unwrap()
            .iter()
            .map(|(_, ids)| ids.iter().map(|&i| uint(&p, i)).collect())
            .collect();
        let some = |v: &[u64]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
        assert_eq!(got, [some(&[384, 640]), some(&[64]), some(&[1028])]);
        // The pairs stay; a list per buffer of another length, or fewer buffers: refused.
        assert_eq!(numel_lists(&p).unwrap()[2].0[0], "torch.bfloat16");
        let e = set_numels(&mut p, &[vec![384], vec![64, 1], vec![1028]]);
        assert_eq!(
            e.unwrap_err(),
            "buckets per buffer [2, 1, 1], not [1, 2, 1]"
        );
        assert!(set_numels(&mut p, &[vec![1, 2], vec![3]]).is_err());
    }
}
