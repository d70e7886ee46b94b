//! One tensor's resize: its layout checked before anything is computed, its new rows computed
//! (on the CPU or the GPU, per segment for multi-codebook tables), and the grown tensor handed
//! to the writers without holding its old rows. Used by extend-embeddings and, for the model
//! part of a training checkpoint, sanitize-checkpoint.

use super::device::Device;
use super::init::{self, Init, Matrix};
use crate::error::{Error, Result};
use crate::formats::torch::writer::StoragePayload;
use crate::formats::TensorRef;
use crate::output::later::Later;
use crate::rowmap::RowMap;
use crate::vocab::Role;
use std::path::Path;

/// Mean L2 norm of the old rows and of the new rows.
pub(crate) struct RowNorms {
    pub old: f64,
    pub new: f64,
}

/// A tensor at its new row count: the first `keep` bytes of the input tensor (its old rows, or
/// the rows left after shrinking), then `tail` (the new rows, encoded; possibly still being
/// computed).
#[derive(Clone, Copy)]
pub(crate) struct Grown<'l> {
    pub keep: u64,
    pub tail: &'l Later,
    /// A matrix of equal segments (`--segments`), each grown at its end: (segments, old bytes
    /// per segment, new bytes per segment); the tail holds the segments' new rows in order.
    pub parts: Option<(u64, u64, u64)>,
}

impl<'l> Grown<'l> {
    pub fn len(&self) -> u64 {
        self.keep + self.tail.len()
    }

    /// The new storage for a torch writer: the old rows copied from `t`'s file as it is
    /// written, then the new rows (the only bytes in memory).
    pub fn payload<'t>(self, t: &TensorRef<'t>) -> Result<StoragePayload<'t>>
    where
        'l: 't,
    {
        let tail: &'l [u8] = self.tail.wait()?;
        StoragePayload::try_resized(t, self.keep, self.parts, std::borrow::Cow::Borrowed(tail))
    }
}

/// One tensor's resize, checked and laid out before anything is computed: how many of its bytes
/// are kept and how many new ones follow. An append map (today's resize) keeps the old rows in
/// place and computes only the new ones; any other map keeps nothing and its tail is the whole
/// gathered tensor (memory bounded by the tensor changed).
pub(crate) struct Resize<'c> {
    t: TensorRef<'c>,
    role: Role,
    /// New id → old row or init, per segment (a multi-codebook table maps each segment alike).
    map: RowMap,
    cols: usize,
    pub keep: u64,
    pub tail_len: u64,
}

impl<'c> Resize<'c> {
    /// The tensor's name.
    pub fn name(&self) -> &'c str {
        self.t.name
    }

    /// `t` at `new_rows` rows: refused for dtypes that cannot be initialised.
    pub fn new(t: TensorRef<'c>, role: Role, old_rows: u64, new_rows: u64) -> Result<Self> {
        Self::laid_out(t, role, RowMap::append(old_rows, new_rows))
    }

    /// `t` rearranged by `map` (its rows must be the map's old rows): an append map gives
    /// exactly [`Resize::new`]'s layout; any other keeps no bytes in place and its tail is the
    /// whole new tensor, gathered by [`Resize::compute`]. The init's statistics are over all
    /// the old rows (each segment's own), whichever rows the map keeps.
    // The transplant (issue 46) and trim (issue 47) planners are its callers; until they land,
    // only the tests are.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn mapped(t: TensorRef<'c>, role: Role, map: &RowMap) -> Result<Self> {
        if t.shape.first() != Some(&map.old_rows()) {
            return Err(Error::tensor(
                &t.map.path,
                t.name,
                format!(
                    "has shape {:?} but the row map is for {} old rows",
                    t.shape,
                    map.old_rows()
                ),
            ));
        }
        Self::laid_out(t, role, map.clone())
    }

    fn laid_out(t: TensorRef<'c>, role: Role, map: RowMap) -> Result<Self> {
        if !t.dtype.is_convertible_float() {
            return Err(Error::tensor(
                &t.map.path,
                t.name,
                format!(
                    "dtype {} cannot be initialised (F16, BF16, F32, F64 only)",
                    t.dtype
                ),
            ));
        }
        mapped(&t)?;
        let cols = if t.shape.len() == 2 {
            t.shape[1] as usize
        } else {
            1
        };
        let esize = t.dtype.bits() / 8;
        let row = cols as u64 * esize;
        let (old_rows, new_rows) = (map.old_rows(), map.new_rows());
        // The new rows are computed in f64, then encoded: both are in memory at once; a gathered
        // tensor is in memory whole.
        let k = map.init_rows();
        let gathered = if map.is_append() {
            Some(0)
        } else {
            new_rows.checked_mul(row)
        };
        let need = k
            .checked_mul(cols as u64)
            .and_then(|n| n.checked_mul(8 + esize))
            .zip(gathered)
            .and_then(|(n, g)| n.checked_add(g));
        refuse_past_memory(&t.map.path, t.name, k, cols as u64, need)?;
        let (keep, tail_len) = if map.is_append() {
            (old_rows.min(new_rows) * row, k * row)
        } else {
            (0, new_rows * row)
        };
        Ok(Resize {
            t,
            role,
            map,
            cols,
            keep,
            tail_len,
        })
    }

    /// Split into `n` equal segments (a multi-codebook table: codebook c at rows [c·S, (c+1)·S)),
    /// each grown at its end; the statistics are each segment's own. A map other than an append
    /// is segmented when it is made ([`RowMap::segmented`]).
    pub fn segmented(mut self, n: u64) -> Result<Self> {
        if n <= 1 {
            return Ok(self);
        }
        let (old_rows, new_rows) = (self.map.old_rows(), self.map.new_rows());
        let map = RowMap::append(old_rows / n, new_rows / n).segmented(n);
        match map {
            Some(map)
                if self.map.is_append()
                    && self.map.segments() == 1
                    && old_rows.is_multiple_of(n)
                    && new_rows.is_multiple_of(n)
                    && new_rows >= old_rows =>
            {
                self.map = map;
                Ok(self)
            }
            _ => Err(Error::tensor(
                &self.t.map.path,
                self.t.name,
                format!(
                    "{old_rows} rows → {new_rows} rows cannot be {n} equal segments each grown at its end: both must be multiples of {n}, and not fewer"
                ),
            )),
        }
    }

    /// The tensor's row map.
    pub fn map(&self) -> &RowMap {
        &self.map
    }

    /// The tensor's dtype.
    pub fn dtype(&self) -> crate::dtype::DType {
        self.t.dtype
    }

    /// The whole new tensor, from [`Resize::compute`]'s bytes (`tail`): the kept bytes, then the
    /// tail (for a writer that lays the tensor out itself, as ZeRO's does).
    pub fn whole(&self, tail: &[u8]) -> Result<Vec<u8>> {
        if self.keep == 0 {
            return Ok(tail.to_vec());
        }
        let old = self.t.try_bytes()?;
        let keep = old.get(..self.keep as usize).ok_or_else(|| {
            Error::tensor(
                &self.t.map.path,
                self.t.name,
                "shorter than the rows it keeps",
            )
        })?;
        Ok([keep, tail].concat())
    }

    /// (segments, old bytes per segment, new bytes per segment) when segmented.
    pub fn parts(&self) -> Option<(u64, u64, u64)> {
        (self.map.segments() > 1 && self.map.is_append()).then(|| {
            let n = self.map.segments();
            (n, self.keep / n, self.tail_len / n)
        })
    }

    /// The new rows, encoded (and, for matrices, the row norms). The old rows are read through
    /// the map and dropped from the resident set afterwards: only the new rows stay in memory.
    /// Segmented: each segment's new rows from that segment's rows, in segment order. A map
    /// other than an append: the whole new tensor, its copied rows bit for bit and its init rows
    /// in new-id order (norms only where there are init rows).
    pub fn compute(&self, init: &Init, device: &Device) -> Result<(Vec<u8>, Option<RowNorms>)> {
        let t = &self.t;
        let append = self.map.is_append();
        if append && self.map.init_rows() == 0 {
            return Ok((Vec::new(), None));
        }
        let old = match mapped(t)? {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => t.try_bytes()?,
        };
        let (rows, old_norm) = if self.map.init_rows() > 0 {
            self.init_rows(&old, init, device)?
        } else {
            (Vec::new(), 0.0)
        };
        if matches!(init, Init::Donor { .. }) && rows.iter().any(|v| !v.is_finite()) {
            return Err(Error::tensor(
                &t.map.path,
                t.name,
                "a new row from the donor's combinations is not finite: the rows of shared tokens hold NaN or inf; fix the checkpoint (sanitize-checkpoint) or use another --init",
            ));
        }
        let mut tail = init::encode(t.dtype, &rows);
        if !append {
            let row = self.cols * (t.dtype.bits() / 8) as usize;
            tail = self
                .map
                .gather(&old, row, &tail)
                .map_err(|e| Error::tensor(&t.map.path, t.name, e))?;
        }
        drop(old);
        if let Some((start, len)) = t.contiguous_range() {
            t.map.release(start, len);
        }
        if rows.is_empty() {
            return Ok((tail, None));
        }
        let k = rows.len() / self.cols;
        let new_norm = rows
            .chunks(self.cols)
            .map(|r| r.iter().map(|v| v * v).sum::<f64>().sqrt())
            .sum::<f64>()
            / k as f64;
        Ok((
            tail,
            (t.shape.len() == 2).then_some(RowNorms {
                old: old_norm,
                new: new_norm,
            }),
        ))
    }

    /// The init's rows (f64, in new-id order, segment by segment) and the old rows' mean norm:
    /// each segment's statistics over all of that segment's old rows.
    fn init_rows(&self, old: &[u8], init: &Init, device: &Device) -> Result<(Vec<f64>, f64)> {
        let t = &self.t;
        let n = self.map.segments() as usize;
        let (seg_old, seg_k) = (
            self.map.segment_rows().0 as usize,
            self.map.segment_init_rows() as usize,
        );
        let seg_bytes = old.len() / n;
        let mut rows = Vec::with_capacity(seg_k * n * self.cols);
        let mut old_norm = 0f64;
        for c in 0..n {
            let m = Matrix {
                dtype: t.dtype,
                rows: seg_old,
                cols: self.cols,
                bytes: &old[c * seg_bytes..(c + 1) * seg_bytes],
            };
            let stats = device.stats(&m)?;
            old_norm += stats.mean_row_norm / n as f64;
            // A head bias gets the mean of the old bias, whatever the method; each segment of
            // a random method draws from its own stream.
            let how = match init {
                // A donor init's bias follows the head's combinations.
                Init::Donor { .. } => init.for_role(self.role),
                _ if self.role == Role::HeadBias => Init::Mean,
                Init::Hewitt { epsilon, seed } if n > 1 => Init::Hewitt {
                    epsilon: *epsilon,
                    seed: seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                },
                Init::Normal { std, seed } if n > 1 => Init::Normal {
                    std: *std,
                    seed: seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                },
                other => other.clone(),
            };
            let start = rows.len();
            rows.extend(if self.role == Role::HeadBias {
                init::new_rows(&m, &stats, &how, seg_k)
            } else {
                device.new_rows(&m, &stats, &how, seg_k)?
            });
            if rows[start..].iter().any(|v| !v.is_finite()) {
                return Err(self.nonfinite_rows(&m, &how, (c, n)));
            }
        }
        Ok((rows, old_norm))
    }
}

impl Resize<'_> {
    /// New rows made from old rows holding NaN or Inf (`--init mean` spreads one such value into
    /// every new row): refused, naming where, so no output carries them silently.
    fn nonfinite_rows(&self, m: &Matrix, how: &Init, (c, n): (usize, usize)) -> Error {
        let segment = if n > 1 {
            format!(" of segment {c}")
        } else {
            String::new()
        };
        let from = match init::first_nonfinite(m) {
            Some((r, col)) => format!("old row {r}{segment} holds NaN or Inf (column {col}), and --init {} carries it into them", how.name()),
            None => format!("--init {} made them so", how.name()),
        };
        Error::tensor(&self.t.map.path, self.t.name, format!("its new rows would hold NaN or Inf: {from}; give --init zeros or --init normal, or repair the old rows first"))
    }
}

/// A contiguous tensor's bytes, straight from the map (no copy); None for a strided view.
fn mapped<'t>(t: &TensorRef<'t>) -> Result<Option<&'t [u8]>> {
    t.contiguous_range()
        .map(|(start, len)| {
            t.map
                .slice(start, len)
                .ok_or_else(|| Error::tensor(&t.map.path, t.name, "lies past the end of the file"))
        })
        .transpose()
}

/// New rows made in memory (`need` bytes, None past 2^64) are refused, naming the tensor, where
/// this machine has less: `k` new rows of `cols` columns of `tensor` in `path`.
pub(crate) fn refuse_past_memory(
    path: &Path,
    tensor: &str,
    k: u64,
    cols: u64,
    need: Option<u64>,
) -> Result<()> {
    let have = physical_memory();
    if need.is_some_and(|n| have.is_none_or(|h| n <= h)) {
        return Ok(());
    }
    Err(Error::tensor(
        path,
        tensor,
        format!(
            "{k} new rows of {cols} columns need {} bytes of memory to compute, more than this machine has ({} bytes): check the rows asked for (--new-rows, --vocab-rows) or the tokenizer or config that sets them",
            need.map_or("more than 2^64".into(), |n| n.to_string()),
            have.unwrap_or(u64::MAX)
        ),
    ))
}

/// Bytes of physical memory, where the OS says.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf takes and returns plain integers.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        (pages > 0 && size > 0).then(|| (pages as u64).saturating_mul(size as u64))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// One tensor's resize, its new rows computed on the CPU: see [`NewRows::payload`].
pub(crate) fn resized_rows(
    t: TensorRef<'_>,
    role: Role,
    old_rows: u64,
    new_rows: u64,
    init: &Init,
    segments: u64,
) -> Result<NewRows> {
    let r = Resize::new(t, role, old_rows, new_rows)?.segmented(segments)?;
    Ok(NewRows {
        tail: r.compute(init, &Device::cpu(None))?.0,
        keep: r.keep,
        parts: r.parts(),
    })
}

/// A resize's new rows, for any tensor of the same shape and dtype (a model's weight and its
/// copies, e.g. an EMA: each keeps its own old rows and takes these new ones).
pub(crate) struct NewRows {
    keep: u64,
    parts: Option<(u64, u64, u64)>,
    tail: Vec<u8>,
}

impl NewRows {
    /// `t`'s new storage: its own old rows, copied from its file as it is written, then the new
    /// rows.
    pub fn payload<'t>(&self, t: &TensorRef<'t>) -> Result<StoragePayload<'t>> {
        StoragePayload::try_resized(
            t,
            self.keep,
            self.parts,
            std::borrow::Cow::Owned(self.tail.clone()),
        )
    }
}

/// Each resized tensor's [`Grown`] by name, its new rows in `tails` (one per resize, in order);
/// a tie stored apart (same bytes) gets its first name's new rows under every name. A tie stored
/// once (same storage) follows its first name in the torch plan and needs no entry.
pub(crate) fn grown_map<'a>(
    resizes: &[Resize<'_>],
    tails: &'a [Later],
    ties: &[crate::ties::Tie],
) -> std::collections::BTreeMap<String, Grown<'a>> {
    let mut map: std::collections::BTreeMap<String, Grown<'a>> = resizes
        .iter()
        .zip(tails)
        .map(|(r, tail)| {
            (
                r.name().to_string(),
                Grown {
                    keep: r.keep,
                    tail,
                    parts: r.parts(),
                },
            )
        })
        .collect();
    for t in ties.iter().filter(|t| t.how == crate::ties::How::SameBytes) {
        if let Some(g) = map.get(t.first()).copied() {
            for n in &t.names[1..] {
                map.insert(n.clone(), g);
            }
        }
    }
    map
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
