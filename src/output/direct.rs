//! The chunked writer: direct I/O for large outputs (Linux), bytes going from one page-aligned
//! buffer straight to the disk, past the page cache; and, for a writer whose one pass must see
//! every byte ([`super::pass`]), the same chunks written through the page cache.
//!
//! A buffered write of a multi-GiB file spends a core of kernel time putting pages into the
//! cache, is then slowed by the kernel's dirty-page throttling once a few GiB are dirty, and
//! waits again in the fsync while they are written back; it also pushes the user's other files
//! out of the cache. A direct write costs one user-space copy per byte (a positioned read of the
//! input into the buffer) and runs at the disk's speed. Filesystems that refuse `O_DIRECT`
//! (tmpfs on older kernels, some network filesystems) get the buffered writer instead.

use super::pass::Pass;
use super::segment::{unplanned, Segment, Source};
use super::sink::ChunkSink;
use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

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
/// bytes. With a `pass`, it sees every chunk in order before the chunk is written (and starts
/// afresh when the filesystem refuses).
pub(crate) fn write(
    tmp: &Path,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
    chunk: u64,
    pass: Option<&mut dyn Pass>,
) -> Result<Outcome> {
    let Some(file) = open(tmp)? else {
        return Ok(Outcome::Refused);
    };
    let stream = Stream::new(header, segments);
    let Some(p) = pass else {
        return chunked(&file, true, tmp, &stream, total, chunk, None);
    };
    let outcome = chunked(&file, true, tmp, &stream, total, chunk, Some(&mut *p))?;
    if let Outcome::Refused = outcome {
        p.restart();
    }
    Ok(outcome)
}

/// [`write()`] through the page cache into `file` (the temp file `tmp`), for a `pass` that must
/// see every byte: the same chunks, threads and order, without direct I/O.
pub(crate) fn write_buffered(
    file: &File,
    tmp: &Path,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
    pass: &mut dyn Pass,
) -> Result<()> {
    let stream = Stream::new(header, segments);
    chunked(file, false, tmp, &stream, total, CHUNK, Some(pass)).map(|_| ())
}

/// Whose turn it is to show the pass its chunk (chunks are seen in order), and the pass.
type Turns<'p> = (Mutex<(u64, Option<&'p mut dyn Pass>)>, Condvar);

/// Sets `stop` and wakes every writer waiting for its turn when dropped armed: a writer that
/// failed, was refused or panicked never leaves the other waiting for a turn that will not come.
struct Halt<'a, 'p> {
    stop: &'a AtomicBool,
    turns: &'a Turns<'p>,
    armed: bool,
}

impl Drop for Halt<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            let _g = self.turns.0.lock().unwrap_or_else(|e| e.into_inner());
            self.stop.store(true, Ordering::Relaxed);
            self.turns.1.notify_all();
        }
    }
}

/// The chunked write of `stream` into `file` ([`write()`], [`write_buffered`]): `direct` pads the
/// last chunk to a block and takes EINVAL at the first write as a refusal.
///
/// Without a pass the chunks may reach the file in any order: a chunk holding computed bytes
/// that are not there yet ([`Segment::Later`]) is put aside and written once every other chunk
/// has been taken, so the disk keeps writing while they are computed instead of a writer
/// waiting for them. With a pass the chunks go in order (the pass must see them so).
fn chunked(
    file: &File,
    direct: bool,
    tmp: &Path,
    stream: &Stream<'_>,
    total: u64,
    chunk: u64,
    pass: Option<&mut dyn Pass>,
) -> Result<Outcome> {
    debug_assert!(chunk > 0 && chunk.is_multiple_of(BLOCK as u64));
    if stream.len != total {
        return Err(Error::Verify {
            path: tmp.to_path_buf(),
            problem: format!("{} bytes laid out where {total} were planned", stream.len),
        });
    }
    let w = Chunks {
        file,
        direct,
        tmp,
        stream,
        total,
        chunk,
        ordered: pass.is_some(),
        sink: Mutex::new(ChunkSink::new(total)),
        next: AtomicU64::new(0),
        put_aside: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        written_any: AtomicBool::new(false),
        turns: (Mutex::new((0, pass)), Condvar::new()),
    };
    let writers = WRITERS.min(total.div_ceil(chunk)).max(1);
    let outcomes: Vec<Result<Outcome>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..writers)
            .map(|_| {
                s.spawn(|| {
                    let mut halt = Halt {
                        stop: &w.stop,
                        turns: &w.turns,
                        armed: true,
                    };
                    let r = w.one_writer();
                    halt.armed = !matches!(r, Ok(Outcome::Written));
                    r
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| {
                    Err(Error::Verify {
                        path: tmp.to_path_buf(),
                        problem: "a writer thread failed".into(),
                    })
                })
            })
            .collect()
    });
    finish(file, tmp, total, outcomes, w.sink)
}

/// What the writer threads of [`chunked`] share.
struct Chunks<'a, 'p> {
    file: &'a File,
    direct: bool,
    tmp: &'a Path,
    stream: &'a Stream<'a>,
    total: u64,
    chunk: u64,
    /// A pass sees the chunks in order: none is put aside.
    ordered: bool,
    sink: Mutex<ChunkSink>,
    /// The next chunk to take.
    next: AtomicU64,
    /// Chunks whose computed bytes were not there when taken.
    put_aside: Mutex<Vec<u64>>,
    stop: AtomicBool,
    written_any: AtomicBool,
    turns: Turns<'p>,
}

/// How writing one chunk went.
enum Step {
    Wrote,
    /// The writers were stopped (another failed).
    Stopped,
    Refused,
}

impl Chunks<'_, '_> {
    /// One writer thread: takes chunks in turn (putting aside those not ready), then writes the
    /// chunks put aside, waiting for their bytes.
    fn one_writer(&self) -> Result<Outcome> {
        // An anonymous map is page-aligned, as direct I/O needs.
        let size = self
            .chunk
            .min(self.total.next_multiple_of(BLOCK as u64))
            .max(BLOCK as u64);
        let mut buf = memmap2::MmapMut::map_anon(size as usize)
            .map_err(|e| Error::io(self.tmp, "allocate a write buffer for", e))?;
        while !self.stop.load(Ordering::Relaxed) {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            let at = k * self.chunk;
            if at >= self.total {
                break;
            }
            let n = (self.total - at).min(self.chunk);
            if !self.ordered && !self.stream.ready(at, n) {
                lock(&self.put_aside).push(k);
                continue;
            }
            match self.put(k, &mut buf)? {
                Step::Wrote => {}
                Step::Stopped => return Ok(Outcome::Written),
                Step::Refused => return Ok(Outcome::Refused),
            }
        }
        // Every chunk has been taken: what was put aside is written now (the last writer out of
        // the loop above may still add to it, and then writes it itself).
        while !self.stop.load(Ordering::Relaxed) {
            let Some(k) = lock(&self.put_aside).pop() else {
                break;
            };
            match self.put(k, &mut buf)? {
                Step::Wrote | Step::Stopped => {}
                Step::Refused => return Ok(Outcome::Refused),
            }
        }
        Ok(Outcome::Written)
    }

    /// Fill `buf` with chunk `k` (waiting for computed bytes), show it to the pass, write it.
    fn put(&self, k: u64, buf: &mut [u8]) -> Result<Step> {
        let at = k * self.chunk;
        let n = (self.total - at).min(self.chunk) as usize;
        self.stream.fill_at(at, &mut buf[..n])?;
        if !show(&self.turns, &self.stop, self.stream, k, at, &mut buf[..n])? {
            return Ok(Step::Stopped);
        }
        let padded = if self.direct {
            n.next_multiple_of(BLOCK)
        } else {
            n
        };
        buf[n..padded].fill(0);
        match self.file.write_all_at(&buf[..padded], at) {
            // Opened, but refused at the first write (an alignment this filesystem will not
            // take): nothing is written, so the buffered writer can start afresh.
            Err(e)
                if self.direct
                    && e.raw_os_error() == Some(EINVAL)
                    && !self.written_any.load(Ordering::Relaxed) =>
            {
                return Ok(Step::Refused)
            }
            Err(e) => return Err(Error::io(self.tmp, "write", e)),
            Ok(()) => self.written_any.store(true, Ordering::Relaxed),
        }
        lock(&self.sink).chunk(n as u64);
        Ok(Step::Wrote)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Show chunk `k` (bytes `at..` of the stream, in `buf`) to the pass, if there is one, when
/// every chunk before it has been shown. False when the writers were stopped meanwhile.
fn show(
    turns: &Turns<'_>,
    stop: &AtomicBool,
    stream: &Stream<'_>,
    k: u64,
    at: u64,
    buf: &mut [u8],
) -> Result<bool> {
    let mut g = turns.0.lock().unwrap_or_else(|e| e.into_inner());
    if g.1.is_none() {
        return Ok(true);
    }
    while g.0 != k {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        g = turns.1.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    let (turn, pass) = &mut *g;
    if let Some(p) = pass {
        stream.walk(at, buf, |piece, from, bytes| p.see(piece, from, bytes))?;
    }
    *turn += 1;
    turns.1.notify_all();
    Ok(true)
}

/// After the writers: a refusal empties the file (the buffered writer starts afresh), an error
/// is returned, else the file is cut to `total` bytes.
fn finish(
    file: &File,
    tmp: &Path,
    total: u64,
    outcomes: Vec<Result<Outcome>>,
    sink: Mutex<ChunkSink>,
) -> Result<Outcome> {
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

    /// Hand `f` each piece's part of the `buf.len()` bytes from `at` on (the range must lie
    /// inside the stream), in order: (piece, offset in it, its bytes in `buf`).
    fn walk(
        &self,
        at: u64,
        buf: &mut [u8],
        mut f: impl FnMut(usize, u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        // The last piece starting at or before `at`.
        let mut i = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        let (mut n, mut from) = (0usize, at - self.starts[i]);
        while n < buf.len() {
            let take = (self.piece(i).len() - from).min((buf.len() - n) as u64) as usize;
            f(i, from, &mut buf[n..n + take])?;
            n += take;
            i += 1;
            from = 0;
        }
        Ok(())
    }

    /// Whether the `len` bytes from `at` on can be had without waiting for computed bytes.
    fn ready(&self, at: u64, len: u64) -> bool {
        let first = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        (first..self.starts.len())
            .take_while(|&i| self.starts[i] < at + len)
            .all(|i| self.piece(i).ready())
    }

    /// Fill `buf` with the stream's bytes from `at` on (the range must lie inside the stream);
    /// the bytes of a [`Segment::Pass`] piece are left zero for the pass to make.
    fn fill_at(&self, at: u64, buf: &mut [u8]) -> Result<()> {
        self.walk(at, buf, |i, from, dst| {
            let piece = self.piece(i);
            if let Segment::Pass(_) = piece {
                dst.fill(0);
                return Ok(());
            }
            match piece.source()? {
                // A positioned read copies from the page cache without mapping the pages.
                Source::File { map, start, .. } => map.read_at(dst, start + from).map_err(|e| {
                    Error::io(&map.path, "read (was it truncated while we read it?)", e)
                }),
                Source::Memory(b) => {
                    let at = from as usize;
                    let src = b.get(at..at + dst.len()).ok_or_else(|| {
                        unplanned(format!(
                            "a piece of {} bytes was laid out as {} bytes",
                            b.len(),
                            piece.len()
                        ))
                    })?;
                    dst.copy_from_slice(src);
                    Ok(())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::later::Later;
    use std::borrow::Cow;
    use std::time::{Duration, Instant};

    #[test]
    fn chunks_waiting_for_computed_bytes_are_written_after_every_other_chunk() {
        const G: usize = 4096;
        // Eight chunks; the second and third are computed bytes, handed over only once every
        // other chunk is in the file (or after 10 s: writers that wait for them in turn, two of
        // them each holding one, would write nothing else meanwhile).
        let (second, third) = (Later::new(G as u64), Later::new(G as u64));
        let run = |b: u8| Segment::Memory(Cow::Owned(vec![b; G]));
        let mut pieces = vec![run(1), Segment::Later(&second), Segment::Later(&third)];
        pieces.extend((4..=8).map(run));
        let segments = vec![pieces];
        let total = 8 * G as u64;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        File::create(&path).unwrap();
        let others_first = |bytes: &[u8]| {
            [0usize, 3, 4, 5, 6, 7].iter().all(|&k| {
                bytes
                    .get(k * G..(k + 1) * G)
                    .is_some_and(|c| c.iter().all(|&x| usize::from(x) == k + 1))
            })
        };
        let (outcome, before) = std::thread::scope(|s| {
            let producer = s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(10);
                let before = loop {
                    let done = others_first(&std::fs::read(&path).unwrap());
                    if done || Instant::now() > deadline {
                        break done;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
                second.set(vec![2; G]);
                third.set(vec![3; G]);
                before
            });
            let outcome = write(&path, &[], &segments, total, G as u64, None).unwrap();
            (outcome, producer.join().unwrap())
        });
        if let Outcome::Refused = outcome {
            eprintln!("skipped: {} refuses O_DIRECT", tmp.path().display());
            return;
        }
        assert!(
            before,
            "every other chunk was written before the computed ones"
        );
        let want: Vec<u8> = (1..=8u8).flat_map(|b| vec![b; G]).collect();
        assert!(
            std::fs::read(&path).unwrap() == want,
            "the bytes as laid out"
        );
    }
}
