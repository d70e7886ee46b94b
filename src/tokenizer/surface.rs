//! A token's text whatever its tokenizer's form: byte-level BPE symbols (`Ġ` for a space, one
//! symbol per byte) decoded to their bytes; SentencePiece's `▁` to a space and its `<0xNN>` byte
//! pieces to the byte. Two vocabularies share a token when these bytes agree (never by id).

use super::base::Base;
use std::collections::HashMap;

/// How a tokenizer writes its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// GPT-2's byte-level BPE: each byte one printable symbol.
    ByteLevel,
    /// Text as is (SentencePiece `▁` for a space).
    Plain,
}

/// The form of a loaded tokenizer: byte-level when its pre-tokenizer or decoder says so.
pub fn form(t: &Base) -> Form {
    match t {
        Base::Hf(h)
            if ["pre_tokenizer", "decoder"]
                .iter()
                .any(|k| h.pipeline(k).to_string().contains("ByteLevel")) =>
        {
            Form::ByteLevel
        }
        _ => Form::Plain,
    }
}

/// The byte that GPT-2's byte-to-symbol table maps to `c`, if `c` is one of its symbols.
fn byte_of_symbol(c: char) -> Option<u8> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let u = c as u32;
    if u < 256 && printable(u) {
        return Some(u as u8);
    }
    // The other bytes take 256, 257, … in byte order.
    let n = u.checked_sub(256)?;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(n as usize)
        .map(|b| b as u8)
}

/// The bytes of text `token` stands for.
pub fn surface(form: Form, token: &str) -> Vec<u8> {
    match form {
        Form::ByteLevel => {
            let mut out = Vec::with_capacity(token.len());
            for c in token.chars() {
                match byte_of_symbol(c) {
                    Some(b) => out.push(b),
                    // Not a byte symbol (an added token written as raw text): its UTF-8.
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
            out
        }
        Form::Plain => match byte_piece(token) {
            Some(b) => vec![b],
            None => token.replace('\u{2581}', " ").into_bytes(),
        },
    }
}

/// The byte a SentencePiece byte piece `<0xNN>` stands for.
fn byte_piece(token: &str) -> Option<u8> {
    token
        .strip_prefix("<0x")
        .and_then(|h| h.strip_suffix('>'))
        .filter(|h| h.len() == 2)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
}

/// Every token of `t` by its text: the lowest id where two tokens have the same text, a `<0xNN>`
/// byte piece only where no other token has its text (byte fallback stands for characters the
/// pieces lack; a character that has a piece is that piece in text, and its row is the piece's).
pub fn by_surface(t: &Base) -> HashMap<Vec<u8>, u32> {
    let f = form(t);
    let mut ids: Vec<(&str, u32)> = t.ids().into_iter().collect();
    ids.sort_by_key(|&(tok, id)| (f == Form::Plain && byte_piece(tok).is_some(), id));
    let mut out = HashMap::with_capacity(ids.len());
    for (tok, id) in ids {
        out.entry(surface(f, tok)).or_insert(id);
    }
    out
}

/// id → token of `t`.
pub fn by_id(t: &Base) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for (tok, id) in t.ids() {
        out.entry(id).or_insert_with(|| tok.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_and_sentencepiece_forms_meet_on_the_same_text() {
        assert_eq!(surface(Form::ByteLevel, "Ġthe"), b" the");
        assert_eq!(surface(Form::Plain, "\u{2581}the"), b" the");
        // "ሰ" (U+1230, E1 88 B0) as GPT-2 writes it.
        assert_eq!(surface(Form::ByteLevel, "áĪ°"), "ሰ".as_bytes());
        assert_eq!(surface(Form::Plain, "<0x0A>"), b"\n");
        assert_eq!(surface(Form::ByteLevel, "Ċ"), b"\n");
        assert_eq!(surface(Form::Plain, "ሰ"), "ሰ".as_bytes());
    }

    #[test]
    fn a_character_with_a_piece_is_that_piece_not_its_byte_fallback_piece() {
        use crate::tokenizer::sentencepiece::{encode_piece, parse, PieceType};
        // <unk>, the 256 byte pieces (trainer_spec.byte_fallback = true), then "t".
        let mut b = encode_piece("<unk>", 0.0, PieceType::Unknown);
        for byte in 0..=255u8 {
            b.extend(encode_piece(
                &format!("<0x{byte:02X}>"),
                0.0,
                PieceType::Byte,
            ));
        }
        b.extend(encode_piece("t", -1.0, PieceType::Normal));
        b.extend([0x12, 0x03, 0x98, 0x02, 0x01]);
        let ids = by_surface(&Base::Sp(parse(b).unwrap()));
        assert_eq!(ids[&b"t".to_vec()], 257, "'t', not <0x74>");
        assert_eq!(
            ids[&vec![0xE1]],
            1 + 0xE1,
            "a byte no piece has: its byte piece"
        );
    }
}
