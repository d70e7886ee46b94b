//! Text for checking a merge: built-in lines in many scripts (base text the merge must not change
//! unless the addition covers its script), and the split of any text into base text and new text
//! by what the new tokens cover.

use super::fxhash::FxHashSet;
use serde::Serialize;
use std::collections::HashSet;

/// Lines a base tokenizer is likely to meet: prose, code, numbers and many scripts.
pub const BUILT_IN: &[&str] = &[
    "The quick brown fox jumps over the lazy dog, then rests for 15 minutes.",
    "It was the best of times, it was the worst of times; nobody agreed which.",
    "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x.iter().sum::<i32>()); }",
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]  # TODO",
    "{\"id\": 42, \"name\": \"Ada Lovelace\", \"tags\": [\"math\", \"engines\"]}",
    "See https://example.com/docs?page=2&lang=en or mail team@example.org.",
    "Prices rose 3.75% in Q4 2023 (from $1,299.99 to $1,348.70).",
    "Le cœur a ses raisons que la raison ne connaît point, déjà à l'été.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein, schön groß.",
    "¿Dónde está la biblioteca? Está en la calle mayor, señor.",
    "Tôi yêu tiếng Việt và những món ăn ngon của quê hương.",
    "Съешь же ещё этих мягких французских булок да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "我们今天去公园散步，天气非常好。",
    "東京の桜はとても美しいです。カタカナも少し。",
    "안녕하세요, 오늘 날씨가 정말 좋네요.",
    "اللغة العربية جميلة وغنية بالمفردات.",
    "हिंदी भारत की एक प्रमुख भाषा है।",
    "ქართული ენა ძალიან ლამაზია.",
    "ሰላም ለዓለም፣ እንዴት ነህ።",
    "Emoji too: 🎉🚀 ✓ → ≤ ≥ ∞ — “quotes” and ‘single’ ones…",
];

/// What the new tokens cover: the non-ASCII characters of their text (a new script) with the
/// characters that share their first two UTF-8 bytes (the 64 characters of a block, which a
/// byte-level merge inside a character meets too), and their ASCII words (new words of a script
/// BASE has) where they stand as whole words — a new piece of an English word does not make
/// English new text.
pub struct Coverage {
    chars: FxHashSet<u32>,
    /// New ASCII words of letters and digits only: looked up per word of a line.
    words: FxHashSet<String>,
    /// The other new ASCII tokens (with punctuation): searched for in the line.
    others: Vec<String>,
}

/// A character's block as byte-level merges see it: its first two UTF-8 bytes (a two-byte
/// character: itself).
fn block(c: char) -> u32 {
    let cp = c as u32;
    match c.len_utf8() {
        3 => 0x0100_0000 | (cp >> 6),
        4 => 0x0200_0000 | (cp >> 12),
        _ => cp,
    }
}

impl Coverage {
    /// From the new tokens' text (as BASE's form reads it; U+FFFD marks pieces of a character).
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut chars = FxHashSet::default();
        let mut words = FxHashSet::default();
        let mut others = HashSet::new();
        for t in texts {
            chars.extend(
                t.chars()
                    .filter(|c| !c.is_ascii() && !c.is_whitespace() && *c != '\u{FFFD}')
                    .map(block),
            );
            let w = t.trim();
            if w.len() > 1 && w.is_ascii() {
                if w.chars().all(char::is_alphanumeric) {
                    words.insert(w.to_string());
                } else {
                    others.insert(w.to_string());
                }
            }
        }
        let mut others: Vec<String> = others.into_iter().collect();
        others.sort();
        Coverage {
            chars,
            words,
            others,
        }
    }

    /// Is `line` new text (it has a covered character or word), rather than base text?
    pub fn covers(&self, line: &str) -> bool {
        line.chars().any(|c| self.chars.contains(&block(c)))
            || (!self.words.is_empty()
                && line
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|w| self.words.contains(w)))
            || self.others.iter().any(|w| has_word(line, w))
    }
}

/// Does `word` stand in `line` with no letter or digit right before or after it?
fn has_word(line: &str, word: &str) -> bool {
    let edge = |c: Option<char>| !c.is_some_and(char::is_alphanumeric);
    line.match_indices(word).any(|(i, _)| {
        edge(line[..i].chars().next_back()) && edge(line[i + word.len()..].chars().next())
    })
}

/// One text's lines encoded with BASE and with the result.
#[derive(Debug, Clone, Serialize)]
pub struct TextCheck {
    /// The file, or `(built-in sample)`.
    pub file: std::path::PathBuf,
    pub lines: usize,
    pub changed_lines: usize,
    /// Lines left out because BASE cannot encode them (only in the built-in sample: a base whose
    /// unknown token is missing from its vocabulary fails on any character it lacks), and the
    /// first such failure.
    pub skipped_lines: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_because: Option<String>,
    /// Share of lines whose ids changed, in percent.
    pub changed_percent: f64,
    pub tokens_per_char_before: f64,
    pub tokens_per_char_after: f64,
    /// Lines the new tokens do not cover (their ids must not change), and how many did.
    pub base_lines: usize,
    pub base_changed: usize,
    /// The first base line that changed: (1-based line number, text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_base_change: Option<(usize, String)>,
    /// Lines the new tokens cover, and their tokens before and after.
    pub new_lines: usize,
    pub new_tokens_before: usize,
    pub new_tokens_after: usize,
}

/// Encode each non-empty line with `before` and `after`; lines `cover` claims are new text. With
/// `skip_unencodable`, a line `before` fails on is counted as skipped rather than an error.
pub fn check<E: std::fmt::Display>(
    file: std::path::PathBuf,
    lines: &[&str],
    cover: &Coverage,
    skip_unencodable: bool,
    before: impl Fn(&str) -> Result<Vec<u32>, E>,
    after: impl Fn(&str) -> Result<Vec<u32>, E>,
) -> Result<TextCheck, E> {
    let mut c = TextCheck {
        file,
        lines: 0,
        skipped_lines: 0,
        skipped_because: None,
        changed_lines: 0,
        changed_percent: 0.0,
        tokens_per_char_before: 0.0,
        tokens_per_char_after: 0.0,
        base_lines: 0,
        base_changed: 0,
        first_base_change: None,
        new_lines: 0,
        new_tokens_before: 0,
        new_tokens_after: 0,
    };
    let (mut chars, mut tb, mut ta) = (0usize, 0usize, 0usize);
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let a = match before(line) {
            Ok(a) => a,
            Err(e) if skip_unencodable => {
                c.skipped_lines += 1;
                c.skipped_because.get_or_insert_with(|| e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let b = after(line)?;
        c.lines += 1;
        chars += line.chars().count();
        tb += a.len();
        ta += b.len();
        let changed = a != b;
        c.changed_lines += usize::from(changed);
        if cover.covers(line) {
            c.new_lines += 1;
            c.new_tokens_before += a.len();
            c.new_tokens_after += b.len();
        } else {
            c.base_lines += 1;
            if changed {
                c.base_changed += 1;
                c.first_base_change
                    .get_or_insert_with(|| (i + 1, line.to_string()));
            }
        }
    }
    let per = |n: usize| {
        if chars == 0 {
            0.0
        } else {
            n as f64 / chars as f64
        }
    };
    c.tokens_per_char_before = per(tb);
    c.tokens_per_char_after = per(ta);
    if c.lines > 0 {
        c.changed_percent = 100.0 * c.changed_lines as f64 / c.lines as f64;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_a_new_script_or_a_new_word_are_new_text() {
        let c = Coverage::new([" ሰላም", "\u{FFFD}\u{FFFD}", "surgery", "x", "C++"]);
        assert!(c.covers("I write C++ daily") && !c.covers("I write C daily"));
        assert!(c.covers("ሰ and more"));
        assert!(c.covers("brain surgery today"));
        assert!(c.covers("surgery."));
        assert!(!c.covers("microsurgery is a piece of the word"));
        assert!(!c.covers("plain English, x marks"));
        assert!(!c.covers("Съешь"));
        assert!(c.covers("ለ"), "U+1208 shares ሰ's first two bytes");
        assert!(!c.covers("ፀ"), "U+1340 does not");
    }
}
