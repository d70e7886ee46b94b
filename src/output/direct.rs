//! Direct I/O for large safetensors outputs (Linux): bytes go from one page-aligned buffer
//! straight to the disk, past the page cache.
//!
//! A buffered write of a multi-GiB file spends a core of kernel time putting pages into the
//! cache, is then slowed by the kernel's dirty-page throttling once a few GiB are dirty, and
//! waits again in the fsync while they are written back; it also pushes the user's other files
//! out of the cache. A direct write costs one user-space copy per byte (a positioned read of the
//! input into the buffer) and runs at the disk's speed. Filesystems that refuse `O_DIRECT`
//! (tmpfs on older kernels, some network filesystems) get the buffered writer instead.

use super::{ChunkSink, Segment};
use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Outputs at least this large are written directly: below it the page cache costs little and a
/// full read-back from it is cheap.
const DIRECT_FROM: u64 = 256 << 20;

/// Hidden test hook: write directly from this many bytes on (so tests can use small files).
const DIRECT_FROM_ENV: &str = "CKPT_SURGERY_TEST_DIRECT_FROM";

/// Bytes per write, and the grid the read-back samples: a multiple of every logical block size.
pub(crate) const CHUNK: u64 = 16 << 20;

/// Direct I/O wants offsets, lengths and buffer addresses aligned to the device's logical block
/// (512 or 4096 bytes); 4096 suits both.
const BLOCK: usize = 4096;

/// Whether an output of `total` bytes is worth writing directly.
pub(crate) fn wanted(total: u64) -> bool {
    let from = std::env::var(DIRECT_FROM_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DIRECT_FROM);
    cfg!(target_os = "linux") && total >= from
}

/// How a direct write ended.
pub(crate) enum Outcome {
    /// Every byte is in the file, which has exactly the planned length.
    Written,
    /// The filesystem refused direct I/O before anything was written: use the buffered writer.
    Refused,
}

/// The temp file opened a second time, for direct writing; None when the filesystem refuses.
fn open(tmp: &Path) -> Result<Option<File>> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(tmp)
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(e) => Err(Error::io(tmp, "open for direct writing", e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = tmp;
        Ok(None)
    }
}

/// Write `header`, then every segment in order, to the (empty) temp file `tmp`, `chunk` bytes (a
/// multiple of 4096: [`CHUNK`] but in tests) at a time; the last chunk is padded to a block and
/// the file cut back to `total` bytes.
pub(crate) fn write(
    tmp: &Path,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
    chunk: u64,
) -> Result<Outcome> {
    debug_assert!(chunk > 0 && chunk % BLOCK as u64 == 0);
    let Some(file) = open(tmp)? else {
        return Ok(Outcome::Refused);
    };
    // An anonymous map is page-aligned, as direct I/O needs.
    let mut buf = memmap2::MmapMut::map_anon(chunk as usize)
        .map_err(|e| Error::io(tmp, "allocate a write buffer for", e))?;
    let mut pieces = Pieces::new(header, segments);
    let mut sink = ChunkSink::new(total);
    let mut at = 0u64;
    loop {
        let n = pieces.fill(&mut buf)?;
        if n == 0 {
            break;
        }
        let padded = n.next_multiple_of(BLOCK);
        buf[n..padded].fill(0);
        if let Err(e) = file.write_all_at(&buf[..padded], at) {
            if at == 0 && e.raw_os_error() == Some(EINVAL) {
                // Opened, but the first write was refused (an alignment this filesystem will not
                // take): nothing is written yet, so the buffered writer can start afresh.
                return Ok(Outcome::Refused);
            }
            return Err(Error::io(tmp, "write", e));
        }
        at += n as u64;
        sink.chunk(n as u64);
    }
    if at != total {
        return Err(Error::Verify {
            path: tmp.to_path_buf(),
            problem: format!("{at} bytes written where {total} were planned"),
        });
    }
    file.set_len(total)
        .map_err(|e| Error::io(tmp, "set the length of", e))?;
    sink.finish();
    Ok(Outcome::Written)
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

/// The output as one stream: the header, then each segment, read in order.
struct Pieces<'s> {
    pieces: Vec<&'s Segment<'s>>,
    header: &'s [u8],
    /// Index into `pieces` (0 is the header), and bytes of it already taken.
    i: usize,
    done: u64,
}

impl<'s> Pieces<'s> {
    fn new(header: &'s [u8], segments: &'s [Vec<Segment<'s>>]) -> Self {
        Pieces {
            pieces: segments.iter().flatten().collect(),
            header,
            i: 0,
            done: 0,
        }
    }

    /// Fill `buf` from the stream; returns the bytes filled (less than `buf` only at the end).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() && self.i <= self.pieces.len() {
            let len = match self.i {
                0 => self.header.len() as u64,
                i => self.pieces[i - 1].len(),
            };
            let take = (len - self.done).min((buf.len() - n) as u64) as usize;
            let dst = &mut buf[n..n + take];
            let from = self.done as usize;
            match self.i {
                0 => dst.copy_from_slice(&self.header[from..from + take]),
                i => match self.pieces[i - 1] {
                    Segment::Memory(b) => dst.copy_from_slice(&b[from..from + take]),
                    // A positioned read copies from the page cache without mapping the pages.
                    Segment::File { map, start, .. } => map
                        .file
                        .read_exact_at(dst, start + self.done)
                        .map_err(|e| {
                            Error::io(&map.path, "read (was it truncated while we read it?)", e)
                        })?,
                },
            }
            n += take;
            self.done += take as u64;
            if self.done == len {
                self.i += 1;
                self.done = 0;
            }
        }
        Ok(n)
    }
}
