//! A read-only memory map of an input file: the one place inputs are mapped.

use crate::error::{Error, Result};
use memmap2::{Mmap, UncheckedAdvice};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// An input file, mapped. Bytes are read lazily by the OS as they are touched.
pub struct Mapped {
    pub path: PathBuf,
    pub file: File,
    pub len: u64,
    mmap: Option<Mmap>,
    /// Bytes handed out by [`Mapped::slice`] (and so [`Mapped::stream`]), [`Mapped::read_at`]
    /// and [`Mapped::read_vec`], or noted by a copy ([`Mapped::note_read`]): how tests pin the
    /// number of times a writer reads its inputs ([`Mapped::bytes_read`]).
    read: AtomicU64,
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
            read: AtomicU64::new(0),
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.mmap.as_deref().unwrap_or(&[])
    }

    /// Hand `len` bytes at `start` to `f` in bounded chunks, straight from the map (no copy).
    /// Each chunk's pages leave this process's resident set once `f` is done with it, so
    /// streaming a large tensor costs one chunk of memory.
    pub fn stream(&self, start: u64, len: u64, mut f: impl FnMut(&[u8])) -> Result<()> {
        self.stream_while(start, len, |c| {
            f(c);
            true
        })
    }

    /// [`Mapped::stream`], stopping early when `f` returns false.
    pub fn stream_while(
        &self,
        start: u64,
        len: u64,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        const CHUNK: u64 = 8 << 20;
        const AHEAD: u64 = 4;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                Error::format(
                    &self.path,
                    format!(
                        "bytes {start}..+{len} lie past the end of the file ({} bytes)",
                        self.len
                    ),
                )
            })?;
        let mut at = start;
        // Ask for the next chunks while this one is worked on: the disk reads ahead of the
        // work instead of each page fault waiting for it (a cold 6 GiB scan: ~1.5x faster).
        self.will_need(at, (AHEAD * CHUNK).min(end - at));
        while at < end {
            let n = CHUNK.min(end - at);
            let ahead = at + AHEAD * CHUNK;
            if ahead < end {
                self.will_need(ahead, CHUNK.min(end - ahead));
            }
            let keep_going = self.slice(at, n).is_some_and(&mut f);
            self.release(at, n);
            if !keep_going {
                break;
            }
            at += n;
        }
        Ok(())
    }

    /// Start reading `len` bytes at `start` into the page cache, not waiting for them. A hint:
    /// failures are ignored.
    fn will_need(&self, start: u64, len: u64) {
        let (Some(map), Ok(start), Ok(len)) =
            (&self.mmap, usize::try_from(start), usize::try_from(len))
        else {
            return;
        };
        let _ = map.advise_range(memmap2::Advice::WillNeed, start, len);
    }

    /// Drop `len` bytes at `start` from this process's resident set (they stay in the page
    /// cache and are mapped again if touched). A hint: failures are ignored.
    pub fn release(&self, start: u64, len: u64) {
        let (Some(map), Ok(start), Ok(len)) =
            (&self.mmap, usize::try_from(start), usize::try_from(len))
        else {
            return;
        };
        if start.checked_add(len).is_some_and(|e| e <= map.len()) {
            // SAFETY: the map is a read-only shared mapping of a file this program never writes.
            // After MADV_DONTNEED, touching these pages maps them again from the file's (same)
            // contents, so slices borrowed from the map stay valid and unchanged.
            let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, len) };
        }
    }

    /// Tell the OS reads will be scattered: touching a page reads that page, not the readahead
    /// window after it (a hint: failures are ignored).
    pub fn expect_random_reads(&self) {
        if let Some(map) = &self.mmap {
            let _ = map.advise(memmap2::Advice::Random);
        }
    }

    /// `len` bytes at `start` read into a new buffer with a positioned read (the file's pages do
    /// not stay in this process's resident set), with room reserved for `extra` more bytes.
    pub fn read_vec(&self, start: u64, len: u64, extra: usize) -> Result<Vec<u8>> {
        self.note_read(len);
        let mut v = Vec::with_capacity(len as usize + extra);
        v.resize(len as usize, 0);
        self.file
            .read_exact_at(&mut v, start)
            .map_err(|e| Error::io(&self.path, "read", e))?;
        Ok(v)
    }

    /// `len` bytes at `start` of tensor `tensor`'s data: an error naming the file and the tensor
    /// when they lie past the end of the file (never an empty slice).
    pub fn tensor_slice(&self, tensor: &str, start: u64, len: u64) -> Result<&[u8]> {
        self.slice(start, len)
            .ok_or_else(|| Error::tensor(&self.path, tensor, self.past_end(start, len)))
    }

    /// The problem with `len` bytes at `start` that lie past the end of the file.
    pub(crate) fn past_end(&self, start: u64, len: u64) -> String {
        format!(
            "its bytes {start}..+{len} lie past the end of the file ({} bytes): the file is truncated or the range is wrong",
            self.len
        )
    }

    /// `len` bytes at `start`, or None when out of range.
    pub fn slice(&self, start: u64, len: u64) -> Option<&[u8]> {
        let s = usize::try_from(start).ok()?;
        let e = usize::try_from(start.checked_add(len)?).ok()?;
        let b = self.bytes().get(s..e)?;
        self.note_read(len);
        Some(b)
    }

    /// Fill `buf` with the bytes at `start`, by a positioned read (from the page cache, without
    /// mapping the pages).
    pub fn read_at(&self, buf: &mut [u8], start: u64) -> std::io::Result<()> {
        self.note_read(buf.len() as u64);
        self.file.read_exact_at(buf, start)
    }

    /// Count `n` bytes read from the file some other way (a kernel copy from [`Mapped::file`]).
    pub fn note_read(&self, n: u64) {
        self.read.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes read so far through the functions that count them (all but [`Mapped::bytes`]).
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}
