//! Vocabulary rows, the knowledge every job that changes the row count shares (no job imports
//! another: extend-embeddings and sanitize-checkpoint both use this): which tensors hold them and
//! how many a tokenizer needs ([`select`]), how new ones are initialised ([`Method`] resolved
//! into an [`init::Init`]; the maths in [`init`], its CUDA twin under `cuda`, [`device`]
//! choosing), how a matrix is grown or cut ([`resize`]), and how the changed checkpoint is
//! written in its own format ([`write`]).

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod init;
mod method;
pub(crate) mod resize;
mod select;
pub(crate) mod subword;
pub(crate) mod write;

pub use method::{resolve_init, InitOptions, Method};
pub(crate) use select::select;
pub use select::tokenizer_rows;
