//! What a donor init reads from the donor: its tokenizer's path, its embedding (and its own
//! head), and rows of them as f32, refusing rows that are not finite.

use crate::dtype::decode_row_f32;
use crate::error::{Error, Result};
use crate::formats::vocabulary::select_with_logits_bias;
use crate::formats::{self, Tensors};
use crate::tokenizer::base::folder_tokenizer;
use crate::vocab::{Role, VocabTensor, Vocabulary};
use std::path::{Path, PathBuf};

/// A donor matrix: (name, role, rows, cols).
pub(crate) type Matrix = (String, Role, usize, usize);

/// The donor's tokenizer: the one given (`--donor-tokenizer`), else its folder's own.
pub(crate) fn donor_tokenizer(donor: &Path, given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(t) => Ok(t.to_path_buf()),
        None if donor.is_dir() => folder_tokenizer(donor).ok_or_else(|| {
            Error::format(
                donor,
                "the donor folder has no tokenizer.json or .model: give --donor-tokenizer",
            )
        }),
        None => Err(Error::format(
            donor,
            "a donor weight file needs its tokenizer: give --donor-tokenizer",
        )),
    }
}

/// The donor's embedding and, when it is not tied to it, its head, embedding first.
pub(crate) fn donor_matrices(ckpt: &Tensors) -> Result<Vec<Matrix>> {
    let sel = select_with_logits_bias(ckpt, &[])?;
    let mats: Vec<(String, Role, Vec<u64>)> = sel
        .into_iter()
        .filter(|(_, r)| *r != Role::HeadBias)
        .filter_map(|(n, r)| ckpt.tensor(&n).map(|t| (n, r, t.shape.to_vec())))
        .collect();
    let config = formats::config_beside(&ckpt.path)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let vocabulary = Vocabulary {
        rows: mats.first().map_or(0, |m| m.2[0]),
        tensors: mats
            .iter()
            .map(|(n, r, s)| VocabTensor {
                name: n.clone(),
                role: *r,
                shape: s.clone(),
            })
            .collect(),
    };
    let followers =
        crate::ties::followers(&crate::ties::find(ckpt, Some(&vocabulary), config.as_ref()));
    let mut out: Vec<Matrix> = mats
        .into_iter()
        .filter(|(n, _, s)| !followers.contains_key(n) && s.len() == 2)
        .map(|(n, r, s)| (n, r, s[0] as usize, s[1] as usize))
        .collect();
    out.sort_by_key(|m| m.1 != Role::Embedding);
    if out.first().is_none_or(|m| m.1 != Role::Embedding) {
        return Err(Error::format(
            &ckpt.path,
            "the donor has no embedding matrix: is it the right --donor?",
        ));
    }
    out.truncate(2);
    Ok(out)
}

/// Rows `ids` of a donor matrix as f32; a row that is not finite is refused.
pub(crate) fn rows_f32(
    ckpt: &Tensors,
    name: &str,
    ids: &[u32],
    what: &dyn Fn(u32) -> String,
) -> Result<Vec<f32>> {
    let t = ckpt
        .tensor(name)
        .ok_or_else(|| Error::format(&ckpt.path, format!("no tensor named '{name}'")))?;
    let cols = t.shape[1] as usize;
    let bytes = t.try_bytes()?;
    let w = cols * (t.dtype.bits() / 8) as usize;
    let mut out = vec![0f32; ids.len() * cols];
    for (dst, &id) in out.chunks_mut(cols).zip(ids) {
        let src = bytes
            .get(id as usize * w..(id as usize + 1) * w)
            .ok_or_else(|| {
                Error::tensor(&ckpt.path, name, format!("row {id} lies past its end"))
            })?;
        decode_row_f32(t.dtype, src, dst)
            .map_err(|e| Error::tensor(&ckpt.path, name, format!("{e:?}")))?;
        if dst.iter().any(|v| !v.is_finite()) {
            return Err(Error::tensor(
                &ckpt.path,
                name,
                format!(
                    "row {id} ({}) holds NaN or inf: fix the donor or give another --donor",
                    what(id)
                ),
            ));
        }
    }
    Ok(out)
}
