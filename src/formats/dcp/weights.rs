//! A DCP folder's vocabulary matrices as a tensor store, so the row-map planners (which read a
//! [`Tensors`]) plan on them as on any weights: each matrix's chunks assembled (CRCs checked)
//! into one safetensors file in the temp folder, opened (memory-mapped) and unlinked at once; its
//! tensors keep their DCP names (`model.tok_embeddings.weight`), and its path is the folder's
//! `.metadata`, so errors and reports name the input.

use super::keys::{entries, shape};
use super::{Dcp, ItemKind, METADATA};
use crate::error::{Error, Result};
use crate::formats::safetensors::{serialize_header, HeaderEntry, SafetensorsFile};
use crate::formats::{Format, Tensors};
use std::io::Write;
use std::path::PathBuf;

/// The vocabulary matrices of `d` (its answer to the row-surgery interface, weights only).
pub fn vocabulary_store(d: &Dcp) -> Result<Tensors> {
    let mut tensors = Vec::new();
    for (item, e) in entries(d)? {
        if e.is_state() {
            continue;
        }
        let ItemKind::Tensor { dtype, .. } = &item.kind else {
            continue;
        };
        d.verify_item_crcs(item)?;
        let sh = shape(item).unwrap_or(&[]).to_vec();
        tensors.push((item.fqn.clone(), *dtype, sh, d.tensor_bytes(item)?));
    }
    let tmp = temp_path();
    let entries: Vec<HeaderEntry<'_>> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| HeaderEntry {
            name,
            dtype: *dtype,
            shape,
            len: bytes.len() as u64,
        })
        .collect();
    let header = serialize_header(&d.dir, None, &entries)?;
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&header)?;
        for (_, _, _, bytes) in &tensors {
            f.write_all(bytes)?;
        }
        f.flush()
    });
    let opened = written
        .map_err(|e| Error::io(&tmp, "write (the vocabulary matrices, assembled)", e))
        .and_then(|()| SafetensorsFile::open(&tmp));
    // The map stays valid once the name is gone; nothing is left behind.
    let _ = std::fs::remove_file(&tmp);
    Ok(Tensors {
        path: d.dir.join(METADATA),
        format: Format::Safetensors,
        index: None,
        files: vec![opened?],
        torch: Vec::new(),
    })
}

/// A file name in the temp folder no other run uses.
fn temp_path() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "ckpt-surgery-dcp-{}-{nanos}.safetensors",
        std::process::id()
    ))
}
