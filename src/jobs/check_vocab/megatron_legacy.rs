//! check-vocab for Megatron-LM's legacy per-rank save (`mp_rank_TT[_PPP]/model_optim_rng.pt`):
//! the same args and tokenizer checks as a torch_dist save (the args are in each rank's file),
//! and each rank's optimizer state against its parameters (the index → parameter mapping
//! Megatron's group rule gives, proved by every shape).

use super::finding::{finding, Finding, Report, Severity};
use super::megatron::{check, Save};
use crate::error::Result;
use crate::formats::megatron::legacy::{param_map, Legacy, RANK_FILE};
use serde_json::json;
use std::path::PathBuf;

/// Check the legacy save `l`, against `tokenizers` when given.
pub fn run(l: &Legacy, tokenizers: &[PathBuf]) -> Result<Report> {
    let save = Save {
        path: &l.path,
        tp: l.tp,
        head: l.vocab.iter().any(|v| v.role == "head"),
        args_file: RANK_FILE,
    };
    check(
        &save,
        l.args.as_ref(),
        l.padded_rows(),
        optimizer_states(l),
        tokenizers,
    )
}

/// Each rank's optimizer indices map onto its parameters with matching shapes.
fn optimizer_states(l: &Legacy) -> Vec<Finding> {
    l.ranks
        .iter()
        .filter_map(|r| param_map(r).err().map(|e| (r, e)))
        .map(|(r, e)| {
            finding(
                Severity::Error,
                "optimizer-vs-weights",
                e.to_string(),
                json!({"rank_file": r.path}),
                None,
            )
        })
        .collect()
}
