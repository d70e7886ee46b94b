//! A ZeRO-3 checkpoint's model as a tensor store, so the row-map planners (which read a
//! [`Tensors`]) plan on it: stage 3 keeps no whole module, so each parameter's fp32 master copy
//! (its flat partitions gathered) is encoded in the dtype the model trains in and saved as
//! `module.NAME` in one safetensors file in the temp folder, opened (memory-mapped) and unlinked
//! at once. Its path is rank 0's module states file, so errors and reports name an input and the
//! planners treat it as the one file it stands for (no folder's side files).

use super::Zero;
use crate::dtype;
use crate::error::{Error, Result};
use crate::formats::safetensors::{serialize_header, HeaderEntry, SafetensorsFile};
use crate::formats::{Format, Tensors};
use std::io::Write;

/// The model of a stage-3 checkpoint `z`: every parameter's master weights in `z.model_dtype()`.
pub fn master_store(z: &Zero) -> Result<Tensors> {
    let lp = z.model_dtype();
    let mut tensors = Vec::new();
    for p in &z.params {
        let bytes = dtype::recode(&z.master(p)?, dtype::DType::F32, lp)
            .map_err(|e| Error::tensor(&z.dir, &p.name, format!("{e:?}")))?;
        tensors.push((format!("module.{}", p.name), p.shape.clone(), bytes));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = std::env::temp_dir().join(format!(
        "ckpt-surgery-zero3-{}-{nanos}.safetensors",
        std::process::id()
    ));
    let entries: Vec<HeaderEntry<'_>> = tensors
        .iter()
        .map(|(name, shape, bytes)| HeaderEntry {
            name,
            dtype: lp,
            shape,
            len: bytes.len() as u64,
        })
        .collect();
    let header = serialize_header(&z.dir, None, &entries)?;
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&header)?;
        for (_, _, bytes) in &tensors {
            f.write_all(bytes)?;
        }
        f.flush()
    });
    let opened = written
        .map_err(|e| Error::io(&tmp, "write (the ZeRO-3 master weights, gathered)", e))
        .and_then(|()| SafetensorsFile::open(&tmp));
    // The map stays valid once the name is gone; nothing is left behind.
    let _ = std::fs::remove_file(&tmp);
    Ok(Tensors {
        path: z
            .model
            .first()
            .map_or_else(|| z.dir.clone(), |m| m.map.path.clone()),
        format: Format::Safetensors,
        index: None,
        files: vec![opened?],
        torch: Vec::new(),
    })
}
