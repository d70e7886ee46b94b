//! The `extend-embeddings` job: grow (or, when asked, shrink) the vocabulary matrices of a
//! checkpoint to a target row count, initialising new rows, in the checkpoint's own format.
//! Old rows are copied bit for bit; every other tensor is copied untouched.
//!
//! One step of the job per module: `select` (which tensors, how many rows), `choose` (the
//! init; `subword` its lists, [`donor`] omp's), `config` (config.json), `plan` (the whole
//! decision), `execute` and `write` (through `output/`), `report` (what the run says).

mod choose;
mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod donor;
mod execute;
pub mod init;
mod plan;
mod report;
pub(crate) mod resize;
mod select;
mod subword;
mod write;
/// The generator moved down a floor (dtype tests use it too); its old path keeps working.
pub use crate::rng;
pub(crate) use choose::resolve_init;
pub(crate) use config::update_config;
pub use config::CONFIG_KEYS;
pub use execute::execute;
pub(crate) use execute::file_name;
pub use plan::{plan, Plan};
pub use report::{render, Changed, ConfigChange, PlannedTensor, Report, SegmentMap};
pub(crate) use resize::{grown_map, resized_rows, Grown, Resize, RowNorms};
pub(crate) use select::select;
pub use select::tokenizer_rows;
pub(crate) use write::write;

use crate::error::Result;
use crate::formats::{self, OpenOptions};
use std::path::{Path, PathBuf};

/// Where the target row count comes from.
#[derive(Debug, Clone)]
pub enum Target {
    Rows(u64),
    Tokenizer(PathBuf),
}

/// `--init`, as the user named it.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    Mean,
    Hewitt,
    Zeros,
    Normal,
    SubwordMean,
    /// `copy:TOKEN` (a token string, or an id).
    Copy(String),
    /// Orthogonal matching pursuit over a donor model's rows (`--donor`).
    Omp,
}

impl Method {
    pub fn parse(s: &str) -> std::result::Result<Method, String> {
        Ok(match s {
            "mean" => Method::Mean,
            "hewitt" => Method::Hewitt,
            "zeros" => Method::Zeros,
            "normal" => Method::Normal,
            "subword-mean" => Method::SubwordMean,
            "omp" => Method::Omp,
            _ => match s.strip_prefix("copy:") {
                Some(t) if !t.is_empty() => Method::Copy(t.to_string()),
                _ => {
                    return Err(format!(
                    "unknown --init '{s}': mean, hewitt, zeros, normal, subword-mean, omp or copy:TOKEN"
                ))
                }
            },
        })
    }

    fn name(&self) -> String {
        match self {
            Method::Mean => "mean".into(),
            Method::Hewitt => "hewitt".into(),
            Method::Zeros => "zeros".into(),
            Method::Normal => "normal".into(),
            Method::SubwordMean => "subword-mean".into(),
            Method::Copy(t) => format!("copy:{t}"),
            Method::Omp => "omp".into(),
        }
    }
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

/// Extend `input` into `out`: [`plan`], then [`execute`] (or, for `--dry-run` and when nothing
/// would change, the plan's report with the new rows' norms computed and nothing written).
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let (own, note) = choose::with_own_tokenizer(input, opts);
    let opts = own.as_ref().unwrap_or(opts);
    let ckpt = formats::open_with(input, &opts.open)?;
    ckpt.refuse_dcp(
        "extend-embeddings",
        "sanitize-checkpoint DIR --vocab-rows N --output OUT (or --tokenizer TOK)",
    )?;
    let mut plan = plan(&ckpt, input, opts)?;
    plan.report.notes.extend(note);
    execute(&ckpt, plan, out, opts)
}
