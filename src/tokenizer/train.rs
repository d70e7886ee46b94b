//! Training an addition from a corpus in BASE's own form: BPE training continued from BASE's
//! merges (the corpus's words are split by BASE first, then the most frequent adjacent pair becomes
//! the next merge, after all of BASE's), so every new token is one BASE does not have and one the
//! merged model produces. SentencePiece BPE the same way with pieces scored below BASE's.

use super::form::{Bpe, Form, WORD_MARK};
use super::sentencepiece::{self as sp, PieceType, SpModel};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What training learned: new tokens in the order learned and the merges that make them.
#[derive(Debug, Default)]
pub struct Learned {
    /// New characters first (the corpus's alphabet BASE lacks), then one token per merge.
    pub tokens: Vec<String>,
    pub merges: Vec<(String, String)>,
}

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

/// Words of `lines` as SentencePiece splits them (whitespace; `▁` first; no normaliser).
pub fn sp_words(lines: &[&str]) -> Words {
    let mut words = Words::new();
    for w in lines.iter().flat_map(|l| l.split_whitespace()) {
        *words.entry(format!("{WORD_MARK}{w}")).or_default() += 1;
    }
    words
}

/// The most frequent adjacent pair over `pieces` (counted once per occurrence, times the word's
/// count) whose join is not `blocked`; ties go to the smaller pair. None below two occurrences.
fn best_pair(
    pieces: &HashMap<&str, Vec<String>>,
    words: &Words,
    blocked: &HashSet<String>,
    form: Form,
) -> Option<(String, String)> {
    let mut counts: HashMap<(&str, &str), usize> = HashMap::new();
    for (w, n) in words {
        for p in pieces[w.as_str()].windows(2) {
            *counts.entry((&p[0], &p[1])).or_default() += n;
        }
    }
    counts
        .into_iter()
        .filter(|((a, b), n)| {
            *n >= 2 && form.may_join(a, b) && !blocked.contains(&format!("{a}{b}"))
        })
        .max_by(|(p, n), (q, m)| n.cmp(m).then_with(|| q.cmp(p)))
        .map(|((a, b), _)| (a.to_string(), b.to_string()))
}

/// Continue BPE training from `merges` (a tokenizer.json BASE in `form` whose vocabulary is
/// `vocab`) for up to `size` new tokens; joins `form` does not allow are never learned.
pub fn continue_bpe(
    merges: &[(String, String)],
    vocab: &HashSet<&str>,
    form: Form,
    words: &Words,
    size: usize,
) -> Learned {
    let mut bpe = Bpe::new(merges);
    let mut pieces: HashMap<&str, Vec<String>> =
        words.keys().map(|w| (w.as_str(), bpe.apply(w))).collect();
    let mut blocked: HashSet<String> = vocab.iter().map(|v| v.to_string()).collect();
    let mut out = Learned {
        tokens: alphabet(words, |c| vocab.contains(c)),
        ..Learned::default()
    };
    blocked.extend(out.tokens.iter().cloned());
    while out.tokens.len() < size {
        let Some((a, b)) = best_pair(&pieces, words, &blocked, form) else {
            break;
        };
        let join = format!("{a}{b}");
        blocked.insert(join.clone());
        if !bpe.push(&a, &b) {
            continue;
        }
        for (w, p) in pieces.iter_mut() {
            if p.windows(2).any(|x| x[0] == a && x[1] == b) {
                *p = bpe.apply(w);
            }
        }
        out.tokens.push(join);
        out.merges.push((a, b));
    }
    out
}

/// Continue SentencePiece BPE training over `model`'s pieces for up to `size` new pieces; their
/// scores fall below every piece's, in the order learned (returned beside each token).
pub fn continue_sp_bpe(model: &SpModel, words: &Words, size: usize) -> (Learned, Vec<f32>) {
    let mut scores: HashMap<String, f32> = model
        .pieces
        .iter()
        .filter(|p| matches!(p.kind, PieceType::Normal | PieceType::UserDefined))
        .map(|p| (p.piece.clone(), p.score))
        .collect();
    let mut blocked: HashSet<String> = model.pieces.iter().map(|p| p.piece.clone()).collect();
    let mut lowest = scores.values().copied().fold(0f32, f32::min);
    let split = |w: &str, s: &HashMap<String, f32>| sp::bpe_pieces(|p| s.get(p).copied(), w);
    let mut pieces: HashMap<&str, Vec<String>> = words
        .keys()
        .map(|w| (w.as_str(), split(w, &scores)))
        .collect();
    let (mut out, mut new_scores) = (Learned::default(), Vec::new());
    for ch in alphabet(words, |c| blocked.contains(c)) {
        lowest -= 1.0;
        scores.insert(ch.clone(), lowest);
        new_scores.push(lowest);
        out.tokens.push(ch);
    }
    blocked.extend(out.tokens.iter().cloned());
    while out.tokens.len() < size {
        let Some((a, b)) = best_pair(&pieces, words, &blocked, Form::Metaspace) else {
            break;
        };
        let join = format!("{a}{b}");
        blocked.insert(join.clone());
        lowest -= 1.0;
        scores.insert(join.clone(), lowest);
        for (w, p) in pieces.iter_mut() {
            if p.windows(2).any(|x| x[0] == a && x[1] == b) {
                *p = split(w, &scores);
            }
        }
        out.tokens.push(join);
        out.merges.push((a, b));
        new_scores.push(lowest);
    }
    (out, new_scores)
}

/// The characters of `words` that `has` lacks, most frequent first: a new script's alphabet,
/// learned before any pair (as a trainer's initial alphabet).
fn alphabet(words: &Words, has: impl Fn(&str) -> bool) -> Vec<String> {
    let mut n: HashMap<String, usize> = HashMap::new();
    for (w, c) in words {
        for ch in w.chars().map(String::from).filter(|ch| !has(ch)) {
            *n.entry(ch).or_default() += c;
        }
    }
    let mut v: Vec<(String, usize)> = n.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().map(|(ch, _)| ch).collect()
}

/// Tokens per word of `words` (weighted by count) as `pieces` splits each.
pub fn fertility(words: &Words, pieces: impl Fn(&str) -> usize) -> f64 {
    let n: usize = words.values().sum();
    if n == 0 {
        return 0.0;
    }
    words.iter().map(|(w, c)| pieces(w) * c).sum::<usize>() as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_training_learns_frequent_pairs_after_the_base_and_skips_its_tokens() {
        let merges = vec![("a".to_string(), "b".to_string())];
        let vocab: HashSet<&str> = ["a", "b", "c", "ab"].into_iter().collect();
        let words: Words = [("abc".to_string(), 5), ("cc".to_string(), 3)].into();
        let l = continue_bpe(&merges, &vocab, Form::Plain, &words, 10);
        assert_eq!(l.tokens, ["abc", "cc"]);
        assert_eq!(l.merges[0], ("ab".to_string(), "c".to_string()));
        let l = continue_bpe(&merges, &vocab, Form::Plain, &words, 1);
        assert_eq!(l.tokens.len(), 1);
    }
}
