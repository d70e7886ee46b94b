//! Sharded outputs: each shard written (atomically, verified) or hard-linked on its own, then the
//! index last.

use crate::error::{Error, Result};
use crate::formats::safetensors::write::{write_safetensors, SafetensorsLayout};
use crate::formats::sharded::{self, Index};
use crate::formats::torch::write as torch;
use crate::output::atomic;
use crate::output::manifest::{self, digest, FileManifest};
use crate::output::{digest_file, write_bytes};
use std::path::{Path, PathBuf};

/// What writing a sharded set produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardedManifest {
    pub index: PathBuf,
    /// The algorithm of `index_digest`.
    pub hash: manifest::HashAlg,
    pub index_digest: String,
    pub shards: Vec<FileManifest>,
}

/// What to do for one shard of a sharded output.
pub enum ShardOut<'a> {
    /// Write this plan (atomically, verified).
    Safetensors(SafetensorsLayout<'a>),
    /// Write this torch plan (atomically, verified), reading with this policy.
    Torch(
        crate::formats::torch::writer::TorchLayout<'a>,
        &'a crate::formats::torch::pickle::GlobalPolicy,
    ),
    /// An unchanged shard: hard-link the input file (falls back to a verified copy elsewhere).
    Link(&'a Path),
}

/// Write shards (each atomically and verified) into `dir`, then the index last, so a reader that
/// goes by the index never sees a shard set that is half old, half new. `file_sha256`: hash
/// linked shards whole (written shards follow their plan's own flag). `index_keys`: the index's
/// top-level keys but `weight_map` (`metadata` is written first, the others after `weight_map`).
pub fn write_sharded(
    dir: &Path,
    index_name: &str,
    index_keys: &serde_json::Map<String, serde_json::Value>,
    shards: &[(String, ShardOut<'_>)],
    weight_map: &[(String, String)],
    inputs: &[&Path],
    file_sha256: bool,
) -> Result<ShardedManifest> {
    let mut manifests = Vec::with_capacity(shards.len());
    for (name, shard) in shards {
        let dest = dir.join(name);
        let m = match shard {
            ShardOut::Safetensors(plan) => write_safetensors(plan, &dest, inputs)?,
            ShardOut::Torch(plan, policy) => torch::write_torch(plan, &dest, inputs, policy)?,
            ShardOut::Link(src) => {
                atomic::ensure_not_input(&dest, inputs)?;
                if dest.exists() {
                    return Err(Error::arg(
                        "--output",
                        format!(
                            "{}: exists; --link only creates new shard files",
                            dest.display()
                        ),
                    ));
                }
                std::fs::hard_link(src, &dest)
                    .map_err(|e| Error::io(&dest, "hard-link the unchanged shard to", e))?;
                FileManifest {
                    path: dest.clone(),
                    bytes: std::fs::metadata(&dest)
                        .map_err(|e| Error::io(&dest, "stat", e))?
                        .len(),
                    hash: manifest::algorithm(),
                    digest: file_sha256.then(|| digest_file(&dest)).transpose()?,
                    tensors: Vec::new(),
                }
            }
        };
        manifests.push(m);
    }
    let mut doc = serde_json::Map::new();
    if let Some(meta) = index_keys.get("metadata") {
        doc.insert("metadata".into(), meta.clone());
    }
    let wm: serde_json::Map<String, serde_json::Value> = weight_map
        .iter()
        .map(|(t, s)| (t.clone(), serde_json::Value::String(s.clone())))
        .collect();
    doc.insert("weight_map".into(), serde_json::Value::Object(wm));
    for (k, v) in index_keys.iter().filter(|(k, _)| *k != "metadata") {
        doc.insert(k.clone(), v.clone());
    }
    let mut text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::format(dir, format!("cannot serialise the index: {e}")))?;
    text.push('\n');
    let index_path = dir.join(index_name);
    write_bytes(&index_path, inputs, text.as_bytes(), |tmp| {
        let back = std::fs::read_to_string(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
        sharded::parse_index(tmp, &back).map(|_: Index| ())
    })?;
    let index_sha = digest(text.as_bytes());
    Ok(ShardedManifest {
        index: index_path,
        hash: manifest::algorithm(),
        index_digest: index_sha,
        shards: manifests,
    })
}
