//! GGUF (llama.cpp's format), versions 2 and 3, little-endian: read by memory map and validated
//! before anything is handed out. The header's key/values are kept in file order with each
//! one's byte range, and every tensor's info with its own, so a writer can copy what it does not
//! change byte for byte; every tensor's data range is checked (its ggml type's whole blocks,
//! overflow-checked, aligned, inside the file, not overlapping another). A truncated or lying
//! file is refused with one line naming the file and what is wrong, never a panic.
//!
//! Layout: magic `GGUF`, u32 version, u64 tensor count, u64 key/value count, the key/values
//! (string key, u32 value type, value), the tensor infos (string name, u32 dims, u64 `ne[]`
//! fastest-varying first, u32 ggml type, u64 offset into the data section), padding to
//! `general.alignment` (default 32), the data section.

pub mod edit;
pub mod ggml;
pub mod keys;
pub mod quant;
pub mod write;

use crate::error::{Error, Result};
use crate::mapped::Mapped;
pub use ggml::GgmlType;
use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;

/// The layout's name in reports and refusals.
pub const LAYOUT: &str = "GGUF";
/// The first four bytes of every GGUF file.
const MAGIC: &[u8; 4] = b"GGUF";
/// The key that sets the data section's alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The data section's alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The most dimensions a ggml tensor has (GGML_MAX_DIMS).
const MAX_DIMS: u32 = 4;
/// How deep arrays of arrays may nest before the file is refused (ggml writes depth 1).
const MAX_DEPTH: usize = 8;
/// The most metadata values (array elements counted) a header may hold: a 262 144-token
/// vocabulary with scores, types and merges is about a million; a lying count over a large
/// file would otherwise ask for tens of bytes of memory per byte of the file.
pub const MAX_VALUES: u64 = 1 << 24;

/// Is this the start of a GGUF file? (`formats::open` asks, by content.)
pub(super) fn is_gguf(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// A metadata value's type, by GGUF's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    fn of(n: u32) -> Option<ValueType> {
        use ValueType::*;
        [
            U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64,
        ]
        .get(n as usize)
        .copied()
    }

    /// Its name as gguf-py spells it, lower case (`uint32`, `float32`, `string`, `array`).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            U32 => "uint32",
            I32 => "int32",
            F32 => "float32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "uint64",
            I64 => "int64",
            F64 => "float64",
        }
    }

    /// Bytes of one value of a fixed-size type (None for strings and arrays).
    fn size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// A string (bytes that are not UTF-8 shown with U+FFFD; the key's byte range keeps them).
    String(String),
    /// An array: its element type and elements (arrays may hold arrays).
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// Its type.
    pub fn kind(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// An integer value as u64 (None for a negative, a float, a string, an array).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }

    /// As JSON (u64 and i64 exactly; floats as f64).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Value::U8(v) => json!(v),
            Value::I8(v) => json!(v),
            Value::U16(v) => json!(v),
            Value::I16(v) => json!(v),
            Value::U32(v) => json!(v),
            Value::I32(v) => json!(v),
            Value::F32(v) => json!(f64::from(*v)),
            Value::Bool(v) => json!(v),
            Value::String(v) => json!(v),
            Value::Array(_, v) => serde_json::Value::Array(v.iter().map(Value::to_json).collect()),
            Value::U64(v) => json!(v),
            Value::I64(v) => json!(v),
            Value::F64(v) => json!(v),
        }
    }
}

/// One key/value of the header, in file order, with the bytes it takes (key length to the
/// value's end).
#[derive(Debug, Clone)]
pub struct KeyValue {
    pub key: String,
    pub value: Value,
    pub range: Range<u64>,
    /// The first string of the value (an array's element index; 0 for a string) whose bytes are
    /// not UTF-8, shown with U+FFFD in `value`: compared with text, it must not match.
    pub not_utf8: Option<usize>,
}

/// One tensor: its info in the header and where its data lies.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    pub ggml: &'static GgmlType,
    /// `ne[]` as the file stores it: the fastest-varying dimension first.
    pub ne: Vec<u64>,
    /// Offset into the data section, as the file stores it.
    pub offset: u64,
    /// Where its data starts in the file (data section start + offset).
    pub start: u64,
    pub bytes: u64,
    /// The bytes of its info in the header.
    pub info: Range<u64>,
}

impl TensorInfo {
    /// The shape in row-major order, rows first, as every other format is shown: `ne[]`
    /// reversed (a matrix of `ne = [cols, rows]` is `[rows, cols]`).
    pub fn shape(&self) -> Vec<u64> {
        self.ne.iter().rev().copied().collect()
    }

    /// Its elements (validated when the file was opened).
    pub fn elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Rows: the slowest dimension of a matrix (`ne[1]` for 2-D), 1 for a vector.
    pub fn rows(&self) -> u64 {
        self.ne.iter().skip(1).product()
    }
}

/// A GGUF file as `formats::open` found it (by its first bytes): mapped and its header parsed
/// the first time a tool asks ([`GgufAt::get`]), so a tool can start other reading (the merged
/// tokenizer extend-embeddings appends) beside the parse, and a tool that refuses GGUF neither
/// pays for nor fails on it.
#[derive(Debug)]
pub struct GgufAt {
    path: std::path::PathBuf,
    opened: std::sync::OnceLock<Gguf>,
}

impl GgufAt {
    pub fn new(path: &Path) -> GgufAt {
        GgufAt {
            path: path.to_path_buf(),
            opened: std::sync::OnceLock::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file, mapped and validated on first use.
    pub fn get(&self) -> Result<&Gguf> {
        if let Some(g) = self.opened.get() {
            return Ok(g);
        }
        let g = Gguf::open(&self.path)?;
        Ok(self.opened.get_or_init(|| g))
    }
}

/// An open GGUF file.
#[derive(Debug)]
pub struct Gguf {
    pub map: Mapped,
    pub version: u32,
    /// The header's key/values, in file order.
    pub kv: Vec<KeyValue>,
    /// The tensor infos, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// Where the tensor infos end (the header's end, before the padding).
    pub header_end: u64,
    /// Where the data section starts (the header's end, aligned).
    pub data_start: u64,
}

impl Gguf {
    /// Map and validate the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Gguf> {
        let map = Mapped::open(path)?;
        let parsed = parse(path, map.bytes())?;
        Ok(Gguf {
            map,
            version: parsed.version,
            kv: parsed.kv,
            tensors: parsed.tensors,
            alignment: parsed.alignment,
            header_end: parsed.header_end,
            data_start: parsed.data_start,
        })
    }

    pub fn path(&self) -> &Path {
        &self.map.path
    }

    /// The value of `key`, if the header has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of tensor `t`'s data (validated to lie in the file when it was opened).
    pub fn data(&self, t: &TensorInfo) -> Result<&[u8]> {
        self.map.tensor_slice(&t.name, t.start, t.bytes)
    }
}

/// What [`parse`] read.
#[derive(Debug)]
pub struct Parsed {
    pub version: u32,
    pub kv: Vec<KeyValue>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub header_end: u64,
    pub data_start: u64,
}

/// Parse and validate a whole GGUF file's bytes (`path` names it in errors). The fuzz target
/// calls this on arbitrary bytes.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let mut c = Cursor {
        path,
        bytes,
        at: 0,
        values_left: MAX_VALUES,
        not_utf8: None,
        strings_read: 0,
    };
    let version = header(&mut c)?;
    let n_tensors = c.u64("the tensor count")?;
    let n_kv = c.u64("the key/value count")?;
    // Each key/value takes at least 13 bytes (key length, a 1-byte key, type); each tensor info
    // 24 (name length, a 1-byte name, dims, type, offset): counts past that are lies, refused
    // before anything is allocated for them.
    c.count_fits(n_kv, 13, "key/values")?;
    let mut kv = Vec::with_capacity(n_kv as usize);
    let mut seen = HashSet::new();
    for _ in 0..n_kv {
        let one = key_value(&mut c)?;
        if !seen.insert(one.key.clone()) {
            return Err(c.err(format!("key '{}' appears twice in the header", one.key)));
        }
        kv.push(one);
    }
    let alignment = alignment(path, &kv)?;
    c.count_fits(n_tensors, 24, "tensor infos")?;
    let mut infos = Vec::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        infos.push(tensor_info(&mut c)?);
    }
    let header_end = c.at as u64;
    let data_start = header_end
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| c.err("the data section's start overflows"))?;
    let tensors = place(path, bytes.len() as u64, infos, data_start, alignment)?;
    Ok(Parsed {
        version,
        kv,
        tensors,
        alignment,
        header_end,
        data_start,
    })
}

/// The magic and version: 2 and 3 are read (their layouts are the same); 1 (u32 counts) and a
/// big-endian file are refused by name.
fn header(c: &mut Cursor) -> Result<u32> {
    let magic = c.take(4, "the magic")?;
    if magic != MAGIC {
        return Err(c.err(format!(
            "not a GGUF file: starts with {magic:02x?}, not \"GGUF\""
        )));
    }
    let version = c.u32("the version")?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(Error::unsupported(
            c.path,
            "GGUF version 1 (32-bit counts) is not read: convert it with a current llama.cpp",
        )),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => Err(Error::unsupported(
            c.path,
            format!(
                "a big-endian GGUF (version {}) is not read: convert it to little-endian (gguf-py's gguf_convert_endian.py)",
                v.swap_bytes()
            ),
        )),
        v => Err(c.err(format!("GGUF version {v} is unknown (versions 2 and 3 are read)"))),
    }
}

/// One key/value.
fn key_value(c: &mut Cursor) -> Result<KeyValue> {
    let start = c.at as u64;
    let key = c.name("a key")?;
    let at = c.at;
    let t = c.u32("the value type")?;
    let kind = ValueType::of(t).ok_or_else(|| {
        c.err_at(
            at,
            format!("key '{key}' has value type {t}, which GGUF does not define (0–12)"),
        )
    })?;
    (c.not_utf8, c.strings_read) = (None, 0);
    let value = c.value(kind, &key, 0)?;
    Ok(KeyValue {
        key,
        value,
        range: start..c.at as u64,
        not_utf8: c.not_utf8.take(),
    })
}

/// `general.alignment`: a u32 power of two, else the default.
fn alignment(path: &Path, kv: &[KeyValue]) -> Result<u64> {
    let Some(a) = kv.iter().find(|kv| kv.key == ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match a.value {
        Value::U32(n) if n.is_power_of_two() => Ok(n.into()),
        ref v => Err(Error::format(
            path,
            format!(
                "{} is {v:?}: it must be a uint32 power of two",
                ALIGNMENT_KEY
            ),
        )),
    }
}

/// One tensor info, its type known and its size computed (its place is checked by [`place`]).
fn tensor_info(c: &mut Cursor) -> Result<TensorInfo> {
    let start = c.at as u64;
    let name = c.name("a tensor name")?;
    let n_dims = c.u32("a tensor's dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(tensor_err(
            c.path,
            &name,
            format!("{n_dims} dimensions (ggml has at most {MAX_DIMS})"),
        ));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(c.u64("a tensor's dimension")?);
    }
    let type_at = c.at;
    let id = c.u32("a tensor's ggml type")?;
    let offset = c.u64("a tensor's offset")?;
    let ggml = ggml::of(id).ok_or_else(|| {
        c.err_at(
            type_at,
            format!("tensor '{name}' has ggml type {id}, which is unknown (or removed from ggml)"),
        )
    })?;
    let bytes = tensor_bytes(c.path, &name, ggml, &ne)?;
    Ok(TensorInfo {
        name,
        ggml,
        ne,
        offset,
        start: 0,
        bytes,
        info: start..c.at as u64,
    })
}

/// A tensor's bytes: whole blocks per row, every product checked.
fn tensor_bytes(path: &Path, name: &str, ggml: &GgmlType, ne: &[u64]) -> Result<u64> {
    if let Some(d) = ne.iter().find(|&&d| d > i64::MAX as u64) {
        return Err(tensor_err(
            path,
            name,
            format!("dimension {d} is too large"),
        ));
    }
    let row = ne.first().copied().unwrap_or(1);
    if !row.is_multiple_of(ggml.block) {
        return Err(tensor_err(
            path,
            name,
            format!(
                "its rows of {row} elements are not whole {} blocks of {}",
                ggml.name, ggml.block
            ),
        ));
    }
    ne.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| ggml.bytes_for(n))
        .ok_or_else(|| {
            tensor_err(
                path,
                name,
                format!("shape {ne:?} of {} overflows 64 bits", ggml.name),
            )
        })
}

/// Each tensor placed in the data section: its offset aligned, its bytes inside the file and
/// overlapping no other tensor's.
fn place(
    path: &Path,
    len: u64,
    mut infos: Vec<TensorInfo>,
    data_start: u64,
    alignment: u64,
) -> Result<Vec<TensorInfo>> {
    let mut seen = HashSet::new();
    for t in &mut infos {
        if !seen.insert(t.name.clone()) {
            return Err(tensor_err(path, &t.name, "the name appears twice"));
        }
        if !t.offset.is_multiple_of(alignment) {
            return Err(tensor_err(
                path,
                &t.name,
                format!(
                    "data offset {} is not a multiple of the alignment {alignment}",
                    t.offset
                ),
            ));
        }
        let start = data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= len => t.start = s,
            _ => {
                return Err(tensor_err(
                    path,
                    &t.name,
                    format!(
                        "its {} bytes at data offset {} (file byte {data_start} + {}) lie past the end of the file ({len} bytes): the file is truncated or the offset is wrong",
                        t.bytes, t.offset, t.offset
                    ),
                ))
            }
        }
    }
    let mut order: Vec<&TensorInfo> = infos.iter().filter(|t| t.bytes > 0).collect();
    order.sort_by_key(|t| t.start);
    for w in order.windows(2) {
        if w[0].start + w[0].bytes > w[1].start {
            return Err(tensor_err(
                path,
                &w[1].name,
                format!("its data overlaps tensor '{}'s", w[0].name),
            ));
        }
    }
    Ok(infos)
}

fn tensor_err(path: &Path, name: &str, problem: impl Into<String>) -> Error {
    Error::tensor(path, name, problem)
}

/// Reading the header, every read bounds-checked.
struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    at: usize,
    /// Metadata values still allowed ([`MAX_VALUES`]).
    values_left: u64,
    /// The current key's first string that is not UTF-8 (see [`KeyValue::not_utf8`]).
    not_utf8: Option<usize>,
    /// Strings of the current key read so far.
    strings_read: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, problem: impl Into<String>) -> Error {
        Error::format(self.path, format!("GGUF: {}", problem.into()))
    }

    fn err_at(&self, at: usize, problem: impl Into<String>) -> Error {
        Error::format(
            self.path,
            format!("GGUF header byte {at}: {}", problem.into()),
        )
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let got = self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end));
        match got {
            Some(b) => {
                self.at += n;
                Ok(b)
            }
            None => Err(self.err(format!(
                "truncated: {what} ({n} bytes at byte {}) runs past the end of the file ({} bytes)",
                self.at,
                self.bytes.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items of at least `min` bytes each must fit in what is left of the file.
    fn count_fits(&self, n: u64, min: u64, what: &str) -> Result<()> {
        let left = (self.bytes.len() - self.at) as u64;
        if n.checked_mul(min).is_some_and(|need| need <= left) {
            return Ok(());
        }
        Err(self.err(format!(
            "the header says {n} {what} at byte {}, but only {left} bytes follow: the file is truncated or the count is wrong",
            self.at
        )))
    }

    /// A string, and whether its bytes are UTF-8 (if not, it is shown with U+FFFD).
    fn string(&mut self, what: &str) -> Result<(String, bool)> {
        let at = self.at;
        let n = self.u64(what)?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len() - self.at)
            .ok_or_else(|| {
                self.err_at(
                    at,
                    format!("{what}'s length {n} runs past the end of the file"),
                )
            })?;
        let b = self.take(n, what)?;
        Ok(match std::str::from_utf8(b) {
            Ok(s) => (s.to_string(), true),
            Err(_) => (String::from_utf8_lossy(b).into_owned(), false),
        })
    }

    /// A key or a tensor name: UTF-8, as gguf-py reads it (llama.cpp looks tensors and keys up
    /// by their bytes, so one shown with U+FFFD would be written back under another name).
    fn name(&mut self, what: &str) -> Result<String> {
        let at = self.at;
        match self.string(what)? {
            (s, true) => Ok(s),
            (s, false) => Err(self.err_at(at, format!("{what} ('{s}') is not UTF-8: gguf-py refuses such a file, and a name rewritten with U+FFFD would be another name; fix the file that wrote it"))),
        }
    }

    /// A value of type `kind` (`key` names it in errors; `depth` is how deep in arrays).
    fn value(&mut self, kind: ValueType, key: &str, depth: usize) -> Result<Value> {
        self.values_left = self.values_left.checked_sub(1).ok_or_else(|| {
            self.err(format!(
                "key '{key}': the header holds more than {MAX_VALUES} metadata values"
            ))
        })?;
        Ok(match kind {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(key)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::Bool => {
                let at = self.at;
                match self.array::<1>(key)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(
                            self.err_at(at, format!("key '{key}': bool byte {b} is not 0 or 1"))
                        )
                    }
                }
            }
            ValueType::String => {
                let (text, exact) = self.string(key)?;
                let n = self.strings_read;
                self.strings_read += 1;
                if !exact && self.not_utf8.is_none() {
                    self.not_utf8 = Some(n);
                }
                Value::String(text)
            }
            ValueType::Array => self.array_value(key, depth)?,
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
        })
    }

    /// An array: element type, count, elements.
    fn array_value(&mut self, key: &str, depth: usize) -> Result<Value> {
        if depth >= MAX_DEPTH {
            return Err(self.err(format!(
                "key '{key}': arrays nested deeper than {MAX_DEPTH}"
            )));
        }
        let at = self.at;
        let t = self.u32(key)?;
        let elem = ValueType::of(t).ok_or_else(|| {
            self.err_at(
                at,
                format!("key '{key}' is an array of type {t}, which GGUF does not define"),
            )
        })?;
        let n = self.u64(key)?;
        // Strings and arrays take at least 8 bytes each (their length or header).
        self.count_fits(
            n,
            elem.size().unwrap_or(8) as u64,
            &format!("elements of '{key}'"),
        )?;
        if n > self.values_left {
            return Err(self.err(format!(
                "key '{key}' has {n} elements: the header may hold at most {MAX_VALUES} metadata values"
            )));
        }
        let mut items = Vec::with_capacity(n as usize);
        for _ in 0..n {
            items.push(self.value(elem, key, depth + 1)?);
        }
        Ok(Value::Array(elem, items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_is_told_by_content() {
        assert!(is_gguf(b"GGUF\x03\0\0\0"));
        assert!(!is_gguf(b"GGML"));
        assert!(!is_gguf(b"GG"));
    }

    #[test]
    fn an_array_longer_than_the_value_budget_is_refused_before_allocating() {
        let mut b = b"GGUF\x03\0\0\0".to_vec();
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.push(b'k');
        b.extend(9u32.to_le_bytes()); // array
        b.extend(0u32.to_le_bytes()); // of u8
        b.extend((MAX_VALUES + 1).to_le_bytes());
        b.resize(b.len() + MAX_VALUES as usize + 1, 0);
        let e = parse(Path::new("x.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("at most 16777216 metadata values"), "{e}");
    }

    #[test]
    fn counts_past_the_file_are_refused_before_allocating() {
        let mut b = b"GGUF\x03\0\0\0".to_vec();
        b.extend(0u64.to_le_bytes());
        b.extend(u64::MAX.to_le_bytes());
        let e = parse(Path::new("x.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("key/values"), "{e}");
    }
}
