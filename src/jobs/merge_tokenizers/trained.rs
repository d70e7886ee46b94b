//! `--train`: the addition learned from a corpus in BASE's own form (BPE continued from BASE's
//! merges, WordPiece and Unigram by their trainers, SentencePiece BPE continued over its pieces),
//! and what the report says about it.

use super::addition::{plain, Addition, Candidate};
use super::options::Options;
use crate::error::{Error, Result};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::Form;
use crate::tokenizer::sentencepiece::PieceType;
use crate::tokenizer::train;
use serde::Serialize;
use std::collections::HashSet;
use std::path::PathBuf;

/// What training from `--train` did.
#[derive(Debug, Clone, Serialize)]
pub struct Trained {
    pub corpus: Vec<PathBuf>,
    /// Words of the corpus (as BASE splits text into words), and how many differ.
    pub words: usize,
    pub distinct_words: usize,
    /// New tokens learned (at most --train-size; fewer when no pair occurs twice).
    pub learned: usize,
    /// Tokens per word of the corpus with BASE and with the result.
    pub fertility_before: f64,
    pub fertility_after: f64,
}

/// The `kind` of the addition `--train` makes.
pub(super) const TRAINED_KIND: &str = "trained from the corpus";

/// What a trainer gives: the corpus's words, the tokens (and merges) learned, their scores (for
/// scored models) and the form they are written in.
type Learned = (train::Words, train::Learned, Vec<f32>, Form);

/// The addition `--train` learns from its corpus, in BASE's own form (BPE continued from BASE's
/// merges, or SentencePiece BPE continued over its pieces), and the corpus's words.
pub(super) fn trained_addition(
    base: &Base,
    hf: Option<&tokenizers::Tokenizer>,
    opts: &Options,
) -> Result<(Addition, train::Words)> {
    let mut text = String::new();
    for f in &opts.train {
        text.push_str(&std::fs::read_to_string(f).map_err(|e| Error::io(f, "read", e))?);
        text.push('\n');
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let (words, learned, scores, form) = learn(base, hf, &lines, opts)?;
    let tokens = learned
        .tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| Candidate {
            score: scores.get(i).map(|&s| f64::from(s)),
            piece_type: (!scores.is_empty()).then_some(PieceType::Normal),
            ..plain(t)
        })
        .collect();
    let add = Addition {
        path: PathBuf::from("--train"),
        kind: TRAINED_KIND,
        tokens,
        merges: learned.merges,
        pipeline: None,
        model_type: None,
        form,
    };
    Ok((add, words))
}

/// Train with the trainer BASE's model type calls for; a base no trainer continues is refused.
fn learn(
    base: &Base,
    hf: Option<&tokenizers::Tokenizer>,
    lines: &[&str],
    opts: &Options,
) -> Result<Learned> {
    let refuse = |what: &str| {
        Error::arg("--train", format!("--train trains BPE, WordPiece and Unigram additions and BASE is {what}: train an addition with its own trainer and give it with --add"))
    };
    Ok(match (base, hf) {
        (Base::Hf(t), Some(tok)) if t.model_type == "BPE" => {
            let words = hf_corpus(base, tok, lines, opts)?;
            let vocab: HashSet<&str> = t.ids().into_keys().collect();
            let form = base.form();
            let l = train::continue_bpe(&t.merges, &vocab, form, &words, opts.train_size);
            (words, l, Vec::new(), form)
        }
        (Base::Hf(t), Some(tok)) if t.model_type == "WordPiece" => {
            let words = hf_corpus(base, tok, lines, opts)?;
            let ids = t.ids();
            let tokens = train::train_wordpiece(&words, opts.train_size, |p| ids.contains_key(p));
            let l = train::Learned {
                tokens,
                merges: Vec::new(),
            };
            (words, l, Vec::new(), Form::WordPiece)
        }
        (Base::Hf(t), Some(tok)) if t.model_type == "Unigram" => {
            let words = hf_corpus(base, tok, lines, opts)?;
            let pieces = t.vocab.iter().zip(&t.scores);
            let mut base: Vec<(String, f32, PieceType)> = pieces
                .map(|((p, _), s)| (p.clone(), *s as f32, PieceType::Normal))
                .collect();
            // Added tokens outside the vocab are matched whole: never new pieces.
            let added = t.added_only().into_iter();
            base.extend(added.map(|a| (a.content.clone(), 0.0, PieceType::Control)));
            unigram_learned(words, &base, opts)?
        }
        (Base::Sp(m), _) if m.model_type == Some(2) => {
            let words = sp_corpus(lines, opts);
            let (l, scores) = train::continue_sp_bpe(m, &words, opts.train_size);
            (words, l, scores, Form::Metaspace)
        }
        (Base::Sp(m), _) if m.model_type.unwrap_or(1) == 1 => {
            let pieces: Vec<(String, f32, PieceType)> = m
                .pieces
                .iter()
                .map(|p| (p.piece.clone(), p.score, p.kind))
                .collect();
            unigram_learned(sp_corpus(lines, opts), &pieces, opts)?
        }
        (Base::Hf(t), _) => return Err(refuse(&format!("a {} tokenizer.json", t.model_type))),
        (Base::Sp(_), _) => return Err(refuse("a word or char SentencePiece model")),
    })
}

/// The corpus's words as a tokenizer.json BASE splits them; in `▁` form split again before each
/// `▁` (as SentencePiece trains), unless `--train-across-words` asks for BASE's words as they
/// are — then BASE must keep a line whole, or no token across words would be produced.
fn hf_corpus(
    base: &Base,
    tok: &tokenizers::Tokenizer,
    lines: &[&str],
    opts: &Options,
) -> Result<train::Words> {
    let split = |lines: &[&str]| {
        train::hf_words(tok, lines)
            .map_err(|e| Error::format(&opts.train[0], format!("cannot split a line: {e}")))
    };
    let words = split(lines)?;
    if opts.train_across_words {
        if split(&["a b"])?.len() > 1 {
            return Err(Error::arg(
                "--train-across-words",
                "--train-across-words: BASE's pre-tokenizer splits text into words, so a token across words would never be produced; leave the flag out (it applies to a base that keeps a line whole: a Metaspace pre-tokenizer with split: false, a SentencePiece .model)",
            ));
        }
        return Ok(words);
    }
    Ok(if base.form() == Form::Metaspace {
        train::at_word_marks(words)
    } else {
        words
    })
}

/// The corpus's words as a SentencePiece model's trainer splits them: at whitespace, `▁` first;
/// with `--train-across-words` each line one word.
fn sp_corpus(lines: &[&str], opts: &Options) -> train::Words {
    if opts.train_across_words {
        train::sp_lines(lines)
    } else {
        train::sp_words(lines)
    }
}

/// A Unigram addition trained on `words` (pieces BASE lacks, with their log probabilities).
fn unigram_learned(
    words: train::Words,
    base: &[(String, f32, PieceType)],
    opts: &Options,
) -> Result<Learned> {
    let pieces = train::train_unigram(&words, opts.train_size, base)
        .map_err(|e| Error::arg("--train", format!("--train: Unigram training failed: {e}")))?;
    let scores = pieces.iter().map(|(_, s)| *s as f32).collect();
    let l = train::Learned {
        tokens: pieces.into_iter().map(|(p, _)| p).collect(),
        merges: Vec::new(),
    };
    Ok((words, l, scores, Form::Metaspace))
}
