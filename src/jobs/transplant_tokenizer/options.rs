//! What transplant-tokenizer is asked: the new tokenizer, where the rows of tokens the base lacks
//! come from, and how to write.

use crate::formats::OpenOptions;
use crate::rows::{device, Method};
use std::path::{Path, PathBuf};

/// Options of the job.
#[derive(Debug, Clone)]
pub struct Options {
    /// NEW: a tokenizer file (tokenizer.json or SentencePiece .model) or a folder holding one
    /// (with its tokenizer_config.json / special_tokens_map.json, which then come along).
    pub tokenizer: PathBuf,
    /// The model's own tokenizer, when the model is not a folder that holds it.
    pub base_tokenizer: Option<PathBuf>,
    /// How rows of tokens the base lacks are made.
    pub method: Method,
    pub seed: u64,
    /// Round the row count up to a multiple of M (the padding rows get the init).
    pub pad_to_multiple_of: Option<u64>,
    /// Tensors to change, by name; empty: detect the vocabulary matrices.
    pub tensors: Vec<String>,
    /// config.json to update (default: the one beside the input).
    pub config: Option<PathBuf>,
    /// Dropping the trained rows of base tokens NEW lacks is allowed.
    pub allow_shrink: bool,
    pub link: bool,
    pub file_sha256: bool,
    pub dry_run: bool,
    pub overwrite: bool,
    pub device: device::Request,
    pub open: OpenOptions,
    /// `--init omp` / `knn`: the donor model, its tokenizer and k.
    pub donor: Option<Donor>,
    /// A training checkpoint: optimizer indices the user names for vocabulary matrices.
    pub optimizer_params: Vec<(String, u64)>,
    /// A training checkpoint: leave its optimizer state out (a fresh optimizer) instead of moving it.
    pub drop_optimizer: bool,
}

impl Options {
    /// Options for `tokenizer` with every other choice at the tool's defaults.
    pub fn new(tokenizer: PathBuf) -> Options {
        Options {
            tokenizer,
            base_tokenizer: None,
            method: Method::Mean,
            seed: 0,
            pad_to_multiple_of: None,
            tensors: Vec::new(),
            config: None,
            allow_shrink: false,
            link: false,
            file_sha256: false,
            dry_run: false,
            overwrite: false,
            device: device::Request::Auto,
            open: OpenOptions::default(),
            donor: None,
            optimizer_params: Vec::new(),
            drop_optimizer: false,
        }
    }

    /// Every path the job reads: `input` and the files the options name.
    pub(super) fn input_paths<'a>(&'a self, input: &'a Path) -> Vec<&'a Path> {
        let mut v = vec![input, self.tokenizer.as_path()];
        v.extend(self.base_tokenizer.as_deref());
        v.extend(self.config.as_deref());
        if let Some(d) = &self.donor {
            v.push(&d.path);
            v.extend(d.tokenizer.as_deref());
        }
        v
    }
}

/// `--donor`, `--donor-tokenizer`, `--omp-k`.
#[derive(Debug, Clone)]
pub struct Donor {
    pub path: PathBuf,
    pub tokenizer: Option<PathBuf>,
    /// `--omp-k K|auto`.
    pub k: crate::rows::donor::K,
}
