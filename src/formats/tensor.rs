//! One tensor of an open checkpoint: its type, shape, and where its elements lie in a mapped
//! file; its bytes, digest and non-finite count.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mapped::Mapped;
use std::borrow::Cow;

/// One tensor: its element type, shape, and where its elements are in a mapped file.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// Its name: the safetensors key, or the dotted path in a torch tree.
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [u64],
    pub map: &'a Mapped,
    /// Byte offset of element 0 in the file.
    pub start: u64,
    /// Strides in elements; None when stored contiguously (safetensors).
    pub strides: Option<&'a [u64]>,
}

impl<'a> TensorRef<'a> {
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The tensor as the row surgery sees it: a logits bias `[1, V]` as `[V]` (same bytes; see
    /// [`crate::vocab::row_axis`]), any other tensor as it is.
    pub fn rows_view(self) -> TensorRef<'a> {
        let shape = crate::vocab::rows_shape(self.name, self.shape);
        let cut = self.shape.len() - shape.len();
        TensorRef {
            shape,
            strides: self.strides.map(|s| &s[cut.min(s.len())..]),
            ..self
        }
    }

    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes of the tensor laid out contiguously (validated when the file was opened).
    pub fn nbytes(&self) -> u64 {
        self.dtype.bytes_for(self.elements()).unwrap_or(0)
    }

    /// (start, len) in the file when the elements are stored contiguously in row-major order.
    pub fn contiguous_range(&self) -> Option<(u64, u64)> {
        let Some(strides) = self.strides else {
            return Some((self.start, self.nbytes()));
        };
        let mut expect = 1u64;
        for (&n, &st) in self.shape.iter().zip(strides).rev() {
            if n != 1 && st != expect {
                return None;
            }
            expect = expect.saturating_mul(n);
        }
        Some((self.start, self.nbytes()))
    }

    /// The elements in row-major order: a view into the map when contiguous, gathered otherwise.
    /// A range past the end of the file is an error naming the file and the tensor. (Openers
    /// validate every range, so only a `TensorRef` built by hand can fail here.)
    pub fn try_bytes(&self) -> Result<Cow<'a, [u8]>> {
        let (Some(strides), None) = (self.strides, self.contiguous_range()) else {
            return self
                .map
                .tensor_slice(self.name, self.start, self.nbytes())
                .map(Cow::Borrowed);
        };
        self.gather(strides).map(Cow::Owned)
    }

    /// The manifest digest of its elements in row-major order: streamed when stored contiguously.
    pub fn digest(&self) -> Result<String> {
        self.digest_with(|_| {})
    }

    /// [`TensorRef::digest`], telling `on_chunk` how many bytes each step hashed. A contiguous
    /// tensor is streamed through the map and its pages dropped from the resident set behind the
    /// hash, so hashing a checkpoint larger than memory holds a few chunks, not the files.
    pub fn digest_with(&self, mut on_chunk: impl FnMut(u64)) -> Result<String> {
        use crate::output::manifest::{digest_with, Hasher};
        match self.contiguous_range() {
            Some((start, len)) => {
                let mut h = Hasher::default();
                self.map.stream(start, len, |c| {
                    h.update(c);
                    on_chunk(c.len() as u64);
                })?;
                Ok(h.finish())
            }
            None => Ok(digest_with(&self.try_bytes()?, on_chunk)),
        }
    }

    /// (NaN, Inf) among its elements: streamed through the map when stored contiguously,
    /// gathered otherwise; (0, 0) for a type without them.
    pub fn nonfinite(&self) -> Result<(u64, u64)> {
        let Some(mut c) = crate::nonfinite::NonFinite::new(self.dtype) else {
            return Ok((0, 0));
        };
        match self.contiguous_range() {
            Some((start, len)) => self.map.stream(start, len, |b| c.feed(b))?,
            None => c.feed(&self.try_bytes()?),
        }
        Ok((c.nan, c.inf))
    }

    /// A strided view's elements copied out in row-major order, each element's place in the
    /// file computed with checked arithmetic.
    fn gather(&self, strides: &[u64]) -> Result<Vec<u8>> {
        let esize = self.dtype.bits() / 8;
        let mut out = Vec::with_capacity(self.nbytes() as usize);
        let mut index = vec![0u64; self.shape.len()];
        let all = self.map.bytes();
        self.map.note_read(self.nbytes());
        for _ in 0..self.elements() {
            let at = index
                .iter()
                .zip(strides)
                .try_fold(0u64, |acc, (i, s)| i.checked_mul(*s)?.checked_add(acc))
                .and_then(|off| off.checked_mul(esize)?.checked_add(self.start));
            let element = at
                .and_then(|at| all.get(usize::try_from(at).ok()?..)?.get(..esize as usize))
                .ok_or_else(|| {
                    let problem = match at {
                        Some(at) => self.map.past_end(at, esize),
                        None => format!("a strided element's offset overflows (index {index:?})"),
                    };
                    Error::tensor(&self.map.path, self.name, problem)
                })?;
            out.extend_from_slice(element);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(out)
    }
}
