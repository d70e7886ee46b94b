//! Safetensors: open by memory map, validate strictly (at least as strictly as the reference
//! implementation), and hand out tensors as views into the map. Opening reads only the header.

pub mod write;

use super::json::UniqueMap;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mapped::Mapped;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::Path;

/// The reference implementation refuses headers above 100 MB; so do we.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor of a safetensors file. `start` is absolute in the file (after the header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Byte offset of the first element, counted from the start of the file.
    pub start: u64,
    /// Payload length in bytes (= elements × dtype size).
    pub len: u64,
}

impl TensorInfo {
    /// Number of elements (checked at parse time, so it cannot overflow here).
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A parsed, validated header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The `n` of the file: length of the JSON header in bytes (padding included).
    pub header_len: u64,
    /// `__metadata__`, in file order; None when the file has none.
    pub metadata: Option<Vec<(String, String)>>,
    /// Tensors in data order (by offset), which is also the order we write them back in.
    pub tensors: Vec<TensorInfo>,
}

/// An open, validated safetensors file. Tensor bytes are views into the memory map.
#[derive(Debug)]
pub struct SafetensorsFile {
    pub map: Mapped,
    pub header: Header,
}

impl SafetensorsFile {
    /// Open and validate. Only the header pages of the map are touched.
    pub fn open(path: &Path) -> Result<Self> {
        let map = Mapped::open(path)?;
        if map.len < 8 {
            return Err(Error::format(
                path,
                format!(
                    "file is {} bytes, too short for a safetensors header (at least 8)",
                    map.len
                ),
            ));
        }
        let header = parse_header(path, map.bytes(), map.len)?;
        Ok(SafetensorsFile { map, header })
    }

    pub fn path(&self) -> &Path {
        &self.map.path
    }

    /// The payload of one tensor of this file; a range past the end of the file (a `TensorInfo`
    /// that is not this file's) is an error naming the file and the tensor.
    pub fn try_bytes(&self, t: &TensorInfo) -> Result<&[u8]> {
        self.map.tensor_slice(&t.name, t.start, t.len)
    }

    /// Byte offset where tensor data starts (8 + header length).
    pub fn data_start(&self) -> u64 {
        8 + self.header.header_len
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

enum RawEntry {
    Metadata(Option<UniqueMap<String>>),
    Tensor(RawTensor),
}

struct RawHeader(Vec<(String, RawEntry)>);

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<RawHeader, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format_args!(
                            "tensor name '{key}' appears twice in the header"
                        )));
                    }
                    let entry = if key == "__metadata__" {
                        RawEntry::Metadata(map.next_value().map_err(|e: A::Error| {
                            de::Error::custom(format_args!(
                                "__metadata__ must map strings to strings ({e})"
                            ))
                        })?)
                    } else {
                        RawEntry::Tensor(map.next_value().map_err(|e: A::Error| {
                            de::Error::custom(format_args!("tensor '{key}': {e}"))
                        })?)
                    };
                    out.push((key, entry));
                }
                Ok(RawHeader(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parse and validate the header of a safetensors file whose first bytes are `bytes` and whose
/// total length is `file_len`. Pure: no I/O, so tests and fuzzers call it directly.
pub fn parse_header(path: &Path, bytes: &[u8], file_len: u64) -> Result<Header> {
    let (n, RawHeader(entries)) = read_json(path, bytes, file_len)?;
    let mut metadata = None;
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        match entry {
            RawEntry::Metadata(m) => metadata = m.map(|m| m.0),
            RawEntry::Tensor(raw) => tensors.push(check_tensor(path, name, raw)?),
        }
    }
    // Contiguous, non-overlapping, starting at 0, ending exactly at the end of the file.
    tensors.sort_by_key(|t| (t.begin, t.end));
    let header_end = 8 + n;
    check_data_layout(path, &tensors, header_end, file_len)?;
    Ok(Header {
        header_len: n,
        metadata,
        tensors: tensors
            .into_iter()
            .map(|t| TensorInfo {
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                start: header_end + t.begin,
                len: t.end - t.begin,
            })
            .collect(),
    })
}

/// The header's length `n` and its JSON, checked to lie inside the file, to be UTF-8 and to be
/// a safetensors header object.
fn read_json(path: &Path, bytes: &[u8], file_len: u64) -> Result<(u64, RawHeader)> {
    let fmt_err = |p: String| Error::format(path, p);
    let prefix: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            fmt_err(format!(
                "file is {file_len} bytes, too short for a safetensors header"
            ))
        })?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER_BYTES {
        return Err(fmt_err(format!(
            "header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit: not a safetensors file, or a corrupt one"
        )));
    }
    let header_end = 8 + n;
    if header_end > file_len || header_end as usize > bytes.len() {
        return Err(fmt_err(format!(
            "header length {n} runs past the end of the file ({file_len} bytes): the file is truncated or not safetensors"
        )));
    }
    if n == 0 {
        return Err(fmt_err("header length is 0: no JSON header".to_string()));
    }
    let raw = &bytes[8..header_end as usize];
    let text = std::str::from_utf8(raw).map_err(|e| {
        fmt_err(format!(
            "header is not valid UTF-8 (bad byte at header offset {})",
            e.valid_up_to()
        ))
    })?;
    // JSON whitespace may come first: the reference reads such a header too.
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return Err(fmt_err("header does not start with '{'".to_string()));
    }
    let header = serde_json::from_str(text)
        .map_err(|e| fmt_err(format!("header is not valid safetensors JSON: {e}")))?;
    Ok((n, header))
}

/// One tensor of the header, its own entry checked: a known dtype, a shape whose size does not
/// overflow, and data offsets spanning exactly its bytes.
struct Checked {
    begin: u64,
    end: u64,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
}

fn check_tensor(path: &Path, name: String, raw: RawTensor) -> Result<Checked> {
    let t_err = |p: String| Error::tensor(path, &name, p);
    let dtype = DType::from_safetensors_name(&raw.dtype)
        .ok_or_else(|| t_err(format!("unknown dtype '{}'", raw.dtype)))?;
    let elements = raw
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| t_err(format!("shape {:?} overflows the element count", raw.shape)))?;
    let need = dtype.bytes_for(elements).ok_or_else(|| {
        t_err(format!(
            "shape {:?} of {dtype} is not a whole number of bytes (or overflows)",
            raw.shape
        ))
    })?;
    let (begin, end) = raw.data_offsets;
    if end < begin {
        return Err(t_err(format!(
            "data_offsets [{begin}, {end}] end before they begin"
        )));
    }
    if end - begin != need {
        return Err(t_err(format!(
            "{dtype} {:?} needs {need} bytes but data_offsets [{begin}, {end}] span {}",
            raw.shape,
            end - begin
        )));
    }
    Ok(Checked {
        begin,
        end,
        name,
        dtype,
        shape: raw.shape,
    })
}

/// The tensors (sorted by offset) tile the data exactly: no overlap, no gap, starting at 0 and
/// ending at the end of the file.
fn check_data_layout(
    path: &Path,
    tensors: &[Checked],
    header_end: u64,
    file_len: u64,
) -> Result<()> {
    let data_len = file_len - header_end;
    let mut expected = 0u64;
    let mut prev: Option<&str> = None;
    for Checked {
        begin, end, name, ..
    } in tensors
    {
        if *begin < expected {
            return Err(Error::tensor(
                path,
                name,
                format!(
                    "data_offsets [{begin}, {end}] overlap tensor '{}', which ends at {expected}",
                    prev.unwrap_or("?")
                ),
            ));
        }
        if *begin > expected {
            return Err(Error::tensor(
                path,
                name,
                format!("data starts at {begin} but the previous tensor ends at {expected}: a gap of {} bytes", begin - expected),
            ));
        }
        expected = *end;
        prev = Some(name);
    }
    if expected > data_len {
        return Err(Error::format(path, format!(
            "tensor data needs {expected} bytes after the header but the file has only {data_len}: the file is truncated (re-download or re-save it)"
        )));
    }
    if expected < data_len {
        return Err(Error::format(path, format!(
            "{} trailing bytes after the last tensor (data ends at {} of {file_len}): the file was padded or corrupted",
            data_len - expected,
            header_end + expected
        )));
    }
    Ok(())
}

/// One tensor as the writer lays it out.
pub struct HeaderEntry<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [u64],
    pub len: u64,
}

/// Serialise a header the way the reference writer does: compact JSON, `__metadata__` first,
/// tensors in the given order with consecutive offsets, padded with spaces to a multiple of 8.
/// Returns the 8-byte length prefix followed by the header.
pub fn serialize_header(
    path: &Path,
    metadata: Option<&[(String, String)]>,
    tensors: &[HeaderEntry<'_>],
) -> Result<Vec<u8>> {
    let mut obj = serde_json::Map::new();
    if let Some(m) = metadata {
        let meta: serde_json::Map<String, serde_json::Value> = m
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        obj.insert("__metadata__".into(), serde_json::Value::Object(meta));
    }
    let mut offset = 0u64;
    for t in tensors {
        let dtype = t.dtype.safetensors_name().ok_or_else(|| {
            Error::tensor(
                path,
                t.name,
                format!("dtype {} cannot be stored in safetensors", t.dtype),
            )
        })?;
        if t.name == "__metadata__" || obj.contains_key(t.name) {
            return Err(Error::tensor(path, t.name, "name used twice in the output"));
        }
        let end = offset + t.len;
        obj.insert(
            t.name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut json = serde_json::to_vec(&obj)
        .map_err(|e| Error::format(path, format!("cannot serialise the header: {e}")))?;
    json.resize(json.len().div_ceil(8) * 8, b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    Ok(out)
}
