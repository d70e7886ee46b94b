//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.

mod matching;
pub mod sanitize;
pub(crate) mod state;
mod trainer;
pub mod zero;

use crate::error::{Error, Result};
use sanitize::{Options, Report};
pub use state::has_optimizer;
use std::path::Path;

/// sanitize-checkpoint: a Trainer folder (`checkpoint-N/`) or a torch training checkpoint file.
/// The dispatch lives here so the file job and the folder job do not call each other.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
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
