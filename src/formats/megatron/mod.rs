//! Megatron-LM / Megatron-Core checkpoints: recognised so that no tool mistakes one for another
//! layout, not read yet. A `torch_dist` iteration folder is a torch DCP folder underneath, but
//! its vocabulary is split across tensor-parallel ranks and padded by Megatron's rule, its
//! `common.pt` holds the run's args and its optimizer lives in Megatron's own flat buckets: a
//! DCP job run on it would write a checkpoint Megatron cannot resume. Refused by name until the
//! reader lands.

use crate::error::Error;
use std::path::Path;

/// What `dir` is, when it is a Megatron checkpoint: an iteration folder of a distributed
/// checkpoint (`metadata.json` naming its `sharded_backend`), a save root
/// (`latest_checkpointed_iteration.txt`), or a legacy per-rank folder (`mp_rank_00/`).
pub(super) fn recognise(dir: &Path) -> Option<&'static str> {
    let sharded = std::fs::read(dir.join("metadata.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("sharded_backend").is_some());
    if sharded {
        Some("a Megatron-Core distributed checkpoint (metadata.json names its sharded_backend)")
    } else if dir.join("latest_checkpointed_iteration.txt").is_file() {
        Some("a Megatron save root (latest_checkpointed_iteration.txt)")
    } else if dir.join("mp_rank_00").is_dir() {
        Some("a Megatron checkpoint in the legacy per-rank layout (mp_rank_00/)")
    } else {
        None
    }
}

/// The refusal of a Megatron checkpoint, `what` it is.
pub(super) fn refusal(dir: &Path, what: &str) -> Error {
    Error::unsupported(
        dir,
        format!("{what}: not read yet (its vocabulary is split across tensor-parallel ranks and padded by Megatron's rule, its optimizer in Megatron's own buckets); convert it with Megatron's own tools, or give a Hugging Face export"),
    )
}
