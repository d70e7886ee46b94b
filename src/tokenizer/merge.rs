//! The `merge-tokenizers` job: every id of BASE unchanged; new tokens take the first free ids
//! above every id BASE uses, in the order the additions list them; duplicates are skipped and
//! listed. Verified in the `tokenizers` crate (HF) or by re-parsing the model (SentencePiece)
//! before anything is written.

use super::base::{is_json, is_json_file, read, unmergeable};
pub use super::base::{load_base, load_tokenizer, Base};
use super::form::{self, Bpe, Form};
use super::hf::{self, Edit, HfTokenizer};
use super::sample::{self, Coverage, TextCheck};
use super::sentencepiece::{self as sp, PieceType, SpModel};
use super::train;
use super::wordpiece;
use crate::error::{Error, Result};
use crate::output::{self, manifest::sha256};
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// One token an addition lists.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub content: String,
    pub special: bool,
    pub score: Option<f64>,
    pub piece_type: Option<PieceType>,
    /// The addition's added-token object, for its flags.
    pub template: Option<Value>,
}

/// An addition: its tokens in id order, its merges, and its pipeline (for warnings).
#[derive(Debug, Clone)]
pub struct Addition {
    pub path: PathBuf,
    pub kind: &'static str,
    pub tokens: Vec<Candidate>,
    pub merges: Vec<(String, String)>,
    pub pipeline: Option<HashMap<&'static str, Value>>,
    pub model_type: Option<String>,
    /// How its tokens write text (a token list's lines are plain text).
    pub form: Form,
}

const PIPELINE: [&str; 3] = ["normalizer", "pre_tokenizer", "decoder"];

/// Load an addition: tokenizer.json, vocab.json, SentencePiece model, or one token per line.
pub fn load_addition(path: &Path) -> Result<Addition> {
    let bytes = read(path)?;
    let bad = |why: String| Error::format(path, format!("not a usable addition: {why}"));
    if let Some(why) = unmergeable(&bytes) {
        return Err(bad(why.into()));
    }
    if is_json(&bytes) {
        let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if value.get("model").is_some() {
            let t = hf::parse(&text).map_err(bad)?;
            let specials: HashMap<&str, &hf::AddedToken> =
                t.added.iter().map(|a| (a.content.as_str(), a)).collect();
            let mut tokens: Vec<(u32, Candidate)> = t
                .vocab
                .iter()
                .map(|(c, id)| {
                    let a = specials.get(c.as_str());
                    (
                        *id,
                        Candidate {
                            content: c.clone(),
                            special: a.is_some_and(|a| a.special),
                            score: t.scores.get(*id as usize).copied(),
                            piece_type: None,
                            template: a.map(|a| a.raw.clone()),
                        },
                    )
                })
                .collect();
            let in_vocab: HashSet<&str> = t.vocab.iter().map(|(c, _)| c.as_str()).collect();
            for a in t
                .added
                .iter()
                .filter(|a| !in_vocab.contains(a.content.as_str()))
            {
                tokens.push((
                    a.id,
                    Candidate {
                        content: a.content.clone(),
                        special: a.special,
                        score: None,
                        piece_type: None,
                        template: Some(a.raw.clone()),
                    },
                ));
            }
            tokens.sort_by_key(|(id, _)| *id);
            return Ok(Addition {
                path: path.to_path_buf(),
                kind: "tokenizer.json",
                tokens: tokens.into_iter().map(|(_, c)| c).collect(),
                merges: t.merges.clone(),
                pipeline: Some(PIPELINE.iter().map(|k| (*k, t.pipeline(k))).collect()),
                model_type: Some(t.model_type.clone()),
                form: Form::of_tokenizer_json(&t.json),
            });
        }
        let map: crate::formats::json::UniqueMap<u64> =
            serde_json::from_str(&text).map_err(|e| {
                bad(format!(
                    "neither tokenizer.json nor a token → id vocab.json ({e})"
                ))
            })?;
        let mut v = map.0;
        v.sort_by_key(|(_, id)| *id);
        // A GPT-2 vocab.json is byte-level: every token in the alphabet, some with its
        // non-ASCII symbols (Ġ for a space). Anything else is read as plain text.
        let byte_level = v.iter().all(|(c, _)| form::byte_level_bytes(c).is_some())
            && v.iter().any(|(c, _)| !c.is_ascii());
        return Ok(Addition {
            path: path.to_path_buf(),
            kind: "vocab.json",
            tokens: v.into_iter().map(|(c, _)| plain(c)).collect(),
            merges: Vec::new(),
            pipeline: None,
            model_type: None,
            form: if byte_level {
                Form::ByteLevel
            } else {
                Form::Plain
            },
        });
    }
    if let Ok(m) = sp::parse(bytes.clone()) {
        let tokens = m
            .pieces
            .iter()
            .filter(|p| {
                !matches!(
                    p.kind,
                    PieceType::Byte | PieceType::Unused | PieceType::Unknown
                )
            })
            .map(|p| Candidate {
                content: p.piece.clone(),
                special: p.kind == PieceType::Control,
                score: Some(f64::from(p.score)),
                piece_type: Some(match p.kind {
                    PieceType::Control | PieceType::UserDefined => p.kind,
                    _ => PieceType::Normal,
                }),
                template: None,
            })
            .collect();
        return Ok(Addition {
            path: path.to_path_buf(),
            kind: "SentencePiece model",
            tokens,
            merges: Vec::new(),
            pipeline: None,
            model_type: m.model_type.map(|t| format!("SentencePiece type {t}")),
            form: Form::Metaspace,
        });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| bad("not JSON, not a SentencePiece model, and not UTF-8 text".into()))?;
    Ok(Addition {
        path: path.to_path_buf(),
        kind: "token list",
        tokens: text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty())
            .map(|l| plain(l.to_string()))
            .collect(),
        merges: Vec::new(),
        pipeline: None,
        model_type: None,
        form: Form::Plain,
    })
}

fn plain(content: String) -> Candidate {
    Candidate {
        content,
        special: false,
        score: None,
        piece_type: None,
        template: None,
    }
}

/// Where a new token went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// The model's vocab.
    Vocab,
    /// The model's vocab (so `tokenizers` keeps its id) and the added tokens (so it is matched
    /// whole): a special token, or a BPE token no merge can produce.
    AddedToken,
    /// A SentencePiece piece.
    Piece,
}

#[derive(Debug, Clone, Serialize)]
pub struct Assigned {
    pub token: String,
    pub id: u32,
    pub place: Place,
    pub special: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Which --add it came from (1-based).
    pub from: usize,
    #[serde(skip)]
    template: Option<Value>,
    #[serde(skip)]
    piece_type: Option<PieceType>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub token: String,
    pub reason: String,
}

/// Everything the merge did and checked.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub base: PathBuf,
    pub base_format: String,
    /// Largest id BASE uses + 1.
    pub base_size: u32,
    /// Largest id the output uses + 1.
    pub merged_size: u32,
    pub additions: Vec<String>,
    pub added: Vec<Assigned>,
    pub skipped: Vec<Skipped>,
    /// How BASE writes text; entries of additions in another form were converted into it.
    pub base_form: Form,
    /// Tokens written in BASE's form from entries in another (a word gives a bare and a
    /// word-start token).
    pub converted: usize,
    pub merges_appended: Vec<(String, String)>,
    pub merges_not_appended: usize,
    /// Merges made here so that BPE produces each new token (after the appended ones).
    pub merges_synthesized: Vec<(String, String)>,
    /// Pieces those merges pass through that neither BASE nor the additions had: new ids, after
    /// the additions' tokens.
    pub intermediates: Vec<String>,
    /// Multi-character BPE tokens no merge produces: written as (non-special) added tokens.
    pub became_added_tokens: Vec<String>,
    /// BASE's added tokens that were outside model.vocab, written into it at their ids so that
    /// `tokenizers` (which numbers such tokens after the vocab) keeps their ids.
    pub pinned: Vec<String>,
    /// New tokens that do not encode alone to their id.
    pub unreachable: Vec<String>,
    /// What could not be checked here.
    pub not_checked: Vec<String>,
    pub warnings: Vec<String>,
    /// The built-in lines (base text in many scripts; those the new tokens cover are new text).
    pub base_sample: TextCheck,
    pub check_text: Vec<TextCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trained: Option<Trained>,
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
}

/// Options of the job.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Score for new Unigram/SentencePiece pieces whose addition has none.
    pub score: Option<f64>,
    pub check_text: Vec<PathBuf>,
    pub dry_run: bool,
    /// Write the merge even when new tokens do not encode alone to their id.
    pub allow_unreachable: bool,
    /// Replace an existing output file.
    pub overwrite: bool,
    /// Write the merge even when base text (lines no new token covers) encodes differently.
    pub allow_base_change: bool,
    /// Corpus files to train an addition from (BPE continued from BASE's merges).
    pub train: Vec<PathBuf>,
    /// How many new tokens to train at most.
    pub train_size: usize,
    /// Tokens to add as special tokens (matched whole, `special: true`): marked where an
    /// addition lists them, else added after the additions' tokens.
    pub special: Vec<String>,
}

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

/// The addition `--train` learns from its corpus, in BASE's own form (BPE continued from BASE's
/// merges, or SentencePiece BPE continued over its pieces), and the corpus's words.
fn trained_addition(
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
    let refuse = |what: &str| {
        Error::Usage(format!("--train trains BPE, WordPiece and Unigram additions and BASE is {what}: train an addition with its own trainer and give it with --add"))
    };
    let (words, learned, scores, form) = match (base, hf) {
        (Base::Hf(t), Some(tok)) if t.model_type == "BPE" => {
            let words = hf_corpus(tok, &lines, opts)?;
            let vocab: HashSet<&str> = t.ids().into_keys().collect();
            let form = base.form();
            let l = train::continue_bpe(&t.merges, &vocab, form, &words, opts.train_size);
            (words, l, Vec::new(), form)
        }
        (Base::Hf(t), Some(tok)) if t.model_type == "WordPiece" => {
            let words = hf_corpus(tok, &lines, opts)?;
            let ids = t.ids();
            let tokens = train::train_wordpiece(&words, opts.train_size, |p| ids.contains_key(p))
                .map_err(|e| {
                Error::Usage(format!("--train: WordPiece training failed: {e}"))
            })?;
            let l = train::Learned {
                tokens,
                merges: Vec::new(),
            };
            (words, l, Vec::new(), Form::WordPiece)
        }
        (Base::Hf(t), Some(tok)) if t.model_type == "Unigram" => {
            let words = hf_corpus(tok, &lines, opts)?;
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
            let words = train::sp_words(&lines);
            let (l, scores) = train::continue_sp_bpe(m, &words, opts.train_size);
            (words, l, scores, Form::Metaspace)
        }
        (Base::Sp(m), _) if m.model_type.unwrap_or(1) == 1 => {
            let pieces: Vec<(String, f32, PieceType)> = m
                .pieces
                .iter()
                .map(|p| (p.piece.clone(), p.score, p.kind))
                .collect();
            unigram_learned(train::sp_words(&lines), &pieces, opts)?
        }
        (Base::Hf(t), _) => return Err(refuse(&format!("a {} tokenizer.json", t.model_type))),
        (Base::Sp(_), _) => return Err(refuse("a word or char SentencePiece model")),
    };
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
        kind: "trained from the corpus",
        tokens,
        merges: learned.merges,
        pipeline: None,
        model_type: None,
        form,
    };
    Ok((add, words))
}

/// The corpus's words as a tokenizer.json BASE splits them.
fn hf_corpus(tok: &tokenizers::Tokenizer, lines: &[&str], opts: &Options) -> Result<train::Words> {
    train::hf_words(tok, lines)
        .map_err(|e| Error::format(&opts.train[0], format!("cannot split a line: {e}")))
}

/// A Unigram addition trained on `words` (pieces BASE lacks, with their log probabilities).
fn unigram_learned(
    words: train::Words,
    base: &[(String, f32, PieceType)],
    opts: &Options,
) -> Result<(train::Words, train::Learned, Vec<f32>, Form)> {
    let pieces = train::train_unigram(&words, opts.train_size, base)
        .map_err(|e| Error::Usage(format!("--train: Unigram training failed: {e}")))?;
    let scores = pieces.iter().map(|(_, s)| *s as f32).collect();
    let l = train::Learned {
        tokens: pieces.into_iter().map(|(p, _)| p).collect(),
        merges: Vec::new(),
    };
    Ok((words, l, scores, Form::Metaspace))
}

/// Mark the `special` tokens special where the additions list them (a SentencePiece piece becomes
/// USER_DEFINED: matched whole in text); the others become one more addition, after the rest.
fn mark_special(adds: &mut Vec<Addition>, special: &[String], sp_base: bool) {
    let wanted: HashSet<&str> = special.iter().map(String::as_str).collect();
    let mut found = HashSet::new();
    for c in adds.iter_mut().flat_map(|a| a.tokens.iter_mut()) {
        if wanted.contains(c.content.as_str()) {
            found.insert(c.content.clone());
            c.special = true;
            if sp_base && c.piece_type != Some(PieceType::Control) {
                c.piece_type = Some(PieceType::UserDefined);
            }
        }
    }
    let mut seen = HashSet::new();
    let rest: Vec<Candidate> = special
        .iter()
        .filter(|t| !found.contains(*t) && seen.insert(t.as_str()))
        .map(|t| Candidate {
            special: true,
            piece_type: sp_base.then_some(PieceType::UserDefined),
            ..plain(t.clone())
        })
        .collect();
    if !rest.is_empty() {
        adds.push(Addition {
            path: PathBuf::from("--special"),
            kind: "special tokens",
            tokens: rest,
            merges: Vec::new(),
            pipeline: None,
            model_type: None,
            form: Form::Plain,
        });
    }
}

/// Why new tokens do not encode to their id, as far as BASE's pipeline tells.
fn why_unreachable(base: &Base, tokens: &[String]) -> String {
    let sp_pieces = tokens.iter().any(|t| t.contains('\u{2581}'));
    match base {
        Base::Hf(t) if t.json["pre_tokenizer"].to_string().contains("ByteLevel") => format!(
            "BASE is a byte-level BPE: text becomes byte symbols before the vocabulary is looked up, so a token written in raw characters{} is never produced; add tokens in BASE's byte-level form, or use a base with a character-level vocabulary",
            if sp_pieces { " (SentencePiece '\u{2581}' pieces, non-ASCII letters)" } else { " (non-ASCII letters)" }
        ),
        Base::Hf(t) if t.model_type == "Unigram" => "a unigram model picks the best-scoring segmentation, and their score loses to the pieces they split into: give a higher --score".into(),
        Base::Hf(t) if t.model_type == "WordPiece" => "WordPiece tokens are looked up in words: BASE's normalizer or pre-tokenizer splits or changes their text (BERT makes each punctuation mark and CJK character a word of its own)".into(),
        Base::Sp(_) => "a unigram model picks the best-scoring segmentation, and their score loses to the pieces they split into: give a higher --score (0 makes a whole new piece win over any split)".into(),
        _ if sp_pieces => "they are SentencePiece pieces ('\u{2581}' marks a word start) and BASE's pre-tokenizer does not produce that mark".into(),
        _ => "BASE's normalizer or pre-tokenizer splits or changes them before the vocabulary is looked up".into(),
    }
}

/// A candidate's content in BASE's form: as it is when the forms agree, for special tokens (matched
/// whole, before any form applies) and for plain bases; otherwise its text converted, a word
/// giving its bare and word-start forms. A piece of a character (partial UTF-8) has no text to
/// convert: none.
fn in_form(c: &Candidate, from: Form, base: Form) -> Vec<String> {
    if c.special || from == base || base == Form::Plain {
        return vec![c.content.clone()];
    }
    let text = from.text_of(&c.content);
    if text.contains('\u{FFFD}') {
        return Vec::new();
    }
    base.entry_forms(&text)
}

/// Pieces of a scored unigram addition (a Unigram tokenizer.json, a unigram `.model`) that its
/// own Viterbi splits: trainers leave such pieces, and they would be unreachable in BASE too.
fn unigram_dead(add: &Addition) -> HashSet<String> {
    let unigram = match add.model_type.as_deref() {
        Some("Unigram") => true,
        None | Some("SentencePiece type 1") => add.kind == "SentencePiece model",
        _ => false,
    };
    if !unigram || add.tokens.iter().any(|c| c.score.is_none()) {
        return HashSet::new();
    }
    let pieces: Vec<(String, f32, PieceType)> = add
        .tokens
        .iter()
        .map(|c| {
            let kind = match (c.special, c.piece_type) {
                (true, _) => PieceType::Control,
                (_, Some(k)) => k,
                _ => PieceType::Normal,
            };
            (c.content.clone(), c.score.unwrap_or(0.0) as f32, kind)
        })
        .collect();
    let index = sp::piece_index(&pieces);
    pieces
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            p.2 == PieceType::Normal && sp::viterbi_with(&pieces, &index, &p.0) != [*i]
        })
        .map(|(_, p)| p.0.clone())
        .collect()
}

/// A WordPiece entry as BASE's normalizer writes its text (the `##` mark kept).
fn wp_normalized(tok: &tokenizers::Tokenizer, entry: &str) -> String {
    match entry.strip_prefix(form::CONTINUES) {
        Some(rest) => format!("{}{}", form::CONTINUES, wordpiece::normalized(tok, rest)),
        None => wordpiece::normalized(tok, entry),
    }
}

/// What the BPE step decided.
#[derive(Default)]
struct BpePlan {
    appended: Vec<(String, String)>,
    not_appended: usize,
    synthesized: Vec<(String, String)>,
    intermediates: Vec<String>,
    became_added_tokens: Vec<String>,
}

/// BPE: append the merges of additions written in BASE's form whose parts and result are in the
/// merged vocab (every new token is written into the vocab). Then, in a byte-level or `▁` base,
/// synthesize the merges each new token still needs — after all of BASE's, so BASE's text splits
/// as before — with the intermediate pieces they pass through at new ids from `next`: each new
/// token is produced by the model as an ordinary vocabulary token. In a plain base, multi-character
/// new tokens that no merge produces become added tokens, matched whole.
fn plan_bpe(
    t: &HfTokenizer,
    adds: &[Addition],
    added: &mut Vec<Assigned>,
    next: &mut u32,
) -> BpePlan {
    let form = Form::of_tokenizer_json(&t.json);
    let mut plan = BpePlan::default();
    let all: Vec<&(String, String)> = adds.iter().flat_map(|a| &a.merges).collect();
    // BASE's tokens borrowed (a 262k vocabulary is not copied), the new ones owned.
    let base_vocab: HashSet<&str> = t.vocab.iter().map(|(c, _)| c.as_str()).collect();
    let mut new_vocab: HashSet<String> = added.iter().map(|a| a.token.clone()).collect();
    let mut bpe = Bpe::new(&t.merges);
    for add in adds.iter().filter(|a| a.form == form) {
        for (a, b) in &add.merges {
            let parts = [a.clone(), b.clone(), format!("{a}{b}")];
            let known = |p: &String| base_vocab.contains(p.as_str()) || new_vocab.contains(p);
            if parts.iter().all(known) && bpe.push(a, b) {
                plan.appended.push((a.clone(), b.clone()));
            }
        }
    }
    plan.not_appended = all.len() - plan.appended.len();
    if form == Form::Plain {
        // Is `token` the result of a merge? Each way of cutting it, looked up among the ranks.
        for a in added.iter_mut() {
            let produced = a
                .token
                .char_indices()
                .skip(1)
                .any(|(i, _)| bpe.rank(&a.token[..i], &a.token[i..]).is_some());
            if a.place == Place::Vocab && chars(&a.token) > 1 && !produced {
                a.place = Place::AddedToken;
                plan.became_added_tokens.push(a.token.clone());
            }
        }
        return plan;
    }
    let wanted: Vec<(String, usize)> = added
        .iter()
        .filter(|a| a.place == Place::Vocab)
        .map(|a| (a.token.clone(), a.from))
        .collect();
    for (token, from) in wanted {
        let single = token.chars().map(String::from);
        let merges = bpe.reach(&token, form);
        let made = merges.iter().map(|(a, b)| format!("{a}{b}"));
        for piece in single.chain(made) {
            if !base_vocab.contains(piece.as_str()) && new_vocab.insert(piece.clone()) {
                plan.intermediates.push(piece.clone());
                added.push(Assigned {
                    token: piece,
                    id: *next,
                    place: Place::Vocab,
                    special: false,
                    score: None,
                    from,
                    template: None,
                    piece_type: None,
                });
                *next += 1;
            }
        }
        plan.synthesized.extend(merges);
    }
    plan
}

/// SentencePiece BPE joins two symbols only where the join is a piece, best score first: each new
/// piece needs its characters and every join on its way. Those BASE and the additions lack are
/// appended after the additions' pieces, scored below every piece so that all of BASE's joins come
/// first (each one lower than the last, in the order they are needed; the longest pair is joined
/// first, as for tokenizer.json).
fn plan_sp_bpe(m: &SpModel, added: &mut Vec<Assigned>, next: &mut u32) -> BpePlan {
    // Every piece string, of any type: a model never has one twice.
    let taken: HashSet<&str> = m.pieces.iter().map(|p| p.piece.as_str()).collect();
    let mut scores: HashMap<String, f32> = HashMap::new();
    for p in m.pieces.iter().filter(|p| joinable(p.kind)) {
        scores.entry(p.piece.clone()).or_insert(p.score);
    }
    for a in added
        .iter()
        .filter(|a| joinable(a.piece_type.unwrap_or(PieceType::Normal)))
    {
        scores
            .entry(a.token.clone())
            .or_insert(a.score.unwrap_or(0.0) as f32);
    }
    let mut lowest = scores.values().copied().fold(0f32, f32::min);
    let mut plan = BpePlan::default();
    let wanted: Vec<(String, usize)> = added
        .iter()
        .filter(|a| a.piece_type.unwrap_or(PieceType::Normal) == PieceType::Normal)
        .map(|a| (a.token.clone(), a.from))
        .collect();
    let mut add = |piece: String, from: usize, scores: &mut HashMap<String, f32>| {
        lowest = sp::below(lowest);
        scores.insert(piece.clone(), lowest);
        plan.intermediates.push(piece.clone());
        added.push(Assigned {
            token: piece,
            id: *next,
            place: Place::Piece,
            special: false,
            score: Some(f64::from(lowest)),
            from,
            template: None,
            piece_type: Some(PieceType::Normal),
        });
        *next += 1;
    };
    for (token, from) in wanted {
        for c in token.chars().map(String::from) {
            if !scores.contains_key(&c) && !taken.contains(c.as_str()) {
                add(c, from, &mut scores);
            }
        }
        loop {
            let pieces = sp::bpe_pieces(|p| scores.get(p).copied(), &token);
            let best = pieces
                .windows(2)
                .enumerate()
                .max_by_key(|(i, w)| (chars(&w[0]) + chars(&w[1]), usize::MAX - i));
            let Some((_, w)) = best else { break };
            let join = format!("{}{}", w[0], w[1]);
            if taken.contains(join.as_str()) {
                break; // a control or unused piece: reported unreachable
            }
            add(join, from, &mut scores);
        }
    }
    plan
}

/// Piece types SentencePiece BPE joins into.
fn joinable(kind: PieceType) -> bool {
    matches!(kind, PieceType::Normal | PieceType::UserDefined)
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Plan and (unless dry-run) write the merge of `base_path` with `adds` into `out`.
pub fn run(base_path: &Path, add_paths: &[PathBuf], out: &Path, opts: &Options) -> Result<Report> {
    // Base text is encoded with BASE in `tokenizers` too: load it meanwhile on the other core.
    let mut base_loading = is_json_file(base_path).then(|| {
        let p = base_path.to_path_buf();
        std::thread::spawn(move || tokenizers::Tokenizer::from_file(p).map_err(|e| e.to_string()))
    });
    let base = load_base(base_path)?;
    if !opts.dry_run {
        // The output is BASE's format, and its extension must say so (a SentencePiece model
        // written to o.json would be a protobuf in a .json file).
        let (writes, ext): (&str, &[&str]) = match &base {
            Base::Hf(_) => ("a tokenizer.json, as BASE is", &["json"]),
            Base::Sp(_) => ("a SentencePiece model, as BASE is", &["model"]),
        };
        let mut inputs: Vec<&Path> = vec![base_path];
        inputs.extend(add_paths.iter().map(PathBuf::as_path));
        output::folder::file_destination(out, &inputs, writes, ext, opts.overwrite)?;
        let lower = out.to_string_lossy().to_lowercase();
        if !ext.iter().any(|e| lower.ends_with(&format!(".{e}"))) {
            return Err(Error::Usage(format!(
                "{}: the merged tokenizer is {writes}: name the output *.{}",
                out.display(),
                ext[0]
            )));
        }
    }
    let mut adds: Vec<Addition> = add_paths
        .iter()
        .map(|p| load_addition(p))
        .collect::<Result<_>>()?;
    let mut hf_base = None;
    let mut corpus = train::Words::new();
    // Entries for a WordPiece base are normalised by it (an uncased BERT lowercases).
    if matches!(base, Base::Hf(_)) && (!opts.train.is_empty() || base.form() == Form::WordPiece) {
        hf_base = Some(load_hf_base(base_path, base_loading.take())?);
    }
    if !opts.train.is_empty() {
        let (add, words) = trained_addition(&base, hf_base.as_ref(), opts)?;
        adds.push(add);
        corpus = words;
    }
    mark_special(&mut adds, &opts.special, matches!(base, Base::Sp(_)));
    let existing = base.ids();
    let base_size =
        u32::try_from(base.size()).map_err(|_| Error::format(base_path, "more than 2^32 ids"))?;
    let base_format = match &base {
        Base::Hf(t) => format!("tokenizer.json ({})", t.model_type),
        Base::Sp(m) => format!(
            "SentencePiece model ({})",
            match m.model_type {
                Some(2) => "BPE",
                Some(3) => "word",
                Some(4) => "char",
                _ => "unigram",
            }
        ),
    };
    let mut next = base_size;
    let unigram = matches!(&base, Base::Hf(t) if t.model_type == "Unigram");
    if let Base::Hf(t) = &base {
        // A Unigram's ids are positions: added tokens above its vocab (T5's converted <pad>) can
        // be pinned into it only where they fill the positions after it, one by one.
        let mut above: Vec<u32> = t.added_only().iter().map(|a| a.id).collect();
        above.sort_unstable();
        let filled = (t.vocab.len() as u32..base_size).eq(above.iter().copied());
        if unigram && !filled {
            return Err(Error::format(
                base_path,
                "Unigram base has added tokens above its vocab that leave gaps; its ids are positions, so new pieces cannot take the next free id",
            ));
        }
    }
    let default_score = match &base {
        Base::Hf(t) => t.scores.iter().copied().fold(f64::INFINITY, f64::min) - 1.0,
        Base::Sp(m) => {
            m.pieces
                .iter()
                .filter(|p| p.kind == PieceType::Normal)
                .map(|p| f64::from(p.score))
                .fold(f64::INFINITY, f64::min)
                - 1.0
        }
    };
    let default_score = if default_score.is_finite() {
        default_score
    } else {
        -10.0
    };

    let mut added: Vec<Assigned> = Vec::new();
    let mut skipped = Vec::new();
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut warnings = Vec::new();
    let base_form = base.form();
    let mut converted = 0;
    let unigram_base = unigram || matches!(&base, Base::Sp(m) if m.model_type.unwrap_or(1) == 1);
    for (k, add) in adds.iter().enumerate() {
        let dead = if unigram_base {
            unigram_dead(add)
        } else {
            HashSet::new()
        };
        for (c, content) in add.tokens.iter().flat_map(|c| {
            let mut forms = in_form(c, add.form, base_form);
            if let (Form::WordPiece, Some(tok), false) = (base_form, &hf_base, c.special) {
                forms = forms.iter().map(|f| wp_normalized(tok, f)).collect();
            }
            let none = forms.is_empty().then(String::new);
            forms.into_iter().chain(none).map(move |t| (c, t))
        }) {
            if content.is_empty() {
                skipped.push(Skipped {
                    token: c.content.clone(),
                    reason: "a piece of a character (partial UTF-8): BASE's form has no such token"
                        .into(),
                });
                continue;
            }
            converted += usize::from(content != c.content);
            if dead.contains(&c.content) {
                skipped.push(Skipped {
                    token: content,
                    reason: "the addition's own Viterbi splits it (its parts score higher): never produced there either".into(),
                });
                continue;
            }
            if let (Form::WordPiece, Some(tok)) = (base_form, &hf_base) {
                let rest = content.strip_prefix(form::CONTINUES).unwrap_or_default();
                if !rest.is_empty() && content != c.content && !wordpiece::continues(tok, rest) {
                    skipped.push(Skipped {
                        token: content,
                        reason: "BASE's pre-tokenizer makes this text a word of its own (punctuation, a CJK character): no word continues with it".into(),
                    });
                    continue;
                }
            }
            if let Some(id) = existing.get(content.as_str()) {
                skipped.push(Skipped {
                    token: content,
                    reason: format!("already in BASE as id {id}"),
                });
                continue;
            }
            if let Some(first) = taken.get(&content) {
                skipped.push(Skipped {
                    token: content,
                    reason: format!("repeated: already added from --add #{first}"),
                });
                continue;
            }
            taken.insert(content.clone(), k + 1);
            let place = match &base {
                Base::Sp(_) => Place::Piece,
                Base::Hf(_) if c.special && !unigram => Place::AddedToken,
                Base::Hf(_) => Place::Vocab,
            };
            let scored = unigram || matches!(base, Base::Sp(_));
            added.push(Assigned {
                token: content,
                id: next,
                place,
                special: c.special,
                score: scored.then(|| c.score.or(opts.score).unwrap_or(default_score)),
                from: k + 1,
                template: c.template.clone(),
                piece_type: c.piece_type,
            });
            next += 1;
        }
        if let (Base::Hf(t), Some(p)) = (&base, &add.pipeline) {
            for key in PIPELINE {
                if t.pipeline(key) != p[key] {
                    warnings.push(format!(
                        "--add #{} ({}): its {key} differs from BASE's; the merged tokenizer keeps BASE's, so text in the new language is {} by BASE's rules and may tokenise differently than the addition did",
                        k + 1,
                        add.path.display(),
                        match key {
                            "normalizer" => "normalised",
                            "pre_tokenizer" => "split into words",
                            _ => "decoded",
                        }
                    ));
                }
            }
            if add.model_type.as_deref() != Some(t.model_type.as_str()) {
                warnings.push(format!(
                    "--add #{} is a {} model, BASE is {}: only its tokens{} are used",
                    k + 1,
                    add.model_type.as_deref().unwrap_or("?"),
                    t.model_type,
                    if t.model_type == "BPE" {
                        " and merges"
                    } else {
                        ""
                    }
                ));
            }
        }
    }

    let bpe = match &base {
        Base::Hf(t) if t.model_type == "BPE" => plan_bpe(t, &adds, &mut added, &mut next),
        Base::Sp(m) if m.model_type == Some(2) => plan_sp_bpe(m, &mut added, &mut next),
        _ => BpePlan::default(),
    };

    // Build the output and check it before anything is written.
    let merged_size = next;
    let mut unreachable = Vec::new();
    let mut not_checked = Vec::new();
    let mut pinned = Vec::new();
    let mut fertility = None;
    let cover_texts: Vec<String> = added.iter().map(|a| base_form.text_of(&a.token)).collect();
    let cover = Coverage::new(cover_texts.iter().map(String::as_str));
    let (bytes, (base_sample, check_text)) = match &base {
        Base::Hf(t) => {
            let mut edits = Vec::new();
            if !added.is_empty() {
                let mut above = t.added_only();
                above.sort_by_key(|a| a.id);
                for a in above {
                    // In a Unigram, scored below every piece: added tokens are matched before
                    // the model sees text, and the piece never wins a segmentation.
                    edits.push(Edit::Vocab {
                        content: &a.content,
                        id: a.id,
                        score: default_score,
                    });
                    pinned.push(a.content.clone());
                }
            }
            for a in &added {
                edits.push(Edit::Vocab {
                    content: &a.token,
                    id: a.id,
                    score: a.score.unwrap_or(0.0),
                });
                if a.place == Place::AddedToken || a.special {
                    edits.push(Edit::Added {
                        content: &a.token,
                        id: a.id,
                        special: a.special,
                        template: a.template.as_ref(),
                    });
                }
            }
            edits.extend(
                bpe.appended
                    .iter()
                    .chain(&bpe.synthesized)
                    .map(|(a, b)| Edit::Merge { a, b }),
            );
            let text = hf::apply(t, &edits).map_err(|e| Error::format(out, e))?;
            let merged = verify_hf(t, &text, &added, base_form, &mut unreachable).map_err(|p| {
                Error::Verify {
                    path: out.to_path_buf(),
                    problem: p,
                }
            })?;
            let before = match hf_base.take() {
                Some(t) => t,
                None => load_hf_base(base_path, base_loading.take())?,
            };
            if !opts.train.is_empty() {
                use tokenizers::Model;
                let n = |t: &tokenizers::Tokenizer, w: &str| {
                    t.get_model().tokenize(w).map_or(chars(w), |v| v.len())
                };
                fertility = Some((
                    train::fertility(&corpus, |w| n(&before, w)),
                    train::fertility(&corpus, |w| n(&merged, w)),
                ));
            }
            let enc = |t: &tokenizers::Tokenizer, line: &str| {
                t.encode(line, false)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| e.to_string())
            };
            let checks = check_all(&opts.check_text, &cover, &|l| enc(&before, l), &|l| {
                enc(&merged, l)
            })?;
            (text.into_bytes(), checks)
        }
        Base::Sp(m) => {
            let new: Vec<(String, f32, PieceType)> = added
                .iter()
                .map(|a| {
                    (
                        a.token.clone(),
                        a.score.unwrap_or(default_score) as f32,
                        a.piece_type.unwrap_or(PieceType::Normal),
                    )
                })
                .collect();
            let bytes = sp::append(m, &new);
            verify_sp(m, &bytes, &new).map_err(|p| Error::Verify {
                path: out.to_path_buf(),
                problem: p,
            })?;
            let before: Vec<(String, f32, PieceType)> = m
                .pieces
                .iter()
                .map(|p| (p.piece.clone(), p.score, p.kind))
                .collect();
            let all: Vec<(String, f32, PieceType)> = before.iter().chain(&new).cloned().collect();
            let bpe = m.model_type == Some(2);
            if !opts.train.is_empty() {
                // As the model encodes each word: byte pieces (or one unknown) where no piece
                // has a character. One index per model, not per word.
                let (enc_before, enc_after) = (sp_ids(&before, bpe), sp_ids(&all, bpe));
                let n = |enc: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>, w: &str| {
                    enc(w.trim_start_matches(form::WORD_MARK)).map_or(chars(w), |v| v.len())
                };
                fertility = Some((
                    train::fertility(&corpus, |w| n(&enc_before, w)),
                    train::fertility(&corpus, |w| n(&enc_after, w)),
                ));
            }
            if m.model_type.unwrap_or(1) == 1 || bpe {
                let index = sp::piece_index(&all);
                let score = |p: &str| index.get(p).map(|&i| all[i].1);
                for a in added
                    .iter()
                    .filter(|a| a.piece_type != Some(PieceType::Control))
                {
                    let ok = if bpe && a.piece_type == Some(PieceType::UserDefined) {
                        true // matched whole before any join, as SentencePiece does
                    } else if bpe {
                        sp::bpe_pieces(score, &a.token) == [a.token.as_str()]
                    } else {
                        sp::viterbi_with(&all, &index, &a.token) == [a.id as usize]
                    };
                    if !ok {
                        unreachable.push(a.token.clone());
                    }
                }
                not_checked.push(format!("reachability and base text use SentencePiece's {} over the pieces, without the model's normaliser", if bpe { "BPE joins" } else { "unigram Viterbi" }));
            } else {
                not_checked
                    .push("reachability of new pieces (BASE is a word or char model)".into());
            }
            let checks = check_all(
                &opts.check_text,
                &cover,
                &sp_ids(&before, bpe),
                &sp_ids(&all, bpe),
            )?;
            (bytes, checks)
        }
    };

    let changed = std::iter::once(&base_sample)
        .chain(&check_text)
        .find_map(|c| c.first_base_change.as_ref().map(|l| (c, l)));
    if let (Some((c, (n, line))), false) = (changed, opts.allow_base_change) {
        let shown: String = line.chars().take(80).collect();
        return Err(Error::Check {
            path: c.file.clone(),
            problem: format!(
                "line {n} ('{shown}') is base text (no new token covers it) and encodes to other ids after the merge ({} of {} such lines do); nothing written (--allow-base-change writes it anyway)",
                c.base_changed, c.base_lines
            ),
        });
    }
    if !unreachable.is_empty() && !opts.allow_unreachable {
        let shown: Vec<&str> = unreachable.iter().take(8).map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "{}: {} of {} new tokens do not encode alone to their id ({}{}): {}; nothing written (--allow-unreachable writes them anyway)",
            base_path.display(),
            unreachable.len(),
            added.len(),
            shown.join(" "),
            if unreachable.len() > shown.len() { " …" } else { "" },
            why_unreachable(&base, &unreachable)
        )));
    }
    let mut report = Report {
        base: base_path.to_path_buf(),
        base_format,
        base_size,
        merged_size,
        additions: adds
            .iter()
            .map(|a| format!("{} ({})", a.path.display(), a.kind))
            .collect(),
        added,
        skipped,
        base_form,
        converted,
        merges_appended: bpe.appended,
        merges_not_appended: bpe.not_appended,
        merges_synthesized: bpe.synthesized,
        intermediates: bpe.intermediates,
        became_added_tokens: bpe.became_added_tokens,
        pinned,
        unreachable,
        not_checked,
        warnings,
        base_sample,
        check_text,
        trained: fertility.map(|(before, after)| Trained {
            corpus: opts.train.clone(),
            words: corpus.values().sum(),
            distinct_words: corpus.len(),
            learned: adds
                .iter()
                .find(|a| a.kind == "trained from the corpus")
                .map_or(0, |a| a.tokens.len()),
            fertility_before: before,
            fertility_after: after,
        }),
        dry_run: opts.dry_run,
        output: None,
        output_sha256: None,
    };
    if !opts.dry_run {
        let mut inputs: Vec<&Path> = vec![base_path];
        inputs.extend(add_paths.iter().map(PathBuf::as_path));
        inputs.extend(opts.check_text.iter().map(PathBuf::as_path));
        // write_bytes reads the file back and compares it with these bytes, which loaded in
        // `tokenizers` (or parsed as a model) and were verified above: equal bytes load the same,
        // so a second load (half a second for a 262k-token file) proves nothing more.
        let sha = output::write_bytes(out, &inputs, &bytes, |_| Ok(()))?;
        report.output = Some(out.to_path_buf());
        report.output_sha256 = Some(sha);
    } else {
        report.output_sha256 = Some(sha256(&bytes));
    }
    Ok(report)
}

/// The merged JSON must load in `tokenizers`; every base token keeps its id; each new token maps
/// to its id and is produced: in a byte-level or `▁` base, the merged model (the `tokenizers`
/// crate's, on the token's own symbols) gives exactly that token; in a plain base, and for added
/// tokens, the token's text encoded alone gives exactly its id. Others are listed as unreachable.
fn verify_hf(
    base: &HfTokenizer,
    text: &str,
    added: &[Assigned],
    form: Form,
    unreachable: &mut Vec<String>,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    use tokenizers::Model;
    let merged = tokenizers::Tokenizer::from_bytes(text.as_bytes())
        .map_err(|e| format!("the merged tokenizer.json does not load in tokenizers: {e}"))?;
    for (token, id) in base.ids() {
        if merged.token_to_id(token) != Some(id) {
            return Err(format!("base token '{token}' no longer has id {id}"));
        }
    }
    for a in added {
        if merged.token_to_id(&a.token) != Some(a.id) {
            return Err(format!(
                "new token '{}' does not have its id {}",
                a.token, a.id
            ));
        }
        let ok = if form == Form::WordPiece && a.place == Place::Vocab {
            wordpiece::produced(&merged, &a.token, a.id)
        } else if form != Form::Plain && a.place == Place::Vocab {
            merged
                .get_model()
                .tokenize(&a.token)
                .is_ok_and(|t| t.len() == 1 && t[0].id == a.id)
        } else {
            merged
                .encode(a.token.as_str(), false)
                .is_ok_and(|e| e.get_ids() == [a.id])
        };
        if !ok {
            unreachable.push(a.token.clone());
        }
    }
    Ok(merged)
}

/// Every base piece byte-identical in place; the new pieces exactly as planned after them; all
/// bytes around the insertion unchanged.
fn verify_sp(
    base: &SpModel,
    bytes: &[u8],
    new: &[(String, f32, PieceType)],
) -> std::result::Result<(), String> {
    let back = sp::parse(bytes.to_vec())?;
    if back.pieces.len() != base.pieces.len() + new.len() {
        return Err("piece count read back differs".into());
    }
    for (a, b) in base.pieces.iter().zip(&back.pieces) {
        if base.bytes[a.raw.clone()] != bytes[b.raw.clone()] {
            return Err(format!("base piece '{}' changed", a.piece));
        }
    }
    for ((p, s, k), b) in new.iter().zip(&back.pieces[base.pieces.len()..]) {
        if &b.piece != p || b.score != *s || b.kind != *k {
            return Err(format!("new piece '{p}' reads back differently"));
        }
    }
    let inserted = bytes.len() - base.bytes.len();
    if bytes[..base.insert_at] != base.bytes[..base.insert_at]
        || bytes[base.insert_at + inserted..] != base.bytes[base.insert_at..]
    {
        return Err("bytes outside the new pieces changed".into());
    }
    Ok(())
}

/// The built-in sample and each `--check-text` file, encoded with BASE and with the result.
fn check_all(
    files: &[PathBuf],
    cover: &Coverage,
    before: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>,
    after: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>,
) -> Result<(TextCheck, Vec<TextCheck>)> {
    let built_in = sample::check(
        PathBuf::from("(built-in sample)"),
        sample::BUILT_IN,
        cover,
        before,
        after,
    )
    .map_err(Error::Usage)?;
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| Error::io(f, "read", e))?;
        let lines: Vec<&str> = text.lines().collect();
        let bad = |e: String| Error::format(f, format!("cannot encode a line: {e}"));
        out.push(sample::check(f.clone(), &lines, cover, before, after).map_err(bad)?);
    }
    Ok((built_in, out))
}

/// BASE's tokenizer.json in `tokenizers` (loaded meanwhile on the other core when it could be).
fn load_hf_base(
    base_path: &Path,
    loading: Option<std::thread::JoinHandle<std::result::Result<tokenizers::Tokenizer, String>>>,
) -> Result<tokenizers::Tokenizer> {
    let loaded = match loading {
        Some(h) => h
            .join()
            .unwrap_or_else(|_| Err("the loading thread panicked".into())),
        None => tokenizers::Tokenizer::from_file(base_path).map_err(|e| e.to_string()),
    };
    loaded.map_err(|e| Error::format(base_path, format!("does not load in tokenizers: {e}")))
}

/// Ids of `line` in a SentencePiece model's pieces, as the model type splits it (spaces as `▁`, a
/// `▁` first; no normaliser): unigram Viterbi or BPE joins. A character no piece has becomes its
/// byte pieces where the model has them, else one unknown id.
fn sp_ids(
    pieces: &[(String, f32, PieceType)],
    bpe: bool,
) -> impl Fn(&str) -> std::result::Result<Vec<u32>, String> + '_ {
    let index = sp::piece_index(pieces);
    let bytes: HashMap<&str, u32> = pieces
        .iter()
        .enumerate()
        .filter(|(_, p)| p.2 == PieceType::Byte)
        .map(|(i, p)| (p.0.as_str(), i as u32))
        .collect();
    let lowest = pieces.iter().map(|p| f64::from(p.1)).fold(0.0, f64::min);
    move |line: &str| {
        let text = format!("{}{}", form::WORD_MARK, line.replace(' ', "\u{2581}"));
        let unknown = |piece: &str, out: &mut Vec<u32>| {
            let fallback: Option<Vec<u32>> = piece
                .bytes()
                .map(|b| bytes.get(format!("<0x{b:02X}>").as_str()).copied())
                .collect();
            match fallback {
                Some(ids) if !ids.is_empty() => out.extend(ids),
                _ => out.push(u32::MAX),
            }
        };
        let mut out = Vec::new();
        if bpe {
            for p in sp::bpe_pieces(|p| index.get(p).map(|&i| pieces[i].1), &text) {
                match index.get(p.as_str()) {
                    Some(&i) => out.push(i as u32),
                    None => unknown(&p, &mut out),
                }
            }
        } else {
            let ids = sp::viterbi_unk(pieces, &index, &text, Some(lowest - 10.0));
            let mut at = 0;
            for id in ids {
                if id == usize::MAX {
                    let c = text[at..].chars().next().unwrap_or(' ');
                    unknown(&c.to_string(), &mut out);
                    at += c.len_utf8();
                } else {
                    out.push(id as u32);
                    at += pieces[id].0.len();
                }
            }
        }
        Ok(out)
    }
}

/// The human report.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "base: {} ({}), {} ids",
        r.base.display(),
        r.base_format,
        r.base_size
    );
    for (i, a) in r.additions.iter().enumerate() {
        let _ = writeln!(s, "add #{}: {a}", i + 1);
    }
    let first = r.added.first().map_or(r.base_size, |a| a.id);
    let _ = writeln!(
        s,
        "added {} tokens (ids {}–{}), skipped {}; merged size {} (was {})",
        r.added.len(),
        first,
        r.merged_size.saturating_sub(1),
        r.skipped.len(),
        r.merged_size,
        r.base_size
    );
    let show: Vec<String> = r
        .added
        .iter()
        .take(12)
        .map(|a| format!("{}={}", a.token, a.id))
        .collect();
    if !show.is_empty() {
        let more = if r.added.len() > 12 { " …" } else { "" };
        let _ = writeln!(s, "  new: {}{more}", show.join(" "));
    }
    if !r.skipped.is_empty() {
        let show: Vec<String> = r
            .skipped
            .iter()
            .take(8)
            .map(|k| format!("'{}' ({})", k.token, k.reason))
            .collect();
        let more = if r.skipped.len() > 8 { " …" } else { "" };
        let _ = writeln!(s, "  skipped: {}{more}", show.join(", "));
    }
    if !r.merges_appended.is_empty() || r.merges_not_appended > 0 {
        let _ = writeln!(
            s,
            "merges: {} appended after BASE's, {} of the additions' not appended (already in BASE, or parts/result missing)",
            r.merges_appended.len(),
            r.merges_not_appended
        );
    }
    if r.converted > 0 {
        let _ = writeln!(
            s,
            "converted: {} tokens written in BASE's {} form from entries in another (a word gives its bare and word-start forms)",
            r.converted,
            match r.base_form {
                Form::ByteLevel => "byte-level",
                Form::Metaspace => "\u{2581}",
                Form::WordPiece => "WordPiece (##)",
                Form::Plain => "plain",
            }
        );
    }
    if !r.merges_synthesized.is_empty() {
        let _ = writeln!(
            s,
            "merges: {} synthesized after those so that the model produces every new token, through {} new intermediate pieces",
            r.merges_synthesized.len(),
            r.intermediates.len()
        );
    }
    if r.merges_synthesized.is_empty() && !r.intermediates.is_empty() {
        let _ =
            writeln!(
            s,
            "pieces: {} added after the additions' so that BPE's joins reach every new piece ({})",
            r.intermediates.len(),
            r.intermediates.iter().take(12).cloned().collect::<Vec<_>>().join(" ")
        );
    }
    if !r.became_added_tokens.is_empty() {
        let _ = writeln!(
            s,
            "no merge produces {} new multi-character tokens: written as added tokens ({})",
            r.became_added_tokens.len(),
            r.became_added_tokens.join(" ")
        );
    }
    if r.unreachable.is_empty() {
        let _ = writeln!(
            s,
            "verified: every base token keeps its id; every new token {}",
            if r.base_form == Form::Plain {
                "encodes alone to its id"
            } else {
                "is what the merged model produces for its symbols"
            }
        );
    } else {
        let _ = writeln!(
            s,
            "verified: every base token keeps its id; {} new tokens do not encode alone to their id: {}",
            r.unreachable.len(),
            r.unreachable.join(" ")
        );
    }
    for n in &r.not_checked {
        let _ = writeln!(s, "not checked: {n}");
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    for c in &r.check_text {
        let _ = writeln!(
            s,
            "check {}: {} of {} lines changed ids ({:.1} %); tokens per character {:.3} → {:.3}",
            c.file.display(),
            c.changed_lines,
            c.lines,
            c.changed_percent,
            c.tokens_per_char_before,
            c.tokens_per_char_after
        );
    }
    let all: Vec<&TextCheck> = std::iter::once(&r.base_sample)
        .chain(&r.check_text)
        .collect();
    let sum = |f: fn(&TextCheck) -> usize| all.iter().map(|c| f(c)).sum::<usize>();
    let (lines, changed) = (sum(|c| c.base_lines), sum(|c| c.base_changed));
    let _ = writeln!(
        s,
        "base text: {changed} of {lines} lines no new token covers changed ids ({:.1} %; {} built-in lines, {} from --check-text)",
        if lines == 0 { 0.0 } else { 100.0 * changed as f64 / lines as f64 },
        r.base_sample.base_lines,
        lines - r.base_sample.base_lines
    );
    let (n, before, after) = (
        sum(|c| c.new_lines),
        sum(|c| c.new_tokens_before),
        sum(|c| c.new_tokens_after),
    );
    if n > 0 {
        let _ =
            writeln!(
            s,
            "new text: {n} lines the new tokens cover: {before} → {after} tokens ({:.2}× fewer)",
            if after == 0 { 0.0 } else { before as f64 / after as f64 }
        );
    }
    if let Some(t) = &r.trained {
        let _ = writeln!(
            s,
            "trained: {} new tokens from {} words ({} distinct) of the corpus; tokens per word {:.3} → {:.3}",
            t.learned, t.words, t.distinct_words, t.fertility_before, t.fertility_after
        );
    }
    match (&r.output, r.dry_run) {
        (_, true) => {
            let _ = writeln!(s, "dry run: nothing written");
        }
        (Some(o), _) => {
            let _ = writeln!(
                s,
                "wrote {} (sha256 {})",
                o.display(),
                r.output_sha256.as_deref().unwrap_or("")
            );
        }
        _ => {}
    }
    s
}
