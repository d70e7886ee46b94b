//! The manifest every report carries: the file, and each tensor payload, hashed with the
//! manifest's algorithm — BLAKE3 by default (on the project machine ~3.7× sha256's speed per core,
//! sha256 using the CPU's SHA extensions: 6.6–7.2 GB/s against 1.8–1.9 GB/s), sha256 when asked
//! (`--sha256`, the manifests of earlier versions). The algorithm is named in every manifest.

use crate::dtype::DType;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// The hash of the manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HashAlg {
    #[default]
    Blake3,
    Sha256,
}

impl HashAlg {
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Blake3 => "blake3",
            HashAlg::Sha256 => "sha256",
        }
    }
}

static SHA256: AtomicBool = AtomicBool::new(false);

/// The manifests' algorithm in this process from now on (each tool sets it from `--sha256` as
/// it starts; Python calls in process share it, so concurrent calls should agree on it).
pub fn set_algorithm(alg: HashAlg) {
    SHA256.store(alg == HashAlg::Sha256, Ordering::Relaxed);
}

/// The manifests' algorithm now.
pub fn algorithm() -> HashAlg {
    if SHA256.load(Ordering::Relaxed) {
        HashAlg::Sha256
    } else {
        HashAlg::Blake3
    }
}

/// A running hash of the manifests' algorithm.
pub enum Hasher {
    Blake3(Box<blake3::Hasher>),
    Sha256(Sha256),
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new(algorithm())
    }
}

impl Hasher {
    pub fn new(alg: HashAlg) -> Self {
        match alg {
            HashAlg::Blake3 => Hasher::Blake3(Box::default()),
            HashAlg::Sha256 => Hasher::Sha256(Sha256::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Blake3(h) => {
                h.update(data);
            }
            Hasher::Sha256(h) => h.update(data),
        }
    }

    /// The digest in lower-case hex.
    pub fn finish(self) -> String {
        match self {
            Hasher::Blake3(h) => h.finalize().to_hex().to_string(),
            Hasher::Sha256(h) => hex(&h.finalize()),
        }
    }
}

/// The digest of one tensor's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorManifest {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub bytes: u64,
    pub digest: String,
}

/// A written file and every tensor in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileManifest {
    pub path: PathBuf,
    pub bytes: u64,
    /// The algorithm of every digest here.
    pub hash: HashAlg,
    /// The whole file's digest when asked (`SafetensorsLayout::file_sha256`,
    /// `TorchLayout::file_sha256`, `--file-hash`); null otherwise (every tensor is always hashed).
    pub digest: Option<String>,
    pub tensors: Vec<TensorManifest>,
}

impl FileManifest {
    /// The report line: "wrote PATH (N bytes[, ALG HEX])".
    pub fn wrote(&self) -> String {
        match &self.digest {
            Some(h) => format!(
                "wrote {} ({} bytes, {} {h})",
                self.path.display(),
                self.bytes,
                self.hash.name()
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

/// The digest of `data`, reporting progress per chunk.
pub fn digest_with(data: &[u8], mut on_chunk: impl FnMut(u64)) -> String {
    let mut h = Hasher::default();
    for chunk in data.chunks(HASH_CHUNK) {
        h.update(chunk);
        on_chunk(chunk.len() as u64);
    }
    h.finish()
}

/// The digest of a byte range of a mapped file, streamed through the map a chunk at a time.
pub fn digest_range(
    map: &crate::mapped::Mapped,
    start: u64,
    len: u64,
) -> crate::error::Result<String> {
    let mut h = Hasher::default();
    map.stream(start, len, |c| h.update(c))?;
    Ok(h.finish())
}

/// The digest of `data`.
pub fn digest(data: &[u8]) -> String {
    digest_with(data, |_| {})
}

/// sha256 of `data`, whatever the manifests' algorithm (reports that always named sha256).
pub fn sha256(data: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(data);
    hex(&h.finalize())
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
        let mut h = Hasher::new(HashAlg::Sha256);
        h.update(&big[..5]);
        h.update(&big[5..]);
        assert_eq!(sha256(&big), h.finish());
    }

    #[test]
    fn blake3_matches_the_reference_test_vector_across_chunks() {
        // The BLAKE3 paper's empty-input vector, and chunked = whole.
        let mut h = Hasher::new(HashAlg::Blake3);
        h.update(b"");
        assert_eq!(
            h.finish(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        let big: Vec<u8> = (0..HASH_CHUNK + 3).map(|i| (i % 251) as u8).collect();
        let mut h = Hasher::new(HashAlg::Blake3);
        h.update(&big[..7]);
        h.update(&big[7..]);
        assert_eq!(h.finish(), blake3::hash(&big).to_hex().to_string());
    }
}
