//! The torch writer's one pass ([`crate::output::pass::Pass`]): each record's CRC-32 and digest taken
//! from the bytes as they are written, the NaN/Inf count of the tensors the plan asks about taken
//! from the input ranges as they are copied, and the bytes that depend on those — each record's
//! data descriptor, `.data/serialization_id`, the central directory — made when the writer
//! reaches them. torch's zip layout puts each of them after what it depends on (the CRC-32 in a
//! descriptor after the data, general-purpose bit 3, as torch's own writer streams), so one pass
//! in file order suffices and the bytes are those a CRC pre-pass gave. The input records' own
//! CRC-32s are checked in the same pass (`zip_check`).

use crate::error::Result;
use crate::formats::tensor::TensorRef;
use crate::formats::torch::container::Record;
use crate::formats::torch::writer::{central_directory, serialization_id, Laid};
use crate::formats::torch::zip_check::{Checks, Piece};
use crate::mapped::Mapped;
use crate::nonfinite::NonFinite;
use crate::output::manifest::Hasher;
use crate::output::pass::Pass;
use crate::output::segment::{unplanned, Segment};
use rayon::prelude::*;
use std::collections::HashMap;

/// Bytes the CRC-32, the digest and the scan each take in turn (a fraction of a core's L2).
const PASS_BLOCK: usize = 256 << 10;

/// What a piece of the output is to the pass.
enum Role<'m> {
    /// A local header (or the stream's empty header): only the whole file's digest sees it.
    Header,
    /// Bytes of a record, copied from an input (its map, and where the piece starts in it) or
    /// in memory.
    Data {
        record: usize,
        input: Option<(&'m Mapped, u64)>,
    },
    /// A record's data descriptor.
    Descriptor(usize),
    /// The bytes of `.data/serialization_id`, the record given.
    Id(usize),
    /// The central directory and end records.
    Directory,
}

/// A record's running CRC-32 and digest.
struct Sum {
    crc: crc32fast::Hasher,
    digest: Hasher,
    /// Bytes seen so far.
    len: u64,
}

impl Sum {
    fn new() -> Self {
        Sum {
            crc: crc32fast::Hasher::new(),
            digest: Hasher::default(),
            len: 0,
        }
    }
}

/// What the pass found: each record's (CRC-32, digest), the serialization id it made, each
/// scanned tensor's (name, NaN, Inf) in the plan's order, and the whole file's digest if asked.
pub(super) struct Seen {
    pub sums: Vec<(u32, String)>,
    pub id: Vec<u8>,
    pub nonfinite: Vec<(String, u64, u64)>,
    pub file_digest: Option<String>,
}

/// The pass over a torch zip laid out as `laid`, its pieces `layout` (per record: local header,
/// bytes, descriptor; then the directory), the directory starting at `cd_start`.
pub(super) struct ZipPass<'m> {
    roles: Vec<Role<'m>>,
    laid: Vec<Laid>,
    /// Each record's name (without the archive folder) and length, for the serialization id.
    names: Vec<(String, u64)>,
    cd_start: u64,
    sums: Vec<Sum>,
    /// The last piece made (its index and bytes): a piece can span chunks.
    made: Option<(usize, Vec<u8>)>,
    id: Option<Vec<u8>>,
    scan: Scan<'m>,
    checks: Checks<'m>,
    file: Option<Hasher>,
}

impl<'m> ZipPass<'m> {
    pub(super) fn new(
        layout: &[Vec<Segment<'m>>],
        laid: Vec<Laid>,
        names: Vec<(String, u64)>,
        cd_start: u64,
        scan: &[TensorRef<'m>],
        inputs: &[(&'m Mapped, Vec<Record>)],
        file_digest: bool,
    ) -> Self {
        // Piece 0 is the stream's (empty) header, then every segment in order.
        let mut roles = vec![Role::Header];
        let mut lens = vec![0];
        for (r, segs) in layout.iter().enumerate() {
            let last = segs.len().saturating_sub(1);
            for (i, seg) in segs.iter().enumerate() {
                roles.push(match (r < laid.len(), i, seg) {
                    (false, _, _) => Role::Directory,
                    (true, 0, _) => Role::Header,
                    (true, i, _) if i == last => Role::Descriptor(r),
                    (true, _, Segment::Pass(_)) => Role::Id(r),
                    (true, _, Segment::File { map, start, .. }) => Role::Data {
                        record: r,
                        input: Some((*map, *start)),
                    },
                    (true, _, _) => Role::Data {
                        record: r,
                        input: None,
                    },
                });
                lens.push(seg.len());
            }
        }
        let scan = Scan::new(scan, &roles, &lens);
        let pieces: Vec<Piece<'m>> = roles
            .iter()
            .zip(&lens)
            .map(|(role, &len)| match role {
                Role::Data { record, input } => Piece {
                    record: Some(*record),
                    input: *input,
                    len,
                },
                _ => Piece {
                    record: None,
                    input: None,
                    len,
                },
            })
            .collect();
        let checks = Checks::new(inputs, &pieces);
        let mut pass = ZipPass {
            roles,
            sums: Vec::new(),
            laid,
            names,
            cd_start,
            made: None,
            id: None,
            scan,
            checks,
            file: None,
        };
        pass.file = file_digest.then(Hasher::default);
        pass.restart();
        pass
    }

    /// Record `r`'s CRC-32 over the bytes seen so far.
    fn crc(&self, r: usize) -> u32 {
        self.sums[r].crc.clone().finalize()
    }

    /// The bytes of piece `piece` that depend on the bytes before it, all seen by now.
    fn make(&mut self, piece: usize) -> Result<Vec<u8>> {
        Ok(match self.roles[piece] {
            Role::Descriptor(r) => {
                let crc = self.crc(r);
                self.laid[r].set_crc(crc);
                self.laid[r].descriptor.clone()
            }
            Role::Id(r) => {
                let before: Vec<(String, u64, u32)> = self.names[..r]
                    .iter()
                    .enumerate()
                    .map(|(i, (n, len))| (n.clone(), *len, self.crc(i)))
                    .collect();
                let id = serialization_id(&before).into_bytes();
                self.id = Some(id.clone());
                id
            }
            Role::Directory => {
                for r in 0..self.laid.len() {
                    let crc = self.crc(r);
                    self.laid[r].set_crc(crc);
                }
                central_directory(&self.laid, self.cd_start)
            }
            Role::Header | Role::Data { .. } => {
                return Err(unplanned(format!("piece {piece} is not made by the pass")))
            }
        })
    }

    /// Write bytes `from..` of piece `piece`, made by the pass, into `bytes`.
    fn fill(&mut self, piece: usize, from: u64, bytes: &mut [u8]) -> Result<()> {
        if self.made.as_ref().is_none_or(|(p, _)| *p != piece) {
            let made = self.make(piece)?;
            self.made = Some((piece, made));
        }
        let made = self.made.as_ref().map_or(&[][..], |(_, b)| b.as_slice());
        let src = usize::try_from(from)
            .ok()
            .and_then(|f| made.get(f..f.checked_add(bytes.len())?))
            .ok_or_else(|| {
                unplanned(format!(
                    "the pass made {} bytes where bytes {from}..+{} were laid out",
                    made.len(),
                    bytes.len()
                ))
            })?;
        bytes.copy_from_slice(src);
        Ok(())
    }

    /// What the pass found; tensors to scan whose bytes it did not see are read now.
    pub(super) fn finish(self) -> Result<Seen> {
        let id = self
            .id
            .ok_or_else(|| unplanned("the pass never reached .data/serialization_id".into()))?;
        let sums = &self.sums;
        self.checks.finish(|r| sums[r].crc.clone().finalize())?;
        Ok(Seen {
            sums: self
                .sums
                .into_iter()
                .map(|s| (s.crc.finalize(), s.digest.finish()))
                .collect(),
            id,
            nonfinite: self.scan.finish()?,
            file_digest: self.file.map(Hasher::finish),
        })
    }
}

impl Pass for ZipPass<'_> {
    fn see(&mut self, piece: usize, from: u64, bytes: &mut [u8]) -> Result<()> {
        match self.roles.get(piece) {
            Some(Role::Header) => {}
            Some(&Role::Data { record, input }) => {
                // In blocks that stay in the core's cache from the CRC to the digest to the scan.
                let mut at = from;
                for b in bytes.chunks(PASS_BLOCK) {
                    let s = &mut self.sums[record];
                    s.crc.update(b);
                    s.digest.update(b);
                    s.len += b.len() as u64;
                    if let Some((map, start)) = input {
                        self.scan.feed(piece, map, start + at, b);
                        let out = (&s.crc, s.len);
                        self.checks.feed(piece, (map, start + at, b), out);
                    }
                    at += b.len() as u64;
                }
            }
            Some(&Role::Id(r)) => {
                self.fill(piece, from, bytes)?;
                let s = &mut self.sums[r];
                s.crc.update(bytes);
                s.digest.update(bytes);
            }
            Some(Role::Descriptor(_) | Role::Directory) => self.fill(piece, from, bytes)?,
            None => {
                return Err(unplanned(format!(
                    "the writer showed piece {piece}, past the last"
                )))
            }
        }
        if let Some(f) = &mut self.file {
            f.update(bytes);
        }
        Ok(())
    }

    fn restart(&mut self) {
        self.sums = (0..self.laid.len()).map(|_| Sum::new()).collect();
        self.made = None;
        self.id = None;
        self.scan.restart();
        self.checks.restart();
        if self.file.is_some() {
            self.file = Some(Hasher::default());
        }
    }
}

/// A contiguous floating tensor counted as its input bytes go by: `seen` bytes from its start
/// are counted; a piece that skips ahead of them stops the count there (`broken`), and the rest
/// is read after the write.
struct Range<'m> {
    map: &'m Mapped,
    start: u64,
    len: u64,
    seen: u64,
    broken: bool,
    count: NonFinite,
}

/// The NaN/Inf count of the plan's `scan` tensors.
struct Scan<'m> {
    tensors: Vec<TensorRef<'m>>,
    /// Per tensor: counted in the pass (a contiguous floating tensor), or after it.
    ranges: Vec<Option<Range<'m>>>,
    /// Per piece: the ranges its input bytes overlap.
    by_piece: Vec<Vec<usize>>,
}

impl<'m> Scan<'m> {
    fn new(tensors: &[TensorRef<'m>], roles: &[Role<'m>], lens: &[u64]) -> Self {
        let ranges: Vec<Option<Range<'m>>> = tensors
            .iter()
            .map(|t| {
                let (start, len) = t.contiguous_range()?;
                Some(Range {
                    map: t.map,
                    start,
                    len,
                    seen: 0,
                    broken: false,
                    count: NonFinite::new(t.dtype)?,
                })
            })
            .collect();
        // Per input file: the ranges by start, with the largest end so far, so the ranges a
        // piece overlaps are found without walking them all.
        let mut by_map: HashMap<*const Mapped, (Vec<usize>, Vec<u64>)> = HashMap::new();
        for (i, r) in ranges.iter().enumerate() {
            if let Some(r) = r {
                by_map.entry(r.map).or_default().0.push(i);
            }
        }
        for (idx, ends) in by_map.values_mut() {
            idx.sort_by_key(|&i| ranges[i].as_ref().map_or(0, |r| r.start));
            let mut most = 0;
            *ends = idx
                .iter()
                .map(|&i| {
                    most = ranges[i]
                        .as_ref()
                        .map_or(most, |r| most.max(r.start + r.len));
                    most
                })
                .collect();
        }
        let by_piece = roles
            .iter()
            .zip(lens)
            .map(|(role, &len)| match role {
                Role::Data {
                    input: Some((map, start)),
                    ..
                } => by_map
                    .get(&(*map as *const Mapped))
                    .map(|(idx, ends)| overlapping(&ranges, idx, ends, *start, start + len))
                    .unwrap_or_default(),
                _ => Vec::new(),
            })
            .collect();
        Scan {
            tensors: tensors.to_vec(),
            ranges,
            by_piece,
        }
    }

    /// Count bytes `at..` of input `map` (piece `piece` of the output) where they continue a
    /// tensor's count.
    fn feed(&mut self, piece: usize, map: &Mapped, at: u64, bytes: &[u8]) {
        let end = at + bytes.len() as u64;
        for &i in &self.by_piece[piece] {
            let Some(r) = self.ranges[i].as_mut() else {
                continue;
            };
            let next = r.start + r.seen;
            if r.broken || !std::ptr::eq(r.map, map) || end <= next || r.seen == r.len {
                continue;
            }
            if at > next {
                r.broken = true;
                continue;
            }
            let upto = end.min(r.start + r.len);
            r.count
                .feed(&bytes[(next - at) as usize..(upto - at) as usize]);
            r.seen = upto - r.start;
        }
    }

    fn restart(&mut self) {
        for r in self.ranges.iter_mut().flatten() {
            r.seen = 0;
            r.broken = false;
            r.count.reset();
        }
    }

    /// Every tensor's (name, NaN, Inf): the bytes the pass did not count read now, in parallel.
    fn finish(self) -> Result<Vec<(String, u64, u64)>> {
        self.tensors
            .par_iter()
            .zip(self.ranges.into_par_iter())
            .map(|(t, r)| {
                let (nan, inf) = match r {
                    Some(mut r) => {
                        r.map
                            .stream(r.start + r.seen, r.len - r.seen, |b| r.count.feed(b))?;
                        (r.count.nan, r.count.inf)
                    }
                    None => t.nonfinite()?,
                };
                Ok((t.name.to_string(), nan, inf))
            })
            .collect()
    }
}

/// The ranges (indices `idx`, sorted by start, `ends` their running largest end) that overlap
/// `start..end`.
fn overlapping(
    ranges: &[Option<Range<'_>>],
    idx: &[usize],
    ends: &[u64],
    start: u64,
    end: u64,
) -> Vec<usize> {
    let starts_before = idx.partition_point(|&i| ranges[i].as_ref().is_some_and(|r| r.start < end));
    let mut out = Vec::new();
    for j in (0..starts_before).rev() {
        if ends[j] <= start {
            break;
        }
        if let Some(r) = &ranges[idx[j]] {
            if r.start + r.len > start {
                out.push(idx[j]);
            }
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn a_tensor_the_pass_sees_in_part_or_out_of_order_is_counted_once_each_byte() {
        // 16 f32: Inf at 2, NaN at 10 and 13.
        let mut v = [1.0f32; 16];
        (v[2], v[10], v[13]) = (f32::INFINITY, f32::NAN, f32::NAN);
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.bin");
        std::fs::write(&path, &bytes).unwrap();
        let map = Mapped::open(&path).unwrap();
        let t = TensorRef {
            name: "t",
            dtype: DType::F32,
            shape: &[16],
            map: &map,
            start: 0,
            strides: None,
        };
        let roles = [Role::Data {
            record: 0,
            input: Some((&map, 0)),
        }];
        let mut scan = Scan::new(&[t], &roles, &[64]);
        // Bytes 0..18 (an element cut in two), 18..24, 0..16 again (already counted), then 40..48
        // (past a gap: the rest is read after the write).
        for (a, b) in [(0, 18), (18, 24), (0, 16), (40, 48)] {
            scan.feed(0, &map, a as u64, &bytes[a..b]);
        }
        let before = map.bytes_read();
        assert_eq!(scan.finish().unwrap(), vec![("t".to_string(), 2, 1)]);
        assert_eq!(
            map.bytes_read() - before,
            64 - 24,
            "only the bytes not counted in the pass"
        );
    }
}
