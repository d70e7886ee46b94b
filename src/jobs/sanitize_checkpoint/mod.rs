//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.
//!
//! sanitize-checkpoint takes what `formats::open` found and hands it to the layout's planner and
//! writer in `rows::layout`: a torch training checkpoint file and a Hugging Face Trainer folder
//! ([`run`], options and report in `rows::layout::{options, report}`, rendered by [`report`]),
//! a DCP folder ([`dcp`]), a DeepSpeed ZeRO save ([`zero`]), Megatron's `torch_dist` and legacy
//! saves ([`megatron`], [`megatron_legacy`]); [`to_plan`] turns each report into the `Plan`.
//! No file here names a format module or a writer (`tests/architecture.rs` holds the rule).

pub mod dcp;
pub mod megatron;
pub mod megatron_legacy;
pub mod report;
pub mod to_plan;
pub mod zero;

use crate::error::{Error, Result};
use crate::formats::Checkpoint;
pub use crate::rows::layout::options::{OptimizerAction, Options, RowsFrom, SchedulerAction};
use crate::rows::layout::{torch_file, trainer};
pub use report::{render, Report};
use std::path::Path;

/// sanitize-checkpoint on a torch training checkpoint file or a Trainer folder (`checkpoint-N/`):
/// the one match over what `formats::open` found, so the file job and the folder job do not call
/// each other. A DCP folder and a ZeRO checkpoint have jobs of their own ([`dcp`], [`zero`]),
/// with their own options.
pub fn run(ckpt: &Checkpoint, out: &Path, opts: &Options) -> Result<Report> {
    let mut inputs = vec![ckpt.path()];
    match &opts.target {
        RowsFrom::Tokenizer(p) | RowsFrom::Model(p) => inputs.push(p),
        RowsFrom::Rows(_) => {}
    }
    crate::output::atomic::refuse_overlap(out, &inputs)?;
    let t = match ckpt {
        Checkpoint::File(t) => return torch_file::run_file(t, out, opts),
        Checkpoint::Trainer(t) => t,
        Checkpoint::ModelFolder { dir, .. } => {
            // Says why it is no Trainer folder (no optimizer.pt, or ZeRO files).
            trainer::refuse_unsupported(dir)?;
            return Err(ckpt.refusal("sanitize-checkpoint", "extend-embeddings"));
        }
        Checkpoint::Dcp(_) | Checkpoint::Zero { .. } => {
            return Err(ckpt.refusal("sanitize-checkpoint's file job", "its DCP or ZeRO job"))
        }
        Checkpoint::Gguf(_) | Checkpoint::Megatron(_) | Checkpoint::MegatronLegacy(_) => {
            return Err(ckpt.refusal("sanitize-checkpoint", ""))
        }
    };
    if opts.segments > 1 || !opts.tensors.is_empty() {
        return Err(Error::unsupported(
            &t.dir,
            "--segments and --tensor are for torch training checkpoint files, not Trainer folders yet",
        ));
    }
    trainer::run(t, out, opts)
}
