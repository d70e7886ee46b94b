//! Keep sets by Unicode script: the tokens whose text's letters are all in the named scripts.
//! Scripts are told by Unicode blocks (a table below, not the Unicode Script property): a letter
//! is in a script when its code point is in one of the script's blocks.

use crate::error::{Error, Result};
use crate::tokenizer::base::{load_base, Base};
use crate::tokenizer::form::{byte_level_bytes, Form};
use crate::tokenizer::sentencepiece::PieceType;
use std::ops::RangeInclusive;
use std::path::Path;

type Blocks = &'static [RangeInclusive<u32>];

/// The scripts `--keep-script` knows, each with its Unicode blocks.
pub const SCRIPTS: &[(&str, Blocks)] = &[
    (
        "Latin",
        &[
            0x0000..=0x024F, // Basic Latin, Latin-1 Supplement, Latin Extended-A and -B
            0x0250..=0x02AF, // IPA Extensions
            0x1D00..=0x1DBF, // Phonetic Extensions (and Supplement)
            0x1E00..=0x1EFF, // Latin Extended Additional
            0x2C60..=0x2C7F, // Latin Extended-C
            0xA720..=0xA7FF, // Latin Extended-D
            0xAB30..=0xAB6F, // Latin Extended-E
            0xFB00..=0xFB06, // Latin ligatures of Alphabetic Presentation Forms
            0xFF21..=0xFF5A, // Fullwidth Latin letters
        ],
    ),
    ("Greek", &[0x0370..=0x03FF, 0x1F00..=0x1FFF]),
    (
        "Cyrillic",
        &[
            0x0400..=0x052F,
            0x1C80..=0x1C8F,
            0x2DE0..=0x2DFF,
            0xA640..=0xA69F,
        ],
    ),
    ("Armenian", &[0x0530..=0x058F, 0xFB13..=0xFB17]),
    ("Hebrew", &[0x0590..=0x05FF, 0xFB1D..=0xFB4F]),
    (
        "Arabic",
        &[
            0x0600..=0x06FF,
            0x0750..=0x077F,
            0x0870..=0x08FF,
            0xFB50..=0xFDFF,
            0xFE70..=0xFEFF,
        ],
    ),
    ("Devanagari", &[0x0900..=0x097F, 0xA8E0..=0xA8FF]),
    ("Bengali", &[0x0980..=0x09FF]),
    ("Tamil", &[0x0B80..=0x0BFF]),
    ("Thai", &[0x0E00..=0x0E7F]),
    (
        "Georgian",
        &[0x10A0..=0x10FF, 0x1C90..=0x1CBF, 0x2D00..=0x2D2F],
    ),
    (
        "Hangul",
        &[
            0x1100..=0x11FF,
            0x3130..=0x318F,
            0xA960..=0xA97F,
            0xAC00..=0xD7FF,
            0xFFA0..=0xFFDC,
        ],
    ),
    (
        "Ethiopic",
        &[
            0x1200..=0x139F,
            0x2D80..=0x2DDF,
            0xAB00..=0xAB2F,
            0x1E7E0..=0x1E7FF,
        ],
    ),
    ("Hiragana", &[0x3040..=0x309F, 0x1B000..=0x1B16F]),
    (
        "Katakana",
        &[0x30A0..=0x30FF, 0x31F0..=0x31FF, 0xFF66..=0xFF9F],
    ),
    (
        "Han",
        &[
            0x2E80..=0x2FDF,   // CJK and Kangxi radicals
            0x3005..=0x3007,   // 々 〆 〇
            0x3021..=0x3029,   // Hangzhou numerals
            0x3038..=0x303B,   //
            0x3400..=0x4DBF,   // Extension A
            0x4E00..=0x9FFF,   // CJK Unified Ideographs
            0xF900..=0xFAFF,   // Compatibility Ideographs
            0x20000..=0x323AF, // Extensions B to H
        ],
    ),
];

/// The blocks of the named scripts (names as [`SCRIPTS`] spells them, any case).
fn blocks(scripts: &[&str]) -> Result<Vec<RangeInclusive<u32>>> {
    let mut out = Vec::new();
    for name in scripts {
        let Some((_, b)) = SCRIPTS
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(name.trim()))
        else {
            let known: Vec<&str> = SCRIPTS.iter().map(|(s, _)| *s).collect();
            return Err(Error::arg(
                "--keep-script",
                format!(
                    "--keep-script: '{name}' is not a script this tool knows ({}; told by Unicode blocks)",
                    known.join(", ")
                ),
            ));
        };
        out.extend(b.iter().cloned());
    }
    Ok(out)
}

/// The ids of the tokenizer at `base` whose text's letters are all in `scripts` (tokens with no
/// letter — digits, punctuation, spaces — too). A token's text is what it stands for in the
/// base's form (`▁` as a space, `##` dropped); byte-fallback pieces are not matched (the pruning
/// keeps them). A byte-level token may hold part of a character: a part at its end is matched
/// when the characters it may begin reach into the scripts' blocks, a part at its start (bytes
/// that continue a character) always — so every token that text of those scripts can meet is
/// kept. An unknown script name is an [`Error::Arg`] naming `--keep-script`.
pub fn script_ids(base: &Path, scripts: &[&str]) -> Result<Vec<u32>> {
    let blocks = blocks(scripts)?;
    let b = load_base(base)?;
    let form = b.form();
    let in_blocks = |cp: u32| blocks.iter().any(|r| r.contains(&cp));
    let letters_in = |text: &str| {
        text.chars()
            .filter(|c| c.is_alphabetic())
            .all(|c| in_blocks(c as u32))
    };
    let matches = |tok: &str| match form {
        Form::ByteLevel => {
            byte_level_bytes(tok).is_some_and(|b| bytes_in(&b, &blocks, &letters_in))
        }
        f => letters_in(&f.text_of(tok)),
    };
    let mut ids: Vec<u32> = match &b {
        Base::Hf(t) => t
            .vocab
            .iter()
            .filter(|(tok, _)| matches(tok))
            .map(|(_, id)| *id)
            .collect(),
        Base::Sp(m) => (0..m.pieces.len())
            .filter(|&i| m.pieces[i].kind == PieceType::Normal && matches(&m.pieces[i].piece))
            .map(|i| i as u32)
            .collect(),
    };
    ids.sort_unstable();
    Ok(ids)
}

/// Do a byte-level token's bytes match: the whole characters' letters in the blocks, and a
/// character cut at the end one that may be in them? Bytes continuing a character at the start
/// match (any script's character may end so).
fn bytes_in(b: &[u8], blocks: &[RangeInclusive<u32>], letters_in: &dyn Fn(&str) -> bool) -> bool {
    let start = b.iter().position(|x| x & 0xC0 != 0x80).unwrap_or(b.len());
    let b = &b[start..];
    let (whole, cut) = match std::str::from_utf8(b) {
        Ok(s) => (s, &b[b.len()..]),
        Err(e) if e.error_len().is_none() => {
            let at = e.valid_up_to();
            (std::str::from_utf8(&b[..at]).unwrap_or_default(), &b[at..])
        }
        Err(_) => return false,
    };
    letters_in(whole) && (cut.is_empty() || cut_may_be_in(cut, blocks))
}

/// May the character whose first bytes are `cut` (a lead byte and fewer continuation bytes than
/// it needs) be in one of `blocks`? The code points it may be span `lo..=hi`.
fn cut_may_be_in(cut: &[u8], blocks: &[RangeInclusive<u32>]) -> bool {
    let (n, payload) = match cut[0] {
        x if x >= 0xF0 => (4, u32::from(x & 0x07)),
        x if x >= 0xE0 => (3, u32::from(x & 0x0F)),
        x => (2, u32::from(x & 0x1F)),
    };
    let known = cut[1..]
        .iter()
        .fold(payload, |acc, &c| (acc << 6) | u32::from(c & 0x3F));
    let unknown = 6 * (n - cut.len()) as u32;
    let lo = known << unknown;
    let hi = lo | ((1 << unknown) - 1);
    blocks.iter().any(|r| *r.start() <= hi && lo <= *r.end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_character_matches_where_the_characters_it_may_begin_reach_the_blocks() {
        let (ethiopic, latin) = (blocks(&["Ethiopic"]).unwrap(), blocks(&["Latin"]).unwrap());
        // ሀ is E1 88 80: E1 88 begins U+1200..=U+123F only; E1 begins U+1000..=U+1FFF, Ethiopic
        // and Latin Extended Additional among them; E4 B8 (CJK) begins no Latin character.
        assert!(cut_may_be_in(&[0xE1, 0x88], &ethiopic));
        assert!(!cut_may_be_in(&[0xE1, 0x88], &latin));
        assert!(cut_may_be_in(&[0xE1], &latin) && cut_may_be_in(&[0xE1], &ethiopic));
        assert!(!cut_may_be_in(&[0xE4, 0xB8], &latin));
        let letters = |t: &str| {
            t.chars()
                .filter(|c| c.is_alphabetic())
                .all(|c| c.is_ascii())
        };
        assert!(bytes_in(
            &[0x88, 0x80, b'a', 0xE1, 0x88],
            &ethiopic,
            &|_| true
        ));
        assert!(
            !bytes_in(b"caf\xC3\xA9", &latin, &letters),
            "the letters test applies"
        );
        assert!(
            !bytes_in(&[b'a', 0xFF], &latin, &letters),
            "not UTF-8 at all"
        );
    }
}
