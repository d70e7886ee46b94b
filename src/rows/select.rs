//! Which tensors hold the vocabulary rows to change — the ones named (`--tensor`), else the
//! detected vocabulary — and how many rows a tokenizer needs. extend-embeddings and
//! sanitize-checkpoint ask the same question here.

use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::tokenizer::base::load_tokenizer;
use crate::vocab::{self, Role};
use std::path::Path;

/// Rows a tokenizer needs: its largest id + 1.
pub fn tokenizer_rows(path: &Path) -> Result<u64> {
    Ok(load_tokenizer(path)?.size())
}

/// Pick the tensors to change: the named ones, or the detected vocabulary.
pub(crate) fn select(ckpt: &Tensors, named: &[String]) -> Result<Vec<(String, Role)>> {
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
