//! What an edit of a torch Distributed Checkpoint is: each edited tensor's new shape and chunk
//! list (input chunks kept or moved, new or gathered elements), each pickled object's new bytes;
//! [`super::write`] writes them.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Chunk, Dcp, Item, ItemKind};

/// One chunk of an edited tensor: an input chunk kept where it is or moved, new bytes, or new
/// elements gathered from input chunks when written.
#[derive(Debug, Clone)]
pub enum ChunkOut {
    /// The input chunk with this index in the item's chunk list.
    Keep(usize),
    New {
        offsets: Vec<u64>,
        sizes: Vec<u64>,
        /// Row-major elements.
        bytes: Vec<u8>,
    },
    /// An input chunk's record (of this item or another of the same dtype) at new `offsets`,
    /// unread: its bytes stay where they are, in a data file carried over byte for byte.
    Moved { offsets: Vec<u64>, from: Chunk },
    /// 1-D elements gathered from input chunks (`from`, in order), read when the chunk is
    /// written: memory holds one chunk, not the tensor.
    Gathered {
        offsets: Vec<u64>,
        sizes: Vec<u64>,
        from: Vec<Span>,
    },
}

/// `len` elements of an input chunk from its element `start` (row-major).
#[derive(Debug, Clone)]
pub struct Span {
    pub chunk: Chunk,
    pub start: u64,
    pub len: u64,
}

impl Span {
    /// The span's bytes in `d` (`es`: bytes per element).
    pub fn bytes<'d>(&self, d: &'d Dcp, es: u64) -> Result<&'d [u8]> {
        let map = d.map(&self.chunk.stored)?;
        if self.start + self.len > self.chunk.elements() {
            return Err(Error::format(
                &map.path,
                format!(
                    "elements {}..+{} of a chunk of {}",
                    self.start,
                    self.len,
                    self.chunk.elements()
                ),
            ));
        }
        map.slice(self.chunk.data_start + self.start * es, self.len * es)
            .ok_or_else(|| {
                Error::format(&map.path, "chunk lies past the end of the file: truncated")
            })
    }
}

/// The elements `spans` name, in order (`es`: bytes per element).
pub fn gather(d: &Dcp, spans: &[Span], es: u64) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(spans.iter().map(|s| s.len * es).sum::<u64>() as usize);
    for s in spans {
        out.extend_from_slice(s.bytes(d, es)?);
        // Copied: its pages leave this process's resident set.
        d.map(&s.chunk.stored)?
            .release(s.chunk.data_start + s.start * es, s.len * es);
    }
    Ok(out)
}

/// A tensor of the input with a new global shape and chunk list.
#[derive(Debug, Clone)]
pub struct TensorEdit {
    pub fqn: String,
    pub shape: Vec<u64>,
    pub chunks: Vec<ChunkOut>,
}

/// A pickled object item (a DCP byte item: a `torch.save` archive) given new bytes.
#[derive(Debug, Clone)]
pub struct ObjectEdit {
    pub fqn: String,
    /// The new `torch.save` archive ([`super::write::object_archive`]).
    pub bytes: Vec<u8>,
}

impl TensorEdit {
    /// The new global shape and chunks of `item` resized to `rows` (the row-surgery interface's
    /// append/cut edit, written the DCP way): chunks wholly below `rows` kept where they are, a
    /// chunk across it cut into a new chunk, and (growing) one new chunk of rows `old..rows`
    /// whose bytes `new_rows(old)` makes. Only row-split (FSDP) tensors are resized.
    pub fn resized(
        d: &Dcp,
        item: &Item,
        rows: u64,
        new_rows: impl Fn(u64) -> Result<Vec<u8>>,
    ) -> Result<TensorEdit> {
        let (shape, chunks, dtype) = row_split(d, item, "resized")?;
        let old = shape[0];
        let row_bytes = dtype.bytes_for(shape[1..].iter().product()).unwrap_or(0);
        let mut new_shape = shape.clone();
        new_shape[0] = rows;
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let (start, n) = (c.offsets[0], c.sizes[0]);
            if start + n <= rows {
                out.push(ChunkOut::Keep(i));
            } else if start < rows {
                let k = rows - start;
                let map = d.map(&c.stored)?;
                let bytes = map
                    .slice(c.data_start, k * row_bytes)
                    .ok_or_else(|| {
                        Error::tensor(&map.path, &item.fqn, "chunk past the end of the file")
                    })?
                    .to_vec();
                let mut sizes = c.sizes.clone();
                sizes[0] = k;
                out.push(ChunkOut::New {
                    offsets: c.offsets.clone(),
                    sizes,
                    bytes,
                });
            }
        }
        if rows > old {
            let mut offsets = vec![0; shape.len()];
            offsets[0] = old;
            let mut sizes = shape.clone();
            sizes[0] = rows - old;
            out.push(ChunkOut::New {
                offsets,
                sizes,
                bytes: new_rows(old)?,
            });
        }
        Ok(TensorEdit {
            fqn: item.fqn.clone(),
            shape: new_shape,
            chunks: out,
        })
    }
}

impl TensorEdit {
    /// `item` gathered by a row map (a vocabulary trimmed or transplanted): `bytes`, the whole
    /// new tensor (`new_rows` rows, row-major), cut into new chunks at the input's row
    /// boundaries scaled to the new row count (each rank of the save keeps about its share; DCP
    /// reshards on load). Only row-split (FSDP) tensors are gathered.
    pub fn gathered(d: &Dcp, item: &Item, new_rows: u64, bytes: Vec<u8>) -> Result<TensorEdit> {
        let (shape, chunks, dtype) = row_split(d, item, "gathered")?;
        let old = shape[0].max(1);
        let row_bytes = dtype.bytes_for(shape[1..].iter().product()).unwrap_or(0);
        if Some(bytes.len() as u64) != new_rows.checked_mul(row_bytes) {
            return Err(Error::tensor(
                &d.dir,
                &item.fqn,
                format!(
                    "{} new bytes for {new_rows} rows of {row_bytes} bytes",
                    bytes.len()
                ),
            ));
        }
        let mut starts: Vec<u64> = chunks
            .iter()
            .map(|c| c.offsets[0] * new_rows / old)
            .chain([0, new_rows])
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let mut new_shape = shape.clone();
        new_shape[0] = new_rows;
        let mut out = Vec::new();
        for w in starts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mut offsets = vec![0; shape.len()];
            offsets[0] = a;
            let mut sizes = new_shape.clone();
            sizes[0] = b - a;
            let piece = &bytes[(a * row_bytes) as usize..(b * row_bytes) as usize];
            out.push(ChunkOut::New {
                offsets,
                sizes,
                bytes: piece.to_vec(),
            });
        }
        Ok(TensorEdit {
            fqn: item.fqn.clone(),
            shape: new_shape,
            chunks: out,
        })
    }
}

/// `item`'s shape, chunks and dtype, when it is a tensor split by rows only (FSDP); a tensor
/// whose chunks split columns (tensor parallel) is refused: only row-split vocabulary matrices
/// are `what` (resized, gathered).
fn row_split<'i>(
    d: &Dcp,
    item: &'i Item,
    what: &str,
) -> Result<(&'i Vec<u64>, &'i Vec<Chunk>, &'i DType)> {
    let ItemKind::Tensor {
        shape,
        chunks,
        dtype,
    } = &item.kind
    else {
        return Err(Error::format(
            &d.dir,
            format!("'{}' is not a tensor", item.fqn),
        ));
    };
    if chunks.iter().any(|c| c.sizes.get(1..) != shape.get(1..)) {
        return Err(Error::tensor(
            &d.dir,
            &item.fqn,
            format!("its chunks split columns (tensor parallel): only row-split (FSDP) vocabulary matrices are {what}"),
        ));
    }
    Ok((shape, chunks, dtype))
}
