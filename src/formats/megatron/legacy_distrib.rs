//! A legacy save's distributed-optimizer state (`mp_rank_*/distrib_optim.pt`,
//! [`distrib_optim`]) re-laid for a resized vocabulary, per pipeline stage: each rank's buffers
//! proven against its model's parameters, then the buffers holding a vocabulary matrix laid out
//! again at the new rows (old rows' state moved, between TP ranks where the per-rank share
//! changed; new rows' main params the new weights, moments zero).

use super::buckets::NewVocab;
use super::buckets::{by_first_seen, Param, EMBEDDING, OUTPUT};
use super::common::{bucket_args_in, Args};
use super::distrib_optim::{self, DistribOptim, Flat, NewBuffer};
use super::legacy::{dict_parameters, model_dicts, Legacy, Rank, DISTRIB_OPTIM};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::TensorRef;

/// Every rank's `distrib_optim.pt`, in [`Legacy::ranks`] order (refused when some rank has
/// none: a save holds one per model-parallel rank), read with the `user`'s globals and
/// Megatron's.
pub fn open_all(l: &Legacy, user: &GlobalPolicy) -> Result<Vec<DistribOptim>> {
    let policy = &super::common::globals(user);
    l.ranks
        .iter()
        .map(|r| {
            let p = r.path.with_file_name(DISTRIB_OPTIM);
            if !p.is_file() {
                return Err(Error::format(&p, "missing: rank 0's folder holds the distributed optimizer's state, so every rank folder does; copy the whole iteration folder"));
            }
            DistribOptim::open(&p, policy)
        })
        .collect()
}

/// The new buffers of each rank (in `l.ranks` order; none where nothing changes) for vocabulary
/// matrices at `rows` rows whose new rows are `new_rows` (per [`Legacy::vocab`] entry, in the
/// weights' dtype). Every rank's every buffer is proven first.
pub fn relay<'a>(
    l: &Legacy,
    files: &'a [DistribOptim],
    rows: u64,
    new_rows: &[Vec<u8>],
) -> Result<Vec<Vec<NewBuffer<'a>>>> {
    let tp = l.tp as usize;
    let mut out: Vec<Vec<NewBuffer<'a>>> = files.iter().map(|_| Vec::new()).collect();
    let f32_rows: Vec<Vec<u8>> = l
        .vocab
        .iter()
        .zip(new_rows)
        .map(|(v, b)| {
            crate::dtype::recode(b, v.dtype, DType::F32)
                .map_err(|e| Error::tensor(&l.dir, v.name, e.to_string()))
        })
        .collect::<Result<_>>()?;
    for (s, (stage, files)) in l.ranks.chunks(tp).zip(files.chunks(tp)).enumerate() {
        let st = stage_params(l, stage, &files[0])?;
        let size = bucket_size(l, s == 0);
        // check-vocab proved these files already: their layouts without the main copies.
        let again = l.distrib_proven.get().is_none();
        let olds = prove_stage(stage, files, &st, size, again)?;
        let grown: Vec<NewVocab<'_>> = l
            .vocab
            .iter()
            .zip(&f32_rows)
            .filter(|(v, _)| v.pp == stage[0].pp && v.shape[0] != rows)
            .map(|(v, b)| NewVocab {
                fqn: v.name,
                old_rows: v.shape[0],
                rows,
                cols: v.shape[1],
                new_rows: b,
            })
            .collect();
        if grown.is_empty() {
            continue;
        }
        let new_params: Vec<(Param, DType)> = st
            .params
            .iter()
            .map(|(p, d)| match grown.iter().find(|g| g.fqn == p.fqn) {
                Some(g) => (
                    Param {
                        numel: g.rows / l.tp * g.cols,
                        ..p.clone()
                    },
                    *d,
                ),
                None => (p.clone(), *d),
            })
            .collect();
        for (bi, (old, (members, sized))) in olds.iter().zip(&st.buffers).enumerate() {
            let new = distrib_optim::flat(&new_params, members, size.filter(|_| *sized));
            if new == *old {
                continue;
            }
            let per_rank = distrib_optim::relay(files, bi, (old, &new), &st.params, &grown)?;
            for (t, nb) in per_rank.into_iter().enumerate() {
                out[s * tp + t].push(nb);
            }
        }
    }
    Ok(out)
}

/// Every rank's state `files` proven against its model (check-vocab's check).
pub fn prove_all(l: &Legacy, files: &[DistribOptim]) -> Result<()> {
    let tp = l.tp as usize;
    for (s, (stage, files)) in l.ranks.chunks(tp).zip(files.chunks(tp)).enumerate() {
        let st = stage_params(l, stage, &files[0])?;
        prove_stage(stage, files, &st, bucket_size(l, s == 0), true)?;
    }
    if files.len() == l.ranks.len() {
        // Every rank's file proven: a re-lay of them in this run need not compare again.
        let _ = l.distrib_proven.set(());
    }
    Ok(())
}

/// Rank `rank` of `l`'s state `f` proven (the buffers' sizes and every main copy against the
/// weights; the output's check).
pub fn prove_rank(l: &Legacy, rank: &Rank, f: &DistribOptim) -> Result<()> {
    let st = stage_params(l, std::slice::from_ref(rank), f)?;
    let first = l.ranks.first().is_some_and(|r| r.pp == rank.pp);
    let size = bucket_size(l, first);
    prove_stage(
        std::slice::from_ref(rank),
        std::slice::from_ref(f),
        &st,
        size,
        true,
    )
    .map(|_| ())
}

/// Megatron's bucket size: `ddp_bucket_size` with `overlap_grad_reduce`, on the first pipeline
/// stage only (None: one bucket).
fn bucket_size(l: &Legacy, first_stage: bool) -> Option<u64> {
    let a = bucket_args_in(&l.ranks[0].file.pickle);
    a.overlap_size().filter(|_| first_stage)
}

/// A stage's parameters in module order, each with its dtype and the model dict holding it
/// (`model`, or `model0`, `model1`, … with virtual pipeline stages: one per model chunk), and
/// the members of each of the file's buffers, with whether its buckets close at the bucket size
/// (the first chunk's only: Megatron-LM disables bucketing for the others).
struct Stage {
    params: Vec<(Param, DType)>,
    dicts: Vec<String>,
    buffers: Vec<(Vec<usize>, bool)>,
}

/// A stage's [`Stage`] (every TP rank holds the same shapes; rank 0's file) with `f`'s buffers
/// (every rank's are checked alike): each model chunk's in turn, one per dtype its parameters
/// have, holding the chunk's parameters of the buffer's dtype. With the embedding tied to the
/// output layer over pipeline stages, the first stage's embedding and the last stage's output
/// layer (its copy) are `shared`: a bucket of their own.
fn stage_params(l: &Legacy, stage: &[Rank], f: &DistribOptim) -> Result<Stage> {
    let tied = l.args.as_ref().is_some_and(Args::tied);
    let shared = match stage[0].pp {
        Some(0) if tied && l.pp > 1 => Some(EMBEDDING),
        Some(s) if tied && l.pp > 1 && s + 1 == l.pp => Some(OUTPUT),
        _ => None,
    };
    let p = &stage[0].file.pickle;
    let dicts = model_dicts(p);
    if dicts.is_empty() {
        return Err(Error::unsupported(&stage[0].path, "no 'model' entry (nor 'model0', 'model1', … of virtual pipeline stages): the model the distributed optimizer's buffers hold is not known; give --optimizer drop"));
    }
    let mut st = Stage {
        params: Vec::new(),
        dicts: Vec::new(),
        buffers: Vec::new(),
    };
    let mut chunks = Vec::new();
    for (key, m) in &dicts {
        let start = st.params.len();
        for (fqn, shape, dtype) in dict_parameters(p, *m) {
            let numel = shape.iter().product();
            let shared = shared == Some(fqn.as_str());
            let p = Param {
                fqn,
                layer: None,
                numel,
                shared,
            };
            st.params.push((p, dtype));
            st.dicts.push(key.clone());
        }
        chunks.push(start..st.params.len());
    }
    let dtypes: Vec<DType> = st.params.iter().map(|(_, d)| *d).collect();
    st.buffers = buffer_members(&dtypes, &chunks, &buffer_dtypes(f)).ok_or_else(|| {
        let each: Vec<String> = dicts.iter().zip(&chunks).map(|((k, _), r)| {
            let groups = by_first_seen(r.clone(), |i| dtypes[i]);
            format!("'{k}': {:?}", groups.iter().map(|(d, _)| d).collect::<Vec<_>>())
        }).collect();
        Error::unsupported(&f.path, format!("its buffers are of {:?}, but the model chunks' parameters ({}) make a buffer per dtype of each chunk: which parameters a buffer holds is not known; give --optimizer drop", buffer_dtypes(f), each.join(", ")))
    })?;
    Ok(st)
}

/// Each buffer's members and whether it is its chunk's first stage's bucketed one: megatron-core
/// gives each model chunk (`chunks`: its parameters' range in `dtypes`, in order) a buffer per
/// dtype its parameters have, one after the other; `saved` (the file's buffers' dtypes, in order)
/// must be those, a chunk's buffers in any order. None when they are not.
fn buffer_members(
    dtypes: &[DType],
    chunks: &[std::ops::Range<usize>],
    saved: &[DType],
) -> Option<Vec<(Vec<usize>, bool)>> {
    let mut out = Vec::new();
    let mut at = saved.iter();
    for (c, r) in chunks.iter().enumerate() {
        dtypes.get(r.clone())?;
        let mut left = by_first_seen(r.clone(), |i| dtypes[i]);
        while !left.is_empty() {
            let d = *at.next()?;
            let (_, members) = left.remove(left.iter().position(|(x, _)| *x == d)?);
            out.push((members, c == 0));
        }
    }
    at.next().is_none().then_some(out)
}

/// Each buffer's dtype, in `f`'s order.
fn buffer_dtypes(f: &DistribOptim) -> Vec<DType> {
    f.buffers.iter().map(|b| b.dtype).collect()
}

/// Each buffer's layout, proven on every rank of the stage: the same buffers (dtype, size) on
/// each, every parameter's main copy its weight ([`DistribOptim::prove`]; skipped unless
/// `copies`, for files proven before in this run).
fn prove_stage(
    stage: &[Rank],
    files: &[DistribOptim],
    st: &Stage,
    size: Option<u64>,
    copies: bool,
) -> Result<Vec<Flat>> {
    let first = &files[0];
    let olds: Vec<Flat> = st
        .buffers
        .iter()
        .map(|(m, sized)| distrib_optim::flat(&st.params, m, size.filter(|_| *sized)))
        .collect();
    for (rank, f) in stage.iter().zip(files) {
        let same = f.buffers.len() == first.buffers.len()
            && f.buffers
                .iter()
                .zip(&first.buffers)
                .all(|(a, b)| (a.dtype, a.numel) == (b.dtype, b.numel));
        if !same {
            return Err(Error::format(&f.path, format!("its buffers are not those of {}: every tensor-parallel rank of a stage holds buffers of the same types and sizes; ranks from different saves?", first.path.display())));
        }
        if !copies {
            continue;
        }
        let weights = weights(rank, st)?;
        for (b, old) in f.buffers.iter().zip(&olds) {
            f.prove(b, old, &st.params, &weights)?;
        }
    }
    Ok(olds)
}

/// Each parameter's weight in `rank`'s file (`model.NAME`, or `model0.NAME`, … of its chunk).
fn weights<'a>(rank: &'a Rank, st: &Stage) -> Result<Vec<TensorRef<'a>>> {
    st.params
        .iter()
        .zip(&st.dicts)
        .map(|((p, _), dict)| {
            let name = format!("{dict}.{}", p.fqn);
            rank.file
                .tensor_refs()
                .find(|t| t.name == name)
                .ok_or_else(|| Error::tensor(&rank.path, &p.fqn, "missing on this rank"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_chunk_has_a_buffer_per_dtype_of_its_own_parameters_in_turn() {
        // Two chunks (virtual pipeline stages) of a bf16 run whose norms stayed fp32: chunk 0
        // (model0) the embedding, a norm and a matrix; chunk 1 (model1) a norm and a matrix.
        use DType::{BF16 as B, F32 as F};
        let dtypes = [B, F, B, F, B];
        let chunks = [0..3, 3..5];
        let got = buffer_members(&dtypes, &chunks, &[B, F, F, B]).unwrap();
        let want = [
            (vec![0, 2], true),
            (vec![1], true),
            (vec![3], false),
            (vec![4], false),
        ];
        assert_eq!(got, want);
        // A chunk's buffers in either order (the file names each buffer's dtype).
        let got = buffer_members(&dtypes, &chunks, &[F, B, B, F]).unwrap();
        assert_eq!(got[0], (vec![1], true));
        assert_eq!(got[3], (vec![3], false));
        // One model, one dtype: one buffer of every parameter (the fixtures' layout).
        let whole = std::slice::from_ref(&(0..3));
        let one = buffer_members(&[B, B, B], whole, &[B]).unwrap();
        assert_eq!(one, [(vec![0, 1, 2], true)]);
        // Buffers that are not one per chunk and dtype: refused.
        assert_eq!(buffer_members(&dtypes, &chunks, &[B, F, F]), None);
        assert_eq!(buffer_members(&dtypes, &chunks, &[B, F, F, B, B]), None);
        assert_eq!(buffer_members(&dtypes, &chunks, &[B, B, F, F]), None);
        let all = std::slice::from_ref(&(0..5));
        assert_eq!(buffer_members(&dtypes, all, &[B, F, F, B]), None);
    }
}
