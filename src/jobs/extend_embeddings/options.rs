//! What the job is asked: the target row count, the init and its inputs, how to write.

use crate::formats::OpenOptions;
use crate::rows::{device, Method};
use std::path::{Path, PathBuf};

/// Where the target row count comes from.
#[derive(Debug, Clone)]
pub enum Target {
    Rows(u64),
    Tokenizer(PathBuf),
}

/// Options of the job.
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    pub pad_to_multiple_of: Option<u64>,
    /// Tensors to change, by name; empty: detect the vocabulary matrices.
    pub tensors: Vec<String>,
    pub method: Method,
    /// ε of `hewitt` (transformers uses 1e-9).
    pub epsilon: f64,
    /// Standard deviation of `normal`.
    pub std: f64,
    pub seed: u64,
    pub base_tokenizer: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub allow_shrink: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    pub link: bool,
    /// Also hash each written file whole (tensors are always hashed).
    pub file_sha256: bool,
    pub dry_run: bool,
    /// Replace an existing output file, or a non-empty output folder.
    pub overwrite: bool,
    /// Where the new rows are computed.
    pub device: device::Request,
    /// The matrices are this many equal segments (codebooks), each grown at its end.
    pub segments: u64,
    pub open: OpenOptions,
    /// `--init omp`: the donor model, its tokenizer and k.
    pub donor: Option<Donor>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            target: Target::Rows(0),
            pad_to_multiple_of: None,
            tensors: Vec::new(),
            method: Method::Mean,
            epsilon: 1e-9,
            std: 0.02,
            seed: 0,
            base_tokenizer: None,
            config: None,
            allow_shrink: false,
            link: false,
            file_sha256: false,
            dry_run: false,
            overwrite: false,
            device: device::Request::Auto,
            segments: 1,
            open: OpenOptions::default(),
            donor: None,
        }
    }
}

impl Options {
    /// Every path the job reads: `input` and the files the options name.
    pub(super) fn input_paths<'a>(&'a self, input: &'a Path) -> Vec<&'a Path> {
        let mut v = vec![input];
        if let Target::Tokenizer(t) = &self.target {
            v.push(t);
        }
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
    /// `--omp-k N` or `auto`.
    pub k: crate::rows::donor::K,
}
