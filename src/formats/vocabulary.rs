//! The row-surgery interface every layout answers: which of its tensors are vocabulary matrices
//! and which optimizer entries belong to them ([`Entry`], roles a [`Role`]), and which edits bring
//! them to a row map ([`Entry::edit`]: append, cut, or any map old id → new id). Each format
//! gives its entries from what its names mean (`dcp::keys::entries`, `Zero::entries`,
//! [`weights`] for a tensor store); jobs plan against the entries and never look at a layout's
//! names themselves.

use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::plan::{Edit, Role, RowSource};
use crate::rowmap::RowMap;
use crate::vocab::{self, Detection};
use serde::Serialize;

/// One vocabulary-sized tensor of a checkpoint: a matrix of the model, or optimizer state that
/// belongs to one (`of`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub tensor: String,
    pub role: Role,
    pub shape: Vec<u64>,
    /// For optimizer state (a moment, a master copy): the weight it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
}

impl Entry {
    /// A matrix (or bias) of the model.
    pub fn weight(tensor: &str, role: Role, shape: &[u64]) -> Entry {
        Entry {
            tensor: tensor.to_string(),
            role,
            shape: shape.to_vec(),
            of: None,
        }
    }

    /// Optimizer state of `of` (a moment, a master copy).
    pub fn state(tensor: &str, role: Role, shape: &[u64], of: &str) -> Entry {
        Entry {
            tensor: tensor.to_string(),
            role,
            shape: shape.to_vec(),
            of: Some(of.to_string()),
        }
    }

    /// Its rows (0 for a scalar).
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Whether it is optimizer state (its new rows are the optimizer's initial value, not the
    /// init's).
    pub fn is_state(&self) -> bool {
        self.role == Role::Moment
    }

    /// The edit that brings it to `map`'s rows: an append map keeps its rows and adds rows made
    /// by `init` (weights and master copies) or zeros (moments), or cuts; any other map takes
    /// rows by the map.
    pub fn edit(&self, map: &RowMap, init: &str) -> Edit {
        let mut to = self.shape.clone();
        if let Some(first) = to.first_mut() {
            *first = map.new_rows();
        }
        let rows = if !map.is_append() {
            RowSource::Mapped {
                from: serde_json::to_value(map).unwrap_or_default(),
            }
        } else if map.new_rows() < map.old_rows() {
            RowSource::Cut
        } else if self.is_state() {
            RowSource::Filled { value: 0.0 }
        } else {
            RowSource::Grown {
                init: init.to_string(),
            }
        };
        Edit {
            tensor: self.tensor.clone(),
            role: self.role,
            from: self.shape.clone(),
            to,
            rows,
        }
    }
}

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

/// Pick the tensors to change: the named ones, or the detected vocabulary.
pub fn select(ckpt: &Tensors, named: &[String]) -> Result<Vec<(String, crate::vocab::Role)>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
