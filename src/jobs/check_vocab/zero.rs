//! check-vocab on a DeepSpeed ZeRO checkpoint: the model's vocabulary matrices against the
//! optimizer's (fp32 master weights and moments, sized by `param_shapes`), and against the
//! tokenizers given. Each mismatch is an error whose fix is a sanitize-checkpoint command.

use super::finding::{finding, summarize, Finding, Report, Severity};
use super::fix::fixed_path;
use super::inputs::Inputs;
use super::read::{allowed_globals, load_tok, tokenizer_in, Tok};
use crate::error::{Error, Result};
use crate::formats::zero::Zero;
use crate::plan::Request as Fix;
use serde_json::json;
use std::collections::BTreeMap;

/// The fix: sanitize-checkpoint to `rows` rows, beside the input.
fn fix(inp: &Inputs, rows: u64) -> Fix {
    Fix::Sanitize {
        input: inp.checkpoint.clone(),
        output: fixed_path(&inp.checkpoint),
        vocab_rows: rows,
        tokenizer: None,
        drop_optimizer: false,
        // ZeRO fixes bring the optimizer's state to the module's rows, or grow everything to a
        // tokenizer's rows: never a cut of the weights.
        allow_shrink: false,
        allow_global: allowed_globals(&inp.open),
    }
}

/// Stages 1/2 keep the whole model beside the partitions: a module matrix whose rows differ
/// from its optimizer state's (the model was resized and the optimizer saved as it was).
fn model_vs_optimizer(inp: &Inputs, z: &Zero, vocab: &[String], out: &mut Vec<Finding>) {
    for name in vocab {
        let (Some(p), Some(t)) = (z.param(name), z.module_tensor(name)) else {
            continue;
        };
        if t.shape == p.shape.as_slice() {
            continue;
        }
        let rows = t.shape.first().copied().unwrap_or(0);
        out.push(finding(
            Severity::Error,
            "zero-optimizer-rows",
            format!(
                "module.{name} is {:?} but its fp32 master weights and Adam moments (param_shapes) are {:?}: DeepSpeed's load_checkpoint refuses this, or resumes with state sized for the other vocabulary",
                t.shape, p.shape
            ),
            json!({"tensor": name, "model": t.shape, "optimizer": p.shape}),
            Some(fix(inp, rows)),
        ));
    }
}

/// A tokenizer whose ids reach past the vocabulary rows.
fn tokenizer_vs_rows(inp: &Inputs, toks: &[Tok], rows: u64, out: &mut Vec<Finding>) {
    for t in toks.iter().filter(|t| t.needed > rows) {
        out.push(finding(
            Severity::Error,
            "tokenizer-rows",
            format!(
                "tokenizer {} needs {} rows but the checkpoint's vocabulary matrices have {rows}: ids {rows}..{} index past the table",
                t.path.display(),
                t.needed,
                t.needed - 1
            ),
            json!({"tokenizer": t.path, "needed": t.needed, "rows": rows}),
            Some(fix(inp, t.needed)),
        ));
    }
}

/// check-vocab on the ZeRO checkpoint `z` (opened from `inp.checkpoint`).
pub fn run(inp: &Inputs, z: &Zero) -> Result<Report> {
    let unsupported = [
        (inp.config.is_some(), "--config"),
        (inp.freeze_until.is_some(), "--freeze-until"),
        (inp.base_tokenizer.is_some(), "--base-tokenizer"),
        (inp.training_checkpoint.is_some(), "--training-checkpoint"),
        (inp.token_ids.is_some(), "--token-ids"),
        (inp.codebook_size.is_some(), "--codebook-size"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(Error::arg(
            flag,
            format!("{flag} is not supported for a DeepSpeed ZeRO checkpoint (check-vocab ROOT [--tokenizer TOK])"),
        ));
    }
    let toks: Vec<Tok> = inp
        .tokenizers
        .iter()
        .map(|p| tokenizer_in(p).and_then(|p| load_tok(&p)))
        .collect::<Result<_>>()?;
    let det = crate::vocab::detect(z.params.iter().map(|p| (p.name.as_str(), &p.shape[..])));
    let vocab: Vec<String> = det
        .vocabulary
        .as_ref()
        .map(|v| v.tensors.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default();
    let rows = det.vocabulary.as_ref().map_or(0, |v| v.rows);
    let mut findings = Vec::new();
    model_vs_optimizer(inp, z, &vocab, &mut findings);
    // With the model already resized, the rows a tokenizer is checked against are the model's.
    let model_rows = vocab
        .iter()
        .filter_map(|n| z.module_tensor(n).and_then(|t| t.shape.first().copied()))
        .max()
        .unwrap_or(rows);
    tokenizer_vs_rows(inp, &toks, model_rows.max(rows), &mut findings);
    let mut files = BTreeMap::new();
    files.insert(
        "checkpoint".to_string(),
        z.input_paths()
            .into_iter()
            .map(|p| p.to_path_buf())
            .collect(),
    );
    files.insert(
        "tokenizers".to_string(),
        toks.iter().map(|t| t.path.clone()).collect(),
    );
    Ok(summarize(inp.checkpoint.clone(), rows, files, findings))
}
