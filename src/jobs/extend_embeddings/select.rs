//! Which tensors extend-embeddings changes and to how many rows: the named or detected
//! vocabulary, the target (a row count or a tokenizer's size), the rows they have, their ties.
//! Which tensors are the vocabulary and a tokenizer's row count are knowledge: [`crate::rows`].

use super::options::{Options, Target};
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::rows::tokenizer_rows;
use crate::rows::Method;
use crate::ties::{self, Tie};
use crate::vocab::{self, Role};
use serde_json::Value;
use std::path::PathBuf;

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
    ckpt: &Tensors,
    selected: &[(String, Role)],
    new_rows: u64,
    opts: &Options,
) -> Result<u64> {
    let rows: Vec<(String, u64)> = selected
        .iter()
        .filter_map(|(n, _)| ckpt.tensor(n).map(|t| (n.clone(), t.rows_view().shape[0])))
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
    if let Some((tensor, _)) = rows.first() {
        crate::rows::refuse_weight_cut(&ckpt.path, tensor, first, new_rows, opts.allow_shrink)?;
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
    ckpt: &Tensors,
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
