//! ckpt-surgery: checkpoint surgery with verified outputs.
//!
//! Module map (docs/architecture.md; data flows one way: open → plan → write), top down:
//! - [`cli`]: the tools' command lines (the binaries and the Python package call it).
//! - [`jobs`]: one folder per tool, named as the tool — [`jobs::inspect_checkpoint`],
//!   [`jobs::merge_tokenizers`], [`jobs::extend_embeddings`], [`jobs::sanitize_checkpoint`],
//!   [`jobs::check_vocab`], [`jobs::vocab_blocks`]. No job imports another.
//! - knowledge the jobs share: [`ties`] (one parameter, several names), [`model`] (config.json's
//!   keys), [`rows`] (init maths, the GEMM, the CUDA twin, a tensor at its new rows, writing a
//!   tensor store), [`tokenizer`] (tokenizer forms, training, the base as jobs read it).
//! - [`formats`]: bytes → tensors. [`formats::open`] is the one place that decides what a path is
//!   (one [`formats::Checkpoint`] arm per layout); one folder per format reads it, says what its
//!   names mean and writes its edits; [`formats::vocabulary`] is the row-surgery interface every
//!   layout answers ([`formats::Checkpoint::entries`], [`formats::vocabulary::Entry::edit`]).
//! - [`output`]: what every writer shares: temp beside the destination, fsync, re-open with the
//!   strict reader, compare, rename; direct I/O, manifests, progress, byte-preserving JSON edits.
//! - the floor: [`dtype`], [`error`] (the one error type), [`rng`], [`nonfinite`], [`mapped`]
//!   (input files as memory maps), [`vocab`] (names and shapes → roles), [`rowmap`] (old id →
//!   new id or init), [`plan`] (the one `Plan` every writing job prints with `--dry-run --json`
//!   and every check-vocab finding carries as its fix).

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
pub mod release;
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
