//! What `sentencepiece` checks when it loads a `.model` (its `ModelInterface` and normaliser), done
//! when this project reads one: a model the library refuses is refused here, in the library's
//! terms, and is never merged, trimmed or written back with the same fault.

use super::proto::{fields, PieceType};
use std::collections::HashSet;

/// The `trainer_spec` flags the pieces are checked against (protobuf defaults where absent; the
/// last value of a field wins, as protobuf reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrainerFlags {
    /// `byte_fallback` (field 35): `<0x00>`…`<0xFF>` pieces stand in for unknown bytes.
    pub byte_fallback: bool,
    /// `treat_whitespace_as_suffix` (field 24): `▁` ends a word instead of starting it.
    pub whitespace_as_suffix: bool,
}

/// The [`TrainerFlags`] of a model's bytes.
pub fn trainer_flags(model: &[u8]) -> TrainerFlags {
    let mut t = TrainerFlags::default();
    for (_, f) in fields(model).unwrap_or_default() {
        if (f.number, f.wire) != (2, 2) {
            continue;
        }
        for (_, g) in fields(&model[f.value.clone()]).unwrap_or_default() {
            match (g.number, g.wire) {
                (35, 0) => t.byte_fallback = g.varint != 0,
                (24, 0) => t.whitespace_as_suffix = g.varint != 0,
                _ => {}
            }
        }
    }
    t
}

/// How every refusal here ends (readers tell a refused model from a file that is no model by it).
pub const REFUSED: &str = "sentencepiece refuses the model";

/// Pieces as long as this or longer are refused by `sentencepiece`.
const MAX_PIECE_BYTES: usize = 8000;

/// Refuse what `sentencepiece` refuses: an empty, over-long or NUL-holding piece, a piece defined
/// twice (normal, user-defined and unused pieces apart from the others), no or two unknown pieces,
/// byte pieces without `byte_fallback` or `byte_fallback` without all 256, a score that is not
/// finite, and a precompiled character map whose layout is broken. `model` is the file's bytes,
/// `pieces` its pieces in order, `charsmap` its normaliser's precompiled map.
pub fn check<'p>(
    model: &[u8],
    pieces: impl Iterator<Item = (&'p str, f32, PieceType)>,
    charsmap: &[u8],
) -> Result<(), String> {
    let flags = trainer_flags(model);
    let (mut normal, mut reserved) = (HashSet::new(), HashSet::new());
    let mut unknown: Option<usize> = None;
    let mut bytes = [false; 256];
    for (i, (s, score, kind)) in pieces.enumerate() {
        let fault = if s.is_empty() {
            Some("is empty".to_string())
        } else if s.len() >= MAX_PIECE_BYTES {
            Some(format!(
                "is {} bytes long (sentencepiece takes fewer than {MAX_PIECE_BYTES})",
                s.len()
            ))
        } else if s.contains('\0') {
            Some("holds a NUL character".into())
        } else if !score.is_finite() {
            Some(format!("has score {score}"))
        } else {
            None
        };
        if let Some(f) = fault {
            return Err(format!("piece {i} {f}: {REFUSED}"));
        }
        let plain = matches!(
            kind,
            PieceType::Normal | PieceType::UserDefined | PieceType::Unused
        );
        if !(if plain { &mut normal } else { &mut reserved }).insert(s) {
            return Err(format!("piece {i} '{s}' is defined twice: {REFUSED}"));
        }
        match kind {
            PieceType::Unknown => {
                if let Some(first) = unknown {
                    return Err(format!(
                        "pieces {first} and {i} are both the unknown piece: {REFUSED}"
                    ));
                }
                unknown = Some(i);
            }
            PieceType::Byte if !flags.byte_fallback => {
                return Err(format!("piece {i} '{s}' is a byte piece but trainer_spec.byte_fallback is false: {REFUSED}"));
            }
            PieceType::Byte => match byte_of(s) {
                Some(b) => bytes[usize::from(b)] = true,
                None => {
                    return Err(format!(
                        "piece {i} '{s}' is a byte piece not written <0xHH>: {REFUSED}"
                    ))
                }
            },
            _ => {}
        }
    }
    if unknown.is_none() {
        return Err(format!(
            "no piece is the unknown piece (type UNKNOWN, <unk>): {REFUSED}"
        ));
    }
    let missing = bytes.iter().filter(|b| !**b).count();
    if flags.byte_fallback && missing > 0 {
        return Err(format!("trainer_spec.byte_fallback is true but {missing} of the 256 byte pieces <0x00>..<0xFF> are missing: {REFUSED}"));
    }
    precompiled(charsmap)
}

/// The byte a byte piece stands for: `<0xHH>`, upper-case hex, as `sentencepiece` writes them.
fn byte_of(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    let upper = hex.len() == 2
        && hex
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c));
    upper.then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

/// A precompiled character map's layout: a little-endian u32 trie size, the trie (whole
/// 1024-byte blocks), then the replacement strings, NUL-terminated. Empty: no map.
fn precompiled(blob: &[u8]) -> Result<(), String> {
    if blob.is_empty() {
        return Ok(());
    }
    let fault = |what: &str| {
        Err(format!(
            "normalizer_spec.precompiled_charsmap {what}: {REFUSED}"
        ))
    };
    let Some(head) = blob.get(..4).filter(|_| blob.len() > 4) else {
        return fault(&format!(
            "is {} bytes, too short to hold a trie",
            blob.len()
        ));
    };
    let trie = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if trie >= blob.len() {
        return fault(&format!(
            "says its trie has {trie} bytes, but the map has {}",
            blob.len()
        ));
    }
    if !trie.is_multiple_of(1024) {
        return fault(&format!(
            "says its trie has {trie} bytes, not whole 1024-byte blocks"
        ));
    }
    let rest = &blob[4 + trie.min(blob.len() - 4)..];
    if rest.last().is_some_and(|b| *b != 0) {
        return fault("has replacement strings that do not end in NUL");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_pieces_are_upper_case_hex_only() {
        assert_eq!(byte_of("<0x0A>"), Some(10));
        assert_eq!(byte_of("<0xFF>"), Some(255));
        for bad in ["<0x0a>", "<0xF>", "<0x100>", "0x41", "<0xG1>", "▁"] {
            assert_eq!(byte_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_charsmap_is_checked_as_sentencepiece_decodes_it() {
        let map = |trie: u32, body: &[u8]| [&trie.to_le_bytes()[..], body].concat();
        let good = map(1024, &[vec![0u8; 1024], b"a\0".to_vec()].concat());
        assert_eq!(precompiled(&good), Ok(()));
        assert_eq!(precompiled(&[]), Ok(()));
        let bad = [
            vec![1, 0, 0, 0],
            map(4096, &[0u8; 100]),
            map(1000, &[0u8; 1100]),
            map(1024, &[vec![0u8; 1024], b"a".to_vec()].concat()),
        ];
        for b in bad {
            assert!(precompiled(&b).is_err(), "{:?}", &b[..4]);
        }
    }
}
