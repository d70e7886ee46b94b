//! The `extend-embeddings` job: grow (or, when asked, shrink) the vocabulary matrices of a
//! checkpoint to a target row count, initialising new rows, in the checkpoint's own format.
//! Old rows are copied bit for bit; every other tensor is copied untouched.
//!
//! One step of the job per module: `options` (what it is asked), `select` (which tensors, how
//! many rows), `choose` (the init; [`donor`] omp's), `config` (config.json), `plan` (the whole
//! decision), `to_plan` (the one Plan it prints), `execute` (through the format's writer),
//! `report` (what the run says). How rows are grown, initialised (CPU and CUDA) and written is
//! knowledge sanitize-checkpoint shares: it lives a floor down, in [`crate::rows`].

mod choose;
mod config;
pub mod donor;
mod execute;
pub mod gguf;
mod options;
mod plan;
mod report;
mod select;
mod to_plan;
pub use execute::execute;
pub use options::{Options, Target};
pub use plan::{plan, Planned};
pub use report::{render, render_verbose, Changed, PlannedTensor, Report, SegmentMap};
pub use to_plan::to_plan;

use crate::error::Result;
use crate::formats;
use std::path::Path;

/// What a run gave: a tensor store's report, or a GGUF file's (a report of its own).
pub enum Outcome {
    Tensors(Box<Report>),
    Gguf(Box<gguf::GgufReport>),
}

/// Extend whatever `input` is into `out`: a GGUF file by [`gguf::run`] (its own flags and
/// report), everything else as [`run`] does.
pub fn run_any(input: &Path, out: &Path, opts: &Options) -> Result<Outcome> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    if let formats::Checkpoint::Gguf(g) = &opened {
        return gguf::run(g, out, opts).map(|r| Outcome::Gguf(Box::new(r)));
    }
    run_opened(&opened, input, out, opts).map(|r| Outcome::Tensors(Box::new(r)))
}

/// Extend `input` into `out`: [`plan()`], then [`execute()`] (or, for `--dry-run` and when nothing
/// would change, the plan's report with the new rows' norms computed and nothing written). A
/// GGUF file is refused: [`run_any`] grows it.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    if let formats::Checkpoint::Gguf(_) = opened {
        return Err(crate::error::Error::unsupported(
            input,
            "a GGUF file: it is grown by extend_embeddings::run_any (the extend-embeddings command does this)",
        ));
    }
    run_opened(&opened, input, out, opts)
}

/// [`run`] on the checkpoint `formats::open` found at `input`.
fn run_opened(
    opened: &formats::Checkpoint,
    input: &Path,
    out: &Path,
    opts: &Options,
) -> Result<Report> {
    let (own, note) = choose::with_own_tokenizer(input, opts);
    let opts = own.as_ref().unwrap_or(opts);
    let ckpt = opened.tensors_for(
        "extend-embeddings",
        "sanitize-checkpoint DIR --vocab-rows N --output OUT (or --tokenizer TOK)",
    )?;
    let mut plan = plan(ckpt, input, opts)?;
    plan.report.notes.extend(note);
    let folder = !matches!(opened, formats::Checkpoint::File(_));
    plan.report.layout = (opened.layout(), folder);
    execute(ckpt, plan, out, opts)
}
