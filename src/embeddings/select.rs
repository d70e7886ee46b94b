//! Which tensors extend-embeddings changes and to how many rows: the named or detected
//! vocabulary, the target (a row count or a tokenizer's size), the rows they have, their ties.

use super::{Method, Options, Target};
use crate::error::{Error, Result};
use crate::formats::Checkpoint;
use crate::ties::{self, Tie};
use crate::tokenizer::base::load_tokenizer;
use crate::vocab::{self, Role};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Rows a tokenizer needs: its largest id + 1.
pub fn tokenizer_rows(path: &Path) -> Result<u64> {
    Ok(load_tokenizer(path)?.size())
}

/// Pick the tensors to change: the named ones, or the detected vocabulary.
pub(crate) fn select(ckpt: &Checkpoint, named: &[String]) -> Result<Vec<(String, Role)>> {
    if !named.is_empty() {
        let mut out = Vec::new();
        for n in named {
            let t = ckpt.tensor(n).ok_or_else(|| {
                Error::arg(
                    "--tensor",
                    format!("{}: no tensor named '{n}'", ckpt.path.display()),
                )
            })?;
            let role = match t.shape.len() {
                1 => Role::HeadBias,
                2 if n.contains("head") || n.contains("output") => Role::Head,
                2 => Role::Embedding,
                _ => {
                    return Err(Error::tensor(
                        &ckpt.path,
                        n,
                        format!("shape {:?} is not a vocabulary matrix or bias", t.shape),
                    ))
                }
            };
            out.push((n.clone(), role));
        }
        return Ok(out);
    }
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    if let Some(v) = det.vocabulary {
        return Ok(v.tensors.into_iter().map(|t| (t.name, t.role)).collect());
    }
    let list = |groups: &[vocab::Vocabulary]| -> String {
        groups
            .iter()
            .flat_map(|g| {
                g.tensors
                    .iter()
                    .map(|t| format!("{} {:?}", t.name, t.shape))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !det.ambiguous.is_empty() {
        return Err(Error::format(
            &ckpt.path,
            format!(
                "which tensors are the vocabulary is ambiguous (candidates: {}): name them with --tensor",
                list(&det.ambiguous)
            ),
        ));
    }
    Err(Error::format(
        &ckpt.path,
        "no embedding or head matrix found: name the tensors with --tensor",
    ))
}

/// Rows after the change: the target, rounded up to `--pad-to-multiple-of`; flags that do not go
/// together are refused here.
pub(super) fn target_rows(opts: &Options, inputs: &mut Vec<PathBuf>) -> Result<u64> {
    let target = match &opts.target {
        Target::Rows(n) => *n,
        Target::Tokenizer(p) => {
            inputs.push(p.clone());
            tokenizer_rows(p)?
        }
    };
    let new_rows = match opts.pad_to_multiple_of {
        Some(0) => {
            return Err(Error::arg(
                "--pad-to-multiple-of",
                "--pad-to-multiple-of must be at least 1",
            ))
        }
        Some(m) => target.div_ceil(m) * m,
        None => target,
    };
    if opts.segments > 1 {
        if !matches!(opts.target, Target::Rows(_)) || opts.pad_to_multiple_of.is_some() {
            return Err(Error::arg(
                "--segments",
                "--segments takes --new-rows N (all rows: segments × the new segment size), not --tokenizer or --pad-to-multiple-of",
            ));
        }
        if matches!(opts.method, Method::Copy(_) | Method::SubwordMean) || opts.allow_shrink {
            return Err(Error::arg(
                "--segments",
                "--segments grows each segment with mean, hewitt, zeros or normal (copy:, subword-mean and --allow-shrink name rows of one vocabulary)",
            ));
        }
    }
    Ok(new_rows)
}

/// The rows every selected tensor has (they must agree), checked against the target.
pub(super) fn old_rows(
    ckpt: &Checkpoint,
    selected: &[(String, Role)],
    new_rows: u64,
    opts: &Options,
) -> Result<u64> {
    let rows: Vec<(String, u64)> = selected
        .iter()
        .filter_map(|(n, _)| ckpt.tensor(n).map(|t| (n.clone(), t.shape[0])))
        .collect();
    let first = rows.first().map_or(0, |r| r.1);
    if rows.iter().any(|r| r.1 != first) {
        let list: Vec<String> = rows.iter().map(|(n, r)| format!("{n}: {r}")).collect();
        return Err(Error::format(
            &ckpt.path,
            format!(
                "the selected tensors disagree on rows ({}): name the ones to change with --tensor",
                list.join(", ")
            ),
        ));
    }
    if new_rows < first && !opts.allow_shrink {
        return Err(Error::arg(
            "--allow-shrink",
            format!(
                "{}: target {new_rows} rows is fewer than the checkpoint's {first}: rows {new_rows}..{first} would be dropped; pass --allow-shrink if that is meant",
                ckpt.path.display()
            ),
        ));
    }
    if new_rows == 0 {
        return Err(Error::arg(
            "--new-rows",
            "target of 0 rows: give --new-rows N or a --tokenizer",
        ));
    }
    Ok(first)
}

/// Ties among the selected tensors: a name that follows another is computed once, under the
/// first name.
pub(super) fn selected_ties(
    ckpt: &Checkpoint,
    selected: &[(String, Role)],
    old_rows: u64,
    config: Option<&Value>,
) -> Vec<Tie> {
    let vocabulary = vocab::Vocabulary {
        rows: old_rows,
        tensors: selected
            .iter()
            .filter_map(|(n, role)| {
                ckpt.tensor(n).map(|t| vocab::VocabTensor {
                    name: n.clone(),
                    role: *role,
                    shape: t.shape.to_vec(),
                })
            })
            .collect(),
    };
    ties::find(ckpt, Some(&vocabulary), config)
        .into_iter()
        .filter(|t| t.names.iter().any(|n| selected.iter().any(|(s, _)| s == n)))
        .collect()
}
