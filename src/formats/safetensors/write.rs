//! The safetensors writer: a plan of output tensors (copied from an input, computed, or an input
//! matrix grown by computed rows) laid out as the reference writer lays it out, hashed while it
//! is written, re-read with the strict reader and compared with the plan before the rename.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::safetensors::{serialize_header, HeaderEntry, SafetensorsFile};
use crate::formats::tensor::TensorRef;
use crate::output::atomic::AtomicFile;
use crate::output::direct;
use crate::output::later::Later;
use crate::output::manifest::{self, FileManifest, Hasher, TensorManifest};
use crate::output::priority;
use crate::output::segment::{differs, Segment};
use crate::output::{about_destination, about_output, write_any};
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where an output tensor's bytes come from.
pub enum Payload<'a> {
    /// Copied byte-for-byte from an input file.
    Copy(TensorRef<'a>),
    /// Computed by the job (only changed tensors are ever held in memory).
    Bytes(Vec<u8>),
    /// The first `keep` bytes of an input tensor (copied like [`Payload::Copy`]), then `tail`: a
    /// matrix grown by computed rows, without holding its old rows in memory. The rows may still
    /// be being computed while the writer starts.
    Grow {
        head: TensorRef<'a>,
        keep: u64,
        tail: &'a Later,
    },
    /// A matrix of `parts` equal segments (a multi-codebook table), each grown at its end:
    /// segment c is `old` bytes of `head` from c·old, then `new` bytes of `tail` from c·new.
    Interleave {
        head: TensorRef<'a>,
        parts: u64,
        old: u64,
        new: u64,
        tail: &'a Later,
    },
}

impl Payload<'_> {
    pub fn len(&self) -> u64 {
        match self {
            Payload::Copy(t) => t.nbytes(),
            Payload::Bytes(b) => b.len() as u64,
            Payload::Grow { keep, tail, .. } => keep + tail.len(),
            Payload::Interleave {
                parts, old, new, ..
            } => parts * (old + new),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What is wrong with this payload's arithmetic, if anything: the bytes it keeps of an input
    /// tensor lie inside that tensor, and its computed rows are as long as its layout says.
    fn check(&self) -> std::result::Result<(), String> {
        let keeps = |head: &TensorRef<'_>, kept: Option<u64>, what: String| match kept {
            Some(k) if k <= head.nbytes() => Ok(()),
            _ => Err(format!(
                "keeps {what} bytes of input tensor '{}', which holds {}",
                head.name,
                head.nbytes()
            )),
        };
        match self {
            Payload::Copy(_) | Payload::Bytes(_) => Ok(()),
            Payload::Grow { head, keep, .. } => keeps(head, Some(*keep), keep.to_string()),
            Payload::Interleave {
                head,
                parts,
                old,
                new,
                tail,
            } => {
                keeps(head, parts.checked_mul(*old), format!("{parts} × {old}"))?;
                match parts.checked_mul(*new) {
                    Some(n) if n == tail.len() => Ok(()),
                    _ => Err(format!(
                        "{parts} segments of {new} new bytes were laid out but the new rows hold {}",
                        tail.len()
                    )),
                }
            }
        }
    }

    /// The pieces this payload is made of, in order: ranges of input files (copied kernel-side,
    /// read through their maps) and bytes in memory. A range past what its input tensor holds is
    /// an error naming the input file and tensor.
    fn segments(&self) -> Result<Vec<Segment<'_>>> {
        match self {
            Payload::Copy(t) => Ok(vec![kept(t, 0, t.nbytes())?]),
            Payload::Bytes(b) => Ok(vec![Segment::Memory(Cow::Borrowed(b))]),
            Payload::Grow { head, keep, tail } => {
                Ok(vec![kept(head, 0, *keep)?, Segment::Later(tail)])
            }
            Payload::Interleave {
                head,
                parts,
                old,
                new,
                tail,
            } => {
                // A strided view is gathered once, not once per segment.
                let gathered = match head.contiguous_range() {
                    Some(_) => None,
                    None => Some(head.try_bytes()?),
                };
                let mut out = Vec::with_capacity(2 * *parts as usize);
                for c in 0..*parts {
                    out.push(match &gathered {
                        None => kept(head, c * old, *old)?,
                        Some(all) => {
                            Segment::Memory(Cow::Owned(part_of(head, all, c * old, *old)?.to_vec()))
                        }
                    });
                    out.push(Segment::LaterPart(tail, c * new, *new));
                }
                Ok(out)
            }
        }
    }
}

/// `len` bytes of input tensor `t` from byte `from` of its elements: a range of its file, or for
/// a strided view, gathered into memory.
fn kept<'s>(t: &TensorRef<'s>, from: u64, len: u64) -> Result<Segment<'s>> {
    if from.checked_add(len).is_none_or(|end| end > t.nbytes()) {
        return Err(outside(t, from, len, t.nbytes()));
    }
    match t.contiguous_range() {
        Some((start, _)) => Ok(Segment::File {
            map: t.map,
            start: start + from,
            len,
        }),
        None => {
            let mut b = t.try_bytes()?.into_owned();
            b.drain(..from as usize);
            b.truncate(len as usize);
            Ok(Segment::Memory(Cow::Owned(b)))
        }
    }
}

/// `len` bytes from `from` of `all`, input tensor `t`'s gathered bytes.
fn part_of<'b>(t: &TensorRef<'_>, all: &'b [u8], from: u64, len: u64) -> Result<&'b [u8]> {
    usize::try_from(from)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(f, n)| all.get(f..f.checked_add(n)?))
        .ok_or_else(|| outside(t, from, len, all.len() as u64))
}

/// Bytes of an input tensor were planned past its end.
fn outside(t: &TensorRef<'_>, from: u64, len: u64, holds: u64) -> Error {
    Error::tensor(
        &t.map.path,
        t.name,
        format!("bytes {from}..+{len} of it were planned, but it holds {holds}"),
    )
}

/// One output tensor.
pub struct PlannedTensor<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub payload: Payload<'a>,
}

/// A whole safetensors output: metadata and tensors in the order they will be laid out.
pub struct SafetensorsLayout<'a> {
    pub metadata: Option<Vec<(String, String)>>,
    pub tensors: Vec<PlannedTensor<'a>>,
    /// Also hash the whole file (every tensor is always hashed). Off by default: on two cores a
    /// second hash pass over every byte costs about as much as the copy itself.
    pub file_sha256: bool,
}

impl<'a> SafetensorsLayout<'a> {
    /// Every tensor of `file` copied unchanged, in the input's order, metadata kept.
    pub fn identity(file: &'a SafetensorsFile) -> Self {
        SafetensorsLayout {
            file_sha256: false,
            metadata: file.header.metadata.clone(),
            tensors: file
                .header
                .tensors
                .iter()
                .map(|t| PlannedTensor {
                    name: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    payload: Payload::Copy(TensorRef {
                        name: &t.name,
                        dtype: t.dtype,
                        shape: &t.shape,
                        map: &file.map,
                        start: t.start,
                        strides: None,
                    }),
                })
                .collect(),
        }
    }

    /// Order tensors the way the reference writer does when building a file from scratch:
    /// larger alignment first, then by name.
    pub fn sort_like_reference(&mut self) {
        self.tensors.sort_by(|a, b| {
            reference_rank(b.dtype)
                .cmp(&reference_rank(a.dtype))
                .then_with(|| a.name.cmp(&b.name))
        });
    }

    /// Every input file a copy reads from.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = self
            .tensors
            .iter()
            .filter_map(|t| match &t.payload {
                Payload::Copy(t)
                | Payload::Grow { head: t, .. }
                | Payload::Interleave { head: t, .. } => Some(t.map.path.as_path()),
                Payload::Bytes(_) => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The serialised header (length prefix included) for this plan's tensors, in order.
    fn header(&self, dest: &Path) -> Result<Vec<u8>> {
        let entries: Vec<HeaderEntry<'_>> = self
            .tensors
            .iter()
            .map(|t| HeaderEntry {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                len: t.payload.len(),
            })
            .collect();
        serialize_header(dest, self.metadata.as_deref(), &entries)
    }

    fn total_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.payload.len()).sum()
    }
}

/// The reference writer's dtype order (its enum order); types it lacks sit beside their size class.
fn reference_rank(d: DType) -> u8 {
    use DType::*;
    match d {
        Bool => 0,
        F4 => 1,
        F6E2M3 => 2,
        F6E3M2 => 3,
        U8 | QU8 => 4,
        I8 | QI8 => 5,
        F8E5M2 | F8E5M2Fnuz => 6,
        F8E4M3 | F8E4M3Fnuz => 7,
        F8E8M0 => 8,
        I16 => 9,
        U16 => 10,
        F16 => 11,
        BF16 => 12,
        I32 | QI32 => 13,
        U32 => 14,
        F32 | C32 => 15,
        C64 => 16,
        F64 => 17,
        I64 => 18,
        U64 => 19,
        C128 => 20,
    }
}

/// Write `plan` to `dest` atomically and verified. `inputs` are extra paths that must not be
/// overwritten (the plan's own source files are always protected). Returns the manifest.
pub fn write_safetensors(
    plan: &SafetensorsLayout<'_>,
    dest: &Path,
    inputs: &[&Path],
) -> Result<FileManifest> {
    // Plan sanity: every payload matches its dtype and shape.
    for t in &plan.tensors {
        let need = t
            .shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| t.dtype.bytes_for(n));
        if need != Some(t.payload.len()) {
            let need = need.map_or("an impossible number of".to_string(), |n| n.to_string());
            return Err(Error::tensor(
                dest,
                &t.name,
                format!(
                    "planned {} {:?} needs {need} bytes but the payload has {}",
                    t.dtype,
                    t.shape,
                    t.payload.len()
                ),
            ));
        }
    }
    for t in &plan.tensors {
        t.payload
            .check()
            .map_err(|p| Error::tensor(dest, &t.name, p))?;
    }
    let header = plan.header(dest)?;

    let mut protected = plan.input_paths();
    protected.extend_from_slice(inputs);
    let mut out = AtomicFile::create(dest, &protected)?;

    // While the writer copies (a core's worth of kernel memcpy), one more thread hashes each
    // tensor as the plan says (one thread, so the writer keeps its core); a third hashes the
    // whole file when asked. Hashing yields the CPU to the writer (see `priority`). Computed
    // bytes may still be on their way ([`Later`]): whoever reaches them waits. Then the fsync (a
    // wait on the disk) and the read-back overlap: the strict reader re-opens the file and
    // compares every byte with the plan (so the hashes are the written file's). Both must pass
    // before the rename. The read-back (on the rayon pool) starts only once the writer has taken
    // every byte, so it never waits for computed bytes there.
    let segments: Vec<Vec<Segment<'_>>> = plan
        .tensors
        .iter()
        .map(|t| t.payload.segments())
        .collect::<Result<_>>()?;
    let stop = AtomicBool::new(false);
    let tmp = out.temp_path().to_path_buf();
    // A direct write leaves the cores free, so the tensors are hashed in parallel.
    let direct = direct::wanted(header.len() as u64 + plan.total_bytes());
    let (written, verified, file_sha, tensor_shas) = std::thread::scope(|s| {
        let file_sha = plan
            .file_sha256
            .then(|| s.spawn(|| background(|| hash_file(&header, &segments, &stop))));
        let tensor_shas = s.spawn(|| background(|| hash_tensors(&segments, &stop, direct)));
        let mut written = write_any(&mut out, &header, &segments, plan.total_bytes(), direct);
        let verified = match written {
            Ok(direct) => {
                // Written directly, the file is not in the page cache: read back from the disk,
                // a full compare would cost as much as writing it again, so it samples (see
                // `differs`).
                let sample = direct.then_some(direct::CHUNK);
                let (tmp, header, segments) = (&tmp, &header, &segments);
                let v =
                    s.spawn(move || verify_safetensors(tmp, dest, plan, header, segments, sample));
                written = out.sync().map(|()| direct);
                Some(joined(v, dest))
            }
            Err(_) => None,
        };
        let written = written.map_err(|e| about_destination(e, dest));
        if written.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let file_sha = file_sha.map(|h| joined(h, dest)).transpose();
        (written, verified, file_sha, joined(tensor_shas, dest))
    });
    written?;
    let back = verified.unwrap_or_else(|| {
        Err(Error::Verify {
            path: dest.to_path_buf(),
            problem: "not read back".into(),
        })
    })?;
    let (file_sha, tensor_shas) = (file_sha?, tensor_shas?);
    out.commit()?;
    Ok(FileManifest {
        path: dest.to_path_buf(),
        bytes: back,
        hash: manifest::algorithm(),
        digest: file_sha,
        tensors: plan
            .tensors
            .iter()
            .zip(tensor_shas)
            .map(|(t, digest)| TensorManifest {
                name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                bytes: t.payload.len(),
                digest,
            })
            .collect(),
    })
}

/// Run `f` on this (helper) thread at the priority of work done beside the writer.
fn background<T>(f: impl FnOnce() -> T) -> T {
    priority::lower_this_thread();
    f()
}

/// A helper thread's result (hashing, or the read-back); a panic there becomes an error about
/// the destination.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>, dest: &Path) -> Result<T> {
    h.join()
        .unwrap_or_else(|_| {
            Err(Error::Verify {
                path: dest.to_path_buf(),
                problem: "a hashing or read-back thread failed".into(),
            })
        })
        .map_err(|e| about_output(e, dest))
}

/// The digest of the planned file: header, then every segment in order.
fn hash_file(header: &[u8], segments: &[Vec<Segment<'_>>], stop: &AtomicBool) -> Result<String> {
    let mut h = Hasher::default();
    h.update(header);
    for seg in segments.iter().flatten() {
        seg.stream(|c| {
            h.update(c);
            !stop.load(Ordering::Relaxed)
        })?;
    }
    Ok(h.finish())
}

/// The digest of each planned tensor: one after the other, or with `parallel` on one thread per
/// core taking the next tensor, largest first (for a writer that leaves the cores free).
fn hash_tensors(
    segments: &[Vec<Segment<'_>>],
    stop: &AtomicBool,
    parallel: bool,
) -> Result<Vec<String>> {
    let one = |segs: &Vec<Segment<'_>>| -> Result<String> {
        let mut h = Hasher::default();
        for seg in segs {
            seg.stream(|c| {
                h.update(c);
                !stop.load(Ordering::Relaxed)
            })?;
        }
        Ok(h.finish())
    };
    if !parallel {
        return segments.iter().map(one).collect();
    }
    let len = |segs: &Vec<Segment<'_>>| segs.iter().map(Segment::len).sum::<u64>();
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(len(&segments[i])));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut hashed: Vec<(usize, Result<String>)> = Vec::with_capacity(order.len());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(order.len()))
            .map(|_| {
                s.spawn(|| {
                    priority::lower_this_thread();
                    let mut done = Vec::new();
                    while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        done.push((i, one(&segments[i])));
                    }
                    done
                })
            })
            .collect();
        for w in workers {
            // A worker's panic goes on to this thread's caller, which reports it about the
            // destination like any helper thread's (`joined`).
            hashed.extend(w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
    });
    hashed.sort_by_key(|(i, _)| *i);
    hashed.into_iter().map(|(_, h)| h).collect()
}

/// Re-open the temp file with the strict reader and check it is exactly the plan: the header
/// bytes, names, dtypes, shapes, metadata, length, and every tensor byte (or, with `sample`, the
/// samples [`differs`] describes). Returns the file length.
fn verify_safetensors(
    tmp: &Path,
    dest: &Path,
    plan: &SafetensorsLayout<'_>,
    header: &[u8],
    segments: &[Vec<Segment<'_>>],
    sample: Option<u64>,
) -> Result<u64> {
    let verr = |p: String| Error::Verify {
        path: dest.to_path_buf(),
        problem: p,
    };
    let written = SafetensorsFile::open(tmp).map_err(|e| verr(e.to_string()))?;
    if written.header.metadata != plan.metadata {
        return Err(verr("metadata differs from the plan".into()));
    }
    if written.header.tensors.len() != plan.tensors.len() {
        return Err(verr(format!(
            "{} tensors read back, {} planned",
            written.header.tensors.len(),
            plan.tensors.len()
        )));
    }
    for (w, p) in written.header.tensors.iter().zip(&plan.tensors) {
        if w.name != p.name || w.dtype != p.dtype || w.shape != p.shape {
            return Err(verr(format!(
                "tensor '{}' {} {:?} read back where '{}' {} {:?} was planned",
                w.name, w.dtype, w.shape, p.name, p.dtype, p.shape
            )));
        }
    }
    let expected = header.len() as u64 + plan.total_bytes();
    if written.map.len != expected || written.map.slice(0, header.len() as u64) != Some(header) {
        return Err(verr(format!(
            "{} bytes read back, {expected} planned, or the header bytes differ",
            written.map.len
        )));
    }
    if sample.is_some() {
        // Otherwise each sampled block would pull in the disk's readahead window (8 MiB here).
        written.map.expect_random_reads();
    }
    let checks: Vec<Result<Option<u64>>> = written
        .header
        .tensors
        .par_iter()
        .zip(segments)
        .map(|(t, segs)| differs(&written.map, t.start, segs, sample))
        .collect();
    for (t, c) in written.header.tensors.iter().zip(checks) {
        if let Some(at) = c? {
            return Err(verr(format!(
                "tensor '{}' differs from what was planned at byte {at} of the tensor",
                t.name
            )));
        }
    }
    Ok(written.map.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::manifest::digest;
    use std::fs::File;
    use std::path::PathBuf;
    use std::time::Duration;

    fn fixture() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/chatterbox_t3/t3_f32.safetensors")
    }

    /// Lay out `plan` into `path` the way write_safetensors does, without the rename.
    fn lay_out(plan: &SafetensorsLayout<'_>, path: &Path) -> (Vec<u8>, Vec<Vec<u8>>) {
        let header = plan.header(path).unwrap();
        let mut bytes = header.clone();
        let mut tensors = Vec::new();
        for t in &plan.tensors {
            let mut b = Vec::new();
            for seg in t.payload.segments().unwrap() {
                seg.stream(|c| {
                    b.extend_from_slice(c);
                    true
                })
                .unwrap();
            }
            bytes.extend_from_slice(&b);
            tensors.push(b);
        }
        std::fs::write(path, &bytes).unwrap();
        (header, tensors)
    }

    /// The fixture with `text_emb` grown by three rows of made-up bytes, still to be handed over:
    /// the plan, the grown tensor's index, its input tensor, the tail and where it goes.
    #[allow(clippy::type_complexity)]
    fn grown_plan(
        input: &SafetensorsFile,
    ) -> (
        SafetensorsLayout<'_>,
        usize,
        TensorRef<'_>,
        Vec<u8>,
        &'static Later,
    ) {
        let mut plan = SafetensorsLayout::identity(input);
        let i = plan
            .tensors
            .iter()
            .position(|t| t.name.contains("text_emb"))
            .unwrap();
        let Payload::Copy(head) = plan.tensors[i].payload else {
            panic!("identity plans copy")
        };
        let row = head.shape[1] * 4;
        let tail: Vec<u8> = (0..3 * row).map(|b| (b % 251) as u8).collect();
        plan.tensors[i].shape[0] += 3;
        let later: &'static Later = Box::leak(Box::new(Later::new(tail.len() as u64)));
        plan.tensors[i].payload = Payload::Grow {
            head,
            keep: head.nbytes(),
            tail: later,
        };
        (plan, i, head, tail, later)
    }

    /// Where tensor `i`'s bytes start in a file of `len` bytes laid out from `plan`.
    fn tensor_start(plan: &SafetensorsLayout<'_>, len: u64, i: usize) -> u64 {
        len - plan.tensors[i..]
            .iter()
            .map(|t| t.payload.len())
            .sum::<u64>()
    }

    #[test]
    fn grown_tensors_are_the_old_rows_then_the_tail_and_every_byte_is_verified() {
        let input = SafetensorsFile::open(&fixture()).unwrap();
        let (plan, i, head, tail, later) = grown_plan(&input);
        later.set(tail.clone());
        let row = head.shape[1] * 4;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out.safetensors");
        let (header, tensors) = lay_out(&plan, &path);
        let mut want = head.try_bytes().unwrap().into_owned();
        want.extend_from_slice(&tail);
        assert_eq!(tensors[i], want, "old rows, then the new ones");

        let segments: Vec<Vec<Segment<'_>>> = plan
            .tensors
            .iter()
            .map(|t| t.payload.segments().unwrap())
            .collect();
        let len = verify_safetensors(&path, &path, &plan, &header, &segments, None).unwrap();
        assert_eq!(len, std::fs::metadata(&path).unwrap().len());
        let stop = AtomicBool::new(false);
        assert_eq!(
            hash_file(&header, &segments, &stop).unwrap(),
            digest(&std::fs::read(&path).unwrap())
        );
        let shas = hash_tensors(&segments, &stop, false).unwrap();
        assert_eq!(hash_tensors(&segments, &stop, true).unwrap(), shas);
        assert_eq!(shas[i], digest(&want));

        // One flipped bit in the copied rows, then one in the tail: both are caught, with the
        // tensor and the byte.
        let start = tensor_start(&plan, len, i);
        for at in [row + 5, head.nbytes() + row + 1] {
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[(start + at) as usize] ^= 0x10;
            let bad = tmp.path().join("bad.safetensors");
            std::fs::write(&bad, &bytes).unwrap();
            let e = verify_safetensors(&bad, &path, &plan, &header, &segments, None)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&plan.tensors[i].name) && e.contains(&format!("at byte {at} ")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_direct_write_lays_out_the_same_bytes_and_its_samples_catch_misplaced_bytes() {
        let input = SafetensorsFile::open(&fixture()).unwrap();
        let (want_plan, _, _, tail, later) = grown_plan(&input);
        later.set(tail.clone());
        let tmp = tempfile::tempdir().unwrap();
        let want_path = tmp.path().join("want.safetensors");
        let (header, _) = lay_out(&want_plan, &want_path);
        let want = std::fs::read(&want_path).unwrap();
        // The same plan with its new rows handed over only while the writers run: they copy
        // what they can, then wait for them.
        let (plan, i, head, _, later) = grown_plan(&input);
        let row = head.shape[1] * 4;
        let segments: Vec<Vec<Segment<'_>>> = plan
            .tensors
            .iter()
            .map(|t| t.payload.segments().unwrap())
            .collect();
        let total = header.len() as u64 + plan.total_bytes();
        // A small grid, so the ~3 MiB fixture crosses hundreds of chunk and segment edges.
        const GRID: u64 = 3 * 4096;
        let path = tmp.path().join("direct.safetensors");
        File::create(&path).unwrap();
        let written = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                later.set(tail.clone());
            });
            direct::write(&path, &header, &segments, total, GRID, None).unwrap()
        });
        match written {
            direct::Outcome::Written => {}
            direct::Outcome::Refused => {
                eprintln!(
                    "skipped: the filesystem under {} refuses O_DIRECT (the buffered writer is used there)",
                    tmp.path().display()
                );
                return;
            }
        }
        assert!(
            std::fs::read(&path).unwrap() == want,
            "same bytes as laid out"
        );
        let sample = Some(GRID);
        let len = verify_safetensors(&path, &path, &plan, &header, &segments, sample).unwrap();
        assert_eq!(len, total);

        // A byte just before a grid line inside the copied rows (a chunk filled from the wrong
        // place), and one in the computed rows, are caught with the tensor and the byte.
        let start = tensor_start(&plan, total, i);
        let line = (start / GRID + 5) * GRID;
        let near_line = line - 10 - start;
        let mid_way = line + GRID / 2 - start;
        assert!(mid_way + 4096 < head.nbytes(), "inside the copied rows");
        let check = |at: u64| {
            let mut bytes = want.clone();
            bytes[(start + at) as usize] ^= 0x10;
            let bad = tmp.path().join("bad.safetensors");
            std::fs::write(&bad, &bytes).unwrap();
            verify_safetensors(&bad, &path, &plan, &header, &segments, sample)
        };
        for at in [near_line, head.nbytes() + row + 1] {
            let e = check(at).unwrap_err().to_string();
            assert!(
                e.contains(&plan.tensors[i].name) && e.contains(&format!("at byte {at} ")),
                "{e}"
            );
        }
        // Half-way between two grid lines the sampled check reads nothing: the limit it
        // documents (the buffered writer compares every byte).
        assert_eq!(check(mid_way).unwrap(), total);
    }
}
