//! Writing a checkpoint whose vocabulary rows changed, in the input's format: safetensors, torch,
//! sharded sets (extend-embeddings' output, and a Trainer folder's model for sanitize-checkpoint).

use super::resize::Grown;
use crate::error::{Error, Result};
use crate::formats::safetensors::write::{write_safetensors, Payload, SafetensorsLayout};
use crate::formats::sharded::write::{write_sharded, ShardOut};
use crate::formats::torch::write::write_torch;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::formats::{self, Format, OpenOptions, Tensors};
use crate::output::manifest::FileManifest;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The plan for one safetensors file; changed tensors' bytes are moved out of `new_bytes` (they
/// are the bulk of the job's memory: never copy them).
fn safetensors_plan<'a>(
    file: &'a formats::safetensors::SafetensorsFile,
    new_bytes: &mut BTreeMap<String, Grown<'a>>,
    new_rows: u64,
    file_sha256: bool,
) -> SafetensorsLayout<'a> {
    let mut plan = SafetensorsLayout::identity(file);
    plan.file_sha256 = file_sha256;
    for t in &mut plan.tensors {
        if let Some(g) = new_bytes.remove(&t.name) {
            t.shape[0] = new_rows;
            if let Payload::Copy(head) = &t.payload {
                // The old rows are copied from the input like any untouched tensor.
                t.payload = match g.parts {
                    Some((parts, old, new)) => Payload::Interleave {
                        head: *head,
                        parts,
                        old,
                        new,
                        tail: g.tail,
                    },
                    None => Payload::Grow {
                        head: *head,
                        keep: g.keep,
                        tail: g.tail,
                    },
                };
            }
        }
    }
    plan
}

/// The torch plan: changed tensors get new storages (names viewing the same storage follow),
/// made on `base` (a training file's tree with its optimizer already edited) or the file as it is.
fn torch_plan<'a>(
    t: &'a TorchFile,
    new_bytes: &mut BTreeMap<String, Grown<'a>>,
    new_rows: u64,
    base: Option<TorchLayout<'a>>,
) -> Result<TorchLayout<'a>> {
    let mut plan = match base {
        Some(b) => b,
        None => TorchLayout::try_identity(t)?,
    };
    for old in t.tensor_refs() {
        let Some(grown) = new_bytes.remove(old.name) else {
            continue;
        };
        let payload = grown.payload(&old)?;
        plan.replace_rows(t, old.name, new_rows, payload)
            .map_err(|e| Error::format(&t.map.path, e))?;
    }
    Ok(plan)
}

/// How [`write`] writes: what the tools' flags of the same names say.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Also hash each written file whole (tensors are always hashed).
    pub file_sha256: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    pub link: bool,
    /// How the input was opened (torch outputs re-open with the same globals).
    pub open: OpenOptions,
}

/// Write `ckpt` to `out` with the changed tensors' new rows from `new_bytes`; a torch file's
/// edits are made on `base` when given (a training file whose optimizer state was edited).
pub(crate) fn write<'a>(
    ckpt: &'a Tensors,
    out: &Path,
    mut new_bytes: BTreeMap<String, Grown<'a>>,
    new_rows: u64,
    opts: &WriteOptions,
    inputs: &[&Path],
    base: Option<TorchLayout<'a>>,
) -> Result<Vec<FileManifest>> {
    match ckpt.format {
        Format::Safetensors => Ok(vec![write_safetensors(
            &safetensors_plan(&ckpt.files[0], &mut new_bytes, new_rows, opts.file_sha256),
            out,
            inputs,
        )?]),
        Format::TorchZip | Format::TorchLegacy => {
            let t = &ckpt.torch[0];
            let mut plan = torch_plan(t, &mut new_bytes, new_rows, base)?;
            plan.file_sha256 = opts.file_sha256;
            Ok(vec![write_torch(
                &plan,
                out,
                inputs,
                &opts.open.globals,
            )?])
        }
        Format::TorchDcp => Err(Error::format(
            &ckpt.path,
            "extend-embeddings does not write torch Distributed Checkpoint folders: grow them with sanitize-checkpoint DIR --vocab-rows N --output OUT",
        )),
        Format::ShardedSafetensors | Format::ShardedTorch => {
            let index = ckpt
                .index
                .as_ref()
                .ok_or_else(|| Error::format(&ckpt.path, "sharded without an index"))?;
            // total_size: the tensor bytes of the new set (before the plans take the bytes).
            let total: u64 = ckpt
                .tensors()
                .map(|t| match new_bytes.get(t.name) {
                    Some(g) => g.len(),
                    None => t.nbytes(),
                })
                .sum();
            let mut shards: Vec<(String, ShardOut)> = Vec::new();
            let name_of = |p: &Path| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            for f in &ckpt.files {
                let touched = f
                    .header
                    .tensors
                    .iter()
                    .any(|t| new_bytes.contains_key(&t.name));
                let s = if !touched && opts.link {
                    ShardOut::Link(f.path())
                } else {
                    ShardOut::Safetensors(safetensors_plan(
                        f,
                        &mut new_bytes,
                        new_rows,
                        opts.file_sha256,
                    ))
                };
                shards.push((name_of(f.path()), s));
            }
            for t in &ckpt.torch {
                let touched = t.tensors.iter().any(|x| new_bytes.contains_key(&x.path));
                let s = if !touched && opts.link {
                    ShardOut::Link(&t.map.path)
                } else {
                    let mut plan = torch_plan(t, &mut new_bytes, new_rows, None)?;
                    plan.file_sha256 = opts.file_sha256;
                    ShardOut::Torch(plan, &opts.open.globals)
                };
                shards.push((name_of(&t.map.path), s));
            }

            let mut meta = index.metadata.clone().unwrap_or_default();
            meta.insert("total_size".into(), Value::from(total));
            let index_name = name_of(&ckpt.path);
            let m = write_sharded(
                out,
                &index_name,
                Some(&meta),
                &shards,
                &index.weight_map,
                inputs,
                opts.file_sha256,
            )?;
            Ok(m.shards)
        }
    }
}

/// A path's last component, as the report names written files.
pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
