//! sanitize-checkpoint for Megatron-LM's legacy per-rank save: `--vocab-rows N` (the true
//! vocabulary) gives the padded size by the run's rule (a multiple of
//! `make_vocab_size_divisible_by` x TP, from the args in each rank file); the embedding and
//! output layer grown (new rows by `--init`) or cut (`--allow-shrink`) and re-cut at the same TP
//! size, their Adam moments and fp32 master copies with them (new moments zero, new master rows
//! = the new weights), the optimizer index → parameter mapping proved first by every shape.

use super::megatron::{init_rows, padded, refuse_no_tokens, refuse_non_float, target_rows, Run};
use crate::error::{Error, Result};
use crate::formats::megatron::legacy::{Legacy, VocabTensor};
use crate::formats::megatron::legacy_write::{self, Resize};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::output::folder::Carried;
use crate::rows::init::Init;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What sanitize did to a legacy save.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    pub vocab_rows: u64,
    pub old_padded_rows: u64,
    pub padded_rows: u64,
    pub tensor_parallel: u64,
    pub resized: Vec<&'static str>,
    pub optimizer_dropped: bool,
    pub carried: Vec<Carried>,
}

/// The run's padding rule from the args: (make_vocab_size_divisible_by, old true size).
fn rule(l: &Legacy) -> Result<(u64, Option<u64>)> {
    let a = l.args.as_ref().ok_or_else(|| Error::unsupported(&l.path, "the rank files hold no Megatron-LM args: the run's padding rule (make_vocab_size_divisible_by) is unknown"))?;
    let old = l.padded_rows();
    if a.padded_vocab_size.is_some_and(|p| p != old) {
        return Err(Error::format(&l.ranks[0].path, format!("its args say padded_vocab_size {:?} but the vocabulary matrices have {old} rows: not a size this run pads to", a.padded_vocab_size)));
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
    if padded(old, by, l.tp) != old {
        return Err(Error::format(&l.ranks[0].path, format!("{old} rows is not a multiple of make_vocab_size_divisible_by x TP = {by} x {}: not Megatron's padding", l.tp)));
    }
    Ok((by, a.vocab_size))
}

/// `v`'s global rows (its ranks' chunks stacked).
fn global_bytes(l: &Legacy, v: &VocabTensor) -> Result<Vec<u8>> {
    let mut all = Vec::new();
    for r in l.ranks.iter().filter(|r| r.pp == v.pp) {
        let t = r
            .file
            .tensor_refs()
            .find(|t| t.name.ends_with(v.name) && t.name.starts_with("model"));
        let t = t.ok_or_else(|| Error::tensor(&r.path, v.name, "missing on this rank"))?;
        all.extend_from_slice(&t.try_bytes()?);
    }
    Ok(all)
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

/// Resize `l`'s vocabulary for a true vocabulary of `n` tokens and write it to `output`.
pub fn run(
    l: &Legacy,
    output: &Path,
    n: u64,
    how: &Init,
    run: Run,
    policy: &GlobalPolicy,
) -> Result<Report> {
    crate::output::atomic::refuse_overlap(output, &l.input_paths())?;
    refuse_no_tokens(n)?;
    let (by, old_true) = rule(l)?;
    let old = l.padded_rows();
    let names: Vec<&str> = l.vocab.iter().map(|v| v.name).collect();
    let rows = target_rows(
        &l.dir,
        &names,
        (old, old_true),
        (n, by, l.tp),
        run.allow_shrink,
    )?;
    let base = old_true.unwrap_or(old).min(old);
    let new_rows = l
        .vocab
        .iter()
        .map(|v| new_rows(l, v, base, rows.saturating_sub(old), how))
        .collect::<Result<_>>()?;
    let r = Resize {
        rows,
        new_rows,
        vocab_size: old_true.map(|_| n),
        drop_optimizer: run.drop_optimizer,
    };
    if !run.drop_optimizer {
        for rank in &l.ranks {
            crate::formats::megatron::legacy::param_map(rank)?;
        }
        if let Some(d) = &l.optimizer.distrib_optim {
            return Err(Error::unsupported(d, "the distributed optimizer's parameter state (flat fp32 buckets) is not resized: give --optimizer drop to leave the optimizer state out and resume with Megatron-LM's --no-load-optim"));
        }
    }
    let carried = if run.dry_run {
        Vec::new()
    } else {
        legacy_write::write(l, &r, output, run.overwrite, policy)?
    };
    Ok(Report {
        input: l.path.clone(),
        output: (!run.dry_run).then(|| output.to_path_buf()),
        vocab_rows: n,
        old_padded_rows: old,
        padded_rows: rows,
        tensor_parallel: l.tp,
        resized: if rows == old {
            Vec::new()
        } else {
            l.vocab.iter().map(|v| v.name).collect()
        },
        optimizer_dropped: run.drop_optimizer,
        carried,
    })
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "vocabulary {} tokens: padded table {} -> {} rows (split {} ways by tensor parallelism)\n",
        r.vocab_rows, r.old_padded_rows, r.padded_rows, r.tensor_parallel
    );
    for x in &r.resized {
        s.push_str(&format!(
            "resized {x} with its optimizer moments and fp32 master copy: {} -> {} rows\n",
            r.old_padded_rows, r.padded_rows
        ));
    }
    if r.optimizer_dropped {
        s.push_str("left out the optimizer state: resume with --no-load-optim\n");
    }
    match &r.output {
        Some(o) => s.push_str(&format!(
            "wrote {}: every rank's model_optim_rng.pt, {} other file(s) carried over\n",
            o.display(),
            r.carried.len()
        )),
        None => s.push_str("dry run: nothing written\n"),
    }
    s
}
