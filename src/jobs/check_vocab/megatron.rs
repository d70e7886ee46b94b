//! check-vocab for a Megatron-Core `torch_dist` save: the args in `common.pt` against the
//! tensors (padded size, Megatron's padding rule, the TP split, untied output layer), the
//! optimizer's state against itself, and (with `--tokenizer`) the tokenizer's size against the
//! true and the padded vocabulary — padding is not an error, a tokenizer larger than the padded
//! table is, and so is one Megatron-LM would pad to another size (it recomputes the padded size
//! from the tokenizer on resume). A tokenizer the table is too small for gets a fix:
//! sanitize-checkpoint to the tokenizer (keeping the optimizer state where sanitize would,
//! else with `--optimizer drop`).

use super::finding::{finding, summarize, Finding, Report, Severity};
use super::fix::fixed_path;
use super::read::allowed_globals;
use super::Inputs;
use crate::error::Result;
use crate::formats::dcp::ItemKind;
use crate::formats::megatron::common::{padded, Args};
use crate::formats::megatron::Megatron;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the layout-independent checks need of a Megatron save (torch_dist or legacy).
pub(super) struct Save<'a> {
    pub path: &'a Path,
    /// The tensor-parallel size the vocabulary's row chunks show.
    pub tp: u64,
    /// Is there an output_layer.weight?
    pub head: bool,
    /// The file the args are in, as messages name it (`common.pt`).
    pub args_file: &'static str,
    /// Whether sanitize-checkpoint resizes it to `n` true tokens: Some(false) keeping the
    /// optimizer state, Some(true) only with `--optimizer drop`, None it refuses either way.
    pub resizes: &'a dyn Fn(u64) -> Option<bool>,
    /// The globals the user allowed (a fix names them too).
    pub allow_global: Vec<String>,
}

/// [`Save::resizes`] from `plan(n, drop_optimizer)`: whether that resize would go through.
pub(super) fn resizes_by(plan: impl Fn(u64, bool) -> bool, n: u64) -> Option<bool> {
    if plan(n, false) {
        Some(false)
    } else {
        plan(n, true).then_some(true)
    }
}

/// Check the Megatron save `m`, against `inp`'s tokenizers when given.
pub fn run(m: &Megatron, inp: &Inputs) -> Result<Report> {
    use crate::rows::layout::megatron::resizable;
    let rows = m.vocab.first().map_or(0, |v| v.shape[0]);
    let args = m.args();
    // Decided from the metadata: a dry run of the resize would read every optimizer bucket.
    let plan = |n, drop| resizable(m, n, drop, &inp.open.globals).is_ok();
    let save = Save {
        path: &m.path,
        tp: m.tp,
        head: m.vocab.iter().any(|v| v.role == "head"),
        args_file: "common.pt",
        resizes: &|n| resizes_by(plan, n),
        allow_global: allowed_globals(&inp.open),
    };
    check(&save, args, rows, optimizer_states(m), &inp.tokenizers)
}

/// The args and tokenizer checks of `save` (`rows`: its padded vocabulary), with `findings` of
/// its own layout first.
pub(super) fn check(
    save: &Save,
    args: Option<&Args>,
    rows: u64,
    layout_findings: Vec<Finding>,
    tokenizers: &[PathBuf],
) -> Result<Report> {
    let m = save;
    let mut findings = args
        .map(|a| args_vs_tensors(m, a, rows))
        .unwrap_or_default();
    findings.extend(layout_findings);
    let mut files = BTreeMap::new();
    files.insert("checkpoint".to_string(), vec![m.path.to_path_buf()]);
    for t in tokenizers {
        let needed = crate::rows::tokenizer_rows(t)?;
        files
            .entry("tokenizer".to_string())
            .or_insert_with(Vec::new)
            .push(t.clone());
        findings.extend(tokenizer_vs_vocabulary(m, args, rows, t, needed));
    }
    Ok(summarize(m.path.to_path_buf(), rows, files, findings))
}

fn error(check: &'static str, message: String, numbers: serde_json::Value) -> Finding {
    finding(Severity::Error, check, message, numbers, None)
}

/// An error whose fix is sanitize-checkpoint to the tokenizer `t` (`needed` true tokens), when
/// it resizes the save ([`Save::resizes`]); else the message says it refuses.
fn growth(
    m: &Save,
    t: &Path,
    needed: u64,
    (check, message): (&'static str, String),
    numbers: serde_json::Value,
) -> Finding {
    let Some(drop_optimizer) = (m.resizes)(needed) else {
        let message = format!(
            "{message} (sanitize-checkpoint refuses to resize this save: run it for the reason)"
        );
        return error(check, message, numbers);
    };
    let fix = crate::plan::Request::Sanitize {
        input: m.path.to_path_buf(),
        output: fixed_path(m.path),
        vocab_rows: needed,
        tokenizer: Some(t.to_path_buf()),
        drop_optimizer,
        allow_shrink: false,
        allow_global: m.allow_global.clone(),
    };
    finding(Severity::Error, check, message, numbers, Some(fix))
}

/// `common.pt`'s args against the vocabulary matrices.
fn args_vs_tensors(m: &Save, a: &Args, rows: u64) -> Vec<Finding> {
    let at = m.path.display();
    let mut out = Vec::new();
    if let Some(p) = a.padded_vocab_size.filter(|&p| p != rows) {
        out.push(error(
            "args-vs-tensors",
            format!("{at}: {}'s args say padded_vocab_size {p} but the vocabulary matrices have {rows} rows: a run resumed with these args builds a table of another size", m.args_file),
            json!({"args_padded_vocab_size": p, "rows": rows}),
        ));
    }
    if let Some(d) = a.make_vocab_size_divisible_by {
        if padded(rows, d, m.tp) != Some(rows) {
            out.push(error(
                "padding-rule",
                format!("{at}: {rows} rows is not a multiple of make_vocab_size_divisible_by x TP = {d} x {}: not a size Megatron pads to, so no tokenizer resumes it", m.tp),
                json!({"rows": rows, "make_vocab_size_divisible_by": d, "tensor_parallel": m.tp}),
            ));
        }
    }
    if let Some(tp) = a.tensor_model_parallel_size.filter(|&tp| tp != m.tp) {
        out.push(finding(
            Severity::Warning,
            "args-vs-tensors",
            format!("{at}: {}'s args say tensor_model_parallel_size {tp} but the vocabulary is split into {} row chunks: converted after the run saved its args?", m.args_file, m.tp),
            json!({"args_tensor_parallel": tp, "tensor_parallel": m.tp}),
            None,
        ));
    }
    if a.untie_embeddings_and_output_weights == Some(true) && !m.head {
        out.push(error(
            "args-vs-tensors",
            format!("{at}: the args untie the output layer but the checkpoint has no output_layer.weight: Megatron's load stops on the missing key"),
            json!({"untie_embeddings_and_output_weights": true, "output_layer": false}),
        ));
    }
    out
}

/// Each flat bucket's states (fp32 main copy, Adam moments) cover the same elements.
fn optimizer_states(m: &Megatron) -> Vec<Finding> {
    let mut by_bucket: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for name in &m.optimizer.tensors {
        let Some((bucket, state)) = name.rsplit_once('.') else {
            continue;
        };
        let Some(it) = m.dcp.item(name) else { continue };
        if let ItemKind::Tensor { shape, .. } = &it.kind {
            by_bucket
                .entry(bucket)
                .or_default()
                .push((state, shape.iter().product()));
        }
    }
    match m.optimizer.form.as_deref() {
        Some("dp_reshardable") => {}
        Some(crate::formats::megatron::layout::FULLY_RESHARDABLE) => return model_space_states(m),
        _ => return Vec::new(),
    }
    by_bucket
        .into_iter()
        .filter(|(_, states)| states.iter().any(|s| s.1 != states[0].1))
        .map(|(bucket, states)| {
            let sizes: Vec<String> = states.iter().map(|(s, n)| format!("{s} {n}")).collect();
            error(
                "optimizer-vs-weights",
                format!("{}: the optimizer's bucket {bucket} holds states of different sizes ({}): its moments no longer follow its weights", m.path.display(), sizes.join(", ")),
                json!({"bucket": bucket, "states": states.iter().map(|(s, n)| json!({"state": s, "elements": n})).collect::<Vec<_>>()}),
            )
        })
        .collect()
}

/// In the `fully_reshardable` layout each parameter's states (`optimizer.state.STATE.NAME`)
/// have its shape: Megatron's loader asks for them at the model's shapes, so a state left at
/// another size (a vocabulary resized without its optimizer) fails the resume.
fn model_space_states(m: &Megatron) -> Vec<Finding> {
    let apart = crate::formats::megatron::layout::states_apart(&m.dcp, &m.optimizer);
    apart
        .into_iter()
        .map(|a| {
            let (name, weight) = (&a.fqn, a.weight);
            let (state, of) = (&a.shape, &a.weight_shape);
            error(
                "optimizer-vs-weights",
                format!("{}: the optimizer state '{name}' is {state:?} but its weight '{weight}' is {of:?}: its moments no longer follow its weights (resize both with sanitize-checkpoint, or resume with --no-load-optim)", m.path.display()),
                json!({"state": name, "shape": state, "weight": weight, "weight_shape": of}),
            )
        })
        .collect()
}

/// The tokenizer's size (`needed` rows) against the padded table and the run's true size.
fn tokenizer_vs_vocabulary(
    m: &Save,
    args: Option<&Args>,
    rows: u64,
    t: &std::path::Path,
    needed: u64,
) -> Vec<Finding> {
    let at = t.display();
    let numbers = json!({"tokenizer_rows": needed, "padded_rows": rows});
    if needed > rows {
        let why = format!("{at}: the tokenizer needs {needed} rows but the padded vocabulary has {rows}: ids {rows}..{needed} index past the table");
        return vec![growth(
            m,
            t,
            needed,
            ("tokenizer-vs-embedding", why),
            numbers,
        )];
    }
    let mut out = Vec::new();
    let divisible = args.and_then(|a| a.make_vocab_size_divisible_by);
    match divisible.and_then(|d| padded(needed, d, m.tp)) {
        Some(p) if p != rows => {
            let why = format!("{at}: Megatron-LM pads this tokenizer's {needed} tokens to {p} rows (make_vocab_size_divisible_by {} x TP {}) but the checkpoint has {rows}: resuming with it builds a table of {p} rows and the load stops with a size mismatch", divisible.unwrap_or(0), m.tp);
            let numbers = json!({"tokenizer_rows": needed, "padded_rows": rows, "megatron_pads_to": p});
            // A smaller table would cut trained rows: no fix is offered for that.
            out.push(match p > rows {
                true => growth(m, t, needed, ("tokenizer-vs-padding", why), numbers),
                false => error("tokenizer-vs-padding", why, numbers),
            })
        }
        _ => out.push(finding(
            Severity::Info,
            "padding",
            format!("{at}: the tokenizer's {needed} tokens fit the {rows} rows; rows {needed}..{rows} are Megatron's padding (not an error)"),
            numbers,
            None,
        )),
    }
    if let Some(v) = args.and_then(|a| a.vocab_size).filter(|&v| v != needed) {
        out.push(finding(
            Severity::Warning,
            "tokenizer-vs-args",
            format!("{at}: the tokenizer has {needed} tokens but the run's args say vocab_size {v}: another tokenizer than the run's?"),
            json!({"tokenizer_rows": needed, "args_vocab_size": v}),
            None,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::padded;

    #[test]
    fn padding_follows_megatron_lms_rule() {
        assert_eq!(padded(84, 64, 2), Some(128));
        assert_eq!(padded(128, 64, 2), Some(128));
        assert_eq!(padded(129, 64, 2), Some(256));
        assert_eq!(padded(50257, 128, 8), Some(51200));
        assert_eq!(padded(10, 0, 2), None);
    }
}
