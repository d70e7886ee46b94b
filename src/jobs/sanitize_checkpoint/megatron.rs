//! sanitize-checkpoint for a Megatron-Core `torch_dist` checkpoint: `--vocab-rows N` (the true
//! vocabulary) gives the padded table size by the run's own rule (a multiple of
//! `make_vocab_size_divisible_by` x TP, from `common.pt`'s args); the embedding and output
//! layer are grown (new rows by `--init`) or cut (`--allow-shrink`) to it and re-cut into the same
//! number of tensor-parallel row chunks; `common.pt`'s `padded_vocab_size` (and `vocab_size` where
//! set) follow. The distributed optimizer's `dp_reshardable` buckets are re-laid exactly, its
//! `fully_reshardable` per-parameter state resized with the matrices, or either left out with
//! `--optimizer drop`; other optimizer layouts are refused. The planning and the
//! writing are `rows::layout::megatron`'s; the report and its rendering are here.

use super::dcp::Resized;
use crate::error::Result;
use crate::formats::GlobalPolicy;
use crate::output::folder::Carried;
use crate::rows::init::Init;
use crate::rows::layout::megatron::{resize, How};
pub use crate::rows::layout::megatron::{Megatron, RelaidBuckets, Written};
use crate::rows::layout::report::NonFinite;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How a run writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub dry_run: bool,
    pub overwrite: bool,
    pub allow_shrink: bool,
    /// `--optimizer drop`: leave the optimizer state out (resume with `--no-load-optim`).
    pub drop_optimizer: bool,
    /// `--fail-on-nonfinite`: NaN or Inf in a vocabulary matrix stops the run, nothing written.
    pub fail_on_nonfinite: bool,
}

/// What sanitize did to a Megatron checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    /// The true vocabulary asked for.
    pub vocab_rows: u64,
    /// The table's rows before and after (the padded sizes).
    pub old_padded_rows: u64,
    pub padded_rows: u64,
    pub tensor_parallel: u64,
    pub resized: Vec<Resized>,
    /// The optimizer's items left out (`--optimizer drop`).
    pub dropped: Vec<String>,
    /// The distributed optimizer's buckets, re-laid (absent without optimizer state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<RelaidBuckets>,
    /// The distributed optimizer's `fully_reshardable` state items resized with their vocabulary
    /// matrix (main copies' new rows the new weights, moments' zero).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub optimizer_states: Vec<String>,
    /// The vocabulary matrices as entries, and the re-laid buckets' items: the plan's edits.
    #[serde(skip)]
    pub entries: Vec<crate::plan::Entry>,
    #[serde(skip)]
    pub bucket_edits: Vec<crate::plan::Edit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<Written>,
    /// The save root's and iteration folder's other files, carried over.
    pub carried: Vec<Carried>,
    /// The vocabulary matrices holding NaN or Inf (the tensors the run reads whole; the others
    /// are carried over unread).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nonfinite: Vec<NonFinite>,
    /// `--fail-on-nonfinite` found some: nothing written, exit 1.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// Resize `m`'s vocabulary for a true vocabulary of `n` tokens and write it to `output`.
pub fn run(
    m: &Megatron,
    output: &Path,
    n: u64,
    init: &Init,
    run: Run,
    policy: &GlobalPolicy,
) -> Result<Report> {
    crate::output::atomic::refuse_overlap(output, &m.input_paths())?;
    let how = How {
        allow_shrink: run.allow_shrink,
        drop_optimizer: run.drop_optimizer,
        out: (!run.dry_run).then_some((output, run.overwrite)),
        fail_on_nonfinite: run.fail_on_nonfinite,
    };
    let done = resize(m, n, init, how, policy)?;
    let (old, rows) = (done.old_rows, done.rows);
    Ok(Report {
        input: m.path.clone(),
        output: (!run.dry_run && !done.failed).then(|| output.to_path_buf()),
        vocab_rows: n,
        old_padded_rows: old,
        padded_rows: rows,
        tensor_parallel: m.tp,
        resized: done
            .changed
            .into_iter()
            .map(|c| Resized {
                name: c.name,
                role: c.role,
                old_rows: old,
                new_rows: rows,
                shape: c.shape,
            })
            .collect(),
        dropped: done.dropped,
        buckets: done.buckets,
        optimizer_states: done.optimizer_states,
        entries: done.entries,
        bucket_edits: done.bucket_edits,
        written: done.written,
        carried: done.carried,
        nonfinite: done.nonfinite,
        failed: done.failed,
    })
}

/// The report's lines on NaN and Inf, and on `--fail-on-nonfinite` stopping the run.
pub(super) fn render_nonfinite(s: &mut String, nonfinite: &[NonFinite], failed: bool) {
    for n in nonfinite {
        s.push_str(&format!(
            "non-finite: {} has {} NaN, {} Inf\n",
            n.tensor, n.nan, n.inf
        ));
    }
    if failed {
        s.push_str("failed: non-finite values found (--fail-on-nonfinite); nothing written\n");
    }
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "vocabulary {} tokens: padded table {} -> {} rows (split {} ways by tensor parallelism)\n",
        r.vocab_rows, r.old_padded_rows, r.padded_rows, r.tensor_parallel
    );
    for x in &r.resized {
        s.push_str(&format!(
            "resized {} ({}): {} -> {} rows\n",
            x.name, x.role, x.old_rows, x.new_rows
        ));
    }
    // Rows are new only when the table grew.
    let zero = if r.padded_rows > r.old_padded_rows {
        ", new rows' moments zero"
    } else {
        ""
    };
    if let Some(b) = r.buckets.as_ref().filter(|b| b.stages.is_empty()) {
        s.push_str(&format!(
            "re-laid the distributed optimizer's buckets ({} groups x {} states): {} -> {} elements ({} padded){zero}\n",
            b.groups, b.states, b.numel_unpadded.0, b.numel_unpadded.1, b.numel
        ));
    }
    for (b, st) in r
        .buckets
        .iter()
        .flat_map(|b| b.stages.iter().map(move |s| (b, s)))
    {
        let buffer = match st.buffer {
            0 => String::new(),
            n => format!("gbuf_idx_{n}, "),
        };
        s.push_str(&format!(
            "re-laid the distributed optimizer's buckets of pipeline stage {}, {buffer}bucket_idx_{} (groups {:?} x {} states): {} -> {} elements ({} padded){zero}\n",
            st.stage, st.bucket, st.groups, b.states, st.numel_unpadded.0, st.numel_unpadded.1, st.numel
        ));
    }
    if !r.optimizer_states.is_empty() {
        s.push_str(&format!(
            "resized the distributed optimizer's per-parameter state with its matrices ({} items, fully_reshardable): new rows' main copies the new weights, moments zero\n",
            r.optimizer_states.len()
        ));
    }
    if !r.dropped.is_empty() {
        s.push_str(&format!(
            "left out the optimizer state ({} items): resume with --no-load-optim\n",
            r.dropped.len()
        ));
    }
    render_nonfinite(&mut s, &r.nonfinite, r.failed);
    if r.failed {
        return s;
    }
    match (&r.output, &r.written) {
        (Some(o), Some(w)) => s.push_str(&format!(
            "wrote {}: {} data file(s) carried over unchanged, {} new chunk(s){}, new .metadata and common.pt\n",
            o.display(),
            w.carried.len(),
            w.new_chunks,
            w.new_file.as_ref().map(|f| format!(" in {f}")).unwrap_or_default()
        )),
        _ => s.push_str("dry run: nothing written\n"),
    }
    s
}
