//! inspect-checkpoint's report: what it lists, as the JSON gives it.

use crate::dtype::DType;
use crate::formats::{Format, OpenOptions};
use crate::output::manifest::HashAlg;
use crate::ties::Tie;
use crate::vocab::Detection;
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What to include.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// The digest of every listed tensor (parallel), with the manifests' algorithm.
    pub hash: bool,
    /// Only tensors whose name matches.
    pub filter: Option<Regex>,
    /// How to open (pickle globals the user trusts).
    pub open: OpenOptions,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: DType,
    /// torch's name for the dtype (`float32`, `uint16`, `float8_e4m3fn`), for torch files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<&'static str>,
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// The shard holding it (sharded checkpoints only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// With `--hash`: the digest of its bytes (the report's `hash` names the algorithm).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A DCP tensor's chunks: its box in the global tensor and where it is stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<ChunkEntry>>,
}

/// One chunk of a DCP tensor.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkEntry {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
    pub file: String,
    /// Where the chunk's `torch.save` archive is in `file`.
    pub offset: u64,
    pub length: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DTypeTotal {
    pub tensors: u64,
    pub parameters: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Names listed (a tied pair is two).
    pub tensors: u64,
    /// Elements and bytes, a storage shared by tied names counted once.
    pub parameters: u64,
    pub bytes: u64,
    pub by_dtype: BTreeMap<String, DTypeTotal>,
}

impl Totals {
    /// One listed tensor: into the totals and its dtype's line.
    pub(super) fn count(&mut self, dtype: &str, parameters: u64, bytes: u64) {
        self.tensors += 1;
        self.parameters += parameters;
        self.bytes += bytes;
        let d = self.by_dtype.entry(dtype.to_string()).or_default();
        d.tensors += 1;
        d.parameters += parameters;
        d.bytes += bytes;
    }
}

/// The whole report for one checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: Format,
    pub files: Vec<FileEntry>,
    pub file_bytes: u64,
    /// `__metadata__` of a single file, or the index's `metadata` of a sharded set.
    pub metadata: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// With `--hash`: the algorithm of the tensors' digests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<HashAlg>,
    pub tensors: Vec<TensorEntry>,
    /// Totals over the listed tensors.
    pub totals: Totals,
    /// Vocabulary matrices, over all tensors (the filter does not apply).
    pub vocabulary: Detection,
    /// Names that are one parameter (see [`crate::ties`]).
    pub ties: Vec<Tie>,
    /// The non-tensor tree of a torch file, summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeSummary>,
    /// A DCP folder's non-tensor items (pickled values such as `optim.param_groups.….lr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_items: Option<Vec<String>>,
}

/// One top-level entry of a torch file's tree.
#[derive(Debug, Clone, Serialize)]
pub struct TreeEntry {
    pub key: String,
    pub kind: String,
    /// Tensors at or under this key.
    pub tensors: usize,
    /// The value, for scalars (`step: 3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// An optimizer state dict found in the tree (`{"state": …, "param_groups": […]}`).
#[derive(Debug, Clone, Serialize)]
pub struct OptimizerSummary {
    pub path: String,
    pub param_groups: usize,
    pub params: usize,
    /// Parameters that have per-parameter state.
    pub state_entries: usize,
    /// Names found in the per-parameter state (`exp_avg`, `exp_avg_sq`, `step`, …).
    pub moments: Vec<String>,
}

/// A scheduler state dict found in the tree (has `last_epoch` or `base_lrs`).
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerSummary {
    pub path: String,
    pub keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_epoch: Option<String>,
}

/// What a torch file holds besides tensors.
#[derive(Debug, Clone, Serialize)]
pub struct TreeSummary {
    pub root: String,
    pub entries: Vec<TreeEntry>,
    pub optimizers: Vec<OptimizerSummary>,
    pub schedulers: Vec<SchedulerSummary>,
}
