//! sanitize-checkpoint for Megatron-LM's legacy per-rank save: `--vocab-rows N` (the true
//! vocabulary) gives the padded size by the run's rule (a multiple of
//! `make_vocab_size_divisible_by` x TP, from the args in each rank file); the embedding and
//! output layer grown (new rows by `--init`) or cut (`--allow-shrink`) and re-cut at the same TP
//! size, their Adam moments and fp32 master copies with them (new moments zero, new master rows
//! = the new weights), the optimizer index → parameter mapping proved first by every shape. The
//! planning and the writing are `rows::layout::megatron_legacy`'s; the report is here.

use super::megatron::Run;
use crate::error::Result;
use crate::formats::GlobalPolicy;
use crate::output::folder::{Carried, Left};
use crate::rows::init::Init;
use crate::rows::layout::megatron::How;
pub use crate::rows::layout::megatron_legacy::Legacy;
use crate::rows::layout::megatron_legacy::{resize, RelaidBuffer};
use crate::rows::layout::report::NonFinite;
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
    /// Files of the input the output leaves out on purpose (`--optimizer drop`: each rank
    /// folder's `distrib_optim.pt`), and why.
    pub left_out: Vec<Left>,
    /// The matrices, moments and master copies the run resizes, as entries (the plan's edits).
    #[serde(skip)]
    pub entries: Vec<crate::plan::Entry>,
    /// With `--optimizer drop`, each rank file's optimizer tensors left out (the plan's
    /// `removed` edits); with the distributed optimizer, its re-laid buffers' states.
    #[serde(skip)]
    pub dropped: Vec<crate::plan::Edit>,
    /// The distributed optimizer's buffers re-laid (each rank's `distrib_optim.pt`; left out of
    /// the JSON when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub distrib_optim: Vec<RelaidBuffer>,
    /// The vocabulary matrices holding NaN or Inf (the tensors the run reads whole).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nonfinite: Vec<NonFinite>,
    /// `--fail-on-nonfinite` found some: nothing written, exit 1.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// Resize `l`'s vocabulary for a true vocabulary of `n` tokens and write it to `output`.
pub fn run(
    l: &Legacy,
    output: &Path,
    n: u64,
    init: &Init,
    run: Run,
    policy: &GlobalPolicy,
) -> Result<Report> {
    crate::output::atomic::refuse_overlap(output, &l.input_paths())?;
    let how = How {
        allow_shrink: run.allow_shrink,
        drop_optimizer: run.drop_optimizer,
        out: (!run.dry_run).then_some((output, run.overwrite)),
        fail_on_nonfinite: run.fail_on_nonfinite,
    };
    let done = resize(l, n, init, how, policy)?;
    Ok(Report {
        input: l.path.clone(),
        output: (!run.dry_run && !done.failed).then(|| output.to_path_buf()),
        vocab_rows: n,
        old_padded_rows: done.old_rows,
        padded_rows: done.rows,
        tensor_parallel: l.tp,
        resized: done.changed,
        optimizer_dropped: run.drop_optimizer,
        carried: done.carried,
        left_out: done.left_out,
        entries: done.entries,
        dropped: done
            .dropped
            .into_iter()
            .chain(done.distrib.iter().flat_map(RelaidBuffer::edits))
            .collect(),
        distrib_optim: done.distrib,
        nonfinite: done.nonfinite,
        failed: done.failed,
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
            "resized {x}{}: {} -> {} rows\n",
            with_state(r, x),
            r.old_padded_rows,
            r.padded_rows
        ));
    }
    for b in &r.distrib_optim {
        s.push_str(&format!(
            "re-laid the distributed optimizer's buffer {} ({} parameters) in {}: {} -> {} elements x 3 states\n",
            b.buffer, b.dtype, b.file, b.numel.0, b.numel.1
        ));
    }
    if r.optimizer_dropped {
        s.push_str("left out the optimizer state: resume with --no-load-optim\n");
    }
    super::megatron::render_nonfinite(&mut s, &r.nonfinite, r.failed);
    if r.failed {
        return s;
    }
    for l in &r.left_out {
        s.push_str(&format!("left out {}: {}\n", l.name, l.why));
    }
    match &r.output {
        Some(o) => s.push_str(&format!(
            "wrote {}: every rank's model_optim_rng.pt{}, {} other file(s) carried over\n",
            o.display(),
            if r.distrib_optim.is_empty() {
                ""
            } else {
                " and its re-laid distrib_optim.pt"
            },
            r.carried.len()
        )),
        None => s.push_str("dry run: nothing written\n"),
    }
    s
}

/// What the rank files' optimizer state resized with matrix `name` (its entries in the plan):
/// its moments, and its fp32 master copy where there is one; nothing when the state is left out
/// or lives in `distrib_optim.pt` (its buffers have lines of their own).
fn with_state(r: &Report, name: &str) -> &'static str {
    use crate::plan::Role;
    let of = |role: Role| {
        r.entries
            .iter()
            .any(|e| e.of.as_deref() == Some(name) && e.role == role)
    };
    match (of(Role::Moment), of(Role::MasterCopy)) {
        (true, true) => " with its optimizer moments and fp32 master copy",
        (true, false) => " with its optimizer moments",
        (false, true) => " with its fp32 master copy",
        (false, false) => "",
    }
}
