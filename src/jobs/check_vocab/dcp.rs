//! check-vocab for a DCP folder: every vocabulary matrix's optimizer moments have its rows, and
//! (with `--tokenizer`) the embedding has a row for every id; fixes are sanitize-checkpoint
//! commands that make the finding pass.

use super::finding::{self, Finding, Report, Severity};
use super::fix::fixed_path;
use crate::error::{Error, Result};
use crate::formats::dcp::keys::{moments_of, shape, vocabulary};
use crate::formats::dcp::Dcp;
use crate::plan::Request as Fix;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An error whose fix is sanitize-checkpoint on the folder, to `rows` rows or to a tokenizer's.
fn finding(
    check: &'static str,
    message: String,
    numbers: serde_json::Value,
    (dir, rows, tokenizer): (&Path, u64, Option<&Path>),
) -> Finding {
    let fix = Fix::Sanitize {
        input: dir.to_path_buf(),
        output: fixed_path(dir),
        vocab_rows: rows,
        tokenizer: tokenizer.map(Path::to_path_buf),
        drop_optimizer: false,
        allow_shrink: false,
        allow_global: Vec::new(),
    };
    finding::finding(Severity::Error, check, message, numbers, Some(fix))
}

/// Check the DCP folder `d`, against `tokenizers` (paths of tokenizer files) when given.
pub fn run(d: &Dcp, tokenizers: &[PathBuf]) -> Result<Report> {
    let dir = d.dir.as_path();
    let det = vocabulary(d);
    let Some(v) = det.vocabulary else {
        let rows: Vec<String> = det.ambiguous.iter().map(|g| g.rows.to_string()).collect();
        return Err(Error::format(
            dir,
            format!(
                "no single vocabulary among the model's tensors (row counts: {}): check-vocab cannot tell which rows are right",
                if rows.is_empty() { "none".into() } else { rows.join(", ") }
            ),
        ));
    };
    let mut findings = Vec::new();
    for vt in &v.tensors {
        let Some(w) = d.item(&vt.name) else { continue };
        for m in moments_of(d, w) {
            let mrows = shape(m).and_then(|s| s.first()).copied().unwrap_or(0);
            if mrows != v.rows {
                findings.push(finding(
                    "optimizer-vs-weights",
                    format!(
                        "{}: optimizer moment {} has {mrows} rows but its weight {} has {}: torch.distributed.checkpoint.load stops with a size mismatch when resuming the model of {} rows (seed 001)",
                        dir.display(), m.fqn, w.fqn, v.rows, v.rows
                    ),
                    json!({"moment": m.fqn, "moment_rows": mrows, "weight": w.fqn, "weight_rows": v.rows}),
                    (dir, v.rows, None),
                ));
            }
        }
    }
    let mut files = BTreeMap::new();
    files.insert("checkpoint".to_string(), vec![dir.to_path_buf()]);
    for t in tokenizers {
        let needed = crate::rows::tokenizer_rows(t)?;
        files
            .entry("tokenizer".to_string())
            .or_insert_with(Vec::new)
            .push(t.clone());
        if needed > v.rows {
            findings.push(finding(
                "tokenizer-vs-embedding",
                format!(
                    "{}: the tokenizer needs {needed} rows but the embedding has {}: ids {}..{needed} index past the table",
                    t.display(), v.rows, v.rows
                ),
                json!({"tokenizer_rows": needed, "embedding_rows": v.rows}),
                (dir, needed, Some(t)),
            ));
        }
    }
    let errors = findings.len();
    Ok(Report {
        checkpoint: dir.to_path_buf(),
        rows: v.rows,
        files,
        findings,
        errors,
        warnings: 0,
        infos: 0,
    })
}
