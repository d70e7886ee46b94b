//! Megatron-LM's legacy checkpoint (`--ckpt-format torch`): an iteration folder
//! (`iter_0000010/`, `release/`) holding one folder per model-parallel rank,
//! `mp_rank_TT/model_optim_rng.pt` (`mp_rank_TT_PPP/` with pipeline parallelism), each a
//! `torch.save` of the dict Megatron-LM's `generate_state_dict` builds: `args` (an
//! `argparse.Namespace`), `checkpoint_version`, `iteration`, `model` (or `model0`, `model1`, … with
//! virtual pipeline stages), `optimizer` (the optimizer's own `state_dict()`),
//! `opt_param_scheduler`, `rng_state`. With `--use-distributed-optimizer` the optimizer's state is
//! in `distrib_optim.pt` beside it instead. Each file is read as data through the
//! non-executing pickle VM with the globals Megatron puts there allowed by name.

use super::common::{self, Args};
use super::layout::VOCAB;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::TorchFile;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layout, in the user's words.
pub const LAYOUT: &str = "Megatron-LM legacy checkpoint (mp_rank_XX/model_optim_rng.pt)";
/// Each rank's file.
pub const RANK_FILE: &str = "model_optim_rng.pt";
/// The distributed optimizer's state file beside it.
pub const DISTRIB_OPTIM: &str = "distrib_optim.pt";

/// One model-parallel rank's file.
#[derive(Debug)]
pub struct Rank {
    pub tp: u64,
    /// None: no pipeline parallelism (`mp_rank_TT`).
    pub pp: Option<u64>,
    pub path: PathBuf,
    pub file: TorchFile,
}

impl Rank {
    /// The name of the folder holding its file (`mp_rank_TT` or `mp_rank_TT_PPP`).
    pub fn folder(&self) -> &str {
        self.path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("")
    }
}

/// A vocabulary matrix on one rank: its dtype and local shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    pub dtype: DType,
    pub shape: Vec<u64>,
}

/// A vocabulary matrix: its local shape on each tensor-parallel rank (pipeline stage `pp`).
#[derive(Debug, Clone)]
pub struct VocabTensor {
    pub name: &'static str,
    pub role: &'static str,
    pub pp: Option<u64>,
    pub dtype: DType,
    /// The global shape: the ranks' rows stacked.
    pub shape: Vec<u64>,
    /// Rows `[start, end)` per tensor-parallel rank, in rank order.
    pub rows: Vec<[u64; 2]>,
}

/// What the optimizer entry is.
#[derive(Debug, Clone, Default)]
pub struct Optimizer {
    /// Megatron's class whose `state_dict()` it is; None: no optimizer saved.
    pub form: Option<&'static str>,
    /// The torch optimizer's per-parameter states (`exp_avg`, `exp_avg_sq`, `step`).
    pub states: Vec<String>,
    /// Parameter groups and the parameters each indexes.
    pub groups: Vec<u64>,
    /// `distrib_optim.pt` beside rank 0's file, when there.
    pub distrib_optim: Option<PathBuf>,
}

/// An open legacy checkpoint.
#[derive(Debug)]
pub struct Legacy {
    pub path: PathBuf,
    pub dir: PathBuf,
    pub iteration: Option<u64>,
    pub tp: u64,
    pub pp: u64,
    pub ranks: Vec<Rank>,
    /// Rank 0's args (every rank holds the same).
    pub args: Option<Args>,
    pub vocab: Vec<VocabTensor>,
    pub optimizer: Optimizer,
    /// Set once [`super::legacy_distrib::prove_all`] proved every rank's `distrib_optim.pt`
    /// (check-vocab's check): a dry-run re-lay of the same files in this run then lays them out
    /// without reading every main copy again.
    pub distrib_proven: std::sync::OnceLock<()>,
}

/// The iteration folder of a legacy save at `path` (the save root or the folder itself) and
/// its iteration; None when `path` is not one.
pub fn locate(path: &Path) -> Option<(PathBuf, Option<u64>)> {
    if path.join("mp_rank_00").is_dir() || path.join("mp_rank_00_000").is_dir() {
        return Some((path.to_path_buf(), super::iteration_of_name(path)));
    }
    let (dir, iteration) = super::iteration_folder(path).ok()?;
    let legacy = dir.join("mp_rank_00").is_dir() || dir.join("mp_rank_00_000").is_dir();
    legacy.then_some((dir, iteration))
}

/// `mp_rank_TT` → (TT, None); `mp_rank_TT_PPP` → (TT, Some(PPP)); an expert-parallel suffix or
/// any other name: None.
fn rank_of_name(name: &str) -> Option<(u64, Option<u64>)> {
    let rest = name.strip_prefix("mp_rank_")?;
    let mut parts = rest.split('_');
    let tp = parts.next()?.parse().ok()?;
    let pp = parts.next().map(str::parse).transpose().ok()?;
    parts.next().is_none().then_some((tp, pp))
}

/// The rank folders of `dir`, checked to form a full TP × PP grid; sorted (PP, TP).
fn rank_folders(dir: &Path) -> Result<Vec<(u64, Option<u64>, PathBuf)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    let mut found = Vec::new();
    for e in entries {
        let e = e.map_err(|e| Error::io(dir, "list", e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("mp_rank_") {
            continue;
        }
        let (tp, pp) = rank_of_name(&name).ok_or_else(|| {
            Error::unsupported(dir.join(&name), "not mp_rank_TT or mp_rank_TT_PPP: expert-parallel legacy saves are not read; convert with Megatron's own tools")
        })?;
        found.push((tp, pp, dir.join(name)));
    }
    found.sort_by_key(|(tp, pp, _)| (*pp, *tp));
    let tps: BTreeSet<u64> = found.iter().map(|f| f.0).collect();
    let pps: BTreeSet<Option<u64>> = found.iter().map(|f| f.1).collect();
    if pps.len() > 1 && pps.contains(&None) {
        return Err(Error::format(dir, "holds both mp_rank_TT and mp_rank_TT_PPP folders: two saves mixed; copy one whole iteration folder"));
    }
    for (what, set) in [
        ("tensor", tps.iter().map(|&t| Some(t)).collect::<Vec<_>>()),
        ("pipeline", pps.iter().copied().collect()),
    ] {
        let want: Vec<Option<u64>> = if set == [None] {
            vec![None]
        } else {
            (0..set.len() as u64).map(Some).collect()
        };
        if set != want {
            return Err(Error::format(dir, format!("its {what}-parallel rank folders are not numbered 0.. without gaps: a rank folder is missing; copy the whole iteration folder")));
        }
    }
    if found.len() != tps.len() * pps.len() {
        return Err(Error::format(dir, format!("has {} rank folders, not {} tensor x {} pipeline ranks: a rank folder is missing; copy the whole iteration folder", found.len(), tps.len(), pps.len())));
    }
    Ok(found)
}

impl Legacy {
    /// The iteration the rank files hold (every rank's is rank 0's): what Megatron-LM resumes
    /// from, whatever the folder is called.
    pub fn saved_iteration(&self) -> Option<u64> {
        self.ranks.first().and_then(rank_iteration)
    }

    /// Open the legacy save at `path` (located by [`locate`] as `dir`, `iteration`).
    pub fn open(path: &Path, user: &GlobalPolicy) -> Result<Legacy> {
        let (dir, iteration) = locate(path).ok_or_else(|| {
            Error::format(path, "not a Megatron legacy checkpoint (no mp_rank_00/ here or in the iteration latest_checkpointed_iteration.txt names)")
        })?;
        let policy = common::globals(user);
        let mut ranks = Vec::new();
        for (tp, pp, folder) in rank_folders(&dir)? {
            let file_path = folder.join(RANK_FILE);
            if !file_path.is_file() {
                return Err(Error::format(&file_path, "missing: every rank folder of a legacy save holds one; copy the whole iteration folder"));
            }
            let file = TorchFile::open(&file_path, &policy)?;
            if file.pickle.dict_entries(file.pickle.root).is_none() {
                return Err(Error::format(
                    &file_path,
                    "not a dict: not a Megatron-LM rank checkpoint",
                ));
            }
            ranks.push(Rank {
                tp,
                pp,
                path: file_path,
                file,
            });
        }
        let tp = ranks.iter().map(|r| r.tp).max().unwrap_or(0) + 1;
        let pp = ranks.iter().filter_map(|r| r.pp).max().unwrap_or(0) + 1;
        let args = rank_args(&ranks[0])?;
        check_agree(&ranks, &args)?;
        check_models(&ranks, tp as usize, args.as_ref())?;
        check_sizes(&dir, args.as_ref(), tp, pp)?;
        let vocab = vocabulary(&ranks, tp)?;
        if vocab.is_empty() {
            return Err(Error::unsupported(path, format!("{LAYOUT}: holds neither {} nor {}: only GPT models' checkpoints are read so far", VOCAB[0].0, VOCAB[1].0)));
        }
        let mut optimizer = optimizer(&ranks[0]);
        optimizer.distrib_optim = distrib_optim(&ranks)?;
        if optimizer.distrib_optim.is_some() && optimizer.states.is_empty() {
            // The rank file's `optimizer` holds only the param groups (DistributedOptimizer's
            // state_dict); the per-parameter state is in distrib_optim.pt.
            optimizer.form = Some("DistributedOptimizer (parameter state in distrib_optim.pt)");
        }
        Ok(Legacy {
            path: path.to_path_buf(),
            dir,
            iteration,
            tp,
            pp,
            ranks,
            args,
            vocab,
            optimizer,
            distrib_proven: std::sync::OnceLock::new(),
        })
    }

    /// Every file it reads.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.path, &self.dir];
        v.extend(self.ranks.iter().map(|r| r.path.as_path()));
        v
    }

    /// The padded vocabulary size the tensors show (the first matrix's global rows).
    pub fn padded_rows(&self) -> u64 {
        self.vocab.first().map_or(0, |v| v.shape[0])
    }

    /// Its vocabulary matrices as the row-surgery interface names them (global shapes).
    pub fn weight_entries(&self) -> Vec<crate::plan::Entry> {
        let weight = |v: &VocabTensor| super::vocab_entry(v.name, v.role, &v.shape);
        self.vocab.iter().map(weight).collect()
    }

    /// The row-surgery interface's answer: each vocabulary matrix (its global shape, the TP
    /// ranks' rows stacked), then, when the save holds an optimizer, the state that belongs to
    /// it (its Adam moments, its fp32 master copy) at the same global shape, named by their paths
    /// in the rank files of its pipeline stage. An optimizer whose index → parameter mapping
    /// cannot be proved on any rank of the stage is refused ([`param_map`]).
    pub fn entries(&self) -> Result<Vec<crate::plan::Entry>> {
        let mut out = self.weight_entries();
        for v in &self.vocab {
            // Every rank of its stage must prove its mapping; the paths are the first rank's
            // (TP ranks hold the same parameters in the same order).
            let mut maps = Vec::new();
            for rank in self.ranks.iter().filter(|r| r.pp == v.pp) {
                maps.push((rank, param_map(rank)?));
            }
            let Some((rank, Some(map))) = maps.into_iter().next() else {
                continue;
            };
            for (key, _, path) in state_of(rank, &map, v.name) {
                let role = match key {
                    Some(_) => crate::plan::Role::Moment,
                    None => crate::plan::Role::MasterCopy,
                };
                out.push(crate::plan::Entry::state(&path, role, &v.shape, v.name));
            }
        }
        Ok(out)
    }
}

/// The args' TP and PP sizes are the rank folders'.
fn check_sizes(dir: &Path, args: Option<&Args>, tp: u64, pp: u64) -> Result<()> {
    let sizes = [
        (
            "tensor",
            args.and_then(|a| a.tensor_model_parallel_size),
            tp,
        ),
        (
            "pipeline",
            args.and_then(|a| a.pipeline_model_parallel_size),
            pp,
        ),
    ];
    for (what, said, found) in sizes {
        if let Some(n) = said.filter(|&n| n != found) {
            return Err(Error::format(dir, format!("the args say {what}_model_parallel_size {n} but the rank folders show {found}: a rank folder is missing or another save's is here; copy the whole iteration folder")));
        }
    }
    Ok(())
}

/// A rank's `args`, when it has them.
fn rank_args(r: &Rank) -> Result<Option<Args>> {
    let p = &r.file.pickle;
    match p.get(p.root, "args") {
        Some(a) if !matches!(p.node(a), Node::None) => {
            common::args(p, a).map(Some).ok_or_else(|| {
                Error::format(
                    &r.path,
                    "'args' is not an argparse.Namespace of plain values: not Megatron-LM's args",
                )
            })
        }
        _ => Ok(None),
    }
}

/// The `iteration` a rank file holds.
fn rank_iteration(r: &Rank) -> Option<u64> {
    let p = &r.file.pickle;
    p.get(p.root, "iteration").and_then(|v| common::uint(p, v))
}

/// Every rank holds the same iteration and args.
fn check_agree(ranks: &[Rank], args: &Option<Args>) -> Result<()> {
    let first = rank_iteration(&ranks[0]);
    for r in &ranks[1..] {
        if rank_iteration(r) != first {
            return Err(Error::format(&r.path, format!("its iteration ({}) is not rank 0's ({}): ranks from different saves; copy one whole iteration folder", shown(rank_iteration(r)), shown(first))));
        }
        if &rank_args(r)? != args {
            return Err(Error::format(&r.path, "its args differ from rank 0's: ranks from different runs; copy one whole iteration folder"));
        }
    }
    Ok(())
}

/// Every rank holds as many model chunks as rank 0 (the args' virtual pipeline size, `model`
/// for one), each TP rank of a pipeline stage the same names in each chunk with the same local
/// dtypes and shapes (Megatron splits every parameter evenly), and every rank an optimizer
/// entry or none: a rank file from another save is refused, naming it.
fn check_models(ranks: &[Rank], tp: usize, args: Option<&Args>) -> Result<()> {
    let chunks = |r: &Rank| model_dicts(&r.file.pickle);
    let has_optimizer = |r: &Rank| r.file.pickle.get(r.file.pickle.root, "optimizer").is_some();
    let first = chunks(&ranks[0]);
    if let Some(v) = args.map(|a| a.virtual_pipeline_model_parallel_size) {
        let want = v.unwrap_or(1).max(1) as usize;
        let named = |n: usize| if n == 1 { "one" } else { "several" };
        if first.len() != want || (want > 1) != (first.first().is_some_and(|(k, _)| k != "model")) {
            return Err(Error::format(&ranks[0].path, format!("holds {} model chunk(s) ({}) but its args' virtual_pipeline_model_parallel_size {} gives {} ({want}): the args are not this save's", first.len(), first.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", "), v.map_or("None".into(), |v| v.to_string()), named(want))));
        }
    }
    for stage in ranks.chunks(tp.max(1)) {
        let lead = chunks(&stage[0]);
        for r in stage.iter().chain(ranks.first()) {
            let mine = chunks(r);
            if mine.len() != first.len() {
                return Err(Error::format(&r.path, format!("holds {} model chunk(s) but rank 0 holds {}: ranks from different saves; copy one whole iteration folder", mine.len(), first.len())));
            }
            if has_optimizer(r) != has_optimizer(&ranks[0]) {
                let (here, there) = if has_optimizer(r) {
                    ("an", "none")
                } else {
                    ("no", "one")
                };
                return Err(Error::format(&r.path, format!("holds {here} optimizer state but rank 0 holds {there}: ranks from different saves; copy one whole iteration folder")));
            }
        }
        for r in &stage[1..] {
            for ((key, a), (_, b)) in lead.iter().zip(chunks(r)) {
                same_entries(r, key, (&stage[0].file.pickle, *a), (&r.file.pickle, b))?;
            }
        }
    }
    Ok(())
}

/// A model entry's dtype and local shape; None for an entry that is not a tensor.
type EntryKind = Option<(DType, Vec<u64>)>;

/// Chunk `key` of rank `r` (`here`) holds the names `lead` (its stage's TP rank 0) does, each
/// tensor of the same dtype and shape.
fn same_entries(r: &Rank, key: &str, lead: (&Pickle, Id), here: (&Pickle, Id)) -> Result<()> {
    let entries = |(p, m): (&Pickle, Id)| -> Vec<(String, EntryKind)> {
        p.dict_entries(m)
            .unwrap_or_default()
            .iter()
            .map(|&(k, v)| {
                let t = p.tensor_of(v).map(|t| (t.storage.dtype, t.shape.clone()));
                (p.str(k).unwrap_or("").to_string(), t)
            })
            .collect()
    };
    let (a, b) = (entries(lead), entries(here));
    let index = |v: &[(String, EntryKind)]| -> std::collections::HashMap<String, EntryKind> {
        v.iter().cloned().collect()
    };
    let (ia, ib) = (index(&a), index(&b));
    let show = |t: &EntryKind| {
        t.as_ref()
            .map_or("not a tensor".to_string(), |(d, s)| format!("{d} {s:?}"))
    };
    let why = if let Some((n, _)) = a.iter().find(|(n, _)| !ib.contains_key(n)) {
        format!("its {key} lacks '{n}', which tensor-parallel rank 0 of its pipeline stage holds")
    } else if let Some((n, _)) = b.iter().find(|(n, _)| !ia.contains_key(n)) {
        format!("its {key} holds '{n}', which tensor-parallel rank 0 of its pipeline stage lacks")
    } else if let Some((n, x)) = a.iter().find(|(n, x)| ib.get(n) != Some(x)) {
        let y = ib.get(n).cloned().flatten();
        format!("its {key}'s '{n}' is {} here but {} on tensor-parallel rank 0 of its pipeline stage (Megatron splits every parameter evenly)", show(&y), show(x))
    } else {
        return Ok(());
    };
    Err(Error::format(
        &r.path,
        format!("{why}: ranks from different saves; copy one whole iteration folder"),
    ))
}

/// Each rank folder's `distrib_optim.pt` (the distributed optimizer's state): rank 0's, when
/// every rank folder has one; none when none has; one missing beside others is refused.
fn distrib_optim(ranks: &[Rank]) -> Result<Option<PathBuf>> {
    let at = |r: &Rank| r.path.with_file_name(DISTRIB_OPTIM);
    let (with, without): (Vec<&Rank>, Vec<&Rank>) = ranks.iter().partition(|r| at(r).is_file());
    match (with.first(), without.first()) {
        (Some(r), Some(missing)) => Err(Error::format(at(missing), format!("missing: {} holds the distributed optimizer's state, so every rank folder does; copy the whole iteration folder", at(r).display()))),
        (Some(_), None) => Ok(Some(at(&ranks[0]))),
        (None, _) => Ok(None),
    }
}

/// The model dicts of a rank (`model`, or `model0`, `model1`, … for virtual pipeline stages).
pub fn model_dicts(p: &Pickle) -> Vec<(String, Id)> {
    if let Some(m) = p.get(p.root, "model") {
        return vec![("model".to_string(), m)];
    }
    (0..)
        .map_while(|i| {
            let k = format!("model{i}");
            p.get(p.root, &k).map(|m| (k, m))
        })
        .collect()
}

/// A vocabulary matrix's dtype and shape in one rank's model dicts.
fn local(p: &Pickle, name: &str) -> Option<Local> {
    let t = model_dicts(p)
        .into_iter()
        .find_map(|(_, m)| p.get(m, name).and_then(|t| p.tensor_of(t)))?;
    Some(Local {
        dtype: t.storage.dtype,
        shape: t.shape.clone(),
    })
}

/// The vocabulary matrices per pipeline stage, each split by rows across the TP ranks: every TP
/// rank holds the same local shape (Megatron's VocabParallelEmbedding / ColumnParallelLinear).
fn vocabulary(ranks: &[Rank], tp: u64) -> Result<Vec<VocabTensor>> {
    let mut out = Vec::new();
    for stage in ranks.chunks(tp as usize) {
        for (name, role) in VOCAB {
            let locals: Vec<Option<Local>> =
                stage.iter().map(|r| local(&r.file.pickle, name)).collect();
            let Some(Some(first)) = locals.first().cloned() else {
                continue;
            };
            if first.shape.len() != 2 {
                return Err(Error::tensor(
                    &stage[0].path,
                    name,
                    format!("has shape {:?}, not [rows, hidden]", first.shape),
                ));
            }
            for (r, l) in stage.iter().zip(&locals) {
                if l.as_ref() != Some(&first) {
                    return Err(Error::tensor(&r.path, name, format!("is {} here but {} {:?} on tensor-parallel rank 0: every rank holds an equal row chunk; ranks from different saves?", l.as_ref().map_or("missing".to_string(), |l| format!("{} {:?}", l.dtype, l.shape)), first.dtype, first.shape)));
                }
            }
            let rows = first.shape[0];
            out.push(VocabTensor {
                name,
                role,
                pp: stage[0].pp,
                dtype: first.dtype,
                shape: vec![rows * tp, first.shape[1]],
                rows: (0..tp).map(|i| [i * rows, (i + 1) * rows]).collect(),
            });
        }
    }
    Ok(out)
}

/// Which of Megatron's optimizers wrote rank `r`'s `optimizer` entry: `FP32Optimizer` (the torch
/// optimizer's state dict under `optimizer`) or `Float16OptimizerWithFloat16Params` (that, plus
/// `fp32_from_fp16_params`, the fp32 master copies, and `grad_scaler` with fp16).
fn optimizer(r: &Rank) -> Optimizer {
    let p = &r.file.pickle;
    let Some(o) = p.get(p.root, "optimizer") else {
        return Optimizer::default();
    };
    let form = if p.get(o, "fp32_from_fp16_params").is_some() {
        "Float16OptimizerWithFloat16Params (mixed precision: fp32 master copies in fp32_from_fp16_params)"
    } else if p.get(o, "optimizer").is_some() {
        "FP32Optimizer"
    } else {
        "unrecognised (no 'optimizer' entry in it)"
    };
    let inner = p.get(o, "optimizer");
    let mut states = BTreeSet::new();
    if let Some(s) = inner
        .and_then(|i| p.get(i, "state"))
        .and_then(|s| p.dict_entries(s))
    {
        for (_, st) in s {
            for (k, _) in p.dict_entries(*st).unwrap_or_default() {
                states.extend(p.str(*k).map(str::to_string));
            }
        }
    }
    let groups = inner
        .and_then(|i| p.get(i, "param_groups"))
        .and_then(|g| match p.node(g) {
            Node::List(l) => Some(l.clone()),
            _ => None,
        })
        .unwrap_or_default()
        .iter()
        .map(|g| {
            p.get(*g, "params")
                .and_then(|l| match p.node(l) {
                    Node::List(l) => Some(l.len() as u64),
                    _ => None,
                })
                .unwrap_or(0)
        })
        .collect();
    Optimizer {
        form: Some(form),
        states: states.into_iter().collect(),
        groups,
        distrib_optim: None,
    }
}

/// A rank's optimizer state mapped to its model's parameters: `names[i]` is the model key of
/// the torch optimizer's parameter index `i`; `master[i]`, where the parameter is fp16/bf16
/// (`Float16OptimizerWithFloat16Params`), its place `(group, position)` in
/// `fp32_from_fp16_params`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamMap {
    pub names: Vec<String>,
    pub master: Vec<Option<(usize, usize)>>,
}

/// Every tensor-parallel rank of a pipeline stage holds the same optimizer state for each
/// vocabulary matrix (its moments re-cut together, as the matrix): a rank whose state for it
/// lacks a moment (or the whole entry) that another rank holds is refused, naming it.
pub fn stage_states_agree(l: &Legacy) -> Result<()> {
    for v in &l.vocab {
        let stage: Vec<&Rank> = l.ranks.iter().filter(|r| r.pp == v.pp).collect();
        let mut keys = Vec::new();
        for r in &stage {
            let map = param_map(r)?;
            let k: Vec<Option<&str>> = map
                .map(|m| state_of(r, &m, v.name).into_iter().map(|s| s.0).collect())
                .unwrap_or_default();
            keys.push(k);
        }
        let Some(i) = keys.iter().position(|k| *k != keys[0]) else {
            continue;
        };
        let show = |k: &[Option<&str>]| {
            let names: Vec<&str> = k.iter().map(|s| s.unwrap_or("fp32 master copy")).collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        return Err(Error::unsupported(&stage[i].path, format!("its optimizer state for '{}' is {} but tensor-parallel rank 0's is {}: the ranks' moments cannot be re-cut together; give --optimizer drop to leave the optimizer state out", v.name, show(&keys[i]), show(&keys[0]))));
    }
    Ok(())
}

/// The optimizer state of parameter `name` on rank `r` under `map`: its Adam moments
/// (`Some("exp_avg")`, `Some("exp_avg_sq")`) and its fp32 master copy (`None`), each with its
/// node and its dotted path in the rank file (`optimizer.optimizer.state.0.exp_avg`,
/// `optimizer.fp32_from_fp16_params.0.0`).
pub(crate) fn state_of(
    r: &Rank,
    map: &ParamMap,
    name: &str,
) -> Vec<(Option<&'static str>, Id, String)> {
    let p = &r.file.pickle;
    let Some(i) = map.names.iter().position(|n| n == name) else {
        return Vec::new();
    };
    let o = p.get(p.root, "optimizer");
    let mut out = Vec::new();
    let st = o
        .and_then(|o| p.get(o, "optimizer"))
        .and_then(|x| p.get(x, "state"));
    let entry = st
        .and_then(|s| p.dict_entries(s))
        .unwrap_or_default()
        .iter()
        .find(|(k, _)| super::common::uint(p, *k) == Some(i as u64))
        .map(|e| e.1);
    for key in ["exp_avg", "exp_avg_sq"] {
        if let Some(id) = entry
            .and_then(|e| p.get(e, key))
            .and_then(|t| p.tensor_id(t))
        {
            out.push((
                Some(key),
                id,
                format!("optimizer.optimizer.state.{i}.{key}"),
            ));
        }
    }
    if let Some((g, k)) = map.master[i] {
        let groups = o.and_then(|o| p.get(o, "fp32_from_fp16_params"));
        let item = |l: Option<Id>, n: usize| match l.map(|l| p.node(l)) {
            Some(Node::List(v)) => v.get(n).copied(),
            _ => None,
        };
        if let Some(id) = item(item(groups, g), k).and_then(|t| p.tensor_id(t)) {
            out.push((None, id, format!("optimizer.fp32_from_fp16_params.{g}.{k}")));
        }
    }
    out
}

/// The model's parameters in `named_parameters()` order (the state dict's tensors, less
/// `_extra_state`): key, shape, dtype; every model chunk's in turn.
pub(super) fn parameters(p: &Pickle) -> Vec<(String, Vec<u64>, DType)> {
    let dicts = model_dicts(p).into_iter();
    dicts.flat_map(|(_, m)| dict_parameters(p, m)).collect()
}

/// [`parameters`] of one model dict `m` (one model chunk's).
pub(super) fn dict_parameters(p: &Pickle, m: Id) -> Vec<(String, Vec<u64>, DType)> {
    let mut out = Vec::new();
    for (k, v) in p.dict_entries(m).unwrap_or_default() {
        let (Some(name), Some(t)) = (p.str(*k), p.tensor_of(*v)) else {
            continue;
        };
        if !name.ends_with("_extra_state") {
            out.push((name.to_string(), t.shape.clone(), t.storage.dtype));
        }
    }
    out
}

/// A list node's items.
fn list(p: &Pickle, id: Option<Id>) -> Vec<Id> {
    match id.map(|i| p.node(i)) {
        Some(Node::List(l)) => l.clone(),
        _ => Vec::new(),
    }
}

/// A float (or int) node's value.
fn float(p: &Pickle, id: Option<Id>) -> Option<f64> {
    match p.node(id?) {
        Node::Float(f) => Some(*f),
        Node::Int(i) => Some(*i as f64),
        _ => None,
    }
}

/// Derive rank `r`'s parameter index → parameter mapping from Megatron's group rule
/// (`_get_param_groups` with the standard overrides: 1-D and `*.bias` parameters in the
/// `wd_mult` 0 group, the rest in the `wd_mult` 1 group, each in `named_parameters()` order; the
/// torch optimizer numbers them group after group), then prove it: every index's moments and
/// master copy must have its parameter's shape. None when no optimizer was saved.
pub fn param_map(r: &Rank) -> Result<Option<ParamMap>> {
    let p = &r.file.pickle;
    let Some(o) = p.get(p.root, "optimizer") else {
        return Ok(None);
    };
    let inner = p.get(o, "optimizer");
    let bad = |problem: String| {
        Error::unsupported(&r.path, format!("optimizer: {problem}: the parameter each optimizer index belongs to cannot be proved, so its rows are not moved; give --optimizer drop to leave the optimizer state out"))
    };
    let params = parameters(p);
    let (no_wd, wd): (Vec<usize>, Vec<usize>) =
        (0..params.len()).partition(|&i| params[i].1.len() == 1 || params[i].0.ends_with(".bias"));
    let mut map = ParamMap::default();
    for (g, group) in list(p, inner.and_then(|i| p.get(i, "param_groups")))
        .into_iter()
        .enumerate()
    {
        let expert = matches!(
            p.get(group, "is_expert_parallel").map(|v| p.node(v)),
            Some(Node::Bool(true))
        );
        let decoupled = matches!(
            p.get(group, "is_decoupled_lr").map(|v| p.node(v)),
            Some(Node::Bool(true))
        );
        let members = match float(p, p.get(group, "wd_mult")) {
            Some(w) if w == 0.0 && !expert && !decoupled => &no_wd,
            Some(w) if w == 1.0 && !expert && !decoupled => &wd,
            w => return Err(bad(format!("parameter group {g} (wd_mult {}, expert {expert}, decoupled lr {decoupled}) is not one of Megatron's standard groups", w.map_or_else(|| "none".to_string(), |w| w.to_string())))),
        };
        let indices = list(p, p.get(group, "params"));
        if indices.len() != members.len() {
            return Err(bad(format!(
                "parameter group {g} holds {} parameters but the group rule gives it {}",
                indices.len(),
                members.len()
            )));
        }
        let mut half = 0;
        for (&idx, &m) in indices.iter().zip(members) {
            if common::uint(p, idx) != Some(map.names.len() as u64) {
                return Err(bad(format!(
                    "parameter group {g} does not number its parameters {} on",
                    map.names.len()
                )));
            }
            map.names.push(params[m].0.clone());
            let is_half = matches!(params[m].2, DType::BF16 | DType::F16);
            map.master.push(is_half.then_some((g, half)));
            half += usize::from(is_half);
        }
    }
    prove(p, o, &params, &map).map_err(bad)?;
    Ok(Some(map))
}

/// Every index's state tensors and master copy have its parameter's shape.
fn prove(
    p: &Pickle,
    o: Id,
    params: &[(String, Vec<u64>, DType)],
    map: &ParamMap,
) -> std::result::Result<(), String> {
    let shape_of = |name: &str| params.iter().find(|x| x.0 == name).map(|x| x.1.clone());
    let state = p.get(o, "optimizer").and_then(|i| p.get(i, "state"));
    for (k, st) in state.and_then(|s| p.dict_entries(s)).unwrap_or_default() {
        let i = common::uint(p, *k).ok_or("a state key is not an index")? as usize;
        let name = map.names.get(i).ok_or(format!(
            "state index {i} is past the {} parameters",
            map.names.len()
        ))?;
        let want = shape_of(name).unwrap_or_default();
        for (sk, sv) in p.dict_entries(*st).unwrap_or_default() {
            let Some(t) = p.tensor_of(*sv) else { continue };
            if !t.shape.is_empty() && t.shape != want {
                return Err(format!("index {i}'s {} has shape {:?} but the group rule gives it {name} of shape {want:?}", p.str(*sk).unwrap_or("?"), t.shape));
            }
        }
    }
    let groups = list(p, p.get(o, "fp32_from_fp16_params"));
    for (i, at) in map.master.iter().enumerate() {
        let Some((g, k)) = at else { continue };
        let t = groups
            .get(*g)
            .map(|l| list(p, Some(*l)))
            .and_then(|l| l.get(*k).and_then(|&t| p.tensor_of(t).cloned()));
        let want = shape_of(&map.names[i]).unwrap_or_default();
        match t {
            Some(t) if t.shape == want => {}
            t => return Err(format!("index {i}'s fp32 master copy (fp32_from_fp16_params[{g}][{k}]) {} but the group rule gives it {} of shape {want:?}", t.map_or("is missing".to_string(), |t| format!("has shape {:?}", t.shape)), map.names[i])),
        }
    }
    Ok(())
}

/// An optional number as a message shows it ("none" when absent).
pub(crate) fn shown(n: Option<u64>) -> String {
    n.map_or("none".to_string(), |n| n.to_string())
}
