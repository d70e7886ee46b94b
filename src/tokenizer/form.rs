//! Tokenizer forms (model knowledge every job may ask): how a vocabulary writes text — GPT-2's
//! byte-level alphabet (`Ġ` is the space byte), SentencePiece's `▁` word mark, or plain characters
//! — and BPE as the model applies it (merge ranks over symbols), so that entries are converted into
//! the base's own form and reachability is checked on the model, never by decoding text.

use super::fxhash::{self, FxHashMap};
use serde_json::Value;
use std::borrow::{Borrow, Cow};
use std::hash::{Hash, Hasher};
use std::ops::Range;

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

/// The byte-level alphabet's symbol for byte `b`.
pub fn byte_symbol(b: u8) -> char {
    byte_chars()[b as usize]
}

/// `text`'s UTF-8 bytes written in the byte-level alphabet.
pub fn byte_level(text: &str) -> String {
    let map = byte_chars();
    text.bytes().map(|b| map[b as usize]).collect()
}

/// The bytes a byte-level token stands for; None when a character is outside the alphabet.
pub fn byte_level_bytes(token: &str) -> Option<Vec<u8>> {
    token.chars().map(byte_of).collect()
}

/// The byte a character of the byte-level alphabet stands for (every one is below U+0144: a
/// table, not a hash lookup per character of a 262k-token vocabulary).
fn byte_of(c: char) -> Option<u8> {
    static BACK: std::sync::OnceLock<[Option<u8>; 0x144]> = std::sync::OnceLock::new();
    let back = BACK.get_or_init(|| {
        let mut back = [None; 0x144];
        for (b, c) in byte_chars().iter().enumerate() {
            back[*c as usize] = Some(b as u8);
        }
        back
    });
    back.get(c as usize).copied().flatten()
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
            // Every space is a `▁` to the model (its normalizer or pre-tokenizer replaces them).
            (Form::Metaspace, Some(r)) => vec![format!("{WORD_MARK}{}", marked(r))],
            (Form::Metaspace, None) => {
                let e = marked(entry);
                vec![e.clone(), format!("{WORD_MARK}{e}")]
            }
            (Form::WordPiece, Some(r)) => vec![r.to_string()],
            (Form::WordPiece, None) if entry.starts_with(CONTINUES) => vec![entry.to_string()],
            (Form::WordPiece, None) => vec![entry.to_string(), format!("{CONTINUES}{entry}")],
        }
    }
}

/// `text` with every space a `▁`.
fn marked(text: &str) -> String {
    text.replace(' ', "\u{2581}")
}

/// BPE merge ranks as the model applies them: BASE's (borrowed) then appended ones, in one map
/// (a pair is hashed once, whichever it is).
pub struct Bpe<'a> {
    ranks: FxHashMap<(Cow<'a, str>, Cow<'a, str>), usize>,
    len: usize,
}

/// A pair of strings, borrowed or owned, looked up without a copy.
trait Pair {
    fn parts(&self) -> (&str, &str);
}

impl Pair for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl Pair for (Cow<'_, str>, Cow<'_, str>) {
    fn parts(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl<'b> Borrow<dyn Pair + 'b> for (Cow<'_, str>, Cow<'_, str>)
where
    Self: 'b,
{
    fn borrow(&self) -> &(dyn Pair + 'b) {
        self
    }
}

// Hashed and compared as the tuple of its strings, as the map's own keys are.
impl Hash for dyn Pair + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl PartialEq for dyn Pair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn Pair + '_ {}

impl<'a> Bpe<'a> {
    pub fn new(merges: &'a [(String, String)]) -> Self {
        let mut ranks = fxhash::map_with_capacity(merges.len());
        for (i, (a, b)) in merges.iter().enumerate() {
            ranks
                .entry((Cow::Borrowed(a.as_str()), Cow::Borrowed(b.as_str())))
                .or_insert(i);
        }
        Bpe {
            ranks,
            len: merges.len(),
        }
    }

    pub fn rank(&self, a: &str, b: &str) -> Option<usize> {
        self.ranks.get(&(a, b) as &dyn Pair).copied()
    }

    /// Append a merge (lowest priority so far); false if it was there already.
    pub fn push(&mut self, a: &str, b: &str) -> bool {
        if self.rank(a, b).is_some() {
            return false;
        }
        let key = (Cow::Owned(a.to_string()), Cow::Owned(b.to_string()));
        self.ranks.insert(key, self.len);
        self.len += 1;
        true
    }

    /// The pieces BPE makes of `token`'s characters: the lowest-ranked adjacent pair is merged
    /// first, the leftmost among equals, until no pair has a merge (as `tokenizers` does).
    pub fn apply(&self, token: &str) -> Vec<String> {
        let pieces = self.join(token, chars_of(token));
        pieces
            .iter()
            .map(|r| token[r.clone()].to_string())
            .collect()
    }

    /// [`Bpe::apply`] from pieces of `token` already made (byte ranges: no copy of a piece), each
    /// pair's rank looked up once, and again only for the two pairs a join changes.
    fn join(&self, token: &str, pieces: Vec<Range<usize>>) -> Vec<Range<usize>> {
        let rank =
            |a: &Range<usize>, b: &Range<usize>| self.rank(&token[a.clone()], &token[b.clone()]);
        let ranks = pieces.windows(2).map(|w| rank(&w[0], &w[1])).collect();
        self.join_ranked(token, pieces, ranks)
    }

    /// [`Bpe::join`] with each pair's rank known.
    fn join_ranked(
        &self,
        token: &str,
        mut pieces: Vec<Range<usize>>,
        mut ranks: Vec<Option<usize>>,
    ) -> Vec<Range<usize>> {
        let rank =
            |a: &Range<usize>, b: &Range<usize>| self.rank(&token[a.clone()], &token[b.clone()]);
        loop {
            let best = ranks
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.map(|r| (r, i)))
                .min();
            let Some((_, i)) = best else {
                return pieces;
            };
            pieces[i].end = pieces[i + 1].end;
            pieces.remove(i + 1);
            ranks.remove(i);
            if i > 0 {
                ranks[i - 1] = rank(&pieces[i - 1], &pieces[i]);
            }
            if i < ranks.len() {
                ranks[i] = rank(&pieces[i], &pieces[i + 1]);
            }
        }
    }

    /// Append the merges that make BPE produce `token` whole; the merges added, in order. Ranks
    /// already there are never changed, so text that never meets a new pair splits as before. To
    /// keep new pairs rare in other text, each step joins, among the pieces BPE leaves, first a
    /// pair inside one character (the bytes of a character: a new script's pairs meet only that
    /// script), then the longest pair, the leftmost among equals — never the commonest.
    ///
    /// Each appended merge ranks below every other, so BPE over the characters takes every step
    /// it took before and only then the new join: BPE continues from the pieces it left, rather
    /// than starting again from the characters (the same pieces, a fraction of the lookups).
    pub fn reach(&mut self, token: &str, form: Form) -> Vec<(String, String)> {
        let mut added = Vec::new();
        let mut pieces = self.join(token, chars_of(token));
        loop {
            let best = pieces
                .windows(2)
                .enumerate()
                .max_by_key(|(i, w)| {
                    let (a, b) = (&token[w[0].clone()], &token[w[1].clone()]);
                    let inside = form.continues_char(b);
                    (
                        inside,
                        a.chars().count() + b.chars().count(),
                        usize::MAX - i,
                    )
                })
                .map(|(_, w)| {
                    (
                        token[w[0].clone()].to_string(),
                        token[w[1].clone()].to_string(),
                    )
                });
            let Some((a, b)) = best else {
                return added;
            };
            if !self.push(&a, &b) {
                return added;
            }
            // No pair of the pieces had a rank; now those that are (a, b) have the new one.
            let new = Some(self.len - 1);
            let is_new = |w: &[Range<usize>]| token[w[0].clone()] == a && token[w[1].clone()] == b;
            let ranks = pieces
                .windows(2)
                .map(|w| new.filter(|_| is_new(w)))
                .collect();
            added.push((a, b));
            pieces = self.join_ranked(token, pieces, ranks);
        }
    }
}

/// Each character of `token`, as its byte range.
fn chars_of(token: &str) -> Vec<Range<usize>> {
    token
        .char_indices()
        .map(|(i, c)| i..i + c.len_utf8())
        .collect()
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
                .and_then(byte_of)
                .is_some_and(|b| b & 0xC0 == 0x80)
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
        // A space inside an entry is `▁` too, as the model sees it (byte-level: `Ġ`).
        assert_eq!(Form::Metaspace.entry_forms("ab cd"), ["ab▁cd", "▁ab▁cd"]);
        assert_eq!(Form::Metaspace.entry_forms(" ab cd"), ["▁ab▁cd"]);
        assert_eq!(Form::ByteLevel.entry_forms("ab cd"), ["abĠcd", "ĠabĠcd"]);
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

    /// BPE as the loop reads in the paper: every pair's rank looked up again after each join.
    fn apply_from_scratch(bpe: &Bpe, token: &str) -> Vec<String> {
        let mut syms: Vec<String> = token.chars().map(String::from).collect();
        loop {
            let best = syms
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| bpe.rank(&w[0], &w[1]).map(|r| (r, i)))
                .min();
            let Some((_, i)) = best else {
                return syms;
            };
            let right = syms.remove(i + 1);
            syms[i].push_str(&right);
        }
    }

    #[test]
    fn apply_and_reach_give_the_pieces_bpe_from_the_characters_gives() {
        let mut rng = crate::rng::Rng::new(45, 3);
        let mut pick = |n: u64| (rng.next_u64() % n) as usize;
        let letters = ["a", "b", "c", "Ġ", "á", "Ī"];
        let mut tokens: Vec<String> = letters.iter().map(|s| (*s).to_string()).collect();
        let mut merges = Vec::new();
        while merges.len() < 60 {
            let (a, b) = (
                tokens[pick(tokens.len() as u64)].clone(),
                tokens[pick(tokens.len() as u64)].clone(),
            );
            if a.chars().count() + b.chars().count() <= 5 {
                tokens.push(format!("{a}{b}"));
                merges.push((a, b));
            }
        }
        let words: Vec<String> = (0..300)
            .map(|_| (0..3 + pick(6)).map(|_| letters[pick(6)]).collect())
            .collect();
        let mut bpe = Bpe::new(&merges);
        for w in &words {
            assert_eq!(bpe.apply(w), apply_from_scratch(&bpe, w), "{w}");
        }
        // Reaching each word in turn gives the merges a reach that starts BPE again from the
        // characters after every appended merge gives, and then the word whole.
        let mut again = Bpe::new(&merges);
        for w in &words {
            let mut expected = Vec::new();
            loop {
                let pieces = apply_from_scratch(&again, w);
                let best = pieces
                    .windows(2)
                    .enumerate()
                    .max_by_key(|(i, p)| {
                        let inside = Form::ByteLevel.continues_char(&p[1]);
                        (
                            inside,
                            p[0].chars().count() + p[1].chars().count(),
                            usize::MAX - i,
                        )
                    })
                    .map(|(_, p)| (p[0].clone(), p[1].clone()));
                let Some((a, b)) = best else { break };
                assert!(again.push(&a, &b));
                expected.push((a, b));
            }
            assert_eq!(bpe.reach(w, Form::ByteLevel), expected, "{w}");
            assert_eq!(bpe.apply(w), std::slice::from_ref(w));
        }
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
