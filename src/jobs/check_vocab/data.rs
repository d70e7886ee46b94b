//! Token-id data for the data-vs-embedding check: a `.npy` of integers or raw little-endian ids.

use crate::error::{Error, Result};
use std::path::Path;

/// Largest id in `bytes`, read from `p`: a `.npy` of integers, or raw little-endian ids of
/// `dtype`.
pub fn max_token_id(p: &Path, bytes: &[u8], dtype: Option<&str>) -> Result<Option<u64>> {
    let (descr, data): (String, &[u8]) = if bytes.starts_with(b"\x93NUMPY") {
        let major = bytes.get(6).copied().unwrap_or(0);
        let (hlen, start) = match major {
            1 => (
                bytes
                    .get(8..10)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize),
                10,
            ),
            _ => (
                bytes
                    .get(8..12)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
                12,
            ),
        };
        let hlen = hlen.ok_or_else(|| Error::format(p, "truncated .npy header"))?;
        let header = bytes
            .get(start..start + hlen)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(|| Error::format(p, "bad .npy header"))?;
        if header.contains("'fortran_order': True") {
            // Order does not change the maximum.
        }
        let descr = header
            .split("'descr':")
            .nth(1)
            .and_then(|r| r.split('\'').nth(1))
            .ok_or_else(|| Error::format(p, ".npy header has no descr"))?;
        (descr.to_string(), &bytes[start + hlen..])
    } else {
        let d = dtype.ok_or_else(|| {
            Error::arg(
                "--token-ids-dtype",
                format!(
                    "{}: not a .npy file: give --token-ids-dtype u16|u32|i32|i64",
                    p.display()
                ),
            )
        })?;
        let descr = match d {
            "u16" => "<u2",
            "u32" => "<u4",
            "i32" => "<i4",
            "i64" => "<i8",
            other => {
                return Err(Error::arg(
                    "--token-ids-dtype",
                    format!("--token-ids-dtype {other}: expected u16, u32, i32 or i64"),
                ))
            }
        };
        (descr.to_string(), bytes)
    };
    let (size, signed) = match descr.trim_start_matches(['<', '|', '=']) {
        "u1" => (1, false),
        "u2" => (2, false),
        "u4" => (4, false),
        "u8" => (8, false),
        "i1" => (1, true),
        "i2" => (2, true),
        "i4" => (4, true),
        "i8" => (8, true),
        other => {
            return Err(Error::format(
                p,
                format!("token ids of dtype '{other}' (little-endian integers only)"),
            ))
        }
    };
    if data.len() % size != 0 {
        return Err(Error::format(
            p,
            format!(
                "{} bytes is not a whole number of {size}-byte ids",
                data.len()
            ),
        ));
    }
    let mut max: Option<u64> = None;
    for c in data.chunks_exact(size) {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(c);
        if signed && c[size - 1] & 0x80 != 0 {
            return Err(Error::format(p, "a negative token id"));
        }
        let v = u64::from_le_bytes(b);
        max = Some(max.map_or(v, |m| m.max(v)));
    }
    Ok(max)
}

/// An integer tensor of a batch file (torch or safetensors): its name, shape, largest id, and
/// for a 2-D [C, T] tensor (a multi-codebook batch) each row's largest id. Negative values
/// (-100, the loss's ignore index) are not ids and are skipped.
#[derive(Debug, Clone)]
pub struct IdTensor {
    pub name: String,
    pub shape: Vec<u64>,
    pub max: Option<u64>,
    /// The largest id per codebook (the second-to-last axis: [C, T] or [B…, C, T]); empty for a
    /// tensor of fewer than two axes.
    pub row_max: Vec<Option<u64>>,
}

/// The integer tensors of a saved batch.
pub fn id_tensors(ckpt: &crate::formats::Tensors) -> Result<Vec<IdTensor>> {
    use crate::dtype::DType;
    let mut out = Vec::new();
    for t in ckpt.tensors() {
        let (w, signed) = match t.dtype {
            DType::U8 => (1, false),
            DType::I8 => (1, true),
            DType::I16 => (2, true),
            DType::U16 => (2, false),
            DType::I32 => (4, true),
            DType::U32 => (4, false),
            DType::I64 => (8, true),
            DType::U64 => (8, false),
            _ => continue,
        };
        let bytes = t.try_bytes()?;
        let value = |c: &[u8]| -> Option<u64> {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            if signed && c[w - 1] & 0x80 != 0 {
                return None;
            }
            Some(u64::from_le_bytes(b))
        };
        // [C, T], or [B…, C, T]: the largest id of each codebook row, over every batch entry.
        let (codebooks, cols) = match t.shape {
            [.., c, n] => (*c as usize, *n as usize),
            _ => (1, bytes.len() / w),
        };
        let mut row_max: Vec<Option<u64>> = vec![None; codebooks.max(1)];
        for (i, row) in bytes.chunks(cols.max(1) * w).enumerate() {
            let m = row.chunks_exact(w).filter_map(value).max();
            let at = &mut row_max[i % codebooks.max(1)];
            *at = (*at).max(m);
        }
        out.push(IdTensor {
            name: t.name.to_string(),
            shape: t.shape.to_vec(),
            max: row_max.iter().flatten().max().copied(),
            row_max: if t.shape.len() >= 2 {
                row_max
            } else {
                Vec::new()
            },
        });
    }
    Ok(out)
}
