//! What trim-vocab is asked: which tokens to keep, and how to write.

use crate::formats::OpenOptions;
use std::path::{Path, PathBuf};

/// Options of the job.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model's tokenizer, when the model is not a folder that holds it.
    pub tokenizer: Option<PathBuf>,
    /// Keep the tokens these corpora use (at least `min_count` times), and check them after.
    pub keep_corpus: Vec<PathBuf>,
    pub min_count: u64,
    /// Keep the tokens whose text is in these Unicode scripts.
    pub keep_script: Vec<String>,
    /// Of the corpus's tokens, keep only the N most frequent.
    pub keep_top: Option<usize>,
    /// Keep the tokens listed (one per line: the token, or its id).
    pub keep_list: Option<PathBuf>,
    /// Texts outside the kept set that must still tokenize without new unknown tokens.
    pub check_text: Vec<PathBuf>,
    pub pad_to_multiple_of: Option<u64>,
    /// Tensors to change, by name; empty: detect the vocabulary matrices.
    pub tensors: Vec<String>,
    pub config: Option<PathBuf>,
    /// Dropping trained rows (every trim does) is allowed.
    pub allow_shrink: bool,
    pub link: bool,
    pub file_sha256: bool,
    pub dry_run: bool,
    pub overwrite: bool,
    pub open: OpenOptions,
    /// A training checkpoint: optimizer indices the user names for vocabulary matrices.
    pub optimizer_params: Vec<(String, u64)>,
    /// A training checkpoint: leave its optimizer state out (a fresh optimizer) instead of trimming it.
    pub drop_optimizer: bool,
}

impl Options {
    /// Every path the job reads: `input` and the files the options name.
    pub(super) fn input_paths<'a>(&'a self, input: &'a Path) -> Vec<&'a Path> {
        let mut v = vec![input];
        v.extend(self.tokenizer.as_deref());
        v.extend(self.keep_corpus.iter().map(PathBuf::as_path));
        v.extend(self.keep_list.as_deref());
        v.extend(self.check_text.iter().map(PathBuf::as_path));
        v.extend(self.config.as_deref());
        v
    }
}
