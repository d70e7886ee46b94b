//! What the doctor is given: what to check ([`Inputs`]), what the layer above opened for it
//! ([`Opened`]), and its one question of another job, sanitize-checkpoint's reading of an
//! optimizer, with the answer the layer above hands in.

use crate::formats::{Checkpoint, OpenOptions, Tensors};
use std::path::PathBuf;

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub checkpoint: PathBuf,
    pub tokenizers: Vec<PathBuf>,
    pub config: Option<PathBuf>,
    pub freeze_until: Option<u64>,
    pub base_tokenizer: Option<PathBuf>,
    pub training_checkpoint: Option<PathBuf>,
    pub token_ids: Option<PathBuf>,
    /// u16, u32, i32 or i64 for raw token-id files.
    pub token_ids_dtype: Option<String>,
    /// Multi-codebook data: ids in each row of a [C, T] tensor must be below this.
    pub codebook_size: Option<u64>,
    pub open: OpenOptions,
}

/// What the layer above opened for the doctor, which opens nothing itself: the checkpoint
/// (None for a saved batch checked on its own), the training checkpoint given apart, the
/// token-id data.
#[derive(Debug, Default)]
pub struct Opened {
    pub checkpoint: Option<Checkpoint>,
    pub training: Option<Checkpoint>,
    pub token_ids: Option<TokenIds>,
    /// The answer to [`super::optimizer_question`], when there was one.
    pub optimizer: Option<OptimizerAnswer>,
}

/// Token-id data as read: a saved batch (a torch or safetensors file, opened), or the bytes of
/// a `.npy` or raw ids file.
#[derive(Debug)]
pub enum TokenIds {
    Batch(Tensors),
    Bytes(Vec<u8>),
}

/// The one question the doctor asks about a training checkpoint's optimizer: which file, and
/// the rows its moments should have. The layer above answers it with sanitize-checkpoint's own
/// reading and hands the answer in as [`Opened::optimizer`] (the doctor imports no other job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimizerQuestion {
    pub training_checkpoint: PathBuf,
    pub target_rows: u64,
}

/// The answer: the moments that do not fit and the tensors holding NaN/Inf, or why
/// sanitize-checkpoint refuses to read the optimizer.
pub type OptimizerAnswer = std::result::Result<OptimizerState, Refusal>;

/// sanitize-checkpoint's reading of a training checkpoint against the target rows.
#[derive(Debug, Clone, Default)]
pub struct OptimizerState {
    /// Optimizer state (moments) whose rows are not the target's: tensor and shape.
    pub misfit: Vec<(String, Vec<u64>)>,
    /// Tensors holding NaN or Inf: tensor, NaN count, Inf count.
    pub nonfinite: Vec<(String, u64, u64)>,
}

/// sanitize-checkpoint refused to read the optimizer (it will not guess which state is whose).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Its message, as sanitize-checkpoint prints it.
    pub message: String,
    /// Only a fresh optimizer (`--optimizer drop`) gets past the refusal.
    pub drop_helps: bool,
}
