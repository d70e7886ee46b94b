//! The row map of a vocabulary change: for each new id, the old row it takes or "a new row from
//! the init". Append (extend), cut (shrink), gather (trim) and gather + approximate (transplant)
//! are the same edit with different maps; this module owns the map, its checks and applying it
//! to a matrix's bytes.

use crate::error::{Error, Result};
use serde::Serialize;
use std::ops::Range;
use std::path::Path;

/// A stretch of new rows from one source, in new-id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "rows", rename_all = "snake_case")]
pub enum Run {
    /// New rows `to..to+len` are old rows `from..from+len`, bit for bit.
    Copy { from: u64, to: u64, len: u64 },
    /// New rows `to..to+len` are computed by the init (the next `len` of its rows, in order).
    Init { to: u64, len: u64 },
}

impl Run {
    fn len(&self) -> u64 {
        match self {
            Run::Copy { len, .. } | Run::Init { len, .. } => *len,
        }
    }
}

/// New id → old id or init, stored as runs (a 262k-row trim is a few thousand runs, an append
/// two). A matrix of `segments` equal segments (a multi-codebook table) maps each segment alike:
/// the runs describe one segment, `old_rows`/`new_rows` its sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowMap {
    /// One segment's old rows ([`RowMap::old_rows`] is all segments').
    old_rows: u64,
    /// One segment's new rows.
    new_rows: u64,
    segments: u64,
    /// One segment's runs, in new-id order, covering `0..new_rows`.
    runs: Vec<Run>,
}

impl RowMap {
    /// Today's resize: the first `min(old, new)` old rows in place, then `new - old` init rows
    /// (none when `new <= old`: a cut).
    pub fn append(old: u64, new: u64) -> RowMap {
        let mut b = Builder::default();
        b.copy(0, old.min(new));
        b.init(new.saturating_sub(old));
        b.finish(old, new)
    }

    /// New id `i` takes old row `ids[i]`, or a new row from the init where `None`. An old id at
    /// or past `old_rows` is refused naming `source` (the file the ids came from), the new id,
    /// the old id and the rows. An old row may be taken by several new ids.
    pub fn from_ids(ids: &[Option<u64>], old_rows: u64, source: &Path) -> Result<RowMap> {
        let mut b = Builder::default();
        for (new_id, id) in ids.iter().enumerate() {
            match *id {
                Some(from) if from >= old_rows => {
                    return Err(Error::format(
                        source,
                        format!(
                            "new id {new_id} takes old row {from}, but the old table has {old_rows} rows (0..{old_rows}): the map and the checkpoint disagree"
                        ),
                    ))
                }
                Some(from) => b.copy(from, 1),
                None => b.init(1),
            }
        }
        Ok(b.finish(old_rows, ids.len() as u64))
    }

    /// This map applied alike to each of `n` equal segments; None when `n` is 0, the map is
    /// already segmented, or the row counts overflow.
    pub fn segmented(mut self, n: u64) -> Option<RowMap> {
        if n == 0 || self.segments != 1 {
            return None;
        }
        self.old_rows.checked_mul(n)?;
        self.new_rows.checked_mul(n)?;
        self.segments = n;
        Some(self)
    }

    /// Rows of the old matrix (all segments).
    pub fn old_rows(&self) -> u64 {
        self.old_rows * self.segments
    }

    /// Rows of the new matrix (all segments).
    pub fn new_rows(&self) -> u64 {
        self.new_rows * self.segments
    }

    /// Equal segments mapped alike (1: the whole matrix).
    pub fn segments(&self) -> u64 {
        self.segments
    }

    /// One segment's (old rows, new rows).
    pub fn segment_rows(&self) -> (u64, u64) {
        (self.old_rows, self.new_rows)
    }

    /// One segment's runs, in new-id order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Today's case: the old rows in place (all or a prefix), then only init rows.
    pub fn is_append(&self) -> bool {
        self.runs == RowMap::append(self.old_rows, self.new_rows).runs
    }

    /// New rows the init computes (all segments), taken from its rows in new-id order.
    pub fn init_rows(&self) -> u64 {
        self.segment_init_rows() * self.segments
    }

    /// New rows the init computes in one segment.
    pub fn segment_init_rows(&self) -> u64 {
        self.runs
            .iter()
            .filter(|r| matches!(r, Run::Init { .. }))
            .map(Run::len)
            .sum()
    }

    /// Old rows no new id takes (all segments), as ascending ranges: the trained rows the edit
    /// removes, to which the `--allow-shrink` rule applies.
    pub fn dropped(&self) -> Vec<Range<u64>> {
        let mut taken: Vec<Range<u64>> = self
            .runs
            .iter()
            .filter_map(|r| match *r {
                Run::Copy { from, len, .. } => Some(from..from + len),
                Run::Init { .. } => None,
            })
            .collect();
        taken.sort_by_key(|r| r.start);
        let mut gaps = Vec::new();
        let mut next = 0;
        for r in taken {
            if r.start > next {
                gaps.push(next..r.start);
            }
            next = next.max(r.end);
        }
        if next < self.old_rows {
            gaps.push(next..self.old_rows);
        }
        (0..self.segments)
            .flat_map(|c| {
                let base = c * self.old_rows;
                gaps.iter().map(move |g| base + g.start..base + g.end)
            })
            .collect()
    }

    /// How many old rows [`RowMap::dropped`] lists.
    pub fn dropped_rows(&self) -> u64 {
        self.dropped().iter().map(|r| r.end - r.start).sum()
    }

    /// The new matrix's bytes, in order, as slices of `old` (the old matrix, `row_bytes` a row)
    /// and of `init` (the init's rows, in new-id order, all segments). Sizes that disagree with
    /// the map are described in the error (the caller names the tensor).
    pub fn pieces<'a>(
        &self,
        old: &'a [u8],
        row_bytes: usize,
        init: &'a [u8],
    ) -> std::result::Result<Vec<&'a [u8]>, String> {
        let rb = row_bytes as u64;
        let bytes = |rows: u64| rows.checked_mul(rb).and_then(|b| usize::try_from(b).ok());
        let (want_old, want_init) = (bytes(self.old_rows()), bytes(self.init_rows()));
        if want_old != Some(old.len()) || want_init != Some(init.len()) {
            return Err(format!(
                "a row map of {} old rows and {} init rows at {row_bytes} bytes a row was given {} old bytes and {} init bytes",
                self.old_rows(),
                self.init_rows(),
                old.len(),
                init.len()
            ));
        }
        // Every offset below lies inside the lengths checked above.
        let (seg, rb) = (self.old_rows as usize * row_bytes, row_bytes);
        let mut out = Vec::with_capacity(self.runs.len() * self.segments as usize);
        let mut at = 0;
        for c in 0..self.segments as usize {
            for r in &self.runs {
                out.push(match *r {
                    Run::Copy { from, len, .. } => {
                        let start = c * seg + from as usize * rb;
                        &old[start..start + len as usize * rb]
                    }
                    Run::Init { len, .. } => {
                        at += len as usize * rb;
                        &init[at - len as usize * rb..at]
                    }
                });
            }
        }
        Ok(out)
    }

    /// The new matrix's bytes: copied rows bit for bit, init rows taken in order from `init`
    /// (for optimizer moments, zeros: [`RowMap::gather_zeros`]). See [`RowMap::pieces`].
    pub fn gather(
        &self,
        old: &[u8],
        row_bytes: usize,
        init: &[u8],
    ) -> std::result::Result<Vec<u8>, String> {
        Ok(self.pieces(old, row_bytes, init)?.concat())
    }

    /// [`RowMap::gather`] with zero bytes for the init rows (optimizer moments of new ids).
    pub fn gather_zeros(
        &self,
        old: &[u8],
        row_bytes: usize,
    ) -> std::result::Result<Vec<u8>, String> {
        let n = self
            .init_rows()
            .checked_mul(row_bytes as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| format!("{} init rows overflow", self.init_rows()))?;
        self.gather(old, row_bytes, &vec![0; n])
    }
}

/// Runs built one stretch at a time, neighbours merged.
#[derive(Default)]
struct Builder {
    runs: Vec<Run>,
    to: u64,
}

impl Builder {
    fn copy(&mut self, from: u64, len: u64) {
        if len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(Run::Copy {
                from: f, len: l, ..
            }) if *f + *l == from => *l += len,
            _ => self.runs.push(Run::Copy {
                from,
                to: self.to,
                len,
            }),
        }
        self.to += len;
    }

    fn init(&mut self, len: u64) {
        if len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(Run::Init { len: l, .. }) => *l += len,
            _ => self.runs.push(Run::Init { to: self.to, len }),
        }
        self.to += len;
    }

    fn finish(self, old_rows: u64, new_rows: u64) -> RowMap {
        RowMap {
            old_rows,
            new_rows,
            segments: 1,
            runs: self.runs,
        }
    }
}

#[cfg(test)]
mod tests;
