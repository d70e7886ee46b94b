//! The checks of a model checkpoint, one function each: the vocabulary matrices' rows, a
//! tokenizer's ids against them, freeze_until_index, and two tokenizers against each other.

use super::finding::{finding, Finding, Severity};
use super::fix::fixed_path;
use super::read::Tok;
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::plan::Request as Fix;
use crate::vocab;
use serde_json::{json, Value};

/// A change made by hand (the training script's settings).
fn manual(text: String) -> Fix {
    Fix::Manual { text }
}

pub(super) fn embedding_rows(ckpt: &Tensors, findings: &mut Vec<Finding>) -> Result<u64> {
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    if let Some(v) = det.vocabulary {
        return Ok(v.rows);
    }
    if det.ambiguous.is_empty() {
        return Err(Error::format(
            &ckpt.path,
            "no embedding matrix found: nothing to check the vocabulary against",
        ));
    }
    let emb = det
        .ambiguous
        .iter()
        .find(|g| g.tensors.iter().any(|t| t.role == vocab::Role::Embedding))
        .unwrap_or(&det.ambiguous[0]);
    let all: Vec<String> = det
        .ambiguous
        .iter()
        .flat_map(|g| {
            g.tensors
                .iter()
                .map(|t| format!("{} {:?}", t.name, t.shape))
        })
        .collect();
    let max = det
        .ambiguous
        .iter()
        .map(|g| g.rows)
        .max()
        .unwrap_or(emb.rows);
    let smaller: Vec<String> = det
        .ambiguous
        .iter()
        .filter(|g| g.rows < max)
        .flat_map(|g| g.tensors.iter().map(|t| t.name.clone()))
        .collect();
    findings.push(finding(
        Severity::Error,
        "embedding-vs-head",
        format!(
            "the vocabulary matrices disagree on rows: {}",
            all.join(", ")
        ),
        json!({"rows": det.ambiguous.iter().map(|g| g.rows).collect::<Vec<_>>()}),
        Some(Fix::Extend {
            input: ckpt.path.clone(),
            output: fixed_path(&ckpt.path),
            rows: max,
            tokenizer: None,
            allow_shrink: false,
            config: None,
            tensors: smaller,
            allow_global: Vec::new(),
        }),
    ));
    Ok(emb.rows)
}

pub(super) fn check_tokenizer(
    t: &Tok,
    rows: u64,
    target: u64,
    fix_rows: &dyn Fn(u64) -> Fix,
    findings: &mut Vec<Finding>,
) {
    if t.needed > rows {
        let mut past: Vec<(&String, &u32)> = t
            .ids
            .iter()
            .filter(|(_, &i)| u64::from(i) >= rows)
            .collect();
        past.sort_by_key(|(_, i)| **i);
        let shown: Vec<String> = past
            .iter()
            .take(5)
            .map(|(k, i)| format!("'{k}'={i}"))
            .collect();
        findings.push(finding(
            Severity::Error,
            "tokenizer-vs-embedding",
            format!(
                "{} uses ids up to {} but the embedding has {rows} rows: {} tokens ({}{}) would index past the table (CUDA: device-side assert triggered)",
                t.path.display(),
                t.needed - 1,
                past.len(),
                shown.join(", "),
                if past.len() > 5 { ", …" } else { "" }
            ),
            json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "highest_id": t.needed - 1, "tokens_past_end": past.len()}),
            Some(fix_rows(target)),
        ));
    } else if t.needed < rows && target == t.needed {
        let extra = rows - t.needed;
        findings.push(
            finding(
                Severity::Warning,
                "tokenizer-vs-embedding",
                format!(
                    "{} uses {} ids; the embedding has {rows} rows: {extra} rows past its ids that are not padding (padding rounds the rows to a multiple of 8, and no config.json says {rows}): rows of an older tokenizer? A model sized by this tokenizer will not load them, nor their optimizer state (seed 001)",
                    t.path.display(),
                    t.needed,
                ),
                json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "extra_rows": extra}),
                Some(fix_rows(target)),
            )
            .alternatives(vec![format!(
                "if the model is sized {rows} rows on purpose, keep them: nothing to do, or say so with vocab_size {rows} in config.json"
            )]),
        );
    } else if t.needed < rows {
        findings.push(finding(
            Severity::Info,
            "tokenizer-vs-embedding",
            format!(
                "{} uses {} ids; the embedding has {rows} rows: {} padding rows, which is normal (e.g. 262144 ids, 262208 rows)",
                t.path.display(),
                t.needed,
                rows - t.needed
            ),
            json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "padding_rows": rows - t.needed}),
            None,
        ));
    }
}

/// Vocabulary-size keys of a config, top level and under text_config.
pub(super) fn config_vocab(c: &Value, keys: &[&str]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (prefix, obj) in [("", Some(c)), ("text_config.", c.get("text_config"))] {
        for k in keys {
            if let Some(v) = obj.and_then(|o| o.get(k)).and_then(Value::as_u64) {
                out.push((format!("{prefix}{k}"), v));
            }
        }
    }
    out
}

pub(super) fn check_freeze(n: u64, rows: u64, base: Option<u64>, findings: &mut Vec<Finding>) {
    let suggest = base.unwrap_or(rows);
    if n == 0 || n > rows {
        findings.push(finding(
            Severity::Error,
            "freeze-until-index",
            format!("freeze_until_index {n} is outside 1..={rows} (the embedding's rows)"),
            json!({"freeze_until_index": n, "embedding_rows": rows}),
            Some(manual(match base {
                Some(b) => format!("set freeze_until_index to {b} (the base vocabulary) in the training config"),
                None => format!("set freeze_until_index to the base vocabulary size (at most {suggest}) in the training config, or pass --base-tokenizer to check it"),
            })),
        ));
    } else if let Some(b) = base {
        if n > b {
            findings.push(finding(
                Severity::Error,
                "freeze-until-index",
                format!("freeze_until_index {n} is above the base vocabulary {b}: new rows {b}..{n} would stay frozen and never learn"),
                json!({"freeze_until_index": n, "base_vocabulary": b}),
                Some(manual(format!("set freeze_until_index to {b} in the training config"))),
            ));
        } else if n < b {
            findings.push(finding(
                Severity::Warning,
                "freeze-until-index",
                format!("freeze_until_index {n} is below the base vocabulary {b}: pretrained rows {n}..{b} will be trained too"),
                json!({"freeze_until_index": n, "base_vocabulary": b}),
                Some(manual(format!("set freeze_until_index to {b} if the pretrained rows should stay frozen"))),
            ));
        }
    }
}

pub(super) fn check_pair(a: &Tok, b: &Tok, findings: &mut Vec<Finding>) {
    let mut diff: Vec<(&String, u32, u32)> = a
        .ids
        .iter()
        .filter_map(|(t, &i)| b.ids.get(t).filter(|&&j| j != i).map(|&j| (t, i, j)))
        .collect();
    diff.sort_by_key(|d| d.1);
    if !diff.is_empty() {
        let shown: Vec<String> = diff
            .iter()
            .take(5)
            .map(|(t, i, j)| format!("'{t}' {i} vs {j}"))
            .collect();
        findings.push(
            finding(
            Severity::Error,
            "tokenizers-agree",
            format!(
                "{} and {} give {} shared tokens different ids ({}): data tokenised with one is garbage to a model trained with the other",
                a.path.display(),
                b.path.display(),
                diff.len(),
                shown.join(", ")
            ),
            json!({"conflicts": diff.len()}),
            None,
        )
        .alternatives(vec![format!(
            "use one tokenizer for the data and the model; if both are meant together, merge them (merge-tokenizers --base {} --add {} --output merged.json: the base keeps its ids, the other's tokens get new ones), then tokenise the data and size the model with merged.json",
            a.path.display(),
            b.path.display()
        )]));
    }
}
