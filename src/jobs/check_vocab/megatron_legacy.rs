//! check-vocab for Megatron-LM's legacy per-rank save (`mp_rank_TT[_PPP]/model_optim_rng.pt`):
//! the same args and tokenizer checks as a torch_dist save (the args are in each rank's file),
//! and each rank's optimizer state against its parameters (the index → parameter mapping
//! Megatron's group rule gives, proved by every shape).

use super::finding::{finding, Finding, Report, Severity};
use super::megatron::{check, resizes_by, Save};
use super::read::allowed_globals;
use super::Inputs;
use crate::error::Result;
use crate::formats::megatron::legacy::{param_map, Legacy, RANK_FILE};
use crate::formats::megatron::legacy_distrib;
use crate::formats::torch::pickle::GlobalPolicy;
use serde_json::json;

/// Check the legacy save `l`, against `inp`'s tokenizers when given.
pub fn run(l: &Legacy, inp: &Inputs) -> Result<Report> {
    use crate::rows::layout::megatron::How;
    use crate::rows::layout::megatron_legacy::resize;
    let policy = &inp.open.globals;
    let plan = |n, drop_optimizer| {
        let how = How {
            drop_optimizer,
            ..How::default()
        };
        resize(l, n, &crate::rows::init::Init::Mean, how, policy).is_ok()
    };
    let save = Save {
        path: &l.path,
        tp: l.tp,
        head: l.vocab.iter().any(|v| v.role == "head"),
        args_file: RANK_FILE,
        resizes: &|n| resizes_by(plan, n),
        allow_global: allowed_globals(&inp.open),
    };
    check(
        &save,
        l.args.as_ref(),
        l.padded_rows(),
        optimizer_states(l, policy),
        &inp.tokenizers,
    )
}

/// Each rank's optimizer indices map onto its parameters with matching shapes; with the
/// distributed optimizer, each rank's `distrib_optim.pt` is its parameters' layout, every main
/// copy its weight.
fn optimizer_states(l: &Legacy, policy: &GlobalPolicy) -> Vec<Finding> {
    if l.optimizer.distrib_optim.is_some() {
        let proven = legacy_distrib::open_all(l, policy)
            .and_then(|files| legacy_distrib::prove_all(l, &files));
        return proven
            .err()
            .map(|e| {
                finding(
                    Severity::Error,
                    "optimizer-vs-weights",
                    e.to_string(),
                    json!({"distrib_optim": l.optimizer.distrib_optim}),
                    None,
                )
            })
            .into_iter()
            .collect();
    }
    let mut found: Vec<Finding> = l
        .ranks
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
        .collect();
    if found.is_empty() {
        if let Err(e) = crate::formats::megatron::legacy::stage_states_agree(l) {
            let at = json!({"checkpoint": l.path});
            found.push(finding(
                Severity::Error,
                "optimizer-vs-weights",
                e.to_string(),
                at,
                None,
            ));
        }
    }
    found
}
