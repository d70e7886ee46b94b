//! Tokenizer forms (model knowledge every job may ask): how a vocabulary writes text — GPT-2's
//! byte-level alphabet (`Ġ` is the space byte), SentencePiece's `▁` word mark, or plain characters
//! — and BPE as the model applies it (merge ranks over symbols), so that entries are converted into
//! the base's own form and reachability is checked on the model, never by decoding text.

use serde_json::Value;
use std::collections::HashMap;

/// How a tokenizer writes text in its vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// Every UTF-8 byte is one symbol of GPT-2's 256-character alphabet; a space is `Ġ`.
    ByteLevel,
    /// Characters, a word start marked `▁` (SentencePiece, `Metaspace`).
    Metaspace,
    /// Characters, a piece inside a word marked `##` (WordPiece, as BERT writes it).
    WordPiece,
    /// Characters as they are (character-level BPE, WordLevel).
    Plain,
}

/// SentencePiece's word mark.
pub const WORD_MARK: char = '\u{2581}';

/// WordPiece's mark of a piece that continues a word.
pub const CONTINUES: &str = "##";

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the other 68 bytes
/// for U+0100 onwards in byte order.
fn byte_chars() -> &'static [char; 256] {
    static MAP: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
    MAP.get_or_init(|| {
        let mut out = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            out[b as usize] = if printable {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\0');
                next += 1;
                c
            };
        }
        out
    })
}

/// `text`'s UTF-8 bytes written in the byte-level alphabet.
pub fn byte_level(text: &str) -> String {
    let map = byte_chars();
    text.bytes().map(|b| map[b as usize]).collect()
}

/// The bytes a byte-level token stands for; None when a character is outside the alphabet.
pub fn byte_level_bytes(token: &str) -> Option<Vec<u8>> {
    static BACK: std::sync::OnceLock<HashMap<char, u8>> = std::sync::OnceLock::new();
    let back = BACK.get_or_init(|| {
        byte_chars()
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect()
    });
    token.chars().map(|c| back.get(&c).copied()).collect()
}

impl Form {
    /// The form of a tokenizer.json: byte-level when its pre-tokenizer has a `ByteLevel` step,
    /// `▁` when its pre-tokenizer or normalizer writes the word mark, WordPiece for a WordPiece
    /// model continuing words with `##` (another mark is read as plain), else plain.
    pub fn of_tokenizer_json(json: &Value) -> Form {
        let pre = json.get("pre_tokenizer").map(Value::to_string);
        let norm = json.get("normalizer").map(Value::to_string);
        let has = |s: &Option<String>, what: &str| s.as_deref().is_some_and(|s| s.contains(what));
        let model = |k: &str| json.pointer(&format!("/model/{k}")).and_then(Value::as_str);
        let word_piece = model("type") == Some("WordPiece")
            && model("continuing_subword_prefix").unwrap_or(CONTINUES) == CONTINUES;
        if has(&pre, "\"ByteLevel\"") {
            Form::ByteLevel
        } else if word_piece {
            Form::WordPiece
        } else if has(&pre, "\"Metaspace\"") || has(&norm, "\u{2581}") {
            Form::Metaspace
        } else {
            Form::Plain
        }
    }

    /// The text a token of this form stands for (partial UTF-8 shown as U+FFFD).
    pub fn text_of(self, token: &str) -> String {
        match self {
            Form::ByteLevel => match byte_level_bytes(token) {
                Some(b) => String::from_utf8_lossy(&b).into_owned(),
                None => token.to_string(),
            },
            Form::Metaspace => token.replace(WORD_MARK, " "),
            Form::WordPiece => token.strip_prefix(CONTINUES).unwrap_or(token).to_string(),
            Form::Plain => token.to_string(),
        }
    }

    /// A plain-text entry (a word or character) in this form: a word-start entry (leading space
    /// or `▁`) once, any other both bare (inside a word) and as a word start (`Ġ`/`▁` first;
    /// in WordPiece the other way round: the word start bare, inside a word `##` first). A
    /// WordPiece entry already marked `##` is kept. Plain forms keep the entry as it is.
    pub fn entry_forms(self, entry: &str) -> Vec<String> {
        let rest = entry.strip_prefix([' ', WORD_MARK]);
        match (self, rest) {
            (Form::Plain, _) => vec![entry.to_string()],
            (Form::ByteLevel, Some(r)) => vec![byte_level(&format!(" {r}"))],
            (Form::ByteLevel, None) => vec![byte_level(entry), byte_level(&format!(" {entry}"))],
            (Form::Metaspace, Some(r)) => vec![format!("{WORD_MARK}{r}")],
            (Form::Metaspace, None) => vec![entry.to_string(), format!("{WORD_MARK}{entry}")],
            (Form::WordPiece, Some(r)) => vec![r.to_string()],
            (Form::WordPiece, None) if entry.starts_with(CONTINUES) => vec![entry.to_string()],
            (Form::WordPiece, None) => vec![entry.to_string(), format!("{CONTINUES}{entry}")],
        }
    }
}

/// BPE merge ranks as the model applies them: BASE's (borrowed) then appended ones.
pub struct Bpe<'a> {
    base: HashMap<(&'a str, &'a str), usize>,
    more: HashMap<String, HashMap<String, usize>>,
    len: usize,
}

impl<'a> Bpe<'a> {
    pub fn new(merges: &'a [(String, String)]) -> Self {
        let mut base = HashMap::with_capacity(merges.len());
        for (i, (a, b)) in merges.iter().enumerate() {
            base.entry((a.as_str(), b.as_str())).or_insert(i);
        }
        Bpe {
            base,
            more: HashMap::new(),
            len: merges.len(),
        }
    }

    pub fn rank(&self, a: &str, b: &str) -> Option<usize> {
        self.base
            .get(&(a, b))
            .copied()
            .or_else(|| self.more.get(a).and_then(|m| m.get(b)).copied())
    }

    /// Append a merge (lowest priority so far); false if it was there already.
    pub fn push(&mut self, a: &str, b: &str) -> bool {
        if self.rank(a, b).is_some() {
            return false;
        }
        self.more
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string(), self.len);
        self.len += 1;
        true
    }

    /// The pieces BPE makes of `token`'s characters: the lowest-ranked adjacent pair is merged
    /// first, the leftmost among equals, until no pair has a merge (as `tokenizers` does).
    pub fn apply(&self, token: &str) -> Vec<String> {
        let mut syms: Vec<String> = token.chars().map(String::from).collect();
        loop {
            let best = syms
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| self.rank(&w[0], &w[1]).map(|r| (r, i)))
                .min();
            let Some((_, i)) = best else {
                return syms;
            };
            let right = syms.remove(i + 1);
            syms[i].push_str(&right);
        }
    }

    /// Append the merges that make BPE produce `token` whole; the merges added, in order. Ranks
    /// already there are never changed, so text that never meets a new pair splits as before. To
    /// keep new pairs rare in other text, each step joins, among the pieces BPE leaves, first a
    /// pair inside one character (the bytes of a character: a new script's pairs meet only that
    /// script), then the longest pair, the leftmost among equals — never the commonest.
    pub fn reach(&mut self, token: &str, form: Form) -> Vec<(String, String)> {
        let mut added = Vec::new();
        loop {
            let pieces = self.apply(token);
            let best = pieces
                .windows(2)
                .enumerate()
                .max_by_key(|(i, w)| {
                    let inside = form.continues_char(&w[1]);
                    (
                        inside,
                        w[0].chars().count() + w[1].chars().count(),
                        usize::MAX - i,
                    )
                })
                .map(|(_, w)| (w[0].clone(), w[1].clone()));
            let Some((a, b)) = best else {
                return added;
            };
            if !self.push(&a, &b) {
                return added;
            }
            added.push((a, b));
        }
    }
}

impl Form {
    /// May BPE learn the join of `a` and `b`? In byte-level form a join inside a character always,
    /// a join across characters only of whole characters — so a learned pair never meets another
    /// script that shares a lead byte (`Ġ` + 0xE1 would meet Georgian and Vietnamese too).
    pub fn may_join(self, a: &str, b: &str) -> bool {
        self != Form::ByteLevel || self.continues_char(b) || (ends_whole(a) && ends_whole(b))
    }

    /// Does `piece` start inside a character (a UTF-8 continuation byte of a byte-level token)?
    pub fn continues_char(self, piece: &str) -> bool {
        self == Form::ByteLevel
            && piece
                .chars()
                .next()
                .and_then(|c| byte_level_bytes(&c.to_string()))
                .is_some_and(|b| b[0] & 0xC0 == 0x80)
    }
}

/// Does a byte-level `piece` end with a whole character?
fn ends_whole(piece: &str) -> bool {
    let Some(b) = byte_level_bytes(piece) else {
        return true;
    };
    let Some(lead) = b.iter().rposition(|x| x & 0xC0 != 0x80) else {
        return false;
    };
    let need = match b[lead] {
        x if x < 0x80 => 1,
        x if x >= 0xF0 => 4,
        x if x >= 0xE0 => 3,
        _ => 2,
    };
    b.len() - lead == need
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_is_gpt2s_alphabet_and_round_trips() {
        assert_eq!(byte_level(" hello"), "Ġhello");
        assert_eq!(byte_level("\n"), "Ċ");
        assert_eq!(byte_level("ሀ"), "áĪĢ");
        assert_eq!(byte_level_bytes("áĪ"), Some(vec![0xE1, 0x88]));
        assert_eq!(byte_level_bytes("ሀ"), None);
        let all: Vec<u8> = (0..=255).collect();
        let s: String = all.iter().map(|&b| byte_chars()[b as usize]).collect();
        assert_eq!(byte_level_bytes(&s), Some(all));
    }

    #[test]
    fn byte_level_joins_keep_to_whole_characters_across_them() {
        let f = Form::ByteLevel;
        assert!(f.may_join("á", "Ī"), "inside ሀ");
        assert!(f.may_join("Ġ", "áĪĢ"), "a space and a whole ሀ");
        assert!(!f.may_join("Ġ", "áĪ"), "a space and half a character");
        assert!(!f.may_join("áĪĢ", "á"));
        assert!(f.may_join("Ġthe", "re") && Form::Plain.may_join("x", "y"));
    }

    #[test]
    fn entries_take_the_word_start_variant_too() {
        assert_eq!(Form::ByteLevel.entry_forms("ሀ"), ["áĪĢ", "ĠáĪĢ"]);
        assert_eq!(Form::ByteLevel.entry_forms(" ሀ"), ["ĠáĪĢ"]);
        assert_eq!(Form::Metaspace.entry_forms("ሀ"), ["ሀ", "▁ሀ"]);
        assert_eq!(Form::Plain.entry_forms("ሀ"), ["ሀ"]);
        assert_eq!(Form::WordPiece.entry_forms("ሀ"), ["ሀ", "##ሀ"]);
        assert_eq!(Form::WordPiece.entry_forms(" ሀ"), ["ሀ"]);
        assert_eq!(Form::WordPiece.entry_forms("##ሀ"), ["##ሀ"]);
        assert_eq!(Form::WordPiece.text_of("##ሀ"), "ሀ");
    }

    #[test]
    fn reach_appends_merges_after_the_base_and_keeps_its_splits() {
        let base = vec![("a".to_string(), "b".to_string())];
        let mut bpe = Bpe::new(&base);
        assert_eq!(bpe.apply("abc"), ["ab", "c"]);
        // "bcd" must not become reachable by changing how "ab" merges.
        let added = bpe.reach("bcd", Form::Plain);
        assert_eq!(added, [("b".into(), "c".into()), ("bc".into(), "d".into())]);
        assert_eq!(bpe.apply("bcd"), ["bcd"]);
        assert_eq!(bpe.apply("abc"), ["ab", "c"], "BASE's merge still wins");
        assert!(bpe.reach("bcd", Form::Plain).is_empty());
    }

    #[test]
    fn reach_finishes_characters_before_joining_them_to_a_space() {
        let mut bpe = Bpe::new(&[]);
        let token = byte_level(" ሀ");
        let added = bpe.reach(&token, Form::ByteLevel);
        let firsts: Vec<&str> = added.iter().map(|(a, _)| a.as_str()).collect();
        // á Ī, then áĪ Ģ (the character ሀ), and only then Ġ with it: no "Ġá" pair, which
        // would meet every character whose UTF-8 starts with 0xE1 after a space.
        assert_eq!(firsts, ["á", "áĪ", "Ġ"]);
        assert_eq!(bpe.apply(&token), vec![token.clone()]);
    }
}
