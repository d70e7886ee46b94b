//! The one way anything is written. A plan says what each output tensor is (copied from an input,
//! or computed); the writer lays it out in a temp file, copies untouched tensors without passing
//! them through user space where the OS allows, fsyncs, re-opens the file with the strict reader,
//! checks every tensor's sha256 against what the plan said, and only then renames into place.

pub mod atomic;
pub mod manifest;
pub mod progress;
pub mod torch;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::safetensors::{serialize_header, HeaderEntry, SafetensorsFile};
use crate::formats::sharded::{self, Index};
use crate::formats::TensorRef;
use atomic::AtomicFile;
use manifest::{hex, sha256, FileManifest, TensorManifest};
use progress::Progress;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where an output tensor's bytes come from.
pub enum Payload<'a> {
    /// Copied byte-for-byte from an input file.
    Copy(TensorRef<'a>),
    /// Computed by the job (only changed tensors are ever held in memory).
    Bytes(Vec<u8>),
}

impl Payload<'_> {
    pub fn len(&self) -> u64 {
        match self {
            Payload::Copy(t) => t.nbytes(),
            Payload::Bytes(b) => b.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes this payload will write (a view into the input's map for contiguous copies).
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Payload::Copy(t) => t.bytes(),
            Payload::Bytes(b) => std::borrow::Cow::Borrowed(b),
        }
    }
}

/// One output tensor.
pub struct PlannedTensor<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub payload: Payload<'a>,
}

/// A whole safetensors output: metadata and tensors in the order they will be laid out.
pub struct SafetensorsPlan<'a> {
    pub metadata: Option<Vec<(String, String)>>,
    pub tensors: Vec<PlannedTensor<'a>>,
}

impl<'a> SafetensorsPlan<'a> {
    /// Every tensor of `file` copied unchanged, in the input's order, metadata kept.
    pub fn identity(file: &'a SafetensorsFile) -> Self {
        SafetensorsPlan {
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
                Payload::Copy(t) => Some(t.map.path.as_path()),
                Payload::Bytes(_) => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
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

/// Bytes copied between progress updates (and between test-hook pauses).
const COPY_CHUNK: u64 = 64 << 20;

/// Hidden test hook: milliseconds to sleep between chunks, so tests can kill a writer mid-write.
const PAUSE_ENV: &str = "CKPT_SURGERY_TEST_PAUSE_MS";

fn test_pause() -> Option<Duration> {
    std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}

/// Write `plan` to `dest` atomically and verified. `inputs` are extra paths that must not be
/// overwritten (the plan's own source files are always protected). Returns the manifest.
pub fn write_safetensors(
    plan: &SafetensorsPlan<'_>,
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
    let entries: Vec<HeaderEntry<'_>> = plan
        .tensors
        .iter()
        .map(|t| HeaderEntry {
            name: &t.name,
            dtype: t.dtype,
            shape: &t.shape,
            len: t.payload.len(),
        })
        .collect();
    let header = serialize_header(dest, plan.metadata.as_deref(), &entries)?;

    let mut protected = plan.input_paths();
    protected.extend_from_slice(inputs);
    let mut out = AtomicFile::create(dest, &protected)?;

    // Hash what the plan says (read from the inputs, not through their maps) while the writer
    // copies.
    write_payloads(&mut out, &header, plan)
        .and_then(|_| out.sync())
        .map_err(|e| about_destination(e, dest))?;
    let manifest = verify_safetensors(out.temp_path(), dest, plan)?;
    out.commit()?;
    Ok(manifest)
}

/// An I/O error while writing the temp file, told about the destination the user named: the
/// temp file is removed and the destination is as it was.
pub(crate) fn about_destination(e: Error, dest: &Path) -> Error {
    match e {
        Error::Io { source, .. } => Error::io(
            dest,
            "write (nothing was replaced; free space or choose another disk)",
            source,
        ),
        other => other,
    }
}

/// Called after each chunk written: advances the progress bar, and sleeps when the hidden test
/// hook asks (so tests can kill a writer mid-write).
pub(crate) struct ChunkSink {
    progress: Progress,
    pause: Option<Duration>,
}

impl ChunkSink {
    pub(crate) fn new(total: u64) -> Self {
        ChunkSink {
            progress: Progress::bytes(total, "writing"),
            pause: test_pause(),
        }
    }

    pub(crate) fn chunk(&mut self, n: u64) {
        self.progress.inc(n);
        if let Some(p) = self.pause {
            std::thread::sleep(p);
        }
    }

    pub(crate) fn finish(self) {
        self.progress.finish();
    }
}

fn write_payloads(out: &mut AtomicFile, header: &[u8], plan: &SafetensorsPlan<'_>) -> Result<()> {
    let tmp = out.temp_path().to_path_buf();
    let mut sink = ChunkSink::new(plan.total_bytes());
    let mut on_chunk = |n: u64| sink.chunk(n);
    let file = out.file();
    file.write_all(header)
        .map_err(|e| Error::io(&tmp, "write", e))?;
    for t in &plan.tensors {
        match &t.payload {
            Payload::Copy(src) => match src.contiguous_range() {
                Some((start, len)) => copy_range(
                    &src.map.file,
                    &src.map.path,
                    start,
                    len,
                    file,
                    &tmp,
                    &mut on_chunk,
                )?,
                None => write_chunks(file, &tmp, &src.bytes(), &mut on_chunk)?,
            },
            Payload::Bytes(b) => write_chunks(file, &tmp, b, &mut on_chunk)?,
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

/// Copy `len` bytes at `start` of `src` to the current position of `dst`. std's `io::copy`
/// between files uses copy_file_range (no user-space buffer) where the kernel allows, and falls
/// back to a bounded buffered copy otherwise.
pub(crate) fn copy_range(
    src: &File,
    src_path: &Path,
    start: u64,
    len: u64,
    dst: &mut File,
    dst_path: &Path,
    on_chunk: &mut impl FnMut(u64),
) -> Result<()> {
    let mut reader = src;
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
        left -= n;
        on_chunk(n);
    }
    Ok(())
}

/// Read a written tensor back (positioned reads), compare every byte with its source — the
/// computed bytes, or the input range it was copied from — and return its sha256 for the
/// manifest. Comparing costs far less than hashing the source as well.
fn read_back(
    out: &crate::formats::mapped::Mapped,
    start: u64,
    len: u64,
    source: &Payload<'_>,
) -> std::result::Result<String, String> {
    use std::os::unix::fs::FileExt;
    let mut h = Sha256::new();
    let mut at = 0usize;
    let mut mismatch: Option<usize> = None;
    let contiguous = match source {
        Payload::Copy(s) => s.contiguous_range(),
        Payload::Bytes(_) => None,
    };
    let gathered = match source {
        Payload::Copy(s) if contiguous.is_none() => Some(s.bytes()),
        _ => None,
    };
    let mut src_buf = Vec::new();
    out.stream(start, len, |chunk| {
        h.update(chunk);
        let n = chunk.len();
        if mismatch.is_none() {
            let same = match (source, contiguous, &gathered) {
                (Payload::Bytes(b), _, _) => b.get(at..at + n) == Some(chunk),
                (Payload::Copy(s), Some((s0, _)), _) => {
                    src_buf.resize(n, 0);
                    s.map
                        .file
                        .read_exact_at(&mut src_buf, s0 + at as u64)
                        .is_ok()
                        && src_buf == chunk
                }
                (_, _, Some(g)) => g.get(at..at + n) == Some(chunk),
                _ => false,
            };
            if !same {
                mismatch = Some(at);
            }
        }
        at += n;
    })
    .map_err(|e| e.to_string())?;
    match mismatch {
        Some(at) => Err(format!(
            "differs from what was planned at byte {at} of the tensor"
        )),
        None => Ok(hex(&h.finalize())),
    }
}

/// Re-open the temp file with the strict reader and check it is exactly the plan.
fn verify_safetensors(tmp: &Path, dest: &Path, plan: &SafetensorsPlan<'_>) -> Result<FileManifest> {
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
    let (file_sha, tensor_shas) = rayon::join(
        || sha256_file(tmp),
        || {
            written
                .header
                .tensors
                .par_iter()
                .zip(&plan.tensors)
                .map(|(t, p)| {
                    read_back(&written.map, t.start, t.len, &p.payload)
                        .map_err(|e| format!("tensor '{}' {e}", t.name))
                })
                .collect::<std::result::Result<Vec<_>, String>>()
        },
    );
    let file_sha = file_sha?;
    let tensor_shas = tensor_shas.map_err(verr)?;
    let tensors = written
        .header
        .tensors
        .iter()
        .zip(tensor_shas)
        .map(|(t, sha256)| TensorManifest {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            bytes: t.len,
            sha256,
        })
        .collect();
    Ok(FileManifest {
        path: dest.to_path_buf(),
        bytes: written.map.len,
        sha256: file_sha,
        tensors,
    })
}

/// sha256 of a whole file, read sequentially.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut h = Sha256::new();
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
    Ok(hex(&h.finalize()))
}

/// Write a small file (an index, a tokenizer, a config) atomically; `verify` re-reads the temp
/// file. Returns its sha256.
pub fn write_bytes(
    dest: &Path,
    inputs: &[&Path],
    bytes: &[u8],
    verify: impl FnOnce(&Path) -> Result<()>,
) -> Result<String> {
    let mut out = AtomicFile::create(dest, inputs)?;
    let tmp = out.temp_path().to_path_buf();
    out.file()
        .write_all(bytes)
        .map_err(|e| Error::io(&tmp, "write", e))?;
    out.sync()?;
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
    Ok(sha256(bytes))
}

/// What writing a sharded set produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardedManifest {
    pub index: PathBuf,
    pub index_sha256: String,
    pub shards: Vec<FileManifest>,
}

/// What to do for one shard of a sharded output.
pub enum ShardOut<'a> {
    /// Write this plan (atomically, verified).
    Safetensors(SafetensorsPlan<'a>),
    /// Write this torch plan (atomically, verified), reading with this policy.
    Torch(
        crate::formats::torch::writer::TorchPlan<'a>,
        &'a crate::formats::torch::pickle::GlobalPolicy,
    ),
    /// An unchanged shard: hard-link the input file (falls back to a verified copy elsewhere).
    Link(&'a Path),
}

/// Write shards (each atomically and verified) into `dir`, then the index last, so a reader that
/// goes by the index never sees a shard set that is half old, half new.
pub fn write_sharded(
    dir: &Path,
    index_name: &str,
    index_metadata: Option<&serde_json::Map<String, serde_json::Value>>,
    shards: &[(String, ShardOut<'_>)],
    weight_map: &[(String, String)],
    inputs: &[&Path],
) -> Result<ShardedManifest> {
    let mut manifests = Vec::with_capacity(shards.len());
    for (name, shard) in shards {
        let dest = dir.join(name);
        let m = match shard {
            ShardOut::Safetensors(plan) => write_safetensors(plan, &dest, inputs)?,
            ShardOut::Torch(plan, policy) => torch::write_torch(plan, &dest, inputs, policy)?,
            ShardOut::Link(src) => {
                atomic::ensure_not_input(&dest, inputs)?;
                if dest.exists() {
                    return Err(Error::Usage(format!(
                        "{}: exists; --link only creates new shard files",
                        dest.display()
                    )));
                }
                std::fs::hard_link(src, &dest)
                    .map_err(|e| Error::io(&dest, "hard-link the unchanged shard to", e))?;
                FileManifest {
                    path: dest.clone(),
                    bytes: std::fs::metadata(&dest)
                        .map_err(|e| Error::io(&dest, "stat", e))?
                        .len(),
                    sha256: sha256_file(&dest)?,
                    tensors: Vec::new(),
                }
            }
        };
        manifests.push(m);
    }
    let mut doc = serde_json::Map::new();
    if let Some(meta) = index_metadata {
        doc.insert("metadata".into(), serde_json::Value::Object(meta.clone()));
    }
    let wm: serde_json::Map<String, serde_json::Value> = weight_map
        .iter()
        .map(|(t, s)| (t.clone(), serde_json::Value::String(s.clone())))
        .collect();
    doc.insert("weight_map".into(), serde_json::Value::Object(wm));
    let mut text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::format(dir, format!("cannot serialise the index: {e}")))?;
    text.push('\n');
    let index_path = dir.join(index_name);
    let index_sha = write_bytes(&index_path, inputs, text.as_bytes(), |tmp| {
        let back = std::fs::read_to_string(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
        sharded::parse_index(tmp, &back).map(|_: Index| ())
    })?;
    Ok(ShardedManifest {
        index: index_path,
        index_sha256: index_sha,
        shards: manifests,
    })
}
