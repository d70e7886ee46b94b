//! A legacy save's distributed-optimizer state (`mp_rank_*/distrib_optim.pt`,
//! [`distrib_optim`]) re-laid for a resized vocabulary, per pipeline stage: each rank's buffers
//! proven against its model's parameters, then the buffers holding a vocabulary matrix laid out
//! again at the new rows (old rows' state moved, between TP ranks where the per-rank share
//! changed; new rows' main params the new weights, moments zero).

use super::buckets::NewVocab;
use super::buckets::{Param, EMBEDDING, OUTPUT};
use super::common::{bucket_args_in, Args};
use super::distrib_optim::{self, DistribOptim, Flat, NewBuffer};
use super::legacy::{parameters, Legacy, Rank, DISTRIB_OPTIM};
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
        let params = stage_params(l, stage)?;
        let size = bucket_size(l, s == 0);
        // check-vocab proved these files already: their layouts without the main copies.
        let again = l.distrib_proven.get().is_none();
        let olds = prove_stage(stage, files, &params, size, again)?;
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
        let new_params: Vec<(Param, DType)> = params
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
        for (bi, old) in olds.iter().enumerate() {
            let new = distrib_optim::flat(&new_params, &files[0].buffers[bi], size);
            if new == *old {
                continue;
            }
            let per_rank = distrib_optim::relay(files, bi, (old, &new), &params, &grown)?;
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
        let params = stage_params(l, stage)?;
        prove_stage(stage, files, &params, bucket_size(l, s == 0), true)?;
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
    let params = stage_params(l, std::slice::from_ref(rank))?;
    let first = l.ranks.first().is_some_and(|r| r.pp == rank.pp);
    let size = bucket_size(l, first);
    prove_stage(
        std::slice::from_ref(rank),
        std::slice::from_ref(f),
        &params,
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

/// A stage's parameters in module order, each with its dtype (every TP rank holds the same
/// shapes; rank 0's file). Virtual pipeline stages (`model0`, `model1`, …) are refused. With
/// the embedding tied to the output layer over pipeline stages, the first stage's embedding
/// and the last stage's output layer (its copy) are `shared`: a bucket of their own.
fn stage_params(l: &Legacy, stage: &[Rank]) -> Result<Vec<(Param, DType)>> {
    let tied = l.args.as_ref().is_some_and(Args::tied);
    let shared = match stage[0].pp {
        Some(0) if tied && l.pp > 1 => Some(EMBEDDING),
        Some(s) if tied && l.pp > 1 && s + 1 == l.pp => Some(OUTPUT),
        _ => None,
    };
    let p = &stage[0].file.pickle;
    if p.get(p.root, "model").is_none() {
        return Err(Error::unsupported(&stage[0].path, "no 'model' entry (virtual pipeline stages keep model0, model1, …): the distributed optimizer's buffers of several model chunks are not re-laid; give --optimizer drop"));
    }
    Ok(parameters(p)
        .into_iter()
        .map(|(fqn, shape, dtype)| {
            let numel = shape.iter().product();
            (
                Param {
                    shared: shared == Some(fqn.as_str()),
                    fqn,
                    layer: None,
                    numel,
                },
                dtype,
            )
        })
        .collect())
}

/// Each buffer's layout, proven on every rank of the stage: the same buffers (dtype, size) on
/// each, every parameter's main copy its weight ([`DistribOptim::prove`]; skipped unless
/// `copies`, for files proven before in this run).
fn prove_stage(
    stage: &[Rank],
    files: &[DistribOptim],
    params: &[(Param, DType)],
    size: Option<u64>,
    copies: bool,
) -> Result<Vec<Flat>> {
    let first = &files[0];
    let olds: Vec<Flat> = first
        .buffers
        .iter()
        .map(|b| distrib_optim::flat(params, b, size))
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
        let weights = weights(rank, params)?;
        for (b, old) in f.buffers.iter().zip(&olds) {
            f.prove(b, old, params, &weights)?;
        }
    }
    Ok(olds)
}

/// Each parameter's weight in `rank`'s file (`model.NAME`).
fn weights<'a>(rank: &'a Rank, params: &[(Param, DType)]) -> Result<Vec<TensorRef<'a>>> {
    params
        .iter()
        .map(|(p, _)| {
            let name = format!("model.{}", p.fqn);
            rank.file
                .tensor_refs()
                .find(|t| t.name == name)
                .ok_or_else(|| Error::tensor(&rank.path, &p.fqn, "missing on this rank"))
        })
        .collect()
}
