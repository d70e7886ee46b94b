//! A read-only memory map of an input file: the one place inputs are mapped.

use crate::error::{Error, Result};
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// An input file, mapped. Bytes are read lazily by the OS as they are touched.
pub struct Mapped {
    pub path: PathBuf,
    pub file: File,
    pub len: u64,
    mmap: Option<Mmap>,
}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapped")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish()
    }
}

impl Mapped {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(path, "read metadata of", e))?
            .len();
        let mmap = if len == 0 {
            None
        } else {
            // SAFETY: inputs are never written by this program while mapped; a concurrent writer
            // from another program is outside what any reader can defend against (documented).
            Some(unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, "memory-map", e))?)
        };
        Ok(Mapped {
            path: path.to_path_buf(),
            file,
            len,
            mmap,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.mmap.as_deref().unwrap_or(&[])
    }

    /// Read `len` bytes at `start` with positioned reads in bounded chunks, handing each to `f`.
    /// Unlike the map, this does not leave the file's pages in this process's resident set, so
    /// streaming a large tensor costs one chunk of memory.
    pub fn stream(&self, start: u64, len: u64, mut f: impl FnMut(&[u8])) -> Result<()> {
        self.stream_while(start, len, &mut Vec::new(), |c| {
            f(c);
            true
        })
    }

    /// [`Mapped::stream`] into the caller's buffer, stopping early when `f` returns false.
    pub fn stream_while(
        &self,
        start: u64,
        len: u64,
        buf: &mut Vec<u8>,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        use std::os::unix::fs::FileExt;
        const CHUNK: u64 = 8 << 20;
        let mut at = start;
        let end = start + len;
        while at < end {
            let n = CHUNK.min(end - at) as usize;
            buf.resize(n, 0);
            self.file
                .read_exact_at(buf, at)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            if !f(buf) {
                break;
            }
            at += n as u64;
        }
        Ok(())
    }

    /// `len` bytes at `start` read into a new buffer (positioned reads, see [`Mapped::stream`]),
    /// with room reserved for `extra` more bytes.
    pub fn read_vec(&self, start: u64, len: u64, extra: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut v = Vec::with_capacity(len as usize + extra);
        v.resize(len as usize, 0);
        self.file
            .read_exact_at(&mut v, start)
            .map_err(|e| Error::io(&self.path, "read", e))?;
        Ok(v)
    }

    /// `len` bytes at `start`, or None when out of range.
    pub fn slice(&self, start: u64, len: u64) -> Option<&[u8]> {
        let s = usize::try_from(start).ok()?;
        let e = usize::try_from(start.checked_add(len)?).ok()?;
        self.bytes().get(s..e)
    }
}
