//! The one way anything is written. A plan says what each output tensor is (copied from an input,
//! or computed); the writer lays it out in a temp file, copies untouched tensors without passing
//! them through user space where the OS allows, fsyncs, re-opens the file with the strict reader,
//! compares every tensor byte with what the plan said, and only then renames into place. The
//! manifest (BLAKE3, or sha256 when asked: [`manifest`]) is computed from the plan while the
//! writer copies. This module holds what every writer shares (the chunked copy, the temp-file
//! write, small files); each format's writer is its own module.

pub mod atomic;
pub(crate) mod direct;
pub mod folder;
pub mod json_text;
pub mod later;
pub mod manifest;
pub(crate) mod pass;
pub(crate) mod priority;
pub mod progress;
pub(crate) mod segment;
pub(crate) mod sink;

use crate::error::{Error, Result};
use atomic::AtomicFile;
use manifest::Hasher;
use segment::{Segment, Source};
use sink::ChunkSink;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes copied between progress updates (and between test-hook pauses).
const COPY_CHUNK: u64 = 64 << 20;

/// An I/O error while writing the temp file, told about the destination the user named: the
/// temp file is removed and the destination is as it was.
pub(crate) fn about_destination(e: Error, dest: &Path) -> Error {
    match e {
        Error::Io { source, .. } => Error::io(
            dest,
            "write (nothing was replaced; free space or choose another disk)",
            source,
        ),
        other => about_output(other, dest),
    }
}

/// An error about the output that was made where its file was not known (computed bytes that
/// never came: [`later::Later::wait`]), told about the destination the user named.
pub(crate) fn about_output(e: Error, dest: &Path) -> Error {
    match e {
        Error::Verify { path, problem } if path.as_os_str().is_empty() => Error::Verify {
            path: dest.to_path_buf(),
            problem,
        },
        other => other,
    }
}

/// Write the header and segments to the temp file: directly when the output is large and the
/// filesystem allows (returns true), else through the page cache.
pub(crate) fn write_any(
    out: &mut AtomicFile,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
    direct: bool,
) -> Result<bool> {
    if direct {
        let len = header.len() as u64 + total;
        match direct::write(out.temp_path(), header, segments, len, direct::CHUNK, None)? {
            direct::Outcome::Written => return Ok(true),
            direct::Outcome::Refused => {}
        }
    }
    write_segments(out, header, segments, total).map(|()| false)
}

/// [`write_any`] with a `pass` that sees every byte once, in order, as it is written (and makes
/// the [`Segment::Pass`] pieces): directly when `direct` and the filesystem allows (returns
/// true), else through the page cache, both by the chunked writer ([`direct`]).
pub(crate) fn write_passing(
    out: &mut AtomicFile,
    segments: &[Vec<Segment<'_>>],
    total: u64,
    direct: bool,
    pass: &mut dyn pass::Pass,
) -> Result<bool> {
    if direct {
        let chunk = direct::CHUNK;
        match direct::write(
            out.temp_path(),
            &[],
            segments,
            total,
            chunk,
            Some(&mut *pass),
        )? {
            direct::Outcome::Written => return Ok(true),
            direct::Outcome::Refused => {}
        }
    }
    let tmp = out.temp_path().to_path_buf();
    direct::write_buffered(out.file(), &tmp, &[], segments, total, pass).map(|()| false)
}

fn write_segments(
    out: &mut AtomicFile,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    total: u64,
) -> Result<()> {
    let tmp = out.temp_path().to_path_buf();
    let mut sink = ChunkSink::new(total);
    let mut on_chunk = |n: u64| sink.chunk(n);
    let file = out.file();
    file.write_all(header)
        .map_err(|e| Error::io(&tmp, "write", e))?;
    for seg in segments.iter().flatten() {
        match seg.source()? {
            Source::File { map, start, len } => {
                copy_range(map, start, len, file, &tmp, &mut on_chunk)?
            }
            Source::Memory(b) => write_chunks(file, &tmp, b, &mut on_chunk)?,
        }
    }
    sink.finish();
    Ok(())
}

/// Write `bytes` in bounded chunks, reporting each.
pub(crate) fn write_chunks(
    file: &mut File,
    path: &Path,
    bytes: &[u8],
    on_chunk: &mut impl FnMut(u64),
) -> Result<()> {
    for chunk in bytes.chunks(COPY_CHUNK as usize) {
        file.write_all(chunk)
            .map_err(|e| Error::io(path, "write", e))?;
        on_chunk(chunk.len() as u64);
    }
    Ok(())
}

/// Copy `len` bytes at `start` of the input `src` to the current position of `dst`. std's
/// `io::copy` between files uses copy_file_range (no user-space buffer) where the kernel allows,
/// and falls back to a bounded buffered copy otherwise.
pub(crate) fn copy_range(
    src: &crate::mapped::Mapped,
    start: u64,
    len: u64,
    dst: &mut File,
    dst_path: &Path,
    on_chunk: &mut impl FnMut(u64),
) -> Result<()> {
    let src_path = &src.path;
    let mut reader = &src.file;
    reader
        .seek(SeekFrom::Start(start))
        .map_err(|e| Error::io(src_path, "seek in", e))?;
    let mut left = len;
    while left > 0 {
        let want = left.min(COPY_CHUNK);
        let n = std::io::copy(&mut reader.take(want), dst)
            .map_err(|e| Error::io(dst_path, "copy tensor data into", e))?;
        if n == 0 {
            return Err(Error::format(
                src_path,
                format!(
                    "ended {left} bytes early while copying (was it truncated while we read it?)"
                ),
            ));
        }
        src.note_read(n);
        left -= n;
        on_chunk(n);
    }
    Ok(())
}

/// The digest of a whole file, read sequentially.
pub(crate) fn digest_file(path: &Path) -> Result<String> {
    let mut h = Hasher::default();
    let mut f = File::open(path).map_err(|e| Error::io(path, "re-open", e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(path, "read back", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish())
}

/// Write a small file (an index, a tokenizer, a config) atomically; `verify` re-reads the temp
/// file. Returns its sha256 (small files: the reports that name sha256, as merge-tokenizers').
pub fn write_bytes(
    dest: &Path,
    inputs: &[&Path],
    bytes: &[u8],
    verify: impl FnOnce(&Path) -> Result<()>,
) -> Result<String> {
    let mut out = AtomicFile::create(dest, inputs)?;
    let tmp = out.temp_path().to_path_buf();
    let mut sink = ChunkSink::new(bytes.len() as u64);
    write_chunks(out.file(), &tmp, bytes, &mut |n| sink.chunk(n))
        .and_then(|_| out.sync())
        .map_err(|e| about_destination(e, dest))?;
    sink.finish();
    let back = std::fs::read(&tmp).map_err(|e| Error::io(&tmp, "read back", e))?;
    if back != bytes {
        return Err(Error::Verify {
            path: dest.to_path_buf(),
            problem: "bytes read back differ from bytes written".into(),
        });
    }
    verify(&tmp).map_err(|e| Error::Verify {
        path: dest.to_path_buf(),
        problem: e.to_string(),
    })?;
    out.commit()?;
    Ok(manifest::sha256(bytes))
}
