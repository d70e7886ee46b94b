//! Megatron-LM / Megatron-Core checkpoints. A `torch_dist` save (`--ckpt-format torch_dist`) is
//! read: the save root (`latest_checkpointed_iteration.txt`) or an iteration folder
//! (`metadata.json` naming its `sharded_backend`), whose tensors are a torch DCP folder
//! underneath — its vocabulary split by rows across tensor-parallel ranks and padded by
//! Megatron's rule, its `common.pt` holding the run's args, its optimizer in Megatron's own
//! layouts ([`layout`]). inspect-checkpoint and check-vocab read it; sanitize-checkpoint resizes its
//! vocabulary ([`mod@write`]); every other tool that writes refuses it by name (a DCP job run on it
//! would write a checkpoint Megatron cannot resume). The legacy
//! per-rank layout (`mp_rank_00/model_optim_rng.pt`) is read by [`legacy`] (inspect-checkpoint,
//! check-vocab; `formats::open` gives it its own arm) and resized by [`legacy_write`]
//! (sanitize-checkpoint).

pub mod buckets;
pub mod common;
pub mod distrib_optim;
pub mod layout;
pub mod legacy;
pub mod legacy_distrib;
pub mod legacy_write;
pub mod relay;
pub mod write;

use super::dcp::{self, Dcp};
use super::torch::pickle::GlobalPolicy;
use crate::error::{Error, Result};
use common::Common;
use layout::{Optimizer, VocabTensor};
use std::path::{Path, PathBuf};

/// A vocabulary matrix of either Megatron layout as the row-surgery interface names it (the
/// global shape, TP ranks' rows stacked): `output_layer` the head, the word embeddings the
/// embedding.
pub(crate) fn vocab_entry(name: &str, role: &str, shape: &[u64]) -> crate::plan::Entry {
    let role = if role == "head" {
        crate::plan::Role::Head
    } else {
        crate::plan::Role::Embedding
    };
    crate::plan::Entry::weight(name, role, shape)
}

/// The layout, in the user's words.
pub const LAYOUT: &str = "Megatron-Core distributed checkpoint";

/// The globals Megatron-Core adds to DCP's `.metadata` (the save plans of every rank, kept in
/// `Metadata.all_local_plans`), beside torch's own: allowed for that pickle only, as data.
const PLAN_GLOBALS: [&str; 4] = [
    "torch.distributed.checkpoint.planner.SavePlan",
    "torch.distributed.checkpoint.planner.WriteItem",
    "torch.distributed.checkpoint.planner.WriteItemType",
    "torch.distributed.checkpoint.planner.TensorWriteData",
];

/// `.metadata`'s globals: torch's and Megatron's save plans.
static METADATA_GLOBALS: [&str; dcp::METADATA_GLOBALS.len() + PLAN_GLOBALS.len()] = {
    let mut all = [""; dcp::METADATA_GLOBALS.len() + PLAN_GLOBALS.len()];
    let mut i = 0;
    while i < dcp::METADATA_GLOBALS.len() {
        all[i] = dcp::METADATA_GLOBALS[i];
        i += 1;
    }
    let mut j = 0;
    while j < PLAN_GLOBALS.len() {
        all[i + j] = PLAN_GLOBALS[j];
        j += 1;
    }
    all
};

/// The policy a torch_dist `.metadata` is read with: torch's globals and Megatron's save plans.
pub fn metadata_policy() -> GlobalPolicy {
    GlobalPolicy {
        context: &METADATA_GLOBALS,
        ..GlobalPolicy::default()
    }
}

/// What a folder is, when it is a Megatron checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// An iteration folder of a distributed checkpoint (`metadata.json` names its backend).
    Iteration,
    /// A save root (`latest_checkpointed_iteration.txt`).
    Root,
    /// A legacy per-rank folder (`mp_rank_00/`).
    Legacy,
}

impl Found {
    /// What it is, in the user's words (refusals name it).
    pub fn what(self) -> &'static str {
        match self {
            Found::Iteration => {
                "a Megatron-Core distributed checkpoint (metadata.json names its sharded_backend)"
            }
            Found::Root => "a Megatron save root (latest_checkpointed_iteration.txt)",
            Found::Legacy => "a Megatron checkpoint in the legacy per-rank layout (mp_rank_00/)",
        }
    }
}

/// What `dir` is, when it is a Megatron checkpoint.
pub(super) fn recognise(dir: &Path) -> Option<Found> {
    let sharded = std::fs::read(dir.join("metadata.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("sharded_backend").is_some());
    if sharded || looks_like_iteration(dir) {
        Some(Found::Iteration)
    } else if dir.join(LATEST).is_file() {
        Some(Found::Root)
    } else if dir.join("mp_rank_00").is_dir() {
        Some(Found::Legacy)
    } else {
        None
    }
}

/// `metadata.json` names the backend megatron-core loads the folder with: only `torch_dist` (a
/// torch DCP folder) is read; another backend's name is refused, not read as torch_dist.
fn check_backend(dir: &Path) -> Result<()> {
    let path = dir.join("metadata.json");
    let doc = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let version = doc.as_ref().and_then(|d| d.get("sharded_backend_version"));
    match doc.as_ref().and_then(|d| d.get("sharded_backend")) {
        Some(serde_json::Value::String(b)) if b == "torch_dist" => match version {
            None => Ok(()),
            Some(v) if v.as_u64() == Some(1) => Ok(()),
            Some(v) => Err(Error::unsupported(&path, format!("names torch_dist version {v}: only version 1 (what megatron-core writes) is read"))),
        },
        Some(other) => Err(Error::unsupported(&path, format!("names sharded_backend {other}: only megatron-core's torch_dist saves are read"))),
        None => Err(Error::format(&path, "not JSON naming a sharded_backend")),
    }
}

/// A folder holding `metadata.json` beside a torch DCP `.metadata` and `common.pt` is an
/// iteration folder of megatron-core's, whatever its `metadata.json` says (opening it says
/// what is wrong with that file).
fn looks_like_iteration(dir: &Path) -> bool {
    ["metadata.json", dcp::METADATA, "common.pt"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

/// The save root's pointer to its newest iteration.
pub const LATEST: &str = "latest_checkpointed_iteration.txt";

/// The refusal of a Megatron checkpoint (`found` says what it is) by `tool`, when named, that
/// does not read it.
pub fn refusal(dir: &Path, found: Found, tool: Option<&str>) -> Error {
    let reads = match (found, tool) {
        (Found::Legacy, _) => "only inspect-checkpoint and check-vocab read it and sanitize-checkpoint resizes it so far".to_string(),
        (_, Some(tool)) => {
            format!("{tool} does not handle it yet (inspect-checkpoint and check-vocab read it, sanitize-checkpoint resizes its vocabulary)")
        }
        (_, None) => "only inspect-checkpoint, check-vocab and sanitize-checkpoint read it so far"
            .to_string(),
    };
    Error::unsupported(
        dir,
        format!("{}: {reads} (its vocabulary is split across tensor-parallel ranks and padded by Megatron's rule, its optimizer in Megatron's own buckets); convert it with Megatron's own tools, or give a Hugging Face export", found.what()),
    )
}

/// An open Megatron-Core `torch_dist` checkpoint.
#[derive(Debug)]
pub struct Megatron {
    /// The path given: the save root or the iteration folder.
    pub path: PathBuf,
    pub found: Found,
    /// The iteration folder (the DCP folder).
    pub dir: PathBuf,
    /// From `latest_checkpointed_iteration.txt` or the folder's name (`iter_0000010`); None for
    /// a `release` folder.
    pub iteration: Option<u64>,
    pub dcp: Dcp,
    /// `common.pt`, when the folder has one.
    pub common: Option<Common>,
    /// The vocabulary matrices present (`embedding.word_embeddings.weight`,
    /// `output_layer.weight`), each split by rows across the tensor-parallel ranks.
    pub vocab: Vec<VocabTensor>,
    /// The tensor-parallel size the vocabulary's row chunks show.
    pub tp: u64,
    pub optimizer: Optimizer,
}

impl Megatron {
    /// The run's args from `common.pt` (None without one, or without args in it).
    pub fn args(&self) -> Option<&common::Args> {
        self.common.as_ref().and_then(|c| c.args.as_ref())
    }

    /// How many ways the distributed optimizer shards each bucket: its data-parallel group,
    /// DP x CP (megatron-core's `intra_dp_cp_group` for dense parameters) over the args'
    /// `num_distributed_optimizer_instances` (each instance holds every bucket, sharded over its
    /// share of the replicas), from the args; 1 without them.
    pub fn optimizer_shards(&self) -> u64 {
        let all = self.replicas();
        match self
            .args()
            .and_then(|a| a.num_distributed_optimizer_instances)
        {
            // Megatron asserts that the instances divide DP x CP.
            Some(n) if n > 1 && all.is_multiple_of(n) => all / n,
            _ => all,
        }
    }

    /// DP x CP from the args (1 each where not given): the replicas of each model chunk.
    fn replicas(&self) -> u64 {
        let args = self.args();
        let dp = args.and_then(|a| a.data_parallel_size).unwrap_or(1);
        let cp = args.and_then(|a| a.context_parallel_size).unwrap_or(1);
        dp.max(1).saturating_mul(cp.max(1))
    }

    /// The args' `num_distributed_optimizer_instances`, when set, divides DP x CP (Megatron
    /// asserts it does): otherwise the args do not describe the run that wrote the buckets.
    pub fn check_optimizer_instances(&self) -> Result<()> {
        let Some(n) = self
            .args()
            .and_then(|a| a.num_distributed_optimizer_instances)
        else {
            return Ok(());
        };
        let all = self.replicas();
        if n >= 1 && all.is_multiple_of(n) {
            return Ok(());
        }
        Err(Error::unsupported(self.dir.join("common.pt"), format!("its args say num_distributed_optimizer_instances {n}, which does not divide DP x CP = {all} (Megatron asserts it does): which replicas shard a bucket is not known; give --optimizer drop")))
    }

    /// Model chunks per pipeline rank: the args' `virtual_pipeline_model_parallel_size` (the
    /// interleaved schedule), 1 without.
    pub fn model_chunks(&self) -> u64 {
        let args = self.args();
        let v = args.and_then(|a| a.virtual_pipeline_model_parallel_size);
        v.unwrap_or(1).max(1)
    }

    /// Whether the args say the embedding is shared with the output layer over pipeline stages
    /// (`untie_embeddings_and_output_weights` false, PP > 1): the last stage's output layer is
    /// a copy of the embedding, and the distributed optimizer gives each a bucket of its own.
    pub fn tied_pipelined(&self) -> bool {
        let args = self.args();
        args.is_some_and(|a| a.tied() && a.pipeline_model_parallel_size.is_some_and(|pp| pp > 1))
    }

    /// The row-surgery interface's answer: its vocabulary matrices, and in the
    /// `fully_reshardable` layout each one's main copy and moments (laid out as the matrix). The
    /// `dp_reshardable` layout's state is flat buckets, each holding many parameters' rows, so it
    /// lists no entry of its own (sanitize's Plan names each re-laid bucket item as an edit); a
    /// `fully_reshardable` save whose states do not follow the matrices lists none either
    /// (sanitize refuses it).
    pub fn entries(&self) -> Vec<crate::plan::Entry> {
        let weight = |v: &VocabTensor| vocab_entry(v.name, v.role, &v.shape);
        let mut out: Vec<crate::plan::Entry> = self.vocab.iter().map(weight).collect();
        if self.optimizer.form.as_deref() == Some(layout::FULLY_RESHARDABLE) {
            let states = layout::vocab_states(&self.dcp, &self.vocab, &self.optimizer, "");
            out.extend(states.iter().flatten().map(layout::VocabState::entry));
        }
        out
    }

    /// Open the checkpoint at `path` (what `recognise` found there); `policy`: the globals the
    /// user allowed, for `common.pt`.
    pub fn open(path: &Path, found: Found, policy: &GlobalPolicy) -> Result<Megatron> {
        let (dir, iteration) = match found {
            Found::Legacy => return Err(refusal(path, found, None)),
            Found::Iteration => (path.to_path_buf(), iteration_of_name(path)),
            Found::Root => iteration_folder(path)?,
        };
        match recognise(&dir) {
            Some(Found::Iteration) => {}
            Some(Found::Legacy) => return Err(refusal(&dir, Found::Legacy, None)),
            _ => {
                return Err(Error::format(
                    &dir,
                    format!("the iteration {LATEST} names is not a Megatron checkpoint (no metadata.json naming its sharded_backend, no mp_rank_00/): copy the whole iteration folder"),
                ))
            }
        }
        check_backend(&dir)?;
        if !dir.join(dcp::METADATA).is_file() {
            return Err(Error::format(
                dir.join(dcp::METADATA),
                "missing: a torch_dist iteration folder keeps its tensors' index there; copy the whole folder",
            ));
        }
        let dcp = Dcp::open_with(&dir, &metadata_policy())?;
        layout::check_tiling(&dcp)?;
        let common = common::read(&dir, policy)?;
        let (vocab, tp) = layout::vocabulary(&dcp)?;
        if vocab.is_empty() {
            return Err(Error::unsupported(
                path,
                format!(
                    "{}: holds neither {} nor {}: only GPT models' checkpoints are read so far",
                    found.what(),
                    layout::VOCAB[0].0,
                    layout::VOCAB[1].0
                ),
            ));
        }
        let optimizer = layout::optimizer(&dcp, common.as_ref())?;
        Ok(Megatron {
            path: path.to_path_buf(),
            found,
            dir,
            iteration,
            dcp,
            common,
            vocab,
            tp,
            optimizer,
        })
    }

    /// Every file it reads (outputs must never be one).
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.path, &self.dir];
        v.extend(self.dcp.paths());
        v.extend(self.common.iter().map(|c| c.path.as_path()));
        v
    }
}

/// Megatron-LM's `release` folder (a converted model): it resumes at iteration 0, whatever the
/// files hold.
pub fn is_release(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == "release")
}

/// `iter_0000010` → 10.
pub(super) fn iteration_of_name(dir: &Path) -> Option<u64> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("iter_")?
        .parse()
        .ok()
}

/// The iteration folder a save root's `latest_checkpointed_iteration.txt` names, and its number
/// (None for `release`).
pub(super) fn iteration_folder(root: &Path) -> Result<(PathBuf, Option<u64>)> {
    let latest = root.join(LATEST);
    let text = std::fs::read_to_string(&latest).map_err(|e| Error::io(&latest, "read", e))?;
    let text = text.trim();
    let (name, iteration) = if text == "release" {
        ("release".to_string(), None)
    } else {
        let n: u64 = text.parse().map_err(|_| {
            Error::format(
                &latest,
                format!("holds {text:?}, not an iteration number or 'release'"),
            )
        })?;
        (format!("iter_{n:07}"), Some(n))
    };
    let dir = root.join(&name);
    if !dir.is_dir() {
        return Err(Error::format(
            &dir,
            format!("missing: {LATEST} names iteration {text}, whose folder {name}/ is not in the save root"),
        ));
    }
    Ok((dir, iteration))
}
