//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.
//!
//! sanitize-checkpoint's two jobs, each a plan (reads only) and an execute (writes): a torch
//! training checkpoint file ([`sanitize`]) and a Hugging Face Trainer folder ([`trainer`]). What
//! they share sits beside them: [`options`]/[`report`] (what is asked and answered), `plan`
//! (planning steps), `checks` (findings and the rules that stop a write). How torch stores
//! optimizer state and which index is which parameter is knowledge vocab-blocks shares: it lives a
//! floor down, in `formats::torch::optimizer` (`state`, `matching`); how rows are grown in `rows`.

mod checks;
pub mod dcp;
pub mod options;
mod plan;
pub mod report;
pub mod sanitize;
pub mod to_plan;
pub mod trainer;
pub mod zero;

use crate::error::{Error, Result};
pub use crate::formats::torch::optimizer::state::has_optimizer;
pub use options::Options;
use options::RowsFrom;
pub use report::Report;
use std::path::Path;

/// sanitize-checkpoint: a Trainer folder (`checkpoint-N/`) or a torch training checkpoint file.
/// The dispatch lives here so the file job and the folder job do not call each other.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let mut inputs = vec![input];
    match &opts.target {
        RowsFrom::Tokenizer(p) | RowsFrom::Model(p) => inputs.push(p),
        RowsFrom::Rows(_) => {}
    }
    crate::output::atomic::refuse_overlap(out, &inputs)?;
    if !input.is_dir() {
        return sanitize::run_file(input, out, opts);
    }
    if opts.segments > 1 || !opts.tensors.is_empty() {
        return Err(Error::unsupported(
            input,
            "--segments and --tensor are for torch training checkpoint files, not Trainer folders yet",
        ));
    }
    trainer::run(input, out, opts)
}
