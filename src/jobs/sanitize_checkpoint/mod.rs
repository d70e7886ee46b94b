//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.
//!
//! sanitize-checkpoint's two jobs, each a plan (reads only) and an execute (writes): a torch
//! training checkpoint file ([`sanitize`]) and a Hugging Face Trainer folder ([`trainer`]). What
//! they share sits beside them: [`options`]/[`report`] (what is asked and answered), `plan`
//! (planning steps), `checks` (findings and the rules that stop a write). How torch stores
//! optimizer state and which index is which parameter is knowledge vocab-blocks shares: it lives a
//! floor down, in `formats::torch::optimizer` (`state`, `matching`); how rows are grown in `rows`.
//! Every layout's writing (and DCP's, ZeRO's and Megatron's planning) is
//! `rows::layout`'s: no file here names a layout module or a writer (`tests/architecture.rs`
//! holds the rule).

mod checks;
pub mod dcp;
pub mod megatron;
pub mod megatron_legacy;
pub mod options;
mod plan;
pub mod report;
pub mod sanitize;
pub mod to_plan;
pub mod trainer;
pub mod zero;

use crate::error::{Error, Result};
use crate::formats::Checkpoint;
pub use options::Options;
use options::RowsFrom;
pub use report::Report;
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
        Checkpoint::File(t) => return sanitize::run_file(t, out, opts),
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
