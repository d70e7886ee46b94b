//! Vocabulary rows, the knowledge every job that changes the row count shares (no job imports
//! another: extend-embeddings and sanitize-checkpoint both use this): how many a tokenizer needs
//! (`select`; which tensors hold them is the formats' answer, `formats::vocabulary`), how new ones are initialised ([`Method`] resolved
//! into an [`init::Init`]; the maths in [`init`], its CUDA twin under `cuda`, [`device`]
//! choosing; a donor model's rows for any list of new ids in [`donor`]), how a matrix is grown, cut or rearranged (`resize`, by a `rowmap::RowMap`: new id
//! → old row or init), and how the changed checkpoint is
//! written in its own format (`write`).

pub(crate) mod apply;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod donor;
pub mod gemm;
pub mod init;
pub(crate) mod layout;

mod method;
pub(crate) mod moves;
pub(crate) mod resize;
pub(crate) mod select;
pub(crate) mod subword;
pub(crate) mod write;

pub use method::{resolve_init, InitOptions, Method};

use crate::error::{Error, Result};
use std::path::Path;

/// The rule of every writer: removing trained rows of a *weight* needs `--allow-shrink`. Cutting
/// optimizer moments down to the rows their weight already has (seed 001: moments 24001, weights
/// 24000) loses nothing and never comes here. The refusal names the file, the tensor, both
/// sizes and the flag.
pub fn refuse_weight_cut(
    path: &Path,
    tensor: &str,
    rows: u64,
    target: u64,
    allow_shrink: bool,
) -> Result<()> {
    if target >= rows || allow_shrink {
        return Ok(());
    }
    Err(Error::Shrink {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        rows,
        target,
    })
}
pub use select::tokenizer_rows;
