//! Writing a GGUF file from an open one and its edits: key/values kept (their bytes copied),
//! set (serialized anew) or grown (an array's bytes copied and new elements appended), tensors
//! kept or given new bytes after their old ones (rows appended), or rows computed while the
//! writer runs ([`Part::Later`]). Atomic: a temp file beside the destination, fsynced while it
//! is re-opened with the strict reader and compared with the plan (header bytes, every tensor's
//! info, computed bytes in full, copied bytes in full after a buffered write and at every write
//! boundary after a direct one: `segment::differs`), then renamed; never written over or inside
//! an input.
//!
//! Layout. When every tensor is kept, the data section is copied whole and each tensor keeps its
//! offset (offsets are relative to the data section, so a header that grows or shrinks moves
//! nothing): the data section's bytes are the input's. Otherwise the tensors are laid out as
//! gguf-py's `GGUFWriter` and llama.cpp's `gguf_write` do: in info order, each padded with zeros
//! to the alignment, the last one too.

use super::{Gguf, KeyValue, TensorInfo, Value, MAGIC};
use crate::error::{Error, Result};
use crate::formats::gguf::GgmlType;
use crate::output::atomic::{refuse_overlap, AtomicFile};
use crate::output::later::Later;
use crate::output::segment::{differs, Segment};
use crate::output::{about_destination, direct, write_any};
use std::borrow::Cow;
use std::path::Path;

/// One key/value of the output.
#[derive(Debug, Clone)]
pub enum Kv<'a> {
    /// The input's key/value, its bytes copied.
    Keep(&'a KeyValue),
    /// A key and a value, serialized anew.
    Set(String, Value),
    /// The input's array with these elements appended (its own bytes copied, so a token that is
    /// not UTF-8 survives).
    Append(&'a KeyValue, Vec<Value>),
}

impl Kv<'_> {
    pub fn key(&self) -> &str {
        match self {
            Kv::Keep(kv) | Kv::Append(kv, _) => &kv.key,
            Kv::Set(k, _) => k,
        }
    }
}

/// A piece of an output tensor's data.
#[derive(Clone)]
pub enum Part<'a> {
    /// `len` bytes of the input tensor's data from its byte `start`.
    Input { start: u64, len: u64 },
    /// New bytes (rows in the tensor's own ggml type).
    New(Vec<u8>),
    /// New bytes computed while the writer runs: its length is known, the writer writes
    /// everything else first and waits for them only then (see `output::direct`).
    Later(&'a Later),
}

impl Part<'_> {
    fn len(&self) -> u64 {
        match self {
            Part::Input { len, .. } => *len,
            Part::New(b) => b.len() as u64,
            Part::Later(l) => l.len(),
        }
    }
}

impl std::fmt::Debug for Part<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Input { start, len } => write!(f, "Input {{ start: {start}, len: {len} }}"),
            Part::New(b) => write!(f, "New({} bytes)", b.len()),
            Part::Later(l) => write!(f, "Later({} bytes)", l.len()),
        }
    }
}

/// One tensor of the output: its info and its data, pieces of the input tensor's bytes and new
/// ones.
#[derive(Debug, Clone)]
pub struct OutTensor<'a> {
    pub name: String,
    pub ggml: &'static GgmlType,
    /// `ne[]`, fastest-varying first.
    pub ne: Vec<u64>,
    /// The input tensor its [`Part::Input`] pieces come from.
    pub from: Option<&'a TensorInfo>,
    pub parts: Vec<Part<'a>>,
}

impl OutTensor<'_> {
    /// Its bytes, by its type and shape.
    fn bytes(&self) -> Option<u64> {
        let n = self.ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        self.ggml.bytes_for(n)
    }

    fn kept(&self) -> bool {
        self.from.is_some_and(|t| {
            t.name == self.name
                && t.ggml == self.ggml
                && t.ne == self.ne
                && matches!(
                    self.parts[..],
                    [Part::Input { start: 0, len }] if len == t.bytes
                )
        })
    }

    /// Bytes copied from the input, and new.
    fn counts(&self) -> (u64, u64) {
        self.parts.iter().fold((0, 0), |(c, n), p| match p {
            Part::Input { len, .. } => (c + len, n),
            Part::New(_) | Part::Later(_) => (c, n + p.len()),
        })
    }
}

/// A GGUF file to write: the input's header and tensors with edits.
#[derive(Debug, Clone)]
pub struct GgufOut<'a> {
    pub input: &'a Gguf,
    pub kv: Vec<Kv<'a>>,
    pub tensors: Vec<OutTensor<'a>>,
}

impl<'a> GgufOut<'a> {
    /// The input as it is: every key/value and tensor kept.
    pub fn identity(g: &'a Gguf) -> Self {
        GgufOut {
            input: g,
            kv: g.kv.iter().map(Kv::Keep).collect(),
            tensors: g
                .tensors
                .iter()
                .map(|t| OutTensor {
                    name: t.name.clone(),
                    ggml: t.ggml,
                    ne: t.ne.clone(),
                    from: Some(t),
                    parts: vec![Part::Input {
                        start: 0,
                        len: t.bytes,
                    }],
                })
                .collect(),
        }
    }

    /// Set `key` to `value`: in its place when the header has it, else last.
    pub fn set(&mut self, key: &str, value: Value) {
        let new = Kv::Set(key.to_string(), value);
        match self.kv.iter_mut().find(|kv| kv.key() == key) {
            Some(kv) => *kv = new,
            None => self.kv.push(new),
        }
    }

    /// Remove `key`; whether the header had it.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.kv.len();
        self.kv.retain(|kv| kv.key() != key);
        self.kv.len() < before
    }

    /// The value `key` will have (the input's, or the one set).
    pub fn get(&self, key: &str) -> Option<Cow<'_, Value>> {
        match self.kv.iter().find(|kv| kv.key() == key)? {
            Kv::Keep(kv) => Some(Cow::Borrowed(&kv.value)),
            Kv::Set(_, v) => Some(Cow::Borrowed(v)),
            Kv::Append(kv, more) => match &kv.value {
                Value::Array(t, old) => Some(Cow::Owned(Value::Array(
                    *t,
                    old.iter().chain(more).cloned().collect(),
                ))),
                v => Some(Cow::Borrowed(v)),
            },
        }
    }

    /// Append `values` to the array `key` (the input's, or as edited so far); refused when it is
    /// not an array of their type.
    pub fn append(&mut self, key: &str, values: Vec<Value>) -> Result<()> {
        let path = self.input.path();
        let Some(at) = self.kv.iter().position(|kv| kv.key() == key) else {
            return Err(Error::format(
                path,
                format!("{key} is missing: nothing to append to"),
            ));
        };
        let kind = match &self.kv[at] {
            Kv::Keep(kv) | Kv::Append(kv, _) => &kv.value,
            Kv::Set(_, v) => v,
        };
        let Value::Array(t, _) = kind else {
            return Err(Error::format(path, format!("{key} is not an array")));
        };
        if let Some(v) = values.iter().find(|v| v.kind() != *t) {
            return Err(Error::format(
                path,
                format!(
                    "{key} is an array of {}, not of {}",
                    t.name(),
                    v.kind().name()
                ),
            ));
        }
        match &mut self.kv[at] {
            Kv::Keep(kv) => self.kv[at] = Kv::Append(kv, values),
            Kv::Append(_, more) => more.extend(values),
            Kv::Set(_, Value::Array(_, items)) => items.extend(values),
            Kv::Set(..) => {}
        }
        Ok(())
    }

    /// The output tensor named `name`.
    pub fn tensor_mut(&mut self, name: &str) -> Option<&mut OutTensor<'a>> {
        self.tensors.iter_mut().find(|t| t.name == name)
    }

    /// Whether the data section is copied whole (every tensor kept).
    fn keeps_data(&self) -> bool {
        self.tensors.len() == self.input.tensors.len() && self.tensors.iter().all(OutTensor::kept)
    }
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub path: std::path::PathBuf,
    pub bytes: u64,
    /// Tensor bytes copied from the input, and new.
    pub copied: u64,
    pub new: u64,
}

/// Serialize one value (its type written by the caller).
fn value_bytes(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => string_bytes(out, s.as_bytes()),
        Value::Array(t, items) => {
            out.extend((*t as u32).to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for i in items {
                value_bytes(out, i);
            }
        }
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

fn string_bytes(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// One key/value's bytes.
fn kv_bytes(out: &mut Vec<u8>, g: &Gguf, kv: &Kv) -> Result<()> {
    let raw = |kv: &KeyValue| {
        g.map
            .slice(kv.range.start, kv.range.end - kv.range.start)
            .ok_or_else(|| Error::format(g.path(), format!("key '{}' lies past the end", kv.key)))
    };
    match kv {
        Kv::Keep(kv) => out.extend(raw(kv)?),
        Kv::Set(key, v) => {
            string_bytes(out, key.as_bytes());
            out.extend((v.kind() as u32).to_le_bytes());
            value_bytes(out, v);
        }
        Kv::Append(kv, more) => {
            let old = raw(kv)?;
            let Value::Array(_, items) = &kv.value else {
                return Err(Error::format(
                    g.path(),
                    format!("{} is not an array", kv.key),
                ));
            };
            // key length, key, value type (9), element type: then the count, then the elements.
            let key_len = old
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::format(g.path(), "a key's length is unreadable"))?;
            let count_at = 8 + key_len + 8;
            let elements = old.get(count_at + 8..).ok_or_else(|| {
                Error::format(g.path(), format!("{} is shorter than its header", kv.key))
            })?;
            out.extend(&old[..count_at]);
            out.extend(((items.len() + more.len()) as u64).to_le_bytes());
            out.extend(elements);
            for v in more {
                value_bytes(out, v);
            }
        }
    }
    Ok(())
}

/// The header (magic to the data section's start, padding included) and each tensor's offset.
fn header(plan: &GgufOut, dest: &Path) -> Result<(Vec<u8>, Vec<u64>)> {
    let g = plan.input;
    let mut h = Vec::new();
    h.extend(MAGIC);
    h.extend(g.version.to_le_bytes());
    h.extend((plan.tensors.len() as u64).to_le_bytes());
    h.extend((plan.kv.len() as u64).to_le_bytes());
    for kv in &plan.kv {
        kv_bytes(&mut h, g, kv)?;
    }
    let keeps = plan.keeps_data();
    let mut offsets = Vec::with_capacity(plan.tensors.len());
    let mut next = 0u64;
    for t in &plan.tensors {
        let bytes = t.bytes().ok_or_else(|| {
            Error::tensor(
                dest,
                &t.name,
                format!("{:?} is not whole {} blocks", t.ne, t.ggml.name),
            )
        })?;
        let have: u64 = t.parts.iter().map(Part::len).sum();
        let outside = t.parts.iter().any(|p| match p {
            Part::Input { start, len } => t
                .from
                .is_none_or(|f| start.checked_add(*len).is_none_or(|e| e > f.bytes)),
            Part::New(_) | Part::Later(_) => false,
        });
        if outside {
            return Err(Error::tensor(
                dest,
                &t.name,
                "the plan copies bytes from outside its input tensor",
            ));
        }
        if have != bytes {
            return Err(Error::tensor(
                dest,
                &t.name,
                format!(
                    "{} {:?} needs {bytes} bytes; the plan gives {have}",
                    t.ggml.name, t.ne
                ),
            ));
        }
        let offset = match (keeps, t.from) {
            (true, Some(f)) => f.offset,
            _ => next,
        };
        string_bytes(&mut h, t.name.as_bytes());
        h.extend((t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            h.extend(d.to_le_bytes());
        }
        h.extend(t.ggml.id.to_le_bytes());
        h.extend(offset.to_le_bytes());
        offsets.push(offset);
        next = offset + bytes.next_multiple_of(g.alignment);
    }
    h.resize((h.len() as u64).next_multiple_of(g.alignment) as usize, 0);
    Ok((h, offsets))
}

/// The data section's pieces: the input's data section whole, or each tensor's bytes and padding.
fn segments<'p>(plan: &'p GgufOut) -> Vec<Vec<Segment<'p>>> {
    let g = plan.input;
    if plan.keeps_data() {
        let len = g.map.len.saturating_sub(g.data_start);
        return vec![vec![Segment::File {
            map: &g.map,
            start: g.data_start,
            len,
        }]];
    }
    plan.tensors
        .iter()
        .map(|t| {
            let base = t.from.map_or(0, |f| f.start);
            let mut s: Vec<Segment> = t
                .parts
                .iter()
                .filter(|p| p.len() > 0)
                .map(|p| match p {
                    Part::Input { start, len } => Segment::File {
                        map: &g.map,
                        start: base + start,
                        len: *len,
                    },
                    Part::New(b) => Segment::Memory(Cow::Borrowed(b)),
                    Part::Later(l) => Segment::Later(l),
                })
                .collect();
            let len: u64 = s.iter().map(Segment::len).sum();
            let pad = len.next_multiple_of(g.alignment) - len;
            if pad > 0 {
                s.push(Segment::Memory(Cow::Owned(vec![0; pad as usize])));
            }
            s
        })
        .collect()
}

/// Write `plan` to `dest` atomically, verified by re-reading it with the strict reader.
pub fn write_gguf(plan: &GgufOut, dest: &Path) -> Result<Written> {
    let input = plan.input.path();
    refuse_overlap(dest, &[input])?;
    let (head, offsets) = header(plan, dest)?;
    let segs = segments(plan);
    let total: u64 = segs.iter().flatten().map(Segment::len).sum();
    let mut out = AtomicFile::create(dest, &[input])?;
    let direct = direct::wanted(head.len() as u64 + total);
    let wrote_direct =
        write_any(&mut out, &head, &segs, total, direct).map_err(|e| about_destination(e, dest))?;
    // The fsync waits on the disk: the read-back runs meanwhile, as the safetensors writer's
    // does. Both must succeed before the rename.
    let tmp = out.temp_path().to_path_buf();
    let (synced, verified) = std::thread::scope(|s| {
        let v = s.spawn(|| verify(plan, &tmp, &head, &offsets, &segs, wrote_direct));
        let synced = out.sync();
        let verified = v
            .join()
            .unwrap_or_else(|_| Err("the read-back thread failed".into()));
        (synced, verified)
    });
    synced.map_err(|e| about_destination(e, dest))?;
    verified.map_err(|p| Error::Verify {
        path: dest.to_path_buf(),
        problem: p,
    })?;
    let (copied, new) = plan
        .tensors
        .iter()
        .map(OutTensor::counts)
        .fold((0, 0), |(a, b), (c, n)| (a + c, b + n));
    let path = out.commit()?;
    Ok(Written {
        path,
        bytes: head.len() as u64 + total,
        copied,
        new,
    })
}

/// The temp file, re-opened by the strict reader, is the plan: header bytes, tensor infos, and
/// every tensor's data (sampled at chunk edges when written directly: see `segment::differs`).
fn verify(
    plan: &GgufOut,
    tmp: &Path,
    head: &[u8],
    offsets: &[u64],
    segs: &[Vec<Segment>],
    sampled: bool,
) -> std::result::Result<(), String> {
    let back = Gguf::open(tmp).map_err(|e| e.to_string())?;
    if back.map.slice(0, head.len() as u64) != Some(head) || back.data_start != head.len() as u64 {
        return Err("the header read back differs from the one written".into());
    }
    if back.tensors.len() != plan.tensors.len() {
        return Err(format!(
            "{} tensors read back, {} planned",
            back.tensors.len(),
            plan.tensors.len()
        ));
    }
    for ((b, p), off) in back.tensors.iter().zip(&plan.tensors).zip(offsets) {
        if b.name != p.name || b.ggml != p.ggml || b.ne != p.ne || b.offset != *off {
            return Err(format!("tensor '{}' read back as another's info", p.name));
        }
    }
    let sample = sampled.then_some(direct::CHUNK);
    if sample.is_some() {
        back.map.expect_random_reads();
    }
    let starts: Vec<u64> = if plan.keeps_data() {
        vec![back.data_start]
    } else {
        back.tensors.iter().map(|t| t.start).collect()
    };
    for (start, s) in starts.iter().zip(segs) {
        if let Some(at) = differs(&back.map, *start, s, sample).map_err(|e| e.to_string())? {
            return Err(format!("data differs from the plan at byte {}", start + at));
        }
    }
    let end = starts.last().map_or(back.data_start, |s| {
        s + segs.last().map_or(0, |v| v.iter().map(Segment::len).sum())
    });
    if back.map.len != end {
        return Err(format!("{} bytes read back, {end} planned", back.map.len));
    }
    Ok(())
}
