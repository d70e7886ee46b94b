//! Bytes ⇄ tensors. [`open`] takes a file or a model folder and picks the format from the content
//! (magic bytes, JSON), never from the file extension.

pub mod dcp;
pub mod json;
pub mod model_folder;
pub mod safetensors;
pub mod sharded;
mod tensor;
pub mod torch;
pub mod vocabulary;
pub mod zero;

use crate::error::{Error, Result};
use safetensors::SafetensorsFile;
use serde::Serialize;
use sharded::Index;
use std::io::Read;
use std::path::{Path, PathBuf};
pub use tensor::TensorRef;
use torch::pickle::GlobalPolicy;
use torch::TorchFile;

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    Safetensors,
    /// A JSON document (a sharded index, when it has a `weight_map`).
    Json,
    /// A zip archive: torch.save since torch 1.6.
    TorchZip,
    /// A bare pickle: torch.save before 1.6 (or `_use_new_zipfile_serialization=False`).
    TorchLegacy,
    Unknown,
}

impl Sniffed {
    pub fn is_safetensors(self) -> bool {
        self == Sniffed::Safetensors
    }
}

/// Classify a file by its first bytes.
pub fn sniff(path: &Path) -> Result<Sniffed> {
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path)
        .and_then(|f| f.take(16).read_to_end(&mut head))
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(sniff_bytes(&head))
}

/// Classify from up to the first 16 bytes.
pub fn sniff_bytes(head: &[u8]) -> Sniffed {
    if head.len() > 8 && head[8] == b'{' {
        // u64 header length, then the JSON header's opening brace.
        Sniffed::Safetensors
    } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        Sniffed::TorchZip
    } else if head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
        Sniffed::TorchLegacy
    } else if head
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
    {
        Sniffed::Json
    } else {
        Sniffed::Unknown
    }
}

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

/// How to open: which pickle globals beyond the default allowlist the user trusts.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub globals: GlobalPolicy,
}

/// An open checkpoint: one file, or a sharded set read as one.
#[derive(Debug)]
pub struct Checkpoint {
    /// The file that was opened: the safetensors file or the index.
    pub path: PathBuf,
    pub format: Format,
    /// The sharded index, when there is one.
    pub index: Option<Index>,
    /// One entry for a single file; the shards in order for a sharded set (empty for torch).
    pub files: Vec<SafetensorsFile>,
    /// The torch file for torch formats; the shards in order for a sharded torch set.
    pub torch: Vec<TorchFile>,
    /// A DCP folder: its tensors are chunked across files, so they are not in [`Checkpoint::tensors`].
    pub dcp: Option<Box<dcp::Dcp>>,
}

impl Checkpoint {
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

    /// Every file this checkpoint reads (index included): outputs must never be one of these.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.path];
        v.extend(self.files.iter().map(|f| f.path()));
        v.extend(self.torch.iter().map(|t| t.map.path.as_path()));
        v.extend(self.dcp.iter().flat_map(|d| d.paths()));
        v.dedup();
        v
    }

    /// A tool that does not read DCP folders says so, naming the one that does (its tensors
    /// are not in [`Checkpoint::tensors`], so it would otherwise see an empty checkpoint).
    pub fn refuse_dcp(&self, tool: &str, instead: &str) -> Result<()> {
        match self.dcp {
            Some(_) => Err(Error::format(
                &self.path,
                format!("a torch Distributed Checkpoint folder: {tool} does not write these; use {instead}"),
            )),
            None => Ok(()),
        }
    }

    /// Total bytes of the files on disk (index excluded).
    pub fn file_bytes(&self) -> u64 {
        let torch: u64 = self.torch.iter().map(|t| t.map.len).sum::<u64>()
            + self
                .dcp
                .iter()
                .flat_map(|d| d.files.values())
                .map(|m| m.len)
                .sum::<u64>();
        self.files.iter().map(|f| f.map.len).sum::<u64>() + torch
    }
}

/// The `config.json` of a model: in the folder given, or beside the file (or index) given.
pub fn config_beside(path: &Path) -> Option<PathBuf> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Some(dir.join("config.json")).filter(|p| p.is_file())
}

/// The names looked for, in order, when a folder is given.
pub const FOLDER_CANDIDATES: [&str; 4] = [
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
];

/// Open a checkpoint file, sharded index, or model folder with the default options.
pub fn open(path: &Path) -> Result<Checkpoint> {
    open_with(path, &OpenOptions::default())
}

/// Open a checkpoint file, sharded index, or model folder.
pub fn open_with(path: &Path, opts: &OpenOptions) -> Result<Checkpoint> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if meta.is_dir() && dcp::is_dcp(path) {
        return Ok(Checkpoint {
            path: path.to_path_buf(),
            format: Format::TorchDcp,
            index: None,
            files: Vec::new(),
            torch: Vec::new(),
            dcp: Some(Box::new(dcp::Dcp::open(path)?)),
        });
    }
    if meta.is_dir() {
        let file = resolve_folder(path)?;
        return open_with(&file, opts);
    }
    let torch = |format| -> Result<Checkpoint> {
        Ok(Checkpoint {
            path: path.to_path_buf(),
            format,
            index: None,
            files: Vec::new(),
            torch: vec![TorchFile::open(path, &opts.globals)?],
            dcp: None,
        })
    };
    match sniff(path)? {
        Sniffed::Safetensors => Ok(Checkpoint {
            path: path.to_path_buf(),
            format: Format::Safetensors,
            index: None,
            files: vec![SafetensorsFile::open(path)?],
            torch: Vec::new(),
            dcp: None,
        }),
        Sniffed::Json => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
            let index = sharded::parse_index(path, &text)?;
            let (format, files, torch) = match sharded::open_shards(path, &index, &opts.globals)? {
                sharded::Shards::Safetensors(f) => (Format::ShardedSafetensors, f, Vec::new()),
                sharded::Shards::Torch(t) => (Format::ShardedTorch, Vec::new(), t),
            };
            Ok(Checkpoint {
                path: path.to_path_buf(),
                format,
                index: Some(index),
                files,
                torch,
                dcp: None,
            })
        }
        Sniffed::TorchZip => torch(Format::TorchZip),
        Sniffed::TorchLegacy => torch(Format::TorchLegacy),
        Sniffed::Unknown if meta.len() == 0 => {
            Err(Error::format(path, "file is empty (0 bytes): not a checkpoint"))
        }
        Sniffed::Unknown => Err(Error::format(
            path,
            format!(
                "unknown content ({} bytes): not safetensors, a sharded index, or a torch checkpoint",
                meta.len()
            ),
        )),
    }
}

/// Pick the checkpoint file inside a model folder.
pub fn resolve_folder(dir: &Path) -> Result<PathBuf> {
    for name in FOLDER_CANDIDATES {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    // Otherwise exactly one index, or exactly one *.safetensors file.
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    let mut indexes = Vec::new();
    let mut singles = Vec::new();
    for entry in entries {
        let p = entry.map_err(|e| Error::io(dir, "list", e))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".safetensors.index.json") {
            indexes.push(p);
        } else if name.ends_with(".safetensors") {
            singles.push(p);
        }
    }
    for mut group in [indexes, singles] {
        match group.len() {
            0 => continue,
            1 => return Ok(group.swap_remove(0)),
            _ => {
                let mut names: Vec<String> = group
                    .iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .collect();
                names.sort();
                return Err(Error::format(
                    dir,
                    format!(
                        "folder holds several candidate checkpoints ({}): name the file to open",
                        names.join(", ")
                    ),
                ));
            }
        }
    }
    Err(Error::format(
        dir,
        format!(
            "folder has no checkpoint (looked for {} and *.safetensors)",
            FOLDER_CANDIDATES.join(", ")
        ),
    ))
}
