//! ckpt-surgery: checkpoint surgery with verified outputs.
//!
//! Module map (data flows one way: open → plan → write):
//! - [`dtype`]: element types, sizes, row conversion to/from f32/f64.
//! - [`formats`]: bytes ⇄ tensors. [`formats::open`] is the one place that decides what a path is,
//!   from the content: a safetensors or torch file, a sharded set, a model folder, a Trainer
//!   folder, a DCP folder, a ZeRO checkpoint (one [`formats::Checkpoint`] arm each).
//! - [`output`]: the one way anything is written: temp file, fsync, re-open with the strict reader,
//!   compare every tensor byte with the plan, rename, fsync the directory; the output rule for
//!   folders (`output::folder`, `output::model_folder`: a complete folder, renamed into place).
//! - [`vocab`]: which tensors are vocabulary matrices (embeddings, heads, head bias).
//! - [`ties`]: which names are one parameter (a tied head), the one answer every job uses.
//! - [`nonfinite`]: NaN and Inf counted from a floating tensor's bits (the scan, and the writer's pass).
//! - [`model`]: other knowledge jobs share (what a DCP's keys mean, config.json's vocabulary keys,
//!   optimizer layouts), so no job imports another; [`rows`]: how vocabulary rows are chosen,
//!   grown, initialised (CPU init, the CUDA twin behind `--features cuda`, `device` choosing) and
//!   written.
//! - [`inspect`]: the `inspect-checkpoint` job; [`embeddings`] (`extend-embeddings`), [`optimizer`]
//!   (`sanitize-checkpoint`, files and Trainer folders), [`doctor`] (`check-vocab`), [`blocks`]
//!   (`vocab-blocks`), [`tokenizer`] (`merge-tokenizers`).
//! - [`plan`]: the one `Plan` every writing job prints with `--dry-run --json` (the report, the
//!   tensor edits, the side files) and every check-vocab finding carries as its fix.
//! - [`error`]: the one error type.

pub mod dtype;
pub mod error;
pub mod rng;
pub mod rowmap;

pub use error::{Error, Result};
pub mod cli;
pub mod formats;
pub mod jobs;
pub mod mapped;
pub mod model;
pub mod nonfinite;
pub mod output;
pub mod plan;
pub mod rows;
pub mod ties;
pub mod tokenizer;
pub mod vocab;

#[doc(hidden)]
pub use mimalloc::MiMalloc;

/// mimalloc as the global allocator of the crate it is invoked in (every binary and the Python
/// module; not this library, so a program using it keeps its own): glibc's allocator was 30 % of
/// merge-tokenizers' samples on a 262k-id tokenizer.json (a `Value` per token).
#[macro_export]
macro_rules! use_mimalloc {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::MiMalloc = $crate::MiMalloc;
    };
}
