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

    /// `len` bytes at `start`, or None when out of range.
    pub fn slice(&self, start: u64, len: u64) -> Option<&[u8]> {
        let s = usize::try_from(start).ok()?;
        let e = usize::try_from(start.checked_add(len)?).ok()?;
        self.bytes().get(s..e)
    }
}
