//! Writing torch checkpoints that `torch.load(weights_only=True)` (and `mmap=True`) reads: a
//! protocol-2 pickle using BINUNICODE for every string, and a zip whose records are STORED and
//! 64-byte aligned, with the `version` and `byteorder` records torch expects. Each storage is
//! written once, however many views share it; untouched storages are copied from the input map.

mod emit;
mod layout;

pub use emit::{emit_pickle, Emitted};
pub use layout::{
    archive_prefix, central_directory, lay_out, serialization_id, Laid, ALIGNMENT,
    SERIALIZATION_ID_LEN,
};

use super::container::Record;
use super::value::{Id, Node, Pickle};
use super::TorchFile;
use crate::error::{Error, Result};
use crate::formats::tensor::TensorRef;
use crate::mapped::Mapped;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// Where a storage's bytes come from.
pub enum StoragePayload<'a> {
    /// A byte range of an input file (copied without passing through user space where possible).
    Copy {
        map: &'a Mapped,
        start: u64,
        len: u64,
    },
    /// Computed by the job.
    Bytes(Vec<u8>),
    /// Ranges of input files and computed bytes, in order: a matrix whose old rows are copied
    /// from the input like an untouched storage and whose new rows are the only bytes held in
    /// memory (so writing a grown tensor never holds the whole tensor).
    Pieces(Vec<Piece<'a>>),
}

/// A piece of a [`StoragePayload::Pieces`].
pub enum Piece<'a> {
    File {
        map: &'a Mapped,
        start: u64,
        len: u64,
    },
    Bytes(Cow<'a, [u8]>),
}

impl<'a> Piece<'a> {
    /// `len` bytes of tensor `t` from byte `from` of its elements: a range of its file, copied
    /// as the output is written (a tensor stored with strides is gathered into memory). A range
    /// past the tensor's end is an error naming its file and name.
    pub fn try_of_tensor(t: &TensorRef<'a>, from: u64, len: u64) -> Result<Self> {
        if from.checked_add(len).is_none_or(|end| end > t.nbytes()) {
            return Err(outside(t, from, len, t.nbytes()));
        }
        match t.contiguous_range() {
            Some((start, _)) => Ok(Piece::File {
                map: t.map,
                start: start + from,
                len,
            }),
            None => Ok(Piece::Bytes(Cow::Owned(
                part_of(t, &t.try_bytes()?, from, len)?.to_vec(),
            ))),
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Piece::File { len, .. } => *len,
            Piece::Bytes(b) => b.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> StoragePayload<'a> {
    pub fn len(&self) -> u64 {
        match self {
            StoragePayload::Copy { len, .. } => *len,
            StoragePayload::Bytes(b) => b.len() as u64,
            StoragePayload::Pieces(p) => p.iter().map(Piece::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as pieces, in order.
    pub fn pieces(&self) -> Vec<Piece<'_>> {
        match self {
            StoragePayload::Copy { map, start, len } => vec![Piece::File {
                map,
                start: *start,
                len: *len,
            }],
            StoragePayload::Bytes(b) => vec![Piece::Bytes(Cow::Borrowed(b))],
            StoragePayload::Pieces(p) => p
                .iter()
                .map(|p| match p {
                    Piece::File { map, start, len } => Piece::File {
                        map,
                        start: *start,
                        len: *len,
                    },
                    Piece::Bytes(b) => Piece::Bytes(Cow::Borrowed(b)),
                })
                .collect(),
        }
    }

    /// A matrix stored contiguously in `t` (an input tensor), resized: its first `keep` bytes
    /// copied from the input, then `tail`. With `parts` = (segments, old bytes per segment, new
    /// bytes per segment), each of the matrix's equal segments is grown at its end and `tail`
    /// holds the segments' new bytes in order. A tensor stored with strides is gathered first.
    /// Bytes kept past the tensor's end, or a `tail` of another length than the segments need,
    /// are an error naming `t`'s file and name.
    pub fn try_resized(
        t: &TensorRef<'a>,
        keep: u64,
        parts: Option<(u64, u64, u64)>,
        tail: Cow<'a, [u8]>,
    ) -> Result<Self> {
        let layout = Resized::new(t, keep, parts, tail.len() as u64)?;
        if t.contiguous_range().is_none() {
            // Gathered once, not once per segment.
            return layout
                .gathered(t, &t.try_bytes()?, &tail)
                .map(StoragePayload::Bytes);
        }
        let part = |from: u64, len: u64| -> Result<Cow<'a, [u8]>> {
            Ok(match &tail {
                Cow::Borrowed(b) => Cow::Borrowed(part_of(t, b, from, len)?),
                Cow::Owned(v) => Cow::Owned(part_of(t, v, from, len)?.to_vec()),
            })
        };
        let mut pieces = Vec::new();
        match parts {
            Some((n, old, new)) => {
                for c in 0..n {
                    pieces.push(Piece::try_of_tensor(t, c * old, old)?);
                    pieces.push(Piece::Bytes(part(c * new, new)?));
                }
            }
            None => {
                pieces.push(Piece::try_of_tensor(t, 0, keep)?);
                pieces.push(Piece::Bytes(part(0, tail.len() as u64)?));
            }
        }
        Ok(StoragePayload::Pieces(
            pieces.into_iter().filter(|p| !p.is_empty()).collect(),
        ))
    }
}

/// How a resized matrix is laid out, checked against the input tensor and the new bytes.
struct Resized {
    keep: u64,
    parts: Option<(u64, u64, u64)>,
}

impl Resized {
    fn new(
        t: &TensorRef<'_>,
        keep: u64,
        parts: Option<(u64, u64, u64)>,
        tail: u64,
    ) -> Result<Self> {
        let (kept, grown) = match parts {
            Some((n, old, new)) => (n.checked_mul(old), n.checked_mul(new)),
            None => (Some(keep), Some(tail)),
        };
        if kept.is_none_or(|k| k > t.nbytes()) {
            return Err(outside(t, 0, kept.unwrap_or(u64::MAX), t.nbytes()));
        }
        if grown != Some(tail) {
            return Err(Error::tensor(
                &t.map.path,
                t.name,
                format!("its resize lays out {parts:?} (segments, old bytes, new bytes) but the new rows hold {tail} bytes"),
            ));
        }
        Ok(Resized { keep, parts })
    }

    /// The resized matrix in memory, from the input tensor's gathered bytes `all`.
    fn gathered(&self, t: &TensorRef<'_>, all: &[u8], tail: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        match self.parts {
            Some((n, old, new)) => {
                for c in 0..n {
                    out.extend_from_slice(part_of(t, all, c * old, old)?);
                    out.extend_from_slice(part_of(t, tail, c * new, new)?);
                }
            }
            None => {
                out.extend_from_slice(part_of(t, all, 0, self.keep)?);
                out.extend_from_slice(tail);
            }
        }
        Ok(out)
    }
}

/// `len` bytes from `from` of `bytes` (input tensor `t`'s gathered bytes, or its new rows).
fn part_of<'b>(t: &TensorRef<'_>, bytes: &'b [u8], from: u64, len: u64) -> Result<&'b [u8]> {
    usize::try_from(from)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(f, n)| bytes.get(f..f.checked_add(n)?))
        .ok_or_else(|| outside(t, from, len, bytes.len() as u64))
}

/// Bytes of input tensor `t` (or of its new rows) were laid out past their end.
fn outside(t: &TensorRef<'_>, from: u64, len: u64, holds: u64) -> Error {
    Error::tensor(
        &t.map.path,
        t.name,
        format!("bytes {from}..+{len} of it were laid out, but it holds {holds}"),
    )
}

/// A torch checkpoint to write: the tree, the bytes of each storage key, and the small records
/// (`version`, `.data/serialization_id`, …) to carry over.
pub struct TorchLayout<'a> {
    pub pickle: Pickle,
    pub storages: Vec<(String, StoragePayload<'a>)>,
    /// Records other than data.pkl and data/*, by name without the archive prefix.
    pub records: Vec<(String, Vec<u8>)>,
    /// Also hash the whole file (every tensor and record is always hashed), as
    /// the safetensors writer's `file_sha256` does: off by default.
    pub file_sha256: bool,
    /// Input tensors whose NaN and Inf the writer counts in its one pass (the bytes it copies
    /// are counted as it copies them; the others are read once after the write): empty unless
    /// a job asks (`torch::write::write_torch_scanning`).
    pub scan: Vec<TensorRef<'a>>,
    /// Each input zip's storage records: the pass checks the CRC-32 of each one it copies in full
    /// (`formats::torch::zip_check`).
    pub checked: Vec<(&'a Mapped, Vec<Record>)>,
}

impl<'a> TorchLayout<'a> {
    /// Everything in `t` unchanged (a legacy file becomes a zip file). A record past the end of
    /// `t`'s file is an error naming the file and the record.
    pub fn try_identity(t: &'a TorchFile) -> Result<Self> {
        let records = match &t.container {
            super::Container::Zip(z) => z
                .records
                .iter()
                .filter(|r| r.name != "data.pkl" && !r.name.starts_with("data/"))
                .map(|r| {
                    let bytes = t.map.slice(r.start, r.len).ok_or_else(|| {
                        Error::format(
                            &t.map.path,
                            format!("record '{}': {}", r.name, t.map.past_end(r.start, r.len)),
                        )
                    })?;
                    // Carried as they are: a corrupt one is refused, not given a fresh CRC-32.
                    super::container::check_crc(&t.map.path, r, bytes)?;
                    Ok((r.name.clone(), bytes.to_vec()))
                })
                .collect::<Result<_>>()?,
            super::Container::Legacy => Vec::new(),
        };
        Ok(Self::copying(t, records))
    }

    /// `t`'s tree and every storage copied from its file, with `records` carried over.
    fn copying(t: &'a TorchFile, records: Vec<(String, Vec<u8>)>) -> Self {
        let storages = t
            .storages
            .values()
            .map(|s| {
                (
                    s.key.clone(),
                    StoragePayload::Copy {
                        map: &t.map,
                        start: s.start,
                        len: s.len,
                    },
                )
            })
            .collect();
        let checked = match &t.container {
            super::Container::Zip(z) => {
                let data = z.records.iter().filter(|r| r.name.starts_with("data/"));
                vec![(&t.map, data.cloned().collect())]
            }
            super::Container::Legacy => Vec::new(),
        };
        TorchLayout {
            pickle: t.pickle.clone(),
            storages,
            records,
            file_sha256: false,
            scan: Vec::new(),
            checked,
        }
    }

    /// Give the tensor at `path` a new storage holding `payload`: `rows` rows, contiguous, same
    /// dtype and width. Every tensor that viewed the old storage the same way (a tied weight)
    /// follows it; their paths are returned. Calling it again for a tied path changes nothing.
    /// The plan must have been made from `source` (node ids are shared).
    pub fn replace_rows(
        &mut self,
        source: &TorchFile,
        path: &str,
        rows: u64,
        payload: StoragePayload<'a>,
    ) -> std::result::Result<Vec<String>, String> {
        let orig = source
            .tensors
            .iter()
            .find(|x| x.path == path)
            .and_then(|x| source.pickle.tensor_of(x.node))
            .ok_or_else(|| format!("no tensor '{path}'"))?
            .clone();
        let axis = crate::vocab::row_axis(path, &orig.shape);
        let cols: u64 = orig.shape.iter().skip(axis + 1).product();
        let need = orig.storage.dtype.bytes_for(rows * cols);
        if need != Some(payload.len()) {
            return Err(format!(
                "'{path}': {rows} rows need {need:?} bytes, got {}",
                payload.len()
            ));
        }
        let ids: Vec<Id> = (0..source.pickle.nodes.len() as Id)
            .filter(|&i| matches!(source.pickle.node(i), Node::Tensor(n) if n.same_view(&orig)))
            .collect();
        let tied: Vec<String> = source
            .tensors
            .iter()
            .filter(|x| x.path != path)
            .filter(|x| {
                source
                    .pickle
                    .tensor_of(x.node)
                    .is_some_and(|n| n.same_view(&orig))
            })
            .map(|x| x.path.clone())
            .collect();
        let already = ids.iter().any(
            |&i| matches!(self.pickle.node(i), Node::Tensor(n) if n.storage.key != orig.storage.key),
        );
        if already {
            return Ok(tied);
        }
        let key = source
            .storages
            .keys()
            .chain(self.storages.iter().map(|(k, _)| k))
            .filter_map(|k| k.parse::<u64>().ok())
            .max()
            .map_or(0, |m| m + 1)
            .to_string();
        self.storages.push((key.clone(), payload));
        for i in ids {
            if let Node::Tensor(n) = self.pickle.node_mut(i) {
                n.view_new_storage_at(&key, rows, axis);
            }
        }
        Ok(tied)
    }
}

/// Check the plan is writable: every tensor's storage is in the plan with the size it claims.
pub fn check_plan(dest: &Path, plan: &TorchLayout<'_>) -> Result<()> {
    let sizes: HashMap<&str, u64> = plan
        .storages
        .iter()
        .map(|(k, s)| (k.as_str(), s.len()))
        .collect();
    if sizes.len() != plan.storages.len() {
        return Err(Error::format(
            dest,
            "a storage key appears twice in the plan",
        ));
    }
    for n in &plan.pickle.nodes {
        if let Node::Tensor(t) = n {
            let need = t.storage.dtype.bytes_for(t.storage.numel);
            match sizes.get(t.storage.key.as_str()) {
                None => {
                    return Err(Error::format(
                        dest,
                        format!("storage '{}' is used but not planned", t.storage.key),
                    ))
                }
                Some(&have) if Some(have) != need => {
                    return Err(Error::format(
                        dest,
                        format!(
                        "storage '{}' is planned with {have} bytes but its tensors need {need:?}",
                        t.storage.key
                    ),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}
