//! The corpus's words, counted, as BASE splits them (tokenizer.json or SentencePiece).

use crate::tokenizer::form::WORD_MARK;
use std::collections::BTreeMap;

/// The corpus's words in BASE's symbols, with their counts (sorted: the result is the same run
/// to run).
pub type Words = BTreeMap<String, usize>;

/// Words of `lines` as a tokenizer.json BASE splits them (its normalizer and pre-tokenizer).
pub fn hf_words(base: &tokenizers::Tokenizer, lines: &[&str]) -> Result<Words, String> {
    use tokenizers::{Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let mut words = Words::new();
    for line in lines {
        let mut pts = PreTokenizedString::from(*line);
        if let Some(n) = base.get_normalizer() {
            pts.normalize(|s| n.normalize(s))
                .map_err(|e| e.to_string())?;
        }
        if let Some(p) = base.get_pre_tokenizer() {
            p.pre_tokenize(&mut pts).map_err(|e| e.to_string())?;
        }
        for (w, _, _) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            *words.entry(w.to_string()).or_default() += 1;
        }
    }
    Ok(words)
}

/// `words` split as SentencePiece's trainer splits text into words: before every `▁`, so the mark
/// is only ever a word's first character (a run of marks gives `▁` words of their own). A
/// `Metaspace` pre-tokenizer with `split: false` (transformers' conversion of Llama and Mistral
/// models), or a normalizer writing `▁` with no pre-tokenizer, leaves each line one word.
pub fn at_word_marks(words: Words) -> Words {
    let mut out = Words::new();
    for (w, n) in words {
        let mut start = 0;
        for (i, _) in w.match_indices(WORD_MARK).chain([(w.len(), "")]) {
            if i > start {
                *out.entry(w[start..i].to_string()).or_default() += n;
            }
            start = i;
        }
    }
    out
}

/// Words of `lines` as SentencePiece splits them (whitespace; `▁` first; no normaliser).
pub fn sp_words(lines: &[&str]) -> Words {
    let mut words = Words::new();
    for w in lines.iter().flat_map(|l| l.split_whitespace()) {
        *words.entry(format!("{WORD_MARK}{w}")).or_default() += 1;
    }
    words
}

/// Each of `lines` as one word in SentencePiece's writing (`▁` first and for each run of
/// whitespace), for training tokens across words.
pub fn sp_lines(lines: &[&str]) -> Words {
    let mut words = Words::new();
    for l in lines {
        let parts: Vec<&str> = l.split_whitespace().collect();
        if !parts.is_empty() {
            let mark = WORD_MARK.to_string();
            *words
                .entry(format!("{mark}{}", parts.join(&mark)))
                .or_default() += 1;
        }
    }
    words
}
