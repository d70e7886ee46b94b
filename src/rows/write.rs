//! Writing a checkpoint whose vocabulary rows changed, in the input's format: safetensors, torch,
//! sharded sets (extend-embeddings' output, and a Trainer folder's model for sanitize-checkpoint);
//! a folder output's place checked first and completed last ([`Destination`]).

use super::resize::Grown;
use crate::error::{Error, Result};
use crate::formats::model_folder::{finish, Finished, TokenizerFile};
use crate::formats::safetensors::write::{write_safetensors, Payload, SafetensorsLayout};
use crate::formats::sharded::write::{write_sharded, ShardOut};
use crate::formats::torch::write::write_torch;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::formats::{self, Format, OpenOptions, Tensors};
use crate::output::folder::AtomicFolder;
use crate::output::json_text::JsonEdit;
use crate::output::manifest::FileManifest;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
            t.shape = crate::vocab::with_rows(&t.name, &t.shape, new_rows);
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

/// How [`write()`] writes: what the tools' flags of the same names say.
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
            let mut meta = index.metadata.clone().unwrap_or_default();
            move_total_parameters(&mut meta, ckpt, &new_bytes, new_rows);
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

            meta.insert("total_size".into(), Value::from(total));
            let mut keys = (*index.other).clone();
            keys.insert("metadata".into(), Value::Object(meta));
            let index_name = name_of(&ckpt.path);
            let m = write_sharded(
                out,
                &index_name,
                &keys,
                &shards,
                &index.weight_map,
                inputs,
                opts.file_sha256,
            )?;
            Ok(m.shards)
        }
    }
}

/// transformers' index also says `total_parameters` (its model's parameter count, buffers and
/// tied copies aside): moved by the elements each grown or cut tensor gains or loses, so what it
/// did not count stays uncounted. Left alone where it is not a count.
fn move_total_parameters(
    meta: &mut serde_json::Map<String, Value>,
    ckpt: &Tensors,
    new_bytes: &BTreeMap<String, Grown<'_>>,
    new_rows: u64,
) {
    let Some(old) = meta.get("total_parameters").and_then(Value::as_u64) else {
        return;
    };
    let mut total = i128::from(old);
    // A logits bias [1, V] is a buffer, not a parameter: transformers did not count it.
    let counted = |t: &crate::formats::TensorRef| {
        new_bytes.contains_key(t.name) && crate::vocab::row_axis(t.name, t.shape) == 0
    };
    for t in ckpt.tensors().filter(counted) {
        let (rows, n) = (t.shape.first().copied().unwrap_or(0), t.elements());
        if let Some(per_row) = n.checked_div(rows) {
            total += i128::from(per_row) * i128::from(new_rows) - i128::from(n);
        }
    }
    if let Ok(total) = u64::try_from(total) {
        meta.insert("total_parameters".into(), Value::from(total));
    }
}

/// A path's last component, as the report names written files.
pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Where a tensor store's output goes, checked before anything is computed: for a folder output
/// (the input was a folder or a sharded index) a temp folder beside `out`, completed by
/// [`Destination::finish`] and renamed into place; for a file, `out` itself.
pub(crate) enum Destination {
    File,
    Folder(AtomicFolder),
}

/// What completes a folder output besides the weights.
pub(crate) struct FolderRest<'a> {
    /// The input folder: its other files are carried.
    pub dir: &'a Path,
    /// config.json's edit, when there is one.
    pub config: Option<&'a JsonEdit>,
    /// The merged tokenizer, put in place of the folder's.
    pub merged: Option<&'a TokenizerFile<'a>>,
    pub protected: &'a [&'a Path],
    pub link: bool,
}

impl Destination {
    /// Check `out` for `ckpt`'s output (a folder when `folder`), replaced only with `overwrite`,
    /// none of `protected` being it.
    pub(crate) fn check(
        ckpt: &Tensors,
        folder: bool,
        out: &Path,
        protected: &[&Path],
        overwrite: bool,
    ) -> Result<Destination> {
        if folder {
            crate::output::folder::folder_destination_name(out)?;
            let f = AtomicFolder::create(out, protected, overwrite)?;
            return Ok(Destination::Folder(f));
        }
        let ext: &[&str] = match ckpt.format {
            Format::Safetensors => &["safetensors"],
            _ => &["pt", "pth", "bin", "ckpt"],
        };
        let name = ckpt.format.name();
        crate::output::folder::file_destination(out, protected, name, ext, overwrite)?;
        Ok(Destination::File)
    }

    /// Where [`write()`] puts the weights: the file, or the folder under the input's own names.
    pub(crate) fn weights(&self, ckpt: &Tensors, out: &Path) -> PathBuf {
        match self {
            Destination::Folder(f) if ckpt.index.is_none() => f.join(&file_name(&ckpt.path)),
            Destination::Folder(f) => f.path().to_path_buf(),
            Destination::File => out.to_path_buf(),
        }
    }

    /// A writer's error, said of the output (not of a folder's temp path).
    pub(crate) fn about(&self, e: Error) -> Error {
        match self {
            Destination::Folder(f) => f.about(e),
            Destination::File => e,
        }
    }

    /// A folder output completed (config.json's edit, the merged tokenizer, every other file of
    /// the input folder carried) and renamed into place, `manifest`'s paths then said in `out`;
    /// None for a file.
    pub(crate) fn finish(
        self,
        ckpt: &Tensors,
        rest: &FolderRest<'_>,
        manifest: &mut [FileManifest],
        out: &Path,
    ) -> Result<Option<Finished>> {
        let Destination::Folder(folder) = self else {
            return Ok(None);
        };
        let mut written: Vec<String> = manifest.iter().map(|m| file_name(&m.path)).collect();
        if ckpt.index.is_some() {
            written.push(file_name(&ckpt.path));
        }
        let (dir, protected) = (rest.dir, rest.protected);
        let finished = finish(
            &folder,
            dir,
            &mut written,
            rest.config,
            rest.merged,
            protected,
            rest.link,
        )?;
        let tmp = folder.path().to_path_buf();
        folder.commit()?;
        for m in manifest.iter_mut() {
            if let Ok(rel) = m.path.strip_prefix(&tmp) {
                m.path = out.join(rel);
            }
        }
        Ok(Some(finished))
    }
}
