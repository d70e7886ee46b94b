//! Sharded checkpoints: `model.safetensors.index.json` (`weight_map` tensor → shard file) opened
//! as one checkpoint. Every listed tensor must be in its shard, and no tensor in two shards.

pub mod write;

use super::json::UniqueMap;
use super::safetensors::SafetensorsFile;
use super::torch::pickle::GlobalPolicy;
use super::torch::TorchFile;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// The parsed index file.
#[derive(Debug, Clone)]
pub struct Index {
    /// The index's own `metadata` object (e.g. `total_size`), kept as written.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// tensor name → shard file name, in file order.
    pub weight_map: Vec<(String, String)>,
    /// Any other top-level key, kept as written (an output's index carries them).
    pub other: Box<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct RawIndex {
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
    weight_map: UniqueMap<String>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// Parse an index file's text. Shard names must stay inside the index's folder.
pub fn parse_index(path: &Path, text: &str) -> Result<Index> {
    let raw: RawIndex = serde_json::from_str(text).map_err(|e| {
        Error::format(
            path,
            format!("not a valid sharded index (needs a \"weight_map\" object of tensor → shard file): {e}"),
        )
    })?;
    for (tensor, shard) in &raw.weight_map.0 {
        let p = Path::new(shard);
        let inside = !shard.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(Error::tensor(
                path,
                tensor,
                format!("shard '{shard}' is not a file name inside the index's folder"),
            ));
        }
    }
    Ok(Index {
        metadata: raw.metadata,
        weight_map: raw.weight_map.0,
        other: Box::new(raw.other),
    })
}

/// Shard file names in the order we read and write them (sorted: `-00001-of-00003` first).
pub fn shard_names(index: &Index) -> Vec<String> {
    let mut names: Vec<String> = index.weight_map.iter().map(|(_, s)| s.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The opened shards of a set: all safetensors, or all torch files.
pub enum Shards {
    Safetensors(Vec<SafetensorsFile>),
    Torch(Vec<TorchFile>),
}

/// What a shard file is, as `formats::open` found it from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardKind {
    Safetensors,
    Torch,
    Neither,
}

/// Each shard's path, in [`shard_names`] order.
pub fn shard_paths(index_path: &Path, index: &Index) -> Vec<PathBuf> {
    let dir = index_path.parent().unwrap_or(Path::new("."));
    shard_names(index).iter().map(|n| dir.join(n)).collect()
}

/// Open every shard of `index` (read from `index_path`; `kind_of` says what each shard file is)
/// and check the set against the index.
pub fn open_shards(
    index_path: &Path,
    index: &Index,
    kind_of: &dyn Fn(&Path) -> Result<ShardKind>,
    policy: &GlobalPolicy,
) -> Result<Shards> {
    let names = shard_names(index);
    let mut st = Vec::new();
    let mut torch = Vec::new();
    for p in shard_paths(index_path, index) {
        match kind_of(&p)? {
            ShardKind::Safetensors => st.push(SafetensorsFile::open(&p)?),
            ShardKind::Torch => torch.push(TorchFile::open(&p, policy)?),
            ShardKind::Neither => {
                return Err(Error::format(
                    &p,
                    "shard is neither safetensors nor a torch checkpoint",
                ))
            }
        }
    }
    if !st.is_empty() && !torch.is_empty() {
        return Err(Error::format(
            index_path,
            "the shards mix safetensors and torch files: convert them to one format",
        ));
    }
    let listing: Vec<Vec<&str>> = if torch.is_empty() {
        st.iter()
            .map(|f| f.header.tensors.iter().map(|t| t.name.as_str()).collect())
            .collect()
    } else {
        torch
            .iter()
            .map(|f| f.tensors.iter().map(|t| t.path.as_str()).collect())
            .collect()
    };
    check_against_index(index_path, index, &names, &listing)?;
    Ok(if torch.is_empty() {
        Shards::Safetensors(st)
    } else {
        Shards::Torch(torch)
    })
}

/// `listing[i]` is the tensor names found in shard `names[i]`.
fn check_against_index(
    index_path: &Path,
    index: &Index,
    names: &[String],
    listing: &[Vec<&str>],
) -> Result<()> {
    let listed: HashMap<&str, &str> = index
        .weight_map
        .iter()
        .map(|(t, s)| (t.as_str(), s.as_str()))
        .collect();
    // First every occurrence (so a tensor in two shards is named as such), then the index.
    let mut found: HashMap<&str, &str> = HashMap::new();
    for (name, tensors) in names.iter().zip(listing) {
        for &t in tensors {
            if let Some(first) = found.insert(t, name) {
                return Err(Error::tensor(
                    index_path,
                    t,
                    format!("present in two shards, '{first}' and '{name}': remove one copy"),
                ));
            }
        }
    }
    for (shard, tensors) in names.iter().zip(listing) {
        for &tensor in tensors {
            match listed.get(tensor) {
                None => {
                    return Err(Error::tensor(
                        index_path,
                        tensor,
                        format!("found in shard '{shard}' but the index does not list it"),
                    ))
                }
                Some(expected) if expected != shard => {
                    return Err(Error::tensor(
                        index_path,
                        tensor,
                        format!("the index says shard '{expected}' but it is in shard '{shard}'"),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    for (t, s) in &index.weight_map {
        if !found.contains_key(t.as_str()) {
            return Err(Error::tensor(
                index_path,
                t,
                format!("listed in the index but missing from its shard '{s}'"),
            ));
        }
    }
    Ok(())
}
