//! What the job is asked: scores, checks, training, specials, and whether to write.

use std::path::PathBuf;

/// Options of the job.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Score for new Unigram/SentencePiece pieces whose addition has none.
    pub score: Option<f64>,
    pub check_text: Vec<PathBuf>,
    pub dry_run: bool,
    /// Write the merge even when new tokens do not encode alone to their id.
    pub allow_unreachable: bool,
    /// Replace an existing output file.
    pub overwrite: bool,
    /// Write the merge even when base text (lines no new token covers) encodes differently.
    pub allow_base_change: bool,
    /// Corpus files to train an addition from (BPE continued from BASE's merges).
    pub train: Vec<PathBuf>,
    /// How many new tokens to train at most.
    pub train_size: usize,
    /// Train tokens across words too (a line one word), where BASE keeps a line whole; else
    /// words split at whitespace, `▁` only first, as SentencePiece trains.
    pub train_across_words: bool,
    /// Tokens to add as special tokens (matched whole, `special: true`): marked where an
    /// addition lists them, else added after the additions' tokens.
    pub special: Vec<String>,
}
