//! Bytes ⇄ tensors. [`open`] takes a file or a model folder and picks the format from the content
//! (magic bytes, JSON), never from the file extension.

pub mod json;
pub mod safetensors;
pub mod sharded;

use crate::error::{Error, Result};
use safetensors::{SafetensorsFile, TensorInfo};
use serde::Serialize;
use sharded::Index;
use std::io::Read;
use std::path::{Path, PathBuf};

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
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::ShardedSafetensors => "sharded safetensors",
        }
    }
}

/// An open checkpoint: one file, or a sharded set read as one.
#[derive(Debug)]
pub struct Checkpoint {
    /// The file that was opened: the safetensors file or the index.
    pub path: PathBuf,
    pub format: Format,
    /// The sharded index, when there is one.
    pub index: Option<Index>,
    /// One entry for a single file; the shards in order for a sharded set.
    pub files: Vec<SafetensorsFile>,
}

/// One tensor together with the file holding its bytes.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    pub file: &'a SafetensorsFile,
    pub info: &'a TensorInfo,
}

impl<'a> TensorRef<'a> {
    pub fn name(&self) -> &'a str {
        &self.info.name
    }
    /// The payload: a view into the memory map.
    pub fn bytes(&self) -> &'a [u8] {
        self.file.bytes(self.info)
    }
}

impl Checkpoint {
    /// Every tensor, shard by shard, each in data order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorRef<'_>> {
        self.files.iter().flat_map(|file| {
            file.header
                .tensors
                .iter()
                .map(move |info| TensorRef { file, info })
        })
    }

    /// Find a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.tensors().find(|t| t.name() == name)
    }

    /// Every file this checkpoint reads (index included): outputs must never be one of these.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.path];
        v.extend(self.files.iter().map(|f| f.path.as_path()));
        v.dedup();
        v
    }

    /// Total bytes of the files on disk (index excluded).
    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }
}

/// The names looked for, in order, when a folder is given.
pub const FOLDER_CANDIDATES: [&str; 4] = [
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
];

/// Open a checkpoint file, sharded index, or model folder.
pub fn open(path: &Path) -> Result<Checkpoint> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if meta.is_dir() {
        let file = resolve_folder(path)?;
        return open(&file);
    }
    match sniff(path)? {
        Sniffed::Safetensors => Ok(Checkpoint {
            path: path.to_path_buf(),
            format: Format::Safetensors,
            index: None,
            files: vec![SafetensorsFile::open(path)?],
        }),
        Sniffed::Json => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
            let index = sharded::parse_index(path, &text)?;
            let files = sharded::open_shards(path, &index)?;
            Ok(Checkpoint {
                path: path.to_path_buf(),
                format: Format::ShardedSafetensors,
                index: Some(index),
                files,
            })
        }
        Sniffed::TorchZip => Err(Error::format(
            path,
            "a torch zip checkpoint (torch.save, torch ≥ 1.6): torch files are not supported in this version; convert it to safetensors first",
        )),
        Sniffed::TorchLegacy => Err(Error::format(
            path,
            "a legacy torch pickle checkpoint (torch < 1.6): torch files are not supported in this version; convert it to safetensors first",
        )),
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
    for group in [indexes, singles] {
        match group.len() {
            0 => continue,
            1 => return Ok(group.into_iter().next().unwrap_or_default()),
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
