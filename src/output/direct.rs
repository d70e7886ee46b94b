//! Direct I/O for large safetensors outputs (Linux): bytes go from one page-aligned buffer
//! straight to the disk, past the page cache.
//!
//! A buffered write of a multi-GiB file spends a core of kernel time putting pages into the
//! cache, is then slowed by the kernel's dirty-page throttling once a few GiB are dirty, and
//! waits again in the fsync while they are written back; it also pushes the user's other files
//! out of the cache. A direct write costs one user-space copy per byte (a positioned read of the
//! input into the buffer) and runs at the disk's speed. Filesystems that refuse `O_DIRECT`
//! (tmpfs on older kernels, some network filesystems) get the buffered writer instead.

use super::segment::{unplanned, Segment, Source};
use super::ChunkSink;
use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

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

/// Writer threads: while one fills its buffer (a memory copy), the other's write is on the
/// disk, which also sees two requests at a time.
const WRITERS: u64 = 2;

/// Write `header`, then every segment in order, to the (empty) temp file `tmp`, `chunk` bytes (a
/// multiple of 4096: [`CHUNK`] but in tests) at a time, each chunk at its own offset by one of
/// [`WRITERS`] threads; the last chunk is padded to a block and the file cut back to `total`
/// bytes.
pub(crate) fn write(
    tmp: &Path,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
    chunk: u64,
) -> Result<Outcome> {
    debug_assert!(chunk > 0 && chunk.is_multiple_of(BLOCK as u64));
    let Some(file) = open(tmp)? else {
        return Ok(Outcome::Refused);
    };
    let stream = Stream::new(header, segments);
    if stream.len != total {
        return Err(Error::Verify {
            path: tmp.to_path_buf(),
            problem: format!("{} bytes laid out where {total} were planned", stream.len),
        });
    }
    let sink = Mutex::new(ChunkSink::new(total));
    let next = AtomicU64::new(0);
    let (stop, written_any) = (AtomicBool::new(false), AtomicBool::new(false));
    let one_writer = || -> Result<Outcome> {
        // An anonymous map is page-aligned, as direct I/O needs.
        let mut buf = memmap2::MmapMut::map_anon(chunk as usize)
            .map_err(|e| Error::io(tmp, "allocate a write buffer for", e))?;
        while !stop.load(Ordering::Relaxed) {
            let at = next.fetch_add(1, Ordering::Relaxed) * chunk;
            if at >= total {
                break;
            }
            let n = (total - at).min(chunk) as usize;
            stream.fill_at(at, &mut buf[..n])?;
            let padded = n.next_multiple_of(BLOCK);
            buf[n..padded].fill(0);
            match file.write_all_at(&buf[..padded], at) {
                // Opened, but refused at the first write (an alignment this filesystem will not
                // take): nothing is written, so the buffered writer can start afresh.
                Err(e)
                    if e.raw_os_error() == Some(EINVAL) && !written_any.load(Ordering::Relaxed) =>
                {
                    return Ok(Outcome::Refused)
                }
                Err(e) => return Err(Error::io(tmp, "write", e)),
                Ok(()) => written_any.store(true, Ordering::Relaxed),
            }
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .chunk(n as u64);
        }
        Ok(Outcome::Written)
    };
    let outcomes: Vec<Result<Outcome>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                s.spawn(|| {
                    let r = one_writer();
                    if !matches!(r, Ok(Outcome::Written)) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(Error::Verify {
                        path: tmp.to_path_buf(),
                        problem: "a writer thread failed".into(),
                    })
                })
            })
            .collect()
    });
    let mut refused = false;
    for o in outcomes {
        refused |= matches!(o?, Outcome::Refused);
    }
    if refused {
        // Whatever a second writer managed before it stopped goes: the buffered writer starts
        // from an empty file.
        file.set_len(0).map_err(|e| Error::io(tmp, "empty", e))?;
        return Ok(Outcome::Refused);
    }
    file.set_len(total)
        .map_err(|e| Error::io(tmp, "set the length of", e))?;
    sink.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    Ok(Outcome::Written)
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

/// The output as one stream of bytes: the header, then each segment; any range can be read.
struct Stream<'s> {
    /// The header, as the first piece.
    header: Segment<'s>,
    segments: Vec<&'s Segment<'s>>,
    /// Where each piece starts in the stream.
    starts: Vec<u64>,
    len: u64,
}

impl<'s> Stream<'s> {
    fn new(header: &'s [u8], segments: &'s [Vec<Segment<'s>>]) -> Self {
        let mut stream = Stream {
            header: Segment::Memory(std::borrow::Cow::Borrowed(header)),
            segments: segments.iter().flatten().collect(),
            starts: Vec::new(),
            len: 0,
        };
        let lens: Vec<u64> = (0..=stream.segments.len())
            .map(|i| stream.piece(i).len())
            .collect();
        for len in lens {
            stream.starts.push(stream.len);
            stream.len += len;
        }
        stream
    }

    /// Piece `i`: the header, then the segments in order.
    fn piece(&self, i: usize) -> &Segment<'s> {
        match i {
            0 => &self.header,
            i => self.segments[i - 1],
        }
    }

    /// Fill `buf` with the stream's bytes from `at` on (the range must lie inside the stream).
    fn fill_at(&self, at: u64, buf: &mut [u8]) -> Result<()> {
        // The last piece starting at or before `at`.
        let mut i = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        let (mut n, mut from) = (0usize, at - self.starts[i]);
        while n < buf.len() {
            let piece = self.piece(i);
            let take = (piece.len() - from).min((buf.len() - n) as u64) as usize;
            let dst = &mut buf[n..n + take];
            match piece.source()? {
                // A positioned read copies from the page cache without mapping the pages.
                Source::File { map, start, .. } => {
                    map.file.read_exact_at(dst, start + from).map_err(|e| {
                        Error::io(&map.path, "read (was it truncated while we read it?)", e)
                    })?
                }
                Source::Memory(b) => {
                    let at = from as usize;
                    let src = b.get(at..at + take).ok_or_else(|| {
                        unplanned(format!(
                            "a piece of {} bytes was laid out as {} bytes",
                            b.len(),
                            piece.len()
                        ))
                    })?;
                    dst.copy_from_slice(src)
                }
            }
            n += take;
            i += 1;
            from = 0;
        }
        Ok(())
    }
}
