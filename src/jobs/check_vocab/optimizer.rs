//! The optimizer check: a training checkpoint's moments against the target rows, as
//! sanitize-checkpoint reads them (ties, every optimizer, every layout). The reading is the answer
//! the layer above hands in (`Opened::optimizer`): the doctor imports no other job.

use super::finding::{finding, Finding, Severity};
use super::fix::fixed_path;
use super::inputs::OptimizerAnswer;
use super::read::allowed_globals;
use crate::formats::OpenOptions;
use crate::plan::{Plan, Request as Fix};
use serde_json::json;
use std::path::Path;

/// The fix with a fresh optimizer instead of the repaired one.
fn with_drop(fix: &Fix) -> Fix {
    let mut f = fix.clone();
    if let Fix::Sanitize { drop_optimizer, .. } = &mut f {
        *drop_optimizer = true;
    }
    f
}

/// The optimizer's state against the target rows. `fix` is the weights' fix when it is a
/// sanitize of this checkpoint (a Trainer folder); otherwise sanitize-checkpoint to `target`.
pub(super) fn check_optimizer(
    answer: &OptimizerAnswer,
    tp: &Path,
    (target, sure, rows): (u64, bool, u64),
    open: &OpenOptions,
    fix: Option<Fix>,
    findings: &mut Vec<Finding>,
) {
    let fix = fix.unwrap_or_else(|| Fix::Sanitize {
        input: tp.to_path_buf(),
        output: fixed_path(tp),
        vocab_rows: target,
        tokenizer: None,
        drop_optimizer: false,
        // Weights above the target lose trained rows: said with --allow-shrink, so that
        // --fix runs it only when named (moments cut to the weights' rows need no flag).
        allow_shrink: target < rows,
        allow_global: allowed_globals(open),
    });
    match answer {
        Ok(r) => {
            if !r.misfit.is_empty() {
                let list: Vec<String> = r
                    .misfit
                    .iter()
                    .take(4)
                    .map(|(t, s)| format!("{t} {s:?}"))
                    .collect();
                // When only the rows past the tokenizer (not padding) say the model is smaller,
                // the moments are as wrong as that guess: a warning.
                findings.push(finding(
                    if sure { Severity::Error } else { Severity::Warning },
                    "optimizer-vs-weights",
                    format!(
                        "{}: {} optimizer moments do not have {target} rows ({}{}): {}",
                        tp.display(),
                        r.misfit.len(),
                        list.join(", "),
                        if r.misfit.len() > 4 { ", …" } else { "" },
                        what_torch_does(&r.misfit, target)
                    ),
                    json!({"target_rows": target, "moments": r.misfit.iter().map(|(t, s)| json!({"tensor": t, "shape": s})).collect::<Vec<_>>()}),
                    Some(fix),
                ));
            }
            for (tensor, nan, inf) in &r.nonfinite {
                findings.push(finding(
                    Severity::Warning,
                    "optimizer-vs-weights",
                    format!("{}: {tensor} holds {nan} NaN and {inf} Inf", tp.display()),
                    json!({"tensor": tensor, "nan": nan, "inf": inf}),
                    None,
                ));
            }
        }
        // The file was read: what is left is sanitize refusing to guess. Only when nothing but a
        // fresh optimizer gets past the refusal is dropping the optimizer offered.
        Err(refusal) => {
            let why = refusal.message.clone();
            let drop = refusal.drop_helps.then(|| with_drop(&fix));
            // Naming the index keeps the optimizer: the smaller fix, when the user knows it.
            let named: Vec<String> = pin_asked(&why)
                .map(|pin| {
                    vec![format!(
                        "if you know which optimizer index holds it (one of the candidates above), keep the optimizer: {} --optimizer-param {pin}",
                        fix.text()
                    )]
                })
                .unwrap_or_default();
            findings.push(
                finding(
                    Severity::Error,
                    "optimizer-vs-weights",
                    format!("cannot check the optimizer: {why}"),
                    json!({"target_rows": target}),
                    drop,
                )
                .alternatives(named),
            );
        }
    }
}

/// The `NAME=INDEX` sanitize's refusal asks for, if it names one.
fn pin_asked(message: &str) -> Option<String> {
    let rest = message.split("--optimizer-param ").nth(1)?;
    Some(
        rest.split_whitespace()
            .next()?
            .trim_end_matches(',')
            .to_string(),
    )
}

/// What resuming with moments of other rows does, for the rows found (measured with torch 2.15,
/// AdamW and SGD with momentum, foreach on and off: load_state_dict checks counts, not shapes;
/// the first step() fails either way, larger or smaller).
fn what_torch_does(misfit: &[(String, Vec<u64>)], target: u64) -> String {
    let rows = misfit
        .iter()
        .find_map(|(_, s)| s.first().copied().filter(|&r| r != target))
        .unwrap_or(target);
    let how = if rows > target { "more" } else { "fewer" };
    format!(
        "the moments have {how} rows than the model will ({rows} for {target}): torch's load_state_dict accepts them without a word (it checks counts, not shapes), and the first optimizer.step() fails with \"The size of tensor a ({rows}) must match the size of tensor b ({target})\" (measured with torch 2.15; seed 001 reported 7000 steps without learning instead)"
    )
}

/// After the optimizer check: if sanitize refuses the training checkpoint unless the optimizer is
/// dropped, the other fixes that run sanitize on it drop it too (a fix must work when run), each
/// with the index-naming way that keeps the optimizer as an alternative.
pub(super) fn drop_everywhere(tp: &Path, findings: &mut [Finding]) {
    let Some(refused) = findings.iter().find(|f| {
        f.check == "optimizer-vs-weights"
            && matches!(
                f.request(),
                Some(Fix::Sanitize {
                    drop_optimizer: true,
                    ..
                })
            )
    }) else {
        return;
    };
    let pin = pin_asked(&refused.message);
    for f in findings.iter_mut() {
        let Some(action @ Fix::Sanitize { .. }) = f.request().cloned() else {
            continue;
        };
        if action.input() != Some(tp)
            || matches!(
                action,
                Fix::Sanitize {
                    drop_optimizer: true,
                    ..
                }
            )
        {
            continue;
        }
        if let Some(pin) = &pin {
            f.alternatives.push(format!(
                "if you know which optimizer index holds it (see the optimizer finding's candidates), keep the optimizer: {} --optimizer-param {pin}",
                action.text()
            ));
        }
        f.fix = Some(Plan::of_request(with_drop(&action)));
    }
}
