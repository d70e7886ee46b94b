//! Writing a Megatron-LM legacy save with its vocabulary resized: per pipeline stage, each
//! vocabulary matrix's tensor-parallel row chunks gathered, resized and re-cut at the same TP
//! size, and with them the optimizer's Adam moments of that parameter (new rows zero) and its fp32
//! master copy in `fp32_from_fp16_params` (new rows = the new weights); `args.padded_vocab_size`
//! edited; every other record of each rank file carried; built in a temp folder, re-read with
//! the strict reader, renamed into place.

use super::distrib_optim::{DistribOptim, NewBuffer};
use super::legacy::{
    param_map, state_of, Legacy, ParamMap, Rank, VocabTensor, DISTRIB_OPTIM, RANK_FILE,
};
use super::{legacy_distrib, LATEST};
use crate::dtype::{decode_row_f32, DType};
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node};
use crate::formats::torch::writer::{StoragePayload, TorchLayout};
use crate::output::folder::{AtomicFolder, Carried, Left};
use std::path::Path;

/// What is written.
#[derive(Debug, Clone)]
pub struct Resize {
    /// The new padded vocabulary size.
    pub rows: u64,
    /// Per [`Legacy::vocab`] entry: its new rows past the old ones (bytes of its dtype).
    pub new_rows: Vec<Vec<u8>>,
    /// Written where the args hold an int there.
    pub vocab_size: Option<u64>,
    /// `--optimizer drop`: the `optimizer` entry and `distrib_optim.pt` left out.
    pub drop_optimizer: bool,
}

/// The distributed optimizer's state, re-laid ([`legacy_distrib::relay`]): every rank's
/// `distrib_optim.pt` (none: no distributed optimizer, or `--optimizer drop`) and its new
/// buffers (in [`Legacy::ranks`] order).
pub struct Distrib<'a> {
    pub files: &'a [DistribOptim],
    pub news: Vec<Vec<NewBuffer<'a>>>,
}

/// One rank's new tensors: (tensor node, its new local bytes).
type Edits = Vec<(Id, Vec<u8>)>;

/// A tensor of rank `r` at `id`: its contiguous bytes.
fn bytes_of(r: &Rank, id: Id) -> Result<Vec<u8>> {
    let t = r.file.tensor_at(id).map(|t| t.path.as_str());
    let t = t.and_then(|path| r.file.tensor_refs().find(|x| x.name == path));
    let t = t.ok_or_else(|| Error::format(&r.path, "a tensor the resize needs is not readable"))?;
    Ok(t.try_bytes()?.into_owned())
}

/// The rank tensors `ids` (one per TP rank, in rank order, `row` bytes a row, `old` global rows)
/// gathered, cut or grown to `rows` with `tail` (the new rows' bytes), and re-cut: per rank.
fn recut(
    stage: &[Rank],
    ids: &[Id],
    row: usize,
    rows: u64,
    old: u64,
    tail: &[u8],
) -> Result<Vec<Vec<u8>>> {
    let mut all = Vec::new();
    for (r, &id) in stage.iter().zip(ids) {
        all.extend(bytes_of(r, id)?);
    }
    if all.len() != row * old as usize {
        return Err(Error::format(
            &stage[0].path,
            format!(
                "a row-split tensor holds {} bytes, not {old} rows of {row}",
                all.len()
            ),
        ));
    }
    all.truncate(row * old.min(rows) as usize);
    all.extend_from_slice(tail);
    let per = row * (rows as usize / stage.len());
    Ok(all.chunks(per.max(1)).map(<[u8]>::to_vec).collect())
}

/// `new` rows of `dtype` as fp32 bytes (the master copy's new rows).
fn as_f32(dtype: DType, new: &[u8]) -> Result<Vec<u8>> {
    let mut vals = vec![0f32; new.len() / dtype.bytes_for(1).unwrap_or(1) as usize];
    decode_row_f32(dtype, new, &mut vals)
        .map_err(|e| Error::format("", format!("new rows not decodable as {dtype}: {e:?}")))?;
    Ok(vals.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The edits of one stage's ranks for vocabulary matrix `v` (new rows `new`).
fn stage_edits(
    stage: &[Rank],
    maps: &[Option<ParamMap>],
    v: &VocabTensor,
    new: &[u8],
    rows: u64,
    edits: &mut [Edits],
) -> Result<()> {
    let (old, cols) = (v.shape[0], v.shape[1] as usize);
    let p_id = |r: &Rank| {
        let p = &r.file.pickle;
        super::legacy::model_dicts(p)
            .into_iter()
            .find_map(|(_, m)| p.get(m, v.name))
            .and_then(|t| p.tensor_id(t))
    };
    let ids: Option<Vec<Id>> = stage.iter().map(p_id).collect();
    let ids = ids.ok_or_else(|| {
        Error::format(
            &stage[0].path,
            format!("'{}' is not on every tensor-parallel rank", v.name),
        )
    })?;
    let row = v.dtype.bytes_for(cols as u64).unwrap_or(0) as usize;
    for (k, b) in recut(stage, &ids, row, rows, old, new)?
        .into_iter()
        .enumerate()
    {
        edits[k].push((ids[k], b));
    }
    let per_rank: Vec<Vec<(Option<&str>, Id, String)>> = stage
        .iter()
        .zip(maps)
        .map(|(r, m)| {
            m.as_ref()
                .map(|m| state_of(r, m, v.name))
                .unwrap_or_default()
        })
        .collect();
    for j in 0..per_rank[0].len() {
        let ids: Vec<Id> = per_rank
            .iter()
            .map(|s| s.get(j).map_or(Id::MAX, |x| x.1))
            .collect();
        let tail = match per_rank[0][j].0 {
            Some(_) => vec![0u8; 4 * cols * rows.saturating_sub(old) as usize],
            None => as_f32(v.dtype, new)?,
        };
        for (k, b) in recut(stage, &ids, 4 * cols, rows, old, &tail)?
            .into_iter()
            .enumerate()
        {
            edits[k].push((ids[k], b));
        }
    }
    Ok(())
}

/// Write `l` resized as `r` says to `dest` (a save root for a save root, an iteration folder
/// for one).
pub fn write(
    l: &Legacy,
    (r, distrib): (&Resize, Distrib<'_>),
    dest: &Path,
    overwrite: bool,
    user: &GlobalPolicy,
) -> Result<Vec<Carried>> {
    let policy = super::common::globals(user);
    let mut edits: Vec<Edits> = l.ranks.iter().map(|_| Vec::new()).collect();
    let tp = l.tp as usize;
    // With the distributed optimizer the rank files' optimizer entries hold no per-parameter
    // state: it is all in distrib_optim.pt, re-laid before anything is written.
    let distributed = !distrib.files.is_empty();
    let (files, mut news) = (distrib.files, distrib.news);
    for (s, stage) in l.ranks.chunks(tp).enumerate() {
        let maps: Vec<Option<ParamMap>> = if r.drop_optimizer || distributed {
            stage.iter().map(|_| None).collect()
        } else {
            stage.iter().map(param_map).collect::<Result<_>>()?
        };
        for (vi, v) in l
            .vocab
            .iter()
            .enumerate()
            .filter(|(_, v)| v.pp == stage[0].pp)
        {
            stage_edits(
                stage,
                &maps,
                v,
                &r.new_rows[vi],
                r.rows,
                &mut edits[s * tp..(s + 1) * tp],
            )?;
        }
    }
    let folder = AtomicFolder::create(dest, &l.input_paths(), overwrite)?;
    let mut carried = Vec::new();
    let sub = iteration_prefix(l);
    if !sub.is_empty() {
        carried.push(
            folder
                .carry(&l.path.join(LATEST), LATEST, false)
                .map_err(|e| folder.about(e))?,
        );
    }
    for (i, (rank, e)) in l.ranks.iter().zip(&edits).enumerate() {
        let name = rank.folder();
        let d = folder.join(&format!("{sub}{name}"));
        std::fs::create_dir_all(&d).map_err(|e| folder.about(Error::io(&d, "create", e)))?;
        let handled = r.drop_optimizer || distributed;
        carried.extend(carry_rank_files(
            rank,
            &folder,
            &format!("{sub}{name}/"),
            handled,
        )?);
        write_rank(rank, e, r, &d.join(RANK_FILE), &policy).map_err(|e| folder.about(e))?;
        if let Some(f) = files.get(i) {
            let dest = d.join(DISTRIB_OPTIM);
            let new = std::mem::take(&mut news[i]);
            if new.is_empty() {
                carried.push(
                    folder
                        .carry(&f.path, &format!("{sub}{name}/{DISTRIB_OPTIM}"), false)
                        .map_err(|e| folder.about(e))?,
                );
            } else {
                f.write(new, &dest, &policy).map_err(|e| folder.about(e))?;
            }
        }
    }
    verify(l, (r, distributed), &folder.join(&sub), user).map_err(|e| folder.about(e))?;
    folder.commit()?;
    Ok(carried)
}

/// Where the rank folders go in the output: under the iteration folder's name for a save root
/// (beside `latest_checkpointed_iteration.txt`), at the top for an iteration folder.
fn iteration_prefix(l: &Legacy) -> String {
    if l.dir == l.path {
        String::new()
    } else {
        let name = l.dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        format!("{name}/")
    }
}

/// The files `--optimizer drop` leaves out of the output: each rank folder's `distrib_optim.pt`,
/// named as it would be in the output. Any entry of that name counts, as `carry_rank_files`
/// skips it by name whatever it is.
pub fn left_out(l: &Legacy) -> Vec<Left> {
    let sub = iteration_prefix(l);
    l.ranks
        .iter()
        .filter(|r| std::fs::symlink_metadata(r.path.with_file_name(DISTRIB_OPTIM)).is_ok())
        .map(|r| Left {
            name: format!("{sub}{}/{DISTRIB_OPTIM}", r.folder()),
            why: "the distributed optimizer's state (--optimizer drop): resume with Megatron-LM's --no-load-optim".into(),
        })
        .collect()
}

/// Rank `rank`'s file with `edits` and the args, written to `dest`.
fn write_rank(
    rank: &Rank,
    edits: &Edits,
    r: &Resize,
    dest: &Path,
    policy: &GlobalPolicy,
) -> Result<()> {
    let mut plan = TorchLayout::try_identity(&rank.file)?;
    for (id, bytes) in edits {
        let t = rank.file.tensor_at(*id);
        let t = t.ok_or_else(|| Error::format(&rank.path, "a resized tensor has no path"))?;
        let node = rank
            .file
            .pickle
            .tensor_of(t.node)
            .ok_or_else(|| Error::format(&rank.path, "not a tensor"))?;
        let cols: u64 = node.shape.iter().skip(1).product();
        let row = node.storage.dtype.bytes_for(cols).unwrap_or(1).max(1);
        plan.replace_rows(
            &rank.file,
            &t.path,
            bytes.len() as u64 / row,
            StoragePayload::Bytes(bytes.clone()),
        )
        .map_err(|e| Error::tensor(&rank.path, &t.path, e))?;
    }
    let p = &mut plan.pickle;
    let root = p.root;
    let args = p.get(root, "args");
    let d = match args.map(|a| p.node(a)) {
        Some(Node::Object { state: Some(d), .. }) => Some(*d),
        _ => None,
    };
    if let Some(d) = d {
        for (key, v) in [
            ("padded_vocab_size", Some(r.rows)),
            ("vocab_size", r.vocab_size),
        ] {
            let (Some(v), Some(id)) = (v, p.get(d, key)) else {
                continue;
            };
            if matches!(p.node(id), Node::Int(_)) {
                *p.node_mut(id) = Node::Int(
                    i64::try_from(v).map_err(|_| Error::format(&rank.path, "size past i64"))?,
                );
            }
        }
    }
    if r.drop_optimizer {
        p.remove_key(root, "optimizer");
    }
    crate::formats::torch::write::write_torch(&plan, dest, &[rank.path.as_path()], policy)?;
    Ok(())
}

/// A rank folder's other files, carried (not `distrib_optim.pt` when `handled`: left out, or
/// written or carried by `write`).
fn carry_rank_files(
    rank: &Rank,
    folder: &AtomicFolder,
    sub: &str,
    handled: bool,
) -> Result<Vec<Carried>> {
    let dir = rank.path.parent().unwrap_or(Path::new("."));
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))? {
        let e = e.map_err(|e| Error::io(dir, "list", e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        // distrib_optim.pt: left out with --optimizer drop, written (or carried) by `write`
        // when rank 0 has one; one beside a rank whose rank 0 has none is not silently lost.
        if name == RANK_FILE || (handled && name == DISTRIB_OPTIM) {
            continue;
        }
        if name == DISTRIB_OPTIM {
            return Err(Error::format(e.path(), "a distributed optimizer's state where rank 0's folder holds none: ranks from different saves? copy one whole iteration folder, or give --optimizer drop to leave it out"));
        }
        if !e.path().is_file() {
            return Err(Error::unsupported(
                e.path(),
                "not a file: a rank folder holds files only; move it out and run again",
            ));
        }
        names.push(name);
    }
    names.sort();
    names
        .iter()
        .map(|n| {
            folder
                .carry(&dir.join(n), &format!("{sub}{n}"), false)
                .map_err(|e| folder.about(e))
        })
        .collect()
}

/// The output re-read: the same TP/PP, every vocabulary matrix at the new rows, the args as planned.
fn verify(
    l: &Legacy,
    (r, distributed): (&Resize, bool),
    dir: &Path,
    user: &GlobalPolicy,
) -> Result<()> {
    let out = Legacy::open(dir, user)?;
    let verr = |problem: String| Error::Verify {
        path: dir.to_path_buf(),
        problem,
    };
    if (out.tp, out.pp) != (l.tp, l.pp) {
        return Err(verr(format!(
            "TP x PP {} x {}, not {} x {}",
            out.tp, out.pp, l.tp, l.pp
        )));
    }
    if out.vocab.len() != l.vocab.len() || out.vocab.iter().any(|v| v.shape[0] != r.rows) {
        return Err(verr(format!(
            "the vocabulary matrices are not {} rows",
            r.rows
        )));
    }
    if l.args.is_some() && out.args.as_ref().and_then(|a| a.padded_vocab_size) != Some(r.rows) {
        return Err(verr("args.padded_vocab_size is not the new size".into()));
    }
    if out.optimizer.distrib_optim.is_some() != distributed {
        return Err(verr(
            "distrib_optim.pt is not where the input had it".into(),
        ));
    }
    for rank in &out.ranks {
        if distributed {
            // Each rank's state read back with the same reader, proven against the new
            // weights as the input's was.
            let policy = super::common::globals(user);
            let f = DistribOptim::open(&rank.path.with_file_name(DISTRIB_OPTIM), &policy)?;
            legacy_distrib::prove_rank(&out, rank, &f)?;
        } else if !r.drop_optimizer {
            param_map(rank)?;
        }
    }
    Ok(())
}
