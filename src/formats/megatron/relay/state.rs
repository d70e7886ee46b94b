//! One state's re-lay (`param`, `exp_avg` or `exp_avg_sq`): what it reads of the old buckets
//! (the vocabulary matrices' elements, the gaps, nothing else) and each re-laid bucket's new
//! chunk list (vocabulary rows and gaps new, every other parameter's chunks moved unread or,
//! where a data-parallel cut moved, gathered when written).

use super::super::buckets::{self, Bucket, NewVocab, Param, Segment};
use super::super::Megatron;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::write::{gather, ChunkOut, Span, TensorEdit};
use crate::formats::dcp::{Chunk, ItemKind, METADATA};

/// A bucket's 1-D state item (float32): its chunks.
fn state_chunks<'m>(m: &'m Megatron, fqn: &str) -> Result<&'m [Chunk]> {
    let it = m
        .dcp
        .item(fqn)
        .ok_or_else(|| Error::format(m.dir.join(METADATA), format!("no '{fqn}'")))?;
    match &it.kind {
        ItemKind::Tensor {
            dtype: DType::F32,
            chunks,
            ..
        } => Ok(chunks),
        _ => Err(Error::unsupported(
            m.dir.join(METADATA),
            format!("'{fqn}' is not float32: not Adam's fp32 state"),
        )),
    }
}

/// Where elements `start..start + len` of 1-D item `fqn` are: the pieces of its chunks, in
/// order, each chunk's CRC-32 checked.
fn spans(m: &Megatron, fqn: &str, (start, len): (u64, u64)) -> Result<Vec<Span>> {
    let off = |c: &Chunk| c.offsets.first().copied().unwrap_or(0);
    let mut chunks: Vec<&Chunk> = state_chunks(m, fqn)?
        .iter()
        .filter(|c| off(c) < start + len && off(c) + c.elements() > start)
        .collect();
    chunks.sort_by_key(|c| off(c));
    let mut out = Vec::with_capacity(chunks.len());
    let mut at = start;
    for c in chunks {
        let (c0, end) = (off(c), (off(c) + c.elements()).min(start + len));
        if c0 > at {
            break;
        }
        m.dcp.verify_chunk_crc(fqn, c)?;
        out.push(Span {
            chunk: c.clone(),
            start: at - c0,
            len: end - at,
        });
        at = end;
    }
    if at != start + len {
        return Err(Error::format(
            m.dir.join(METADATA),
            format!(
                "'{fqn}': its chunks do not cover elements {start}..{}",
                start + len
            ),
        ));
    }
    Ok(out)
}

/// Elements `start..start + len` of 1-D float32 item `fqn`, read.
fn read_range(m: &Megatron, fqn: &str, range: (u64, u64)) -> Result<Vec<u8>> {
    gather(&m.dcp, &spans(m, fqn, range)?, 4)
}

/// One state's old elements of a vocabulary matrix in one bucket: its group, the matrix's index
/// in the new vocabulary list, the bucket's item, and the bytes.
pub(super) struct OldVocab {
    pub(super) group: u64,
    pub(super) vocab: usize,
    item: String,
    bytes: Vec<u8>,
}

/// State `s`'s old elements of every vocabulary matrix, in each bucket that holds one.
pub(super) fn vocab_segments(
    m: &Megatron,
    (bs, params): (&[Bucket], &[Param]),
    vocab: &[NewVocab<'_>],
    s: &str,
) -> Result<Vec<OldVocab>> {
    let mut out = Vec::new();
    for (i, v) in vocab.iter().enumerate() {
        for b in bs {
            let Some(seg) = segment_of(b, params, v.fqn) else {
                continue;
            };
            let item = format!("{}.{s}", b.prefix);
            let bytes = read_range(m, &item, (seg.start, seg.len))?;
            out.push(OldVocab {
                group: b.group,
                vocab: i,
                item,
                bytes,
            });
        }
    }
    Ok(out)
}

/// The main copy (`param` state) of each vocabulary shard must be the weight's rows of that
/// TP rank: bit for bit for a float32 weight, rounded to its type for a bf16/fp16 one (Megatron
/// copies the fp32 main params into the model's weights after each step); and one bucket of
/// each TP rank must hold it (two with tied embeddings over pipeline stages: the last stage's
/// output layer is its copy). The proof that group `stage x TP + N` holds TP rank N's rows.
/// `old`: the vocabulary matrices' `param` elements in each bucket holding one.
pub(super) fn prove_main_params(
    m: &Megatron,
    old: &[OldVocab],
    vocab: &[NewVocab<'_>],
) -> Result<()> {
    for (i, v) in vocab.iter().enumerate() {
        let it = m
            .dcp
            .item(v.fqn)
            .ok_or_else(|| Error::format(&m.dir, format!("no '{}'", v.fqn)))?;
        let w = m.dcp.tensor_bytes(it)?;
        let dtype = match &it.kind {
            ItemKind::Tensor { dtype, .. } => *dtype,
            ItemKind::Bytes { .. } => DType::F32,
        };
        let per = dtype.bytes_for(v.old_rows / m.tp * v.cols).unwrap_or(0) as usize;
        let mut held = 0;
        for o in old.iter().filter(|o| o.vocab == i) {
            let g = (o.group % m.tp.max(1)) as usize;
            let weight = w.get(g * per..(g + 1) * per);
            if !weight.is_some_and(|w| buckets::rounds_to(&o.bytes, w, dtype)) {
                let bad = |dt, b: &[u8]| {
                    let (nan, inf) = crate::nonfinite::NonFinite::count(dt, b);
                    nan + inf
                };
                let (wb, pb) = (bad(dtype, weight.unwrap_or(&[])), bad(DType::F32, &o.bytes));
                if wb != pb {
                    return Err(Error::unsupported(m.dir.join(METADATA), format!("'{}': TP rank {g}'s '{}' holds {wb} NaN or Inf values where its fp32 main params hold {pb}: the weights and the optimizer state disagree, so which rows the optimizer state holds cannot be proven; give --optimizer drop", o.item, v.fqn)));
                }
                return Err(Error::unsupported(m.dir.join(METADATA), format!("'{}': its '{}' chunk is not that weight's rows of TP rank {g} ({dtype}, the main params rounded to it): which rows the optimizer state holds cannot be proven; give --optimizer drop", o.item, v.fqn)));
            }
            held += 1;
        }
        // Tied over pipeline stages: the last stage's output layer is a copy of the embedding.
        let copies = if m.tied_pipelined() { 2 } else { 1 };
        if held != m.tp * copies {
            return Err(Error::unsupported(m.dir.join(METADATA), format!("'{}' is in {held} of the optimizer's buckets, not {copies} per tensor-parallel rank ({}): which rows the optimizer state holds cannot be proven; give --optimizer drop", v.fqn, m.tp)));
        }
    }
    Ok(())
}

/// The segment of bucket `b` holding parameter `fqn` (not layered).
fn segment_of(b: &Bucket, params: &[Param], fqn: &str) -> Option<Segment> {
    b.segments.iter().copied().find(|s| {
        s.param
            .and_then(|i| params.get(i))
            .is_some_and(|p| p.fqn == fqn && p.layer.is_none())
    })
}

/// What one state's re-lay reads: the buckets' layouts, the vocabulary matrices' old
/// elements of that state.
pub(super) struct Ctx<'a> {
    pub(super) m: &'a Megatron,
    pub(super) bs: &'a [Bucket],
    pub(super) old: &'a [OldVocab],
    pub(super) params: &'a [Param],
    pub(super) vocab: &'a [NewVocab<'a>],
    pub(super) state: &'a str,
}

impl Ctx<'_> {
    /// Bucket `b`'s state re-laid as `n` says: one chunk per parameter and per gap, cut where
    /// each data-parallel shard ends (as Megatron saves it). A parameter's old chunk that is
    /// the same piece at its new place moves there unread.
    pub(super) fn new_state(
        &self,
        b: &Bucket,
        (segs, shard): (&[Segment], Option<u64>),
        unpadded: u64,
    ) -> Result<TensorEdit> {
        let g = b.group;
        let mut chunks = Vec::with_capacity(segs.len());
        for (i, s) in segs.iter().enumerate() {
            let bytes = match s.param {
                Some(j) => match self.vocab.iter().position(|v| self.params[j].fqn == v.fqn) {
                    Some(v) => self.vocab_rows(v, g),
                    None => {
                        chunks.extend(self.moved(g, j, s, shard)?);
                        continue;
                    }
                },
                None => {
                    let next = segs.get(i + 1).and_then(|n| n.param);
                    let old = self
                        .old_gap(g, next)?
                        .filter(|o| o.len() as u64 == s.len * 4);
                    old.unwrap_or_else(|| vec![0; s.len as usize * 4])
                }
            };
            for (at, len) in buckets::split(std::slice::from_ref(s), shard) {
                let from = (at - s.start) as usize * 4;
                chunks.push(ChunkOut::New {
                    offsets: vec![at],
                    sizes: vec![len],
                    bytes: bytes
                        .get(from..from + len as usize * 4)
                        .unwrap_or(&[])
                        .to_vec(),
                });
            }
        }
        Ok(TensorEdit {
            fqn: format!("{}.{}", b.prefix, self.state),
            shape: vec![unpadded],
            chunks,
        })
    }

    /// Group `g`'s old bucket holding parameter `j` and its segment there.
    fn old_place(&self, g: u64, j: usize) -> Option<(&Bucket, Segment)> {
        self.bs.iter().filter(|b| b.group == g).find_map(|b| {
            let s = b.segments.iter().find(|s| s.param == Some(j))?;
            Some((b, *s))
        })
    }

    /// Parameter `j`'s state at its new segment `s` of group `g` (cut at `shard` ends): each
    /// piece an old chunk moved (the same elements at its old place), or gathered from the old
    /// chunks where a data-parallel cut moved.
    fn moved(&self, g: u64, j: usize, s: &Segment, shard: Option<u64>) -> Result<Vec<ChunkOut>> {
        let path = self.m.dir.join(METADATA);
        let (b, old) = self.old_place(g, j).ok_or_else(|| {
            Error::format(
                &path,
                format!("group {g}: parameter {j} is in none of its buckets"),
            )
        })?;
        if old.len != s.len {
            return Err(Error::format(
                &path,
                format!(
                    "group {g}: parameter {j} has {} elements in '{}', not {}",
                    old.len, b.prefix, s.len
                ),
            ));
        }
        let fqn = format!("{}.{}", b.prefix, self.state);
        let chunks = state_chunks(self.m, &fqn)?;
        let mut out = Vec::new();
        for (at, len) in buckets::split(std::slice::from_ref(s), shard) {
            let from = old.start + (at - s.start);
            let same = chunks
                .iter()
                .find(|c| c.offsets == [from] && c.sizes == [len]);
            out.push(match same {
                Some(c) => ChunkOut::Moved {
                    offsets: vec![at],
                    from: c.clone(),
                },
                None => ChunkOut::Gathered {
                    offsets: vec![at],
                    sizes: vec![len],
                    from: spans(self.m, &fqn, (from, len))?,
                },
            });
        }
        Ok(out)
    }

    /// Group `g`'s old gap before parameter `next`, in the bucket that held it (None: no gap
    /// there).
    fn old_gap(&self, g: u64, next: Option<usize>) -> Result<Option<Vec<u8>>> {
        let Some(b) = self
            .bs
            .iter()
            .find(|b| b.group == g && b.segments.iter().any(|s| s.param == next))
        else {
            return Ok(None);
        };
        let i = b.segments.iter().position(|s| s.param == next);
        let gap = i
            .and_then(|i| b.segments.get(i.checked_sub(1)?))
            .filter(|s| s.param.is_none());
        match gap {
            Some(gap) => {
                let fqn = format!("{}.{}", b.prefix, self.state);
                read_range(self.m, &fqn, (gap.start, gap.len)).map(Some)
            }
            None => Ok(None),
        }
    }

    /// Group `group`'s new shard of vocabulary matrix `i` (its TP rank's rows): global rows
    /// below the old table from the group of the same stage that held them, new rows the new
    /// weights (`param`) or zero (the moments).
    fn vocab_rows(&self, i: usize, group: u64) -> Vec<u8> {
        let (v, tp) = (&self.vocab[i], self.m.tp);
        let row = v.cols as usize * 4;
        let (per_new, per_old) = (v.rows / tp, v.old_rows / tp);
        let (first, rank) = (group / tp * tp, group % tp);
        let old = |g: u64| {
            self.old
                .iter()
                .find(|o| o.group == g && o.vocab == i)
                .map_or(&[][..], |o| &o.bytes[..])
        };
        let mut out = Vec::with_capacity(per_new as usize * row);
        for r in rank * per_new..(rank + 1) * per_new {
            if r < v.old_rows {
                let (g, local) = (first + r / per_old, (r % per_old) as usize);
                out.extend_from_slice(old(g).get(local * row..(local + 1) * row).unwrap_or(&[]));
            } else if self.state == "param" {
                let at = (r - v.old_rows) as usize * row;
                out.extend_from_slice(v.new_rows.get(at..at + row).unwrap_or(&[]));
            } else {
                out.extend(std::iter::repeat_n(0u8, row));
            }
        }
        out
    }
}
