//! How many rows a tokenizer needs, and the vocabulary tensors a job that maps rows changes (the
//! named ones, or those `formats::vocabulary::select` detects, or of several vocabularies the one
//! the tokenizer indexes) with the rows they agree on and their ties.

use crate::error::{Error, Result};
use crate::formats::vocabulary::select_with_logits_bias;
use crate::formats::Tensors;
use crate::ties::{self, Tie};
use crate::tokenizer::base::load_tokenizer;
use crate::vocab::{self, Role};
use std::path::Path;

/// Rows a tokenizer needs: its largest id + 1.
pub fn tokenizer_rows(path: &Path) -> Result<u64> {
    Ok(load_tokenizer(path)?.size())
}

/// A model with several vocabularies (T3's text and speech tables) whose detection cannot tell
/// which is the text one: the one the base tokenizer indexes (its rows are the tokenizer's
/// size), when exactly one group has them. None: the usual selection (`--tensor`, or the one
/// detected vocabulary, or the refusal that lists the candidates).
fn named_by_tokenizer(
    ckpt: &Tensors,
    named: &[String],
    base_size: u64,
) -> Option<Vec<(String, Role)>> {
    if !named.is_empty() {
        return None;
    }
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    if det.vocabulary.is_some() {
        return None;
    }
    let mut fits = det.ambiguous.into_iter().filter(|g| g.rows == base_size);
    let group = fits.next()?;
    if fits.next().is_some() {
        return None;
    }
    Some(
        group
            .tensors
            .into_iter()
            .map(|t| (t.name, t.role))
            .collect(),
    )
}

/// The selected vocabulary tensors (name, role), the rows they agree on, their ties.
pub type Vocabulary = (Vec<(String, Role)>, u64, Vec<Tie>);

/// The selected vocabulary tensors (they must agree on rows) and their ties.
pub fn vocabulary(
    ckpt: &Tensors,
    named: &[String],
    config: Option<&serde_json::Value>,
    base_size: u64,
) -> Result<Vocabulary> {
    let selected = match named_by_tokenizer(ckpt, named, base_size) {
        Some(s) => s,
        None => select_with_logits_bias(ckpt, named)?,
    };
    let rows: Vec<(String, u64)> = selected
        .iter()
        .filter_map(|(n, _)| ckpt.tensor(n).map(|t| (n.clone(), t.rows_view().shape[0])))
        .collect();
    let old_rows = rows.first().map_or(0, |r| r.1);
    if rows.iter().any(|r| r.1 != old_rows) {
        let list: Vec<String> = rows.iter().map(|(n, r)| format!("{n}: {r}")).collect();
        return Err(Error::format(
            &ckpt.path,
            format!(
                "the vocabulary tensors disagree on rows ({}): name the ones the tokenizer indexes with --tensor",
                list.join(", ")
            ),
        ));
    }
    let v = vocab::Vocabulary {
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
    let ties: Vec<Tie> = ties::find(ckpt, Some(&v), config)
        .into_iter()
        .filter(|t| t.names.iter().any(|n| selected.iter().any(|(s, _)| s == n)))
        .collect();
    Ok((selected, old_rows, ties))
}
