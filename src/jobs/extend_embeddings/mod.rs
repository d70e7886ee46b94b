//! The `extend-embeddings` job: grow (or, when asked, shrink) the vocabulary matrices of a
//! checkpoint to a target row count, initialising new rows, in the checkpoint's own format.
//! Old rows are copied bit for bit; every other tensor is copied untouched.
//!
//! One step of the job per module: `select` (which tensors, how many rows), `choose` (the
//! init; [`donor`] omp's), `config` (config.json), `plan` (the whole decision), `execute`
//! (through `output/`), `report` (what the run says). How rows are grown, initialised (CPU and
//! CUDA) and written is knowledge sanitize-checkpoint shares: it lives a floor down, in
//! [`crate::rows`]; its old paths here (`init`, `device`, `cuda`, `Method`) keep working.

mod choose;
mod config;
pub mod donor;
mod execute;
mod plan;
mod report;
mod select;
/// Moved down a floor to `model::config` (sanitize-checkpoint sets the same keys).
pub use crate::model::config::{ConfigChange, CONFIG_KEYS};
/// The generator moved down a floor (dtype tests use it too); its old path keeps working.
pub use crate::rng;
/// Moved down a floor to `rows` (sanitize-checkpoint grows rows the same way).
#[cfg(feature = "cuda")]
pub use crate::rows::cuda;
use crate::rows::resize::{Resize, RowNorms};
pub use crate::rows::{device, init, tokenizer_rows, Method};
pub use execute::execute;
pub use plan::{plan, Plan};
pub use report::{render, render_verbose, Changed, PlannedTensor, Report, SegmentMap};

use crate::error::Result;
use crate::formats::{self, OpenOptions};
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
    pub donor: Option<donor::Donor>,
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
    fn input_paths<'a>(&'a self, input: &'a Path) -> Vec<&'a Path> {
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

/// Extend `input` into `out`: [`plan`], then [`execute`] (or, for `--dry-run` and when nothing
/// would change, the plan's report with the new rows' norms computed and nothing written).
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let (own, note) = choose::with_own_tokenizer(input, opts);
    let opts = own.as_ref().unwrap_or(opts);
    let opened = formats::open(input, &opts.open)?;
    let ckpt = opened.tensors_for(
        "extend-embeddings",
        "sanitize-checkpoint DIR --vocab-rows N --output OUT (or --tokenizer TOK)",
    )?;
    let mut plan = plan(ckpt, input, opts)?;
    plan.report.notes.extend(note);
    execute(ckpt, plan, out, opts)
}
