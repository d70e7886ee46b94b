//! The sha256 manifest every report carries: the file, and each tensor payload.

use crate::dtype::DType;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// sha256 of one tensor's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorManifest {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub bytes: u64,
    pub sha256: String,
}

/// sha256 of a written file and of every tensor in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileManifest {
    pub path: PathBuf,
    pub bytes: u64,
    /// The whole file's sha256 when asked (`SafetensorsPlan::file_sha256`,
    /// `TorchPlan::file_sha256`, `--file-sha256`); null otherwise (every tensor is always hashed).
    pub sha256: Option<String>,
    pub tensors: Vec<TensorManifest>,
}

impl FileManifest {
    /// The report line: "wrote PATH (N bytes[, sha256 HEX])".
    pub fn wrote(&self) -> String {
        match &self.sha256 {
            Some(h) => format!(
                "wrote {} ({} bytes, sha256 {h})",
                self.path.display(),
                self.bytes
            ),
            None => format!("wrote {} ({} bytes)", self.path.display(), self.bytes),
        }
    }
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Bytes hashed per update: large enough to amortise, small enough to report progress.
pub const HASH_CHUNK: usize = 8 << 20;

/// sha256 of `data`, reporting progress per chunk.
pub fn sha256_with(data: &[u8], mut on_chunk: impl FnMut(u64)) -> String {
    let mut h = Sha256::new();
    for chunk in data.chunks(HASH_CHUNK) {
        h.update(chunk);
        on_chunk(chunk.len() as u64);
    }
    hex(&h.finalize())
}

/// sha256 of a byte range of a mapped file, streamed through the map a chunk at a time.
pub fn sha256_range(
    map: &crate::formats::mapped::Mapped,
    start: u64,
    len: u64,
) -> crate::error::Result<String> {
    let mut h = Sha256::new();
    map.stream(start, len, |c| h.update(c))?;
    Ok(hex(&h.finalize()))
}

/// sha256 of a tensor's elements in row-major order: streamed when stored contiguously.
pub fn sha256_tensor(t: &crate::formats::TensorRef<'_>) -> crate::error::Result<String> {
    sha256_tensor_with(t, |_| {})
}

/// [`sha256_tensor`], telling `on_chunk` how many bytes each step hashed. A contiguous tensor is
/// streamed through the map and its pages dropped from the resident set behind the hash, so
/// hashing a checkpoint larger than memory holds a few chunks, not the files.
pub fn sha256_tensor_with(
    t: &crate::formats::TensorRef<'_>,
    mut on_chunk: impl FnMut(u64),
) -> crate::error::Result<String> {
    match t.contiguous_range() {
        Some((start, len)) => {
            let mut h = Sha256::new();
            t.map.stream(start, len, |c| {
                h.update(c);
                on_chunk(c.len() as u64);
            })?;
            Ok(hex(&h.finalize()))
        }
        None => Ok(sha256_with(&t.bytes(), on_chunk)),
    }
}

/// sha256 of `data`.
pub fn sha256(data: &[u8]) -> String {
    sha256_with(data, |_| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_published_test_vectors() {
        assert_eq!(
            sha256(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Crossing a chunk boundary must not change the digest.
        let big = vec![0x61u8; HASH_CHUNK + 3];
        let mut h = Sha256::new();
        h.update(&big);
        assert_eq!(sha256(&big), hex(&h.finalize()));
    }
}
