//! Training an addition from a corpus in BASE's own form: BPE training continued from BASE's
//! merges (the corpus's words are split by BASE first, then the most frequent adjacent pair becomes
//! the next merge, after all of BASE's), so every new token is one BASE does not have and one the
//! merged model produces. SentencePiece BPE the same way with pieces scored below BASE's.
//! WordPiece bases get an addition trained the way the `tokenizers` crate's WordPiece trainer
//! trains (BPE from characters, `##` inside words; here with ties broken by the pair, not hash
//! order), Unigram bases one trained by that crate's own Unigram trainer, both on the corpus's
//! words (as BASE splits them), less what BASE already has.

use super::form::{Bpe, Form, CONTINUES};
use super::sentencepiece::{self as sp, PieceType, SpModel};
mod pairs;
mod words;

use pairs::Learner;
use std::collections::{HashMap, HashSet};
pub use words::{at_word_marks, hf_words, sp_lines, sp_words, Words};

/// What training learned: new tokens in the order learned and the merges that make them.
#[derive(Debug, Default)]
pub struct Learned {
    /// New characters first (the corpus's alphabet BASE lacks), then one token per merge.
    pub tokens: Vec<String>,
    pub merges: Vec<(String, String)>,
}

/// Continue BPE training from `merges` (a tokenizer.json BASE in `form` whose vocabulary is
/// `vocab`) for up to `size` new tokens; joins `form` does not allow are never learned. The most
/// frequent adjacent pair over the words as BPE splits them (each occurrence times the word's
/// count, seen at least twice, its join not a token yet; the smaller pair on a tie) becomes the
/// next merge, and the words holding it are split again.
pub fn continue_bpe(
    merges: &[(String, String)],
    vocab: &HashSet<&str>,
    form: Form,
    words: &Words,
    size: usize,
) -> Learned {
    let mut bpe = Bpe::new(merges);
    let mut pairs = Learner::new(words, |w| bpe.apply(w));
    let mut blocked: HashSet<String> = vocab.iter().map(|v| v.to_string()).collect();
    let mut out = Learned {
        tokens: alphabet(words, |c| vocab.contains(c)),
        ..Learned::default()
    };
    blocked.extend(out.tokens.iter().cloned());
    while out.tokens.len() < size {
        let allowed =
            |a: &str, b: &str| form.may_join(a, b) && !blocked.contains(&format!("{a}{b}"));
        let Some((a, b)) = pairs.next(allowed) else {
            break;
        };
        let join = format!("{a}{b}");
        blocked.insert(join.clone());
        if !bpe.push(&a, &b) {
            continue;
        }
        pairs.rejoin(&a, &b, |w, _| bpe.apply(w));
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
    let mut pairs = Learner::new(words, |w| split(w, &scores));
    let (mut out, mut new_scores) = (Learned::default(), Vec::new());
    for ch in alphabet(words, |c| blocked.contains(c)) {
        lowest = sp::below(lowest);
        scores.insert(ch.clone(), lowest);
        new_scores.push(lowest);
        out.tokens.push(ch);
    }
    blocked.extend(out.tokens.iter().cloned());
    while out.tokens.len() < size {
        let allowed = |a: &str, b: &str| !blocked.contains(&format!("{a}{b}"));
        let Some((a, b)) = pairs.next(allowed) else {
            break;
        };
        let join = format!("{a}{b}");
        blocked.insert(join.clone());
        lowest = sp::below(lowest);
        scores.insert(join.clone(), lowest);
        pairs.rejoin(&a, &b, |w, _| split(w, &scores));
        out.tokens.push(join);
        out.merges.push((a, b));
        new_scores.push(lowest);
    }
    (out, new_scores)
}

/// Train a WordPiece addition (`##` continuing words) on `words` as the `tokenizers` crate's
/// WordPiece trainer does — BPE from the characters (a word's first bare, the others `##`), the
/// most frequent adjacent pair seen at least twice joined at each step — with ties going to the
/// smaller pair, so the result is the same run to run (the crate's trainer breaks ties, and numbers
/// its alphabet, in hash order). Returns the tokens BASE lacks (`has`): the alphabet, most
/// frequent first, then the joins in the order learned; at most `size`. Joins BASE has are made
/// too (longer pieces grow from them) but not returned.
pub fn train_wordpiece(words: &Words, size: usize, has: impl Fn(&str) -> bool) -> Vec<String> {
    let mut pairs = Learner::new(words, wordpiece_chars);
    let mut out = alphabet_of(pairs.piece_counts().into_iter(), &has);
    let mut taken: HashSet<String> = out.iter().cloned().collect();
    while out.len() < size {
        let Some((a, b)) = pairs.next(|_, _| true) else {
            break;
        };
        let join = format!("{a}{}", b.strip_prefix(CONTINUES).unwrap_or(&b));
        pairs.rejoin(&a, &b, |_, pieces| join_pairs(pieces, &a, &b, &join));
        if !has(&join) && taken.insert(join.clone()) {
            out.push(join);
        }
    }
    out.truncate(size);
    out
}

/// `pieces` with every adjacent `a`, `b` (left to right) joined into `join`.
fn join_pairs(pieces: &[String], a: &str, b: &str, join: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    let mut i = 0;
    while i < pieces.len() {
        if i + 1 < pieces.len() && pieces[i] == a && pieces[i + 1] == b {
            out.push(join.to_string());
            i += 2;
        } else {
            out.push(pieces[i].clone());
            i += 1;
        }
    }
    out
}

/// A word's characters as WordPiece training starts from them: the first bare, the rest `##`.
fn wordpiece_chars(w: &str) -> Vec<String> {
    w.chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                c.to_string()
            } else {
                format!("{CONTINUES}{c}")
            }
        })
        .collect()
}

/// Train a Unigram on `words` with the `tokenizers` crate's trainer (EM over a seed of frequent
/// substrings, pruned to the size): the pieces BASE (its `base` pieces) lacks, at most `size`, each
/// with its log probability as score — the scale of BASE's own scores, so Viterbi picks them on
/// text in the new language as the addition alone would. A piece that Viterbi over BASE's and the
/// new pieces splits (its parts score higher) is left out: it would never be produced.
pub fn train_unigram(
    words: &Words,
    size: usize,
    base: &[(String, f32, PieceType)],
) -> Result<Vec<(String, f64)>, String> {
    let taken: HashSet<&str> = base.iter().map(|p| p.0.as_str()).collect();
    let has = |p: &str| taken.contains(p);
    let alphabet: HashSet<char> = words.keys().flat_map(|w| w.chars()).collect();
    let mut vocab_size = size.max(alphabet.len() + 1);
    let mut last = usize::MAX;
    loop {
        let model = trained_unigram(words, vocab_size)?;
        // Scores as f32 (as a .model stores them): the trainer's parallel sums differ run to run
        // in the last bits of an f64, which would reorder equal pieces.
        let pieces: Vec<(String, f64)> = model
            .iter()
            .map(|(p, s)| (p.clone(), f64::from(*s as f32)))
            .collect();
        let total = pieces.len();
        let new: Vec<(String, f64)> = pieces.into_iter().filter(|(p, _)| !has(p)).collect();
        let mut new = produced_alone(base, new);
        if new.len() >= size || total == last || total < vocab_size {
            // Best first (the trainer lists the alphabet first, in hash order): the same ids
            // run to run, and a smaller --train-size keeps the likeliest pieces.
            new.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            new.truncate(size);
            return Ok(new);
        }
        last = total;
        vocab_size += size - new.len();
    }
}

/// The `new` pieces that unigram Viterbi over `base` and all of `new` leaves whole. (Leaving a
/// piece out only removes segmentations, so the pieces kept stay whole.)
fn produced_alone(
    base: &[(String, f32, PieceType)],
    new: Vec<(String, f64)>,
) -> Vec<(String, f64)> {
    let all: Vec<(String, f32, PieceType)> = base
        .iter()
        .cloned()
        .chain(
            new.iter()
                .map(|(p, s)| (p.clone(), *s as f32, PieceType::Normal)),
        )
        .collect();
    let index = sp::piece_index(&all);
    new.into_iter()
        .enumerate()
        .filter(|(i, (p, _))| sp::viterbi_with(&all, &index, p) == [base.len() + i])
        .map(|(_, x)| x)
        .collect()
}

/// The `tokenizers` crate's Unigram trainer on `words` at `vocab_size`. Its seed step's suffix
/// array (esaxx-rs' Rust port, which the crate uses without its C++ feature) panics on some
/// orders of the sentences (esaxx-rs issue #2: an index past the end), and the trainer takes
/// them in the order of a randomly seeded map: each attempt sees another order. Three are made;
/// a panic is an error, never a crash.
fn trained_unigram(
    words: &Words,
    vocab_size: usize,
) -> Result<tokenizers::models::unigram::Unigram, String> {
    use tokenizers::models::unigram::{Unigram, UnigramTrainer};
    let mut failed = String::new();
    for _ in 0..3 {
        let mut trainer = UnigramTrainer::builder()
            .vocab_size(u32::try_from(vocab_size).unwrap_or(u32::MAX))
            .show_progress(false)
            .build()
            .map_err(|e| e.to_string())?;
        feed(&mut trainer, words)?;
        let mut model = Unigram::default();
        let trained = crate::tokenizer::library::caught(|| {
            tokenizers::Trainer::train(&trainer, &mut model).map_err(|e| e.to_string())
        });
        match trained {
            Ok(done) => return done.map(|_| model),
            Err(panic) => failed = panic,
        }
    }
    Err(format!(
        "the tokenizers crate's Unigram trainer failed three times ({failed}): its suffix array's known bug (esaxx-rs issue #2)"
    ))
}

/// Give a trainer the corpus's words, each as often as it occurs.
fn feed<T: tokenizers::Trainer>(trainer: &mut T, words: &Words) -> Result<(), String> {
    trainer
        .feed(words.keys(), |w| {
            Ok(vec![w.to_string(); words.get(w).copied().unwrap_or(1)])
        })
        .map_err(|e| e.to_string())
}

/// The characters of `words` that `has` lacks, most frequent first: a new script's alphabet,
/// learned before any pair (as a trainer's initial alphabet).
fn alphabet(words: &Words, has: impl Fn(&str) -> bool) -> Vec<String> {
    let mut n: HashMap<String, usize> = HashMap::new();
    for (w, c) in words {
        for ch in w.chars().map(String::from) {
            *n.entry(ch).or_default() += c;
        }
    }
    alphabet_of(n.into_iter(), &has)
}

/// The symbols of `counts` that `has` lacks, most frequent first (ties by the symbol).
fn alphabet_of(
    counts: impl Iterator<Item = (String, usize)>,
    has: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut v: Vec<(String, usize)> = counts.filter(|(s, _)| !has(s)).collect();
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
    use crate::tokenizer::form::WORD_MARK;

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

    fn amharic_words() -> Words {
        let mut w = Words::new();
        for (word, n) in [("ሰላም", 9), ("ሰላምታ", 4), ("ላም", 5), ("ታላቅ", 3), ("ቅርብ", 2)]
        {
            w.insert(format!("{WORD_MARK}{word}"), n);
        }
        w
    }

    #[test]
    fn words_split_before_each_word_mark_as_sentencepiece_splits_them() {
        let m = |s: &str| s.replace(' ', "\u{2581}");
        let words: Words = [(m(" ab cd"), 2), (m("ab  cd "), 1), (m(" cd"), 1)].into();
        let got = at_word_marks(words);
        let want: Words = [(m(" ab"), 2), ("ab".into(), 1), (m(" "), 2), (m(" cd"), 4)].into();
        assert_eq!(got, want);
        let lines = sp_lines(&["ab  cd ", " "]);
        assert_eq!(lines, [(m(" ab cd"), 1)].into());
    }

    #[test]
    fn wordpiece_training_gives_word_start_and_continuing_pieces_base_lacks() {
        let mut words = Words::new();
        for (w, n) in [("ሰላም", 9), ("ሰላምታ", 4), ("ላም", 5)] {
            words.insert(w.to_string(), n);
        }
        let t = train_wordpiece(&words, 12, |t| t == "ሰ");
        assert!(!t.iter().any(|t| t == "ሰ"), "{t:?}");
        assert!(t.iter().any(|t| t == "##ላ"), "{t:?}");
        assert!(t.iter().any(|t| t.chars().count() > 3), "{t:?}");
        assert!(t.len() <= 12);
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
    fn continue_bpe_by_recounting(
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
    fn continue_sp_bpe_by_recounting(
        model: &SpModel,
        words: &Words,
        size: usize,
    ) -> (Learned, Vec<f32>) {
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
            lowest = sp::below(lowest);
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
            lowest = sp::below(lowest);
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

    /// WordPiece training the plain way, for comparison: every pair counted again at each step
    /// (as continued BPE training does), joins made on the words' strings.
    fn wordpiece_by_recounting(
        words: &Words,
        size: usize,
        has: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut pieces: HashMap<&str, Vec<String>> = words
            .keys()
            .map(|w| (w.as_str(), wordpiece_chars(w)))
            .collect();
        let mut first: HashMap<String, usize> = HashMap::new();
        for (w, n) in words {
            for p in &pieces[w.as_str()] {
                *first.entry(p.clone()).or_default() += n;
            }
        }
        let mut out = alphabet_of(first.into_iter(), &has);
        let mut taken: HashSet<String> = out.iter().cloned().collect();
        while out.len() < size {
            let Some((a, b)) = best_pair(&pieces, words, &HashSet::new(), Form::WordPiece) else {
                break;
            };
            let join = format!("{a}{}", b.strip_prefix(CONTINUES).unwrap_or(&b));
            for p in pieces.values_mut() {
                let mut i = 0;
                while i + 1 < p.len() {
                    if p[i] == a && p[i + 1] == b {
                        p[i] = join.clone();
                        p.remove(i + 1);
                    }
                    i += 1;
                }
            }
            if !has(&join) && taken.insert(join.clone()) {
                out.push(join);
            }
        }
        out.truncate(size);
        out
    }

    /// Random words over a few letters (pairs tie, repeat inside words), `n` of them.
    fn few_letter_words(r: &mut crate::rng::Rng, n: usize, mark: &str) -> Words {
        let mut words = Words::new();
        for _ in 0..n {
            let len = 1 + (r.next_u64() % 6) as usize;
            let w: String = (0..len)
                .map(|_| ['a', 'b', 'c', 'ሀ'][(r.next_u64() % 4) as usize])
                .collect();
            *words.entry(format!("{mark}{w}")).or_default() += 1 + (r.next_u64() % 4) as usize;
        }
        words
    }

    #[test]
    fn continued_training_with_kept_counts_equals_recounting_every_step() {
        let mut r = crate::rng::Rng::new(11, 0);
        let merges = vec![
            ("a".to_string(), "b".to_string()),
            ("c".to_string(), "c".to_string()),
        ];
        let vocab: HashSet<&str> = ["a", "b", "c", "ab", "cc", "ሀ"].into_iter().collect();
        for case in 0..40 {
            let words = few_letter_words(&mut r, 5 + case * 3, "");
            for size in [1, 4, 1000] {
                for form in [Form::Plain, Form::WordPiece] {
                    let (x, y) = (
                        continue_bpe(&merges, &vocab, form, &words, size),
                        continue_bpe_by_recounting(&merges, &vocab, form, &words, size),
                    );
                    assert_eq!((&x.tokens, &x.merges), (&y.tokens, &y.merges), "{words:?}");
                }
            }
        }
    }

    #[test]
    fn sentencepiece_training_with_kept_counts_equals_recounting_every_step() {
        let mut r = crate::rng::Rng::new(13, 0);
        let piece = |p: &str, score: f32| sp::Piece {
            piece: p.to_string(),
            score,
            kind: PieceType::Normal,
            raw: 0..0,
        };
        let model = SpModel {
            bytes: Vec::new(),
            pieces: vec![
                piece("\u{2581}", -1.0),
                piece("a", -2.0),
                piece("b", -3.0),
                piece("ab", -4.0),
            ],
            insert_at: 0,
            model_type: Some(2),
        };
        for case in 0..40 {
            let words = few_letter_words(&mut r, 5 + case * 3, "\u{2581}");
            for size in [2, 6, 1000] {
                let (x, xs) = continue_sp_bpe(&model, &words, size);
                let (y, ys) = continue_sp_bpe_by_recounting(&model, &words, size);
                assert_eq!(
                    (&x.tokens, &x.merges, xs),
                    (&y.tokens, &y.merges, ys),
                    "{words:?}"
                );
            }
        }
    }

    #[test]
    fn wordpiece_training_with_kept_counts_equals_recounting_every_step() {
        // Few letters, so pairs tie, repeat inside words (aaaa) and one string is reached by
        // two joins (a + ##bc, ab + ##c).
        let mut r = crate::rng::Rng::new(7, 0);
        for case in 0..40 {
            let words = few_letter_words(&mut r, 5 + case * 3, "");
            let has = |t: &str| case % 3 == 0 && (t == "ab" || t == "##c");
            for size in [3, 10, 1000] {
                assert_eq!(
                    train_wordpiece(&words, size, has),
                    wordpiece_by_recounting(&words, size, has),
                    "case {case}, size {size}: {words:?}"
                );
            }
        }
    }

    #[test]
    fn wordpiece_training_breaks_ties_by_the_pair_and_grows_from_joins_base_has() {
        let words =
            |w: &[(&str, usize)]| -> Words { w.iter().map(|(w, n)| (w.to_string(), *n)).collect() };
        // Equally frequent symbols and pairs: the smaller first, whatever the hash order.
        let t = train_wordpiece(&words(&[("cd", 2), ("ab", 2)]), 10, |_| false);
        assert_eq!(t, ["##b", "##d", "a", "c", "ab", "cd"]);
        // A pair seen once is not joined; the size cuts the joins in the order learned.
        let t = train_wordpiece(&words(&[("ab", 2), ("cd", 1)]), 10, |_| false);
        assert_eq!(t, ["##b", "a", "##d", "c", "ab"]);
        assert_eq!(
            train_wordpiece(&words(&[("cd", 2), ("ab", 2)]), 5, |_| false).len(),
            5
        );
        // `##bc` (BASE has it) is joined first, not returned; `abc` grows from it.
        let t = train_wordpiece(&words(&[("abc", 3)]), 10, |t| t == "##bc");
        assert_eq!(t, ["##b", "##c", "a", "abc"]);
    }

    #[test]
    fn unigram_training_scores_pieces_as_log_probabilities() {
        let base = [("ም".to_string(), -2.0, PieceType::Normal)];
        let p = train_unigram(&amharic_words(), 20, &base).unwrap();
        assert!(!p.iter().any(|(t, _)| t == "ም"));
        assert!(p.iter().any(|(t, _)| t == "\u{2581}ሰላም"), "{p:?}");
        assert!(p.iter().all(|(_, s)| *s < 0.0 && s.is_finite()), "{p:?}");
    }
}
