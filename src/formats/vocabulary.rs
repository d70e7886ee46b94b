//! The row-surgery interface every layout answers: which of its tensors are vocabulary matrices
//! and which optimizer entries belong to them ([`Entry`], roles a [`Role`]), and which edits bring
//! them to a row map ([`Entry::edit`]: append, cut, or any map old id → new id). Each format
//! gives its entries from what its names mean (`dcp::keys::entries`, `Zero::entries`,
//! [`weights`] for a tensor store); jobs plan against the entries and never look at a layout's
//! names themselves.

use crate::error::{Error, Result};
use crate::formats::Tensors;
pub use crate::plan::Entry;
use crate::plan::Role;
use crate::vocab::{self, Detection};

/// The vocabulary matrices a detection found, as entries (roles from the detector).
pub fn weights(det: &Detection) -> Vec<Entry> {
    det.vocabulary
        .iter()
        .flat_map(|v| &v.tensors)
        .map(|t| Entry::weight(&t.name, Role::from(t.role), &t.shape))
        .collect()
}

/// A matrix named by the user (`--tensor`): its role by its name, a 1-D tensor a head bias.
pub fn named(name: &str, shape: &[u64]) -> Entry {
    Entry::weight(name, Role::of_tensor(name, shape), shape)
}

/// Pick the tensors to change: the named ones, or the detected vocabulary. A model with a
/// logits bias [1, V] ([`vocab::per_token_elsewhere`]) is refused: this is for the layouts whose
/// writers place rows along the first dimension only (a training file's optimizer, a Trainer
/// folder); model files take [`select_with_logits_bias`].
pub fn select(ckpt: &Tensors, named: &[String]) -> Result<Vec<(String, crate::vocab::Role)>> {
    let out = select_any(ckpt, named)?;
    // Each selected tensor's rows (a logits bias named with --tensor: its V) against the biases.
    for (n, _) in &out {
        if let Some(rows) = ckpt.tensor(n).and_then(|t| rows_of(&t)) {
            refuse_per_token_elsewhere(ckpt, rows)?;
        }
    }
    Ok(out)
}

/// A tensor's rows as the row surgery sees them ([`crate::formats::TensorRef::rows_view`]).
fn rows_of(t: &crate::formats::TensorRef) -> Option<u64> {
    t.rows_view().shape.first().copied()
}

/// [`select`] for a model file or folder (safetensors, torch, sharded; a Trainer folder's
/// model): a logits bias [1, V] of the selected tensors' V is selected too, as a head bias (its
/// rows along its second dimension; a buffer, so no optimizer state moves with it). A DCP
/// folder's writer places rows along the first dimension only: refused as [`select`] does.
pub fn select_with_logits_bias(
    ckpt: &Tensors,
    named: &[String],
) -> Result<Vec<(String, crate::vocab::Role)>> {
    if ckpt.format == crate::formats::Format::TorchDcp {
        return select(ckpt, named);
    }
    let mut out = select_any(ckpt, named)?;
    if let Some(bias) = bias_beside(ckpt, &out) {
        out.push((bias, crate::vocab::Role::HeadBias));
    }
    Ok(out)
}

/// The logits bias [1, V] whose V is the first selected tensor's rows, when one is not selected.
fn bias_beside(ckpt: &Tensors, selected: &[(String, crate::vocab::Role)]) -> Option<String> {
    let rows = rows_of(&ckpt.tensor(&selected.first()?.0)?)?;
    let (name, _) = vocab::per_token_elsewhere(ckpt.tensors().map(|t| (t.name, t.shape)), rows)?;
    (!selected.iter().any(|(n, _)| n == name)).then(|| name.to_string())
}

fn select_any(ckpt: &Tensors, named: &[String]) -> Result<Vec<(String, crate::vocab::Role)>> {
    if !named.is_empty() {
        let mut out = Vec::new();
        for n in named {
            let t = ckpt.tensor(n).ok_or_else(|| {
                Error::arg(
                    "--tensor",
                    format!("{}: no tensor named '{n}'", ckpt.path.display()),
                )
            })?;
            let role = match t.rows_view().shape.len() {
                1 => crate::vocab::Role::HeadBias,
                2 if n.contains("head") || n.contains("output") => crate::vocab::Role::Head,
                2 => crate::vocab::Role::Embedding,
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
        refuse_left_out(ckpt, &out)?;
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

/// `--tensor` naming some of the detected vocabulary's matrices but not all: the others would
/// keep the old row count beside the changed ones (an untied head beside a trimmed embedding),
/// and config.json's vocab_size would fit only some. Refused, naming the one left out.
fn refuse_left_out(ckpt: &Tensors, named: &[(String, vocab::Role)]) -> Result<()> {
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    let Some(v) = det.vocabulary else {
        return Ok(());
    };
    let rows_named = |n: &String| ckpt.tensor(n).and_then(|t| rows_of(&t));
    if !named.iter().any(|(n, _)| rows_named(n) == Some(v.rows)) {
        return Ok(());
    }
    match v.tensors.iter().find(|t| !named.iter().any(|(n, _)| *n == t.name)) {
        Some(t) => Err(Error::arg(
            "--tensor",
            format!(
                "{}: '{}' {:?} is a vocabulary matrix with the same {} rows as the ones named: name it with --tensor too, or the output's matrices would disagree on rows",
                ckpt.path.display(),
                t.name,
                t.shape,
                v.rows
            ),
        )),
        None => Ok(()),
    }
}

/// Refuse a model with a tensor of one value per token along a later dimension
/// ([`vocab::per_token_elsewhere`]: BART's `final_logits_bias` [1, V]): changing the
/// vocabulary's `rows` would leave it at the old length, and the output would not load.
pub fn refuse_per_token_elsewhere(ckpt: &Tensors, rows: u64) -> Result<()> {
    let Some((name, shape)) =
        vocab::per_token_elsewhere(ckpt.tensors().map(|t| (t.name, t.shape)), rows)
    else {
        return Ok(());
    };
    Err(Error::unsupported(
        &ckpt.path,
        format!(
            "tensor '{name}' {shape:?} holds one value per token of the {rows}-row vocabulary along its second dimension (BART, mBART, Marian, Pegasus); this release changes vocabulary rows along the first only, so it refuses the model rather than leave '{name}' at {rows} (the output would not load)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RowSource;
    use crate::rowmap::RowMap;

    #[test]
    fn an_append_edit_grows_weights_by_the_init_and_moments_by_zeros_and_a_cut_cuts_both() {
        let w = Entry::weight("emb.weight", Role::Embedding, &[10, 4]);
        let m = Entry::state("state.0.exp_avg", Role::Moment, &[10, 4], "emb.weight");
        let grow = RowMap::append(10, 12);
        assert_eq!(
            w.edit(&grow, "mean").rows,
            RowSource::Grown {
                init: "mean".into()
            }
        );
        assert_eq!(w.edit(&grow, "mean").to, vec![12, 4]);
        assert_eq!(m.edit(&grow, "mean").rows, RowSource::Filled { value: 0.0 });
        // Adagrad's `sum` starts at its initial_accumulator_value, not 0.
        let sum = m.clone().with_fill(0.1);
        assert_eq!(
            sum.edit(&grow, "mean").rows,
            RowSource::Filled { value: 0.1 }
        );
        let cut = RowMap::append(10, 8);
        assert_eq!(w.edit(&cut, "mean").rows, RowSource::Cut);
        assert_eq!(m.edit(&cut, "mean").to, vec![8, 4]);
    }

    #[test]
    fn a_gather_map_edit_names_its_map() {
        let w = Entry::weight("emb.weight", Role::Embedding, &[4, 2]);
        let map =
            RowMap::from_ids(&[Some(3), None, Some(0)], 4, std::path::Path::new("t")).unwrap();
        let e = w.edit(&map, "mean");
        assert_eq!(e.to, vec![3, 2]);
        assert!(matches!(e.rows, RowSource::Mapped { .. }), "{e:?}");
    }
}
