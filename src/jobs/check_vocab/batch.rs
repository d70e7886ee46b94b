//! Checks of a saved batch of token ids: codebook ranges, ids past the table, and two tensors
//! whose widths say a delay pattern was applied to one of them (seed 004).

use super::data::{id_tensors, IdTensor};
use super::finding::{finding, summarize, Finding, Report, Severity};
use super::inputs::{Inputs, TokenIds};
use crate::error::{Error, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Checks of a saved batch's integer tensors (torch or safetensors): each row of a [C, T]
/// tensor against the codebook size, every id against the rows, and two tensors whose widths
/// differ by exactly C − 1 (a delay pattern applied to one of them: seed 004).
pub(super) fn check_batch(
    p: &Path,
    tensors: &[IdTensor],
    rows: Option<u64>,
    codebook: Option<u64>,
    findings: &mut Vec<Finding>,
) {
    for t in tensors {
        if let (Some(s), [.., c, _]) = (codebook, &t.shape[..]) {
            let bad: Vec<(usize, u64)> = t
                .row_max
                .iter()
                .enumerate()
                .filter_map(|(i, m)| m.filter(|&m| m >= s).map(|m| (i, m)))
                .collect();
            if let Some(&(i, m)) = bad.first() {
                findings.push(finding(
                    Severity::Error,
                    "codebook-ids",
                    format!("{}: {} {:?}: codebook {i} holds id {m}, not below the codebook size {s} ({} of {c} codebooks out of range): the codebook's embedding lookup will index past its rows", p.display(), t.name, t.shape, bad.len()),
                    json!({"tensor": t.name, "codebook": i, "id": m, "codebook_size": s}),
                    None,
                ));
            }
        } else if let (Some(r), Some(m)) = (rows, t.max) {
            if m >= r {
                findings.push(finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: {} holds id {m} but the embedding has {r} rows: indexing it is the device-side assert", p.display(), t.name),
                    json!({"tensor": t.name, "max_id": m, "embedding_rows": r}),
                    None,
                ));
            }
        }
    }
    for (i, a) in tensors.iter().enumerate() {
        for b in &tensors[i + 1..] {
            // [C, T] or [B…, C, T], the leading (batch) axes equal.
            let ([lead_a @ .., ca, ta], [lead_b @ .., cb, tb]) = (&a.shape[..], &b.shape[..])
            else {
                continue;
            };
            if lead_a != lead_b || ca != cb || *ca < 2 || ta.abs_diff(*tb) != ca - 1 {
                continue;
            }
            let (narrow, wide) = if ta < tb { (a, b) } else { (b, a) };
            let c = *ca;
            findings.push(finding(
                Severity::Error,
                "delay-pattern",
                format!(
                    "{}: {} {:?} and {} {:?}: {} is {} columns wider, what a delay pattern over {c} codebooks adds (T + C − 1 = {} + {c} − 1): it was applied to {} and not to {}; for teacher forcing both must have one shape — apply the delay pattern in the model (or to both), not to the labels alone",
                    p.display(),
                    narrow.name,
                    narrow.shape,
                    wide.name,
                    wide.shape,
                    wide.name,
                    c - 1,
                    narrow.shape[narrow.shape.len() - 1],
                    wide.name,
                    narrow.name
                ),
                json!({"narrow": narrow.name, "wide": wide.name, "codebooks": c, "widths": [narrow.shape[narrow.shape.len() - 1], wide.shape[wide.shape.len() - 1]]}),
                None,
            ));
        }
    }
}

/// Only a batch to check (no checkpoint): the codebook and delay-pattern checks.
pub(super) fn run_batch_only(inp: &Inputs, ids: Option<&TokenIds>) -> Result<Report> {
    let Some(p) = &inp.token_ids else {
        return Err(Error::arg(
            "CHECKPOINT",
            "give the checkpoint (a file or model folder): check-vocab CHECKPOINT",
        ));
    };
    let Some(TokenIds::Batch(batch)) = ids else {
        return Err(Error::arg(
            "--token-ids",
            format!(
                "{}: without a checkpoint, --token-ids must be a saved batch (torch or safetensors) checked with --codebook-size",
                p.display()
            ),
        ));
    };
    let tensors = id_tensors(batch)?;
    let mut findings = Vec::new();
    check_batch(p, &tensors, None, inp.codebook_size, &mut findings);
    let mut files = BTreeMap::new();
    files.insert("token_ids".to_string(), vec![p.clone()]);
    Ok(summarize(PathBuf::new(), 0, files, findings))
}
