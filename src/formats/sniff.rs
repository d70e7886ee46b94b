//! What the first bytes of a file say it is: the content test [`super::open`] decides by (never
//! the file extension). A leaf: only `formats::open`'s own code calls it.

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    Safetensors,
    /// A JSON document (a sharded index, when it has a `weight_map`).
    Json,
    /// A zip archive: torch.save since torch 1.6.
    TorchZip,
    /// A bare pickle: torch.save before 1.6 (or `_use_new_zipfile_serialization=False`).
    TorchLegacy,
    /// llama.cpp's GGUF (magic `GGUF`).
    Gguf,
    Unknown,
}

/// Classify a file by its first bytes.
pub fn sniff(path: &Path) -> Result<Sniffed> {
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path)
        .and_then(|f| f.take(16).read_to_end(&mut head))
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(sniff_bytes(&head))
}

/// A safetensors header may begin with JSON whitespace (the reference reads it: its check for
/// `{` first is commented out): a length within the reference's limit (text's first 8 bytes
/// read as one are far larger), then whitespace, then `{`.
fn safetensors_after_whitespace(head: &[u8]) -> bool {
    let Some(len) = head.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return false;
    };
    let json_ws = |b: &&u8| matches!(**b, b' ' | b'\t' | b'\n' | b'\r');
    u64::from_le_bytes(len) <= super::safetensors::MAX_HEADER_BYTES
        && head[8..].iter().find(|b| !json_ws(b)) == Some(&b'{')
}

/// Classify from up to the first 16 bytes.
pub fn sniff_bytes(head: &[u8]) -> Sniffed {
    use super::torch::Saved;
    if super::gguf::is_gguf(head) {
        return Sniffed::Gguf;
    }
    if head.len() > 8 && head[8] == b'{' {
        // u64 header length, then the JSON header's opening brace.
        return Sniffed::Safetensors;
    }
    if safetensors_after_whitespace(head) {
        return Sniffed::Safetensors;
    }
    match Saved::of(head) {
        Some(Saved::Zip) => Sniffed::TorchZip,
        Some(Saved::Legacy) => Sniffed::TorchLegacy,
        None if head
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{') =>
        {
            Sniffed::Json
        }
        None => Sniffed::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_before_a_safetensors_header_is_told_from_json_text() {
        let mut st = 3u64.to_le_bytes().to_vec();
        st.extend_from_slice(b" \n{}");
        assert!(matches!(sniff_bytes(&st), Sniffed::Safetensors));
        // Text's first 8 bytes read as a length are far past the reference's limit.
        assert!(matches!(
            sniff_bytes(b"{\"a\": 1, {\"b\": 2}}"),
            Sniffed::Json
        ));
        assert!(matches!(sniff_bytes(b"{\"abcdef\" {}"), Sniffed::Json));
    }
}
