//! Megatron-LM's legacy per-rank save at a new vocabulary size, planned and written for
//! sanitize-checkpoint: `n` true tokens give the padded size by the run's rule (a multiple of
//! `make_vocab_size_divisible_by` x TP, from the args in each rank file); the embedding and
//! output layer grown (new rows by the init) or cut (`allow_shrink`) and re-cut at the same TP
//! size, their Adam moments and fp32 master copies with them (new moments zero, new master rows
//! = the new weights), the optimizer index → parameter mapping proved first by every shape.

use super::megatron::{init_rows, refuse_no_tokens, refuse_non_float, target_rows, How};
use super::torch_optimizer::dropped_role;
use crate::error::{Error, Result};
use crate::formats::megatron::common::padded;
use crate::formats::megatron::distrib_optim::{DistribOptim, NewBuffer};
pub use crate::formats::megatron::legacy::Legacy;
use crate::formats::megatron::legacy::{Rank, VocabTensor};
use crate::formats::megatron::legacy_distrib;
use crate::formats::megatron::legacy_write::{self, Distrib, Resize};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::TensorRef;
use crate::output::folder::{Carried, Left};
use crate::plan::{Edit, Entry};
use crate::rows::init::Init;
use crate::rows::layout::report::NonFinite;

/// The run's padding rule from the args: (make_vocab_size_divisible_by, old true size).
fn rule(l: &Legacy) -> Result<(u64, Option<u64>)> {
    let a = l.args.as_ref().ok_or_else(|| Error::unsupported(&l.path, "the rank files hold no Megatron-LM args: the run's padding rule (make_vocab_size_divisible_by) is unknown"))?;
    let old = l.padded_rows();
    if a.padded_vocab_size.is_some_and(|p| p != old) {
        return Err(Error::format(&l.ranks[0].path, format!("its args say padded_vocab_size {} but the vocabulary matrices have {old} rows: not a size this run pads to", crate::formats::megatron::legacy::shown(a.padded_vocab_size))));
    }
    let by = a
        .make_vocab_size_divisible_by
        .filter(|&d| d > 0)
        .ok_or_else(|| {
            Error::unsupported(
                &l.ranks[0].path,
                "its args hold no make_vocab_size_divisible_by: the run's padding rule is unknown",
            )
        })?;
    if padded(old, by, l.tp.max(1)) != Some(old) {
        return Err(Error::format(&l.ranks[0].path, format!("{old} rows is not a multiple of make_vocab_size_divisible_by x TP = {by} x {}: not Megatron's padding", l.tp)));
    }
    Ok((by, a.vocab_size))
}

/// `v`'s global rows (its ranks' chunks stacked).
fn global_bytes(l: &Legacy, v: &VocabTensor) -> Result<Vec<u8>> {
    let mut all = Vec::new();
    for r in l.ranks.iter().filter(|r| r.pp == v.pp) {
        all.extend_from_slice(&rank_tensor(r, v)?.try_bytes()?);
    }
    Ok(all)
}

/// Rank `r`'s chunk of `v`.
fn rank_tensor<'r>(r: &'r Rank, v: &VocabTensor) -> Result<TensorRef<'r>> {
    let t = r
        .file
        .tensor_refs()
        .find(|t| t.name.ends_with(v.name) && t.name.starts_with("model"));
    t.ok_or_else(|| Error::tensor(&r.path, v.name, "missing on this rank"))
}

/// `count` new rows for `v` by `how` from its first `base` rows.
fn new_rows(l: &Legacy, v: &VocabTensor, base: u64, count: u64, how: &Init) -> Result<Vec<u8>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    refuse_non_float(&l.path, v.name, v.dtype)?;
    let all = global_bytes(l, v)?;
    init_rows(
        &l.path,
        (v.name, v.dtype, v.shape[1]),
        &all,
        (base, count),
        how,
    )
}

/// What [`resize`] did: the padded rows before and after, the vocabulary matrices changed (with
/// their moments and master copies), and the files carried over (none for a dry run).
pub struct Resized {
    pub old_rows: u64,
    pub rows: u64,
    pub changed: Vec<&'static str>,
    pub carried: Vec<Carried>,
    /// What the run changes as the row-surgery interface names it: the vocabulary matrices and,
    /// unless the optimizer is left out, their moments and master copies (`Legacy::entries`).
    pub entries: Vec<Entry>,
    /// With `--optimizer drop`: every tensor of each rank file's optimizer state, left out, as a
    /// `removed` edit named `RANK_FOLDER/PATH` at its shape in that file.
    pub dropped: Vec<Edit>,
    /// With `--optimizer drop`: the files left out of the output (each rank folder's
    /// `distrib_optim.pt`).
    pub left_out: Vec<Left>,
    /// The distributed optimizer's buffers re-laid (each rank's `distrib_optim.pt`).
    pub distrib: Vec<RelaidBuffer>,
    /// The vocabulary matrices holding NaN or Inf (every rank's chunk counted).
    pub nonfinite: Vec<NonFinite>,
    /// `fail_on_nonfinite` and some: nothing was written.
    pub failed: bool,
}

/// The args' `use_distributed_optimizer` agrees with where the rank folders keep the optimizer
/// state (`distrib_optim.pt` beside each rank file, or the rank files' own `optimizer` entries):
/// Megatron-LM loads the state by the args, so a save where they disagree does not resume.
fn refuse_optimizer_args(l: &Legacy) -> Result<()> {
    let said = l.args.as_ref().and_then(|a| a.use_distributed_optimizer);
    let has_state = l.optimizer.form.is_some();
    let why = match (said, l.optimizer.distrib_optim.is_some()) {
        (Some(true), false) if has_state => {
            "say use_distributed_optimizer but no rank folder holds distrib_optim.pt"
        }
        (Some(false), true) => {
            "say use_distributed_optimizer false but the rank folders hold distrib_optim.pt"
        }
        _ => return Ok(()),
    };
    Err(Error::unsupported(&l.ranks[0].path, format!("its args {why}: Megatron-LM would not load this optimizer state; give --optimizer drop to leave it out and resume with --no-load-optim")))
}

/// Each vocabulary matrix holding NaN or Inf, its ranks' chunks counted together.
fn vocab_nonfinite(l: &Legacy) -> Result<Vec<NonFinite>> {
    let mut out = Vec::new();
    for v in &l.vocab {
        let (mut nan, mut inf) = (0, 0);
        for r in l.ranks.iter().filter(|r| r.pp == v.pp) {
            let t = rank_tensor(r, v)?;
            let (n, i) = t.nonfinite()?;
            (nan, inf) = (nan + n, inf + i);
        }
        if nan + inf > 0 {
            out.push(NonFinite {
                tensor: v.name.to_string(),
                nan,
                inf,
            });
        }
    }
    Ok(out)
}

/// One buffer of a rank's `distrib_optim.pt` re-laid: the file (`RANK_FOLDER/distrib_optim.pt`),
/// the buffer's index and parameters' dtype, its elements before and after (the three states
/// each).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RelaidBuffer {
    pub file: String,
    pub buffer: u64,
    pub dtype: &'static str,
    pub numel: (u64, u64),
}

/// Each rank file's optimizer tensors (under `optimizer`), as `removed` edits named by the rank
/// folder and their path in the file, their roles by `torch_optimizer::dropped_role` (a rank
/// file's optimizer is a torch optimizer's state dict with Megatron's master copies beside it).
fn dropped_state(l: &Legacy) -> Result<Vec<Edit>> {
    let mut out = Vec::new();
    for rank in &l.ranks {
        let p = &rank.file.pickle;
        let folder = rank.folder();
        let paths =
            crate::formats::torch::tensor_paths(p).map_err(|e| Error::format(&rank.path, e))?;
        for t in paths.iter().filter(|t| t.path.starts_with("optimizer.")) {
            let Some(node) = p.tensor_of(t.node) else {
                continue;
            };
            let role = dropped_role(&t.path, &node.shape, t.path.contains(".state."));
            out.push(Edit::removed(
                &format!("{folder}/{}", t.path),
                role,
                &node.shape,
            ));
        }
    }
    Ok(out)
}

/// Resize `l`'s vocabulary for a true vocabulary of `n` tokens, written as `how` says.
pub fn resize(
    l: &Legacy,
    n: u64,
    init: &Init,
    how: How<'_>,
    policy: &GlobalPolicy,
) -> Result<Resized> {
    refuse_no_tokens(n)?;
    let (by, old_true) = rule(l)?;
    let old = l.padded_rows();
    let names: Vec<&str> = l.vocab.iter().map(|v| v.name).collect();
    let rows = target_rows(
        &l.dir,
        &names,
        (old, old_true),
        (n, by, l.tp),
        how.allow_shrink,
    )?;
    let base = old_true.unwrap_or(old).min(old);
    let new_rows = l
        .vocab
        .iter()
        .map(|v| new_rows(l, v, base, rows.saturating_sub(old), init))
        .collect::<Result<_>>()?;
    let r = Resize {
        rows,
        new_rows,
        vocab_size: old_true.map(|_| n),
        drop_optimizer: how.drop_optimizer,
    };
    if !how.drop_optimizer {
        refuse_optimizer_args(l)?;
    }
    let distributed = l.optimizer.distrib_optim.is_some() && !how.drop_optimizer;
    if !how.drop_optimizer && !distributed {
        for rank in &l.ranks {
            crate::formats::megatron::legacy::param_map(rank)?;
        }
        crate::formats::megatron::legacy::stage_states_agree(l)?;
    }
    // The distributed optimizer's state: every rank's proven, the changed buffers re-laid.
    let files = if distributed {
        legacy_distrib::open_all(l, policy)?
    } else {
        Vec::new()
    };
    let news = legacy_distrib::relay(l, &files, rows, &r.new_rows)?;
    let relaid = relaid_buffers(l, &files, &news);
    let nonfinite = vocab_nonfinite(l)?;
    let failed = how.fail_on_nonfinite && !nonfinite.is_empty();
    let carried = match how.out.filter(|_| !failed) {
        None => Vec::new(),
        Some((output, overwrite)) => legacy_write::write(
            l,
            (
                &r,
                Distrib {
                    files: &files,
                    news,
                },
            ),
            output,
            overwrite,
            policy,
        )?,
    };
    let changed = if rows == old {
        Vec::new()
    } else {
        l.vocab.iter().map(|v| v.name).collect()
    };
    let (entries, dropped, left_out) = if how.drop_optimizer {
        (
            l.weight_entries(),
            dropped_state(l)?,
            legacy_write::left_out(l),
        )
    } else if distributed {
        // The moments and main copies are the re-laid buffers (`distrib`), not per-parameter
        // entries.
        (l.weight_entries(), Vec::new(), Vec::new())
    } else {
        (l.entries()?, Vec::new(), Vec::new())
    };
    Ok(Resized {
        old_rows: old,
        rows,
        changed,
        carried,
        entries,
        dropped,
        left_out,
        distrib: relaid,
        nonfinite,
        failed,
    })
}

impl RelaidBuffer {
    /// Its three states as plan edits (`FILE:BUFFER.STATE`, flat before and after): each
    /// parameter's elements at its new offset, the new rows' moments 0 and main params the new
    /// weights.
    pub fn edits(&self) -> Vec<Edit> {
        crate::formats::megatron::buckets::STATES
            .iter()
            .map(|s| Edit {
                tensor: format!("{}:{}.{s}", self.file, self.buffer),
                role: if *s == "param" {
                    crate::plan::Role::MasterCopy
                } else {
                    crate::plan::Role::Moment
                },
                from: vec![self.numel.0],
                to: vec![self.numel.1],
                rows: crate::plan::RowSource::Mapped {
                    from: serde_json::json!({"relaid": "distrib_optim.pt buffer: each parameter's elements at its new offset, the new rows' moments 0 and main params the new weights"}),
                },
            })
            .collect()
    }
}

/// The re-laid buffers of the distributed optimizer's state, as the report lists them.
fn relaid_buffers(
    l: &Legacy,
    files: &[DistribOptim],
    news: &[Vec<NewBuffer<'_>>],
) -> Vec<RelaidBuffer> {
    let mut out = Vec::new();
    for ((rank, f), nbs) in l.ranks.iter().zip(files).zip(news) {
        let folder = rank.folder();
        for nb in nbs {
            let b = &f.buffers[nb.buffer];
            out.push(RelaidBuffer {
                file: format!(
                    "{folder}/{}",
                    crate::formats::megatron::legacy::DISTRIB_OPTIM
                ),
                buffer: b.index,
                dtype: b.dtype.name(),
                numel: (b.numel, nb.numel),
            });
        }
    }
    out
}
