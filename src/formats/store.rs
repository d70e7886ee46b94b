//! A tensor store (one file, or a sharded set read as one) and the layout it came from: what
//! `formats::open` hands a reader of tensors.

use super::safetensors::SafetensorsFile;
use super::sharded::Index;
use super::tensor::TensorRef;
use super::torch::TorchFile;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The layout an open checkpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Safetensors,
    ShardedSafetensors,
    /// torch.save zip archive (torch ≥ 1.6).
    TorchZip,
    /// torch.save legacy pickle stream (torch < 1.6).
    TorchLegacy,
    /// `pytorch_model.bin.index.json` and its torch shards.
    ShardedTorch,
    /// A torch Distributed Checkpoint folder (`.metadata` + `*.distcp`).
    TorchDcp,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::ShardedSafetensors => "sharded safetensors",
            Format::TorchZip => "torch zip (torch.save)",
            Format::TorchLegacy => "torch legacy pickle (torch.save < 1.6)",
            Format::ShardedTorch => "sharded torch",
            Format::TorchDcp => "torch distributed checkpoint (DCP)",
        }
    }
}

/// A tensor store: one file, or a sharded set read as one.
#[derive(Debug)]
pub struct Tensors {
    /// The file that was opened: the safetensors file or the index.
    pub path: PathBuf,
    pub format: Format,
    /// The sharded index, when there is one.
    pub index: Option<Index>,
    /// One entry for a single file; the shards in order for a sharded set (empty for torch).
    pub files: Vec<SafetensorsFile>,
    /// The torch file for torch formats; the shards in order for a sharded torch set.
    pub torch: Vec<TorchFile>,
}

impl Tensors {
    /// Does this checkpoint hold optimizer state (a torch training file, or a torch shard of a
    /// set that holds it)?
    pub fn has_optimizer(&self) -> bool {
        self.torch
            .iter()
            .any(|t| super::torch::optimizer::state::has_optimizer(&t.pickle))
    }

    /// The folder an output of this checkpoint completes when it was given as a folder or as a
    /// sharded index (`input`, the path the user gave); None for a single file.
    pub fn input_folder(&self, input: &Path) -> Option<PathBuf> {
        if input.is_dir() {
            return Some(input.to_path_buf());
        }
        self.index.is_some().then(|| {
            input
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        })
    }

    /// Every tensor, shard by shard, each in data order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorRef<'_>> {
        let st = self.files.iter().flat_map(|file| {
            file.header.tensors.iter().map(move |info| TensorRef {
                name: &info.name,
                dtype: info.dtype,
                shape: &info.shape,
                map: &file.map,
                start: info.start,
                strides: None,
            })
        });
        st.chain(self.torch.iter().flat_map(|t| t.tensor_refs()))
    }

    /// Find a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.tensors().find(|t| t.name() == name)
    }

    /// Every file this store reads (index included): outputs must never be one of these.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.path];
        v.extend(self.files.iter().map(|f| f.path()));
        v.extend(self.torch.iter().map(|t| t.map.path.as_path()));
        v.dedup();
        v
    }

    /// Total bytes of the files on disk (index excluded).
    pub fn file_bytes(&self) -> u64 {
        let torch: u64 = self.torch.iter().map(|t| t.map.len).sum::<u64>();
        self.files.iter().map(|f| f.map.len).sum::<u64>() + torch
    }
}
