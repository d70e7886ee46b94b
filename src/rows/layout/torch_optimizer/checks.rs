//! What does not fit before, and the rules that stop a write: findings (weights and moments not
//! at the target rows), refusals (a moment shaped in a way only a fresh optimizer fixes,
//! `--optimizer keep` on moments that do not fit), the coverage rule over a planned file, and the
//! NaN/Inf scan.

use crate::error::{Error, Result};
use crate::formats::torch::optimizer::matching::SameShape;
use crate::formats::torch::optimizer::state::{
    follows, state_path, state_tensors, Follows, FoundOpt, Mapping, DROP_REMEDY,
};
use crate::formats::torch::value::Pickle;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::{TensorRef, Tensors};
use crate::rows::layout::report::{Finding, NonFinite};
use crate::vocab;
use std::path::Path;

/// The coverage rule, checked on the plan before anything is written: no tensor anywhere in the
/// output still has the old vocabulary rows along a vocabulary axis (shaped like a vocabulary
/// matrix, a head bias, or a row factor), unless the user kept it on purpose (`--keep NAME`).
/// This is what stops a checkpoint that cannot resume from being written with exit 0: a copy of
/// the model we did not recognise, an optimizer whose state we did not match.
pub(crate) fn coverage(
    input: &Path,
    plan: &TorchLayout<'_>,
    old_rows: u64,
    target: u64,
    vocab_names: &[String],
    ckpt: &Tensors,
    keep: &[String],
) -> Result<()> {
    if old_rows == target {
        return Ok(());
    }
    let trailing: Vec<Vec<u64>> = vocab_names
        .iter()
        .filter_map(|n| ckpt.tensor(n))
        .map(|x| x.shape[1..].to_vec())
        .collect();
    let tensors =
        crate::formats::torch::tensor_paths(&plan.pickle).map_err(|e| Error::format(input, e))?;
    let mut left = Vec::new();
    for tt in &tensors {
        let Some(n) = plan.pickle.tensor_of(tt.node) else {
            continue;
        };
        let s = &n.shape;
        let along = s.first() == Some(&old_rows)
            && (s.len() == 1
                || trailing.iter().any(|t| t[..] == s[1..])
                || s[1..].iter().all(|&d| d == 1));
        if along && !keep.contains(&tt.path) {
            left.push(format!("{} {:?}", tt.path, s));
        }
    }
    if left.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = left.iter().take(10).map(String::as_str).collect();
    Err(Error::format(
        input,
        format!(
            "{} tensor(s) would keep the old {old_rows} vocabulary rows while the model gets {target}, so the checkpoint could not resume: {}{}; nothing written (if one is meant to keep its rows, pass --keep NAME; to start a fresh optimizer, --optimizer drop)",
            left.len(),
            shown.join(", "),
            if left.len() > shown.len() { ", …" } else { "" }
        ),
    ))
}

/// What may keep the old rows besides `--keep`: positional tables (never the vocabulary, even
/// with as many rows as it) and, when the checkpoint says which index is which (`all`), their
/// optimizer state.
pub(crate) fn kept_on_purpose(
    p: &Pickle,
    found: &[FoundOpt],
    all: &[Mapping],
    model: &[(String, Vec<u64>)],
    keep: &[String],
) -> Vec<String> {
    let positional: Vec<&String> = model
        .iter()
        .map(|(n, _)| n)
        .filter(|n| vocab::is_positional(n))
        .collect();
    let mut out: Vec<String> = keep.to_vec();
    out.extend(positional.iter().map(|n| n.to_string()));
    for (o, m) in found.iter().zip(all) {
        for (i, _) in m.iter().filter(|(_, n)| positional.contains(&n)) {
            for (sname, _) in state_tensors(p, o.id, *i) {
                out.push(state_path(&o.key, *i, &sname));
            }
        }
    }
    out
}

/// Every floating tensor holding NaN or Inf, with the counts (one read of each; the torch
/// writer counts them itself as it copies: [`found_nonfinite`]).
pub(crate) fn scan_nonfinite<'t>(
    tensors: impl Iterator<Item = TensorRef<'t>>,
) -> Result<Vec<NonFinite>> {
    let mut out = Vec::new();
    for x in tensors {
        let (nan, inf) = x.nonfinite()?;
        if nan + inf > 0 {
            out.push(NonFinite {
                tensor: x.name.to_string(),
                nan,
                inf,
            });
        }
    }
    Ok(out)
}

/// The tensors holding NaN or Inf among the writer's counts (name, NaN, Inf), in its order.
pub(crate) fn found_nonfinite(counts: Vec<(String, u64, u64)>) -> Vec<NonFinite> {
    counts
        .into_iter()
        .filter(|(_, nan, inf)| nan + inf > 0)
        .map(|(tensor, nan, inf)| NonFinite { tensor, nan, inf })
        .collect()
}

/// State tensors of the matched vocabulary parameters that do not have the target rows.
/// `same`: the sets whose order is not known (their states are named "of a or b").
pub(crate) fn misfits(
    p: &Pickle,
    o: &FoundOpt,
    (mapping, same): (&Mapping, &[SameShape]),
    param_shape: &dyn Fn(&str) -> Vec<u64>,
    row_counts: &[u64],
    target: u64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (idx, name) in mapping {
        let ps = param_shape(name);
        for (sname, shape) in state_tensors(p, o.id, *idx) {
            let f = follows(&shape, &ps, row_counts);
            if matches!(f, Follows::Rows | Follows::FactoredRows) && shape[0] != target {
                out.push(Finding {
                    tensor: format!(
                        "{} (of {})",
                        state_path(&o.key, *idx, &sname),
                        SameShape::owner(same, *idx, name)
                    ),
                    expected_rows: target,
                    found_shape: shape,
                    optimizer_state: true,
                });
            }
        }
    }
    out
}

/// The other parameters, when the checkpoint says which index is which (`all`): a state tensor
/// shaped like its parameter but for the rows (a position table resized, its moments not) is
/// refused: only vocabulary matrices are resized here, and torch would load it silently.
pub(crate) fn other_misfits(
    input: &Path,
    p: &Pickle,
    found: &[FoundOpt],
    all: &[Mapping],
    vocab: &[String],
    param_shape: &dyn Fn(&str) -> Vec<u64>,
) -> Result<()> {
    for (o, m) in found.iter().zip(all) {
        for (idx, name) in m.iter().filter(|(_, n)| !vocab.contains(n)) {
            let ps = param_shape(name);
            if ps.is_empty() {
                continue;
            }
            for (sname, shape) in state_tensors(p, o.id, *idx) {
                if shape != ps && follows(&shape, &ps, &ps[..1]) == Follows::Rows {
                    return Err(Error::tensor(
                        input,
                        &state_path(&o.key, *idx, &sname),
                        format!(
                            "optimizer state of {name} has shape {shape:?} but the parameter is {ps:?}: torch loads it without a word and fails at step(); {name} is not a vocabulary matrix, which is all this tool resizes; {DROP_REMEDY}"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The model's vocabulary tensors whose rows are not the target's.
pub(crate) fn model_findings(
    model_all: &[(String, Vec<u64>)],
    vocab_names: &[String],
    target: u64,
) -> Vec<Finding> {
    model_all
        .iter()
        .filter(|(n, s)| vocab_names.contains(n) && s[0] != target)
        .map(|(n, s)| Finding {
            tensor: n.clone(),
            expected_rows: target,
            found_shape: s.clone(),
            optimizer_state: false,
        })
        .collect()
}

/// `--optimizer keep` leaves the moments as they are: refused when one of them (a finding whose
/// name starts with `prefix`: the optimizer's key) does not fit the target.
pub(crate) fn refuse_keep(inconsistent: &[Finding], prefix: &str, target: u64) -> Result<()> {
    match inconsistent.iter().find(|f| f.tensor.starts_with(prefix)) {
        Some(f) => Err(Error::arg(
            "--optimizer",
            format!(
                "--optimizer keep: {} has shape {:?} but the target is {target} rows; use --optimizer repair or drop",
                f.tensor, f.found_shape
            ),
        )),
        None => Ok(()),
    }
}
