//! WordPiece as BERT applies it (model knowledge): greedy longest match from the start of a word,
//! pieces after the first written `##`; entries normalised the way BASE normalises text, and a
//! new piece reachable when BASE's pipeline keeps its text one word and the greedy match takes it.

use super::form::CONTINUES;
use tokenizers::{
    Model, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, Tokenizer,
};

/// The pieces WordPiece makes of `word` (`continuing`: the word is the rest of a longer one, so
/// its first piece is a `##` piece too); None where some position has no piece (the model then
/// writes the whole word as its unknown token). As the `tokenizers` crate does, without its
/// length limit.
pub fn greedy(has: impl Fn(&str) -> bool, word: &str, continuing: bool) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < word.len() {
        let mut end = word.len();
        let piece = loop {
            let mut p = word[start..end].to_string();
            if start > 0 || continuing {
                p.insert_str(0, CONTINUES);
            }
            if has(&p) {
                break Some(p);
            }
            end = word[..end].char_indices().next_back().map(|(i, _)| i)?;
            if end <= start {
                break None;
            }
        };
        out.push(piece?);
        start = end;
    }
    Some(out)
}

/// `text` normalised by `tok`'s normalizer (an uncased BERT lowercases and strips accents), so an
/// entry is written as BASE would see it in text.
pub fn normalized(tok: &Tokenizer, text: &str) -> String {
    let Some(n) = tok.get_normalizer() else {
        return text.to_string();
    };
    let mut s = NormalizedString::from(text);
    match n.normalize(&mut s) {
        Ok(()) => s.get().to_string(),
        Err(_) => text.to_string(),
    }
}

/// The words `tok`'s normalizer and pre-tokenizer make of `text`.
fn words(tok: &Tokenizer, text: &str) -> Option<Vec<String>> {
    let mut pts = PreTokenizedString::from(text);
    if let Some(n) = tok.get_normalizer() {
        pts.normalize(|s| n.normalize(s)).ok()?;
    }
    if let Some(p) = tok.get_pre_tokenizer() {
        p.pre_tokenize(&mut pts).ok()?;
    }
    Some(
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(w, _, _)| w.to_string())
            .collect(),
    )
}

/// Does the merged WordPiece tokenizer produce `token` (id `id`) on its text? A word-start piece:
/// its text is one word after normalising and pre-tokenizing, and the model gives that word
/// exactly this token. A `##` piece: its text after a letter stays in that letter's word
/// unchanged (punctuation and CJK characters are words of their own in BERT), and the greedy
/// match on the rest of a word takes it whole.
pub fn produced(merged: &Tokenizer, token: &str, id: u32) -> bool {
    match token.strip_prefix(CONTINUES).filter(|t| !t.is_empty()) {
        None => {
            words(merged, token).is_some_and(|w| w == [token])
                && merged
                    .get_model()
                    .tokenize(token)
                    .is_ok_and(|t| t.len() == 1 && t[0].id == id)
        }
        Some(rest) => {
            let has = |p: &str| merged.token_to_id(p).is_some();
            continues(merged, rest) && greedy(has, rest, true).is_some_and(|p| p == [token])
        }
    }
}

/// Can `rest` continue a word: after a letter, does `tok`'s pipeline keep it in that letter's
/// word, unchanged?
pub fn continues(tok: &Tokenizer, rest: &str) -> bool {
    let lead = format!("a{rest}");
    words(tok, &lead).is_some_and(|w| w == [lead.as_str()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bert() -> Tokenizer {
        let json = r###"{"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
            "pre_tokenizer":{"type":"BertPreTokenizer"},
            "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
              "vocab":{"[UNK]":0,"a":1,"un":2,"##a":3,"##ble":4,"able":5,"##b":6,"##le":7,"ሰላም":8,"##ም":9,"ሰ":10,"##.":11,"中国":12}}}"###;
        Tokenizer::from_bytes(json.as_bytes()).unwrap()
    }

    #[test]
    fn greedy_takes_the_longest_piece_first_as_the_crate_does() {
        let t = bert();
        let has = |p: &str| t.token_to_id(p).is_some();
        for word in ["unable", "able", "ሰላም", "ሰም", "una", "x"] {
            let ours = greedy(has, word, false);
            let crate_ = t.get_model().tokenize(word).unwrap();
            let crate_: Vec<String> = crate_.into_iter().map(|t| t.value).collect();
            match ours {
                Some(p) => assert_eq!(p, crate_, "{word}"),
                None => assert_eq!(crate_, ["[UNK]"], "{word}"),
            }
        }
        assert_eq!(greedy(has, "ble", true).unwrap(), ["##ble"]);
    }

    #[test]
    fn a_piece_is_produced_only_where_berts_pipeline_keeps_it_one_word() {
        let t = bert();
        assert!(produced(&t, "ሰላም", 8));
        assert!(produced(&t, "##ም", 9));
        assert!(produced(&t, "##ble", 4));
        assert!(!produced(&t, "##.", 11), "punctuation is a word of its own");
        assert!(!produced(&t, "中国", 12), "each CJK character is a word");
        assert_eq!(normalized(&t, "Able"), "able");
    }
}
