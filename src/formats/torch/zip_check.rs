//! The input records' CRC-32s, checked in the torch writer's one pass: a storage record of the
//! input whose bytes the pass copies in full, in order, has its CRC-32 taken as they go by and
//! compared with the one its zip entry states. A corrupt input record (a flipped byte, or a local
//! header whose lengths move the data) is refused rather than written out with a fresh CRC-32.
//! Where an output record is one input record copied whole (the usual case), or begins with one
//! (a grown matrix), the output's own CRC-32 is that record's, taken when its bytes have gone
//! by: nothing is hashed twice. Records copied in part (rows cut off)
//! or out of order are not checked here.

use super::container::{check_crc_value, Record};
use crate::error::Result;
use crate::mapped::Mapped;

/// A piece of the output as the check sees it.
pub(super) struct Piece<'m> {
    /// The output record it is data of (None: a header, descriptor or directory).
    pub record: Option<usize>,
    /// The input range it copies from, where it does.
    pub input: Option<(&'m Mapped, u64)>,
    pub len: u64,
}

/// One input record and what the pass has seen of it.
struct Check<'m> {
    map: &'m Mapped,
    record: Record,
    /// Bytes from its start taken so far; a piece that skips ahead stops the check (`broken`).
    seen: u64,
    broken: bool,
    crc: crc32fast::Hasher,
    /// The output record that is this record copied whole: its CRC-32 is compared instead.
    whole_in: Option<usize>,
    /// The output record that starts with this record's bytes (a grown matrix): its CRC-32 when
    /// they have all gone by is this record's, taken then (`prefix_crc`) rather than hashed again.
    prefix_in: Option<usize>,
    prefix_crc: Option<u32>,
}

/// The input records the pass checks, and per output piece the ones its bytes fall in.
pub(super) struct Checks<'m> {
    checks: Vec<Check<'m>>,
    by_piece: Vec<Vec<usize>>,
}

impl<'m> Checks<'m> {
    /// `inputs`: each input file's storage records; `pieces`: the output's pieces in order, each
    /// (the output record it is data of, the input range it copies from, its length).
    pub(super) fn new(inputs: &[(&'m Mapped, Vec<Record>)], pieces: &[Piece<'m>]) -> Self {
        let mut checks: Vec<Check<'m>> = Vec::new();
        for (map, records) in inputs {
            checks.extend(records.iter().cloned().map(|record| Check {
                map,
                record,
                seen: 0,
                broken: false,
                crc: crc32fast::Hasher::new(),
                whole_in: None,
                prefix_in: None,
                prefix_crc: None,
            }));
        }
        let by_piece: Vec<Vec<usize>> = pieces
            .iter()
            .map(|p| match p.input {
                Some((map, start)) => overlapping(&checks, map, start, start + p.len),
                None => Vec::new(),
            })
            .collect();
        // An output record whose only data piece is exactly one input record.
        let mut pieces_of: std::collections::HashMap<usize, Vec<usize>> = Default::default();
        for (i, p) in pieces.iter().enumerate() {
            if let Some(r) = p.record {
                pieces_of.entry(r).or_default().push(i);
            }
        }
        for (out, of) in pieces_of {
            let Some((map, start)) = pieces[of[0]].input else {
                continue;
            };
            if let [c] = by_piece[of[0]][..] {
                let c = &mut checks[c];
                if !std::ptr::eq(c.map, map) || c.record.start != start {
                    continue;
                }
                if of.len() == 1 && c.record.len == pieces[of[0]].len {
                    c.whole_in = Some(out);
                } else {
                    c.prefix_in = Some(out);
                }
            }
        }
        Checks { checks, by_piece }
    }

    /// Take bytes `at..` of input `map` (piece `piece` of the output) where they continue a
    /// record's check; `out` is the output record's CRC-32 state and length with them.
    pub(super) fn feed(
        &mut self,
        piece: usize,
        (map, at, bytes): (&Mapped, u64, &[u8]),
        out: (&crc32fast::Hasher, u64),
    ) {
        let end = at + bytes.len() as u64;
        for &i in &self.by_piece[piece] {
            let c = &mut self.checks[i];
            let next = c.record.start + c.seen;
            if c.whole_in.is_some() || c.broken || !std::ptr::eq(c.map, map) || end <= next {
                continue;
            }
            if at > next || c.seen == c.record.len {
                c.broken = true;
                continue;
            }
            let upto = end.min(c.record.start + c.record.len);
            if c.prefix_in.is_none() {
                c.crc
                    .update(&bytes[(next - at) as usize..(upto - at) as usize]);
            }
            c.seen = upto - c.record.start;
            if c.prefix_in.is_some() && c.seen == c.record.len {
                // The output record so far is exactly this record's bytes, or the check is off.
                match out.1 == c.record.len && upto == end {
                    true => c.prefix_crc = Some(out.0.clone().finalize()),
                    false => c.broken = true,
                }
            }
        }
    }

    pub(super) fn restart(&mut self) {
        for c in &mut self.checks {
            c.seen = 0;
            c.broken = false;
            c.crc = crc32fast::Hasher::new();
            c.prefix_crc = None;
        }
    }

    /// Every record seen in full, in order, has the CRC-32 its entry states (`out_crc`: an output
    /// record's, for those copied whole); the first that does not is an error naming its file.
    pub(super) fn finish(self, out_crc: impl Fn(usize) -> u32) -> Result<()> {
        for c in self.checks {
            let got = match (c.whole_in, c.prefix_crc) {
                (Some(out), _) => out_crc(out),
                _ if c.broken || c.seen != c.record.len => continue,
                (None, Some(crc)) => crc,
                (None, None) if c.prefix_in.is_some() => continue,
                (None, None) => c.crc.finalize(),
            };
            check_crc_value(&c.map.path, &c.record, got)?;
        }
        Ok(())
    }
}

/// The checks whose record overlaps `start..end` of `map`.
fn overlapping(checks: &[Check<'_>], map: &Mapped, start: u64, end: u64) -> Vec<usize> {
    checks
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            std::ptr::eq(c.map, map)
                && c.record.start < end
                && c.record.start + c.record.len > start
        })
        .map(|(i, _)| i)
        .collect()
}
