//! Which tokens of the additions are added, at which ids, and why others are skipped: each entry
//! written in BASE's form, the first free ids above BASE's in the additions' order, duplicates and
//! tokens BASE has (or cannot use) listed with the reason.

use super::addition::{Addition, Candidate, PIPELINE};
use crate::error::{Error, Result};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::{self, Form};
use crate::tokenizer::fxhash::FxHashMap;
use crate::tokenizer::sentencepiece::{self as sp, PieceType};
use crate::tokenizer::wordpiece;
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;

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

/// A new token and the id it takes.
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
    pub(super) template: Option<Value>,
    #[serde(skip)]
    pub(super) piece_type: Option<PieceType>,
}

/// A token of an addition that is not added, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub token: String,
    pub reason: String,
}

/// BASE's id space: where new ids start, and the score a new piece takes when neither its
/// addition nor `--score` gives one (below every piece of BASE).
pub(super) struct IdSpace {
    /// Largest id BASE uses + 1.
    pub base_size: u32,
    pub default_score: f64,
}

/// BASE's id space; a Unigram whose added tokens leave gaps above its vocab is refused (its ids
/// are positions, so new pieces could not take the next free id).
pub(super) fn id_space(base: &Base, base_path: &Path) -> Result<IdSpace> {
    let base_size =
        u32::try_from(base.size()).map_err(|_| Error::format(base_path, "more than 2^32 ids"))?;
    if let Base::Hf(t) = base {
        // A Unigram's ids are positions: added tokens above its vocab (T5's converted <pad>) can
        // be pinned into it only where they fill the positions after it, one by one.
        let mut above: Vec<u32> = t.added_only().iter().map(|a| a.id).collect();
        above.sort_unstable();
        let filled = (t.vocab.len() as u32..base_size).eq(above.iter().copied());
        if t.model_type == "Unigram" && !filled {
            return Err(Error::format(
                base_path,
                "Unigram base has added tokens above its vocab that leave gaps; its ids are positions, so new pieces cannot take the next free id",
            ));
        }
    }
    let lowest = match base {
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
    let default_score = if lowest.is_finite() { lowest } else { -10.0 };
    Ok(IdSpace {
        base_size,
        default_score,
    })
}

/// The additions' tokens as they go into BASE, before the BPE step.
#[derive(Default)]
pub(super) struct Assignment {
    pub added: Vec<Assigned>,
    pub skipped: Vec<Skipped>,
    pub warnings: Vec<String>,
    /// Tokens written in BASE's form from entries in another.
    pub converted: usize,
    /// The next free id.
    pub next: u32,
    /// Entries wanted as text (a plain or normal-piece entry) that a SentencePiece BASE has as
    /// a control or unknown piece: skipped as BASE's, yet never produced from text.
    pub never_produced: Vec<String>,
}

/// Give every usable entry of `adds` (in BASE's form) the next free id; list the others with
/// why. `hf` is BASE in `tokenizers` when it was loaded (a WordPiece base normalises entries).
pub(super) fn assign(
    base: &Base,
    adds: &[Addition],
    hf: Option<&tokenizers::Tokenizer>,
    ids: &IdSpace,
    score: Option<f64>,
) -> Assignment {
    let mut out = Assignment {
        next: ids.base_size,
        ..Assignment::default()
    };
    let existing = base.ids();
    let mut taken: HashMap<String, usize> = HashMap::new();
    let base_form = base.form();
    let unigram = matches!(base, Base::Hf(t) if t.model_type == "Unigram");
    let unigram_base = unigram || matches!(base, Base::Sp(m) if m.model_type.unwrap_or(1) == 1);
    for (k, add) in adds.iter().enumerate() {
        let dead = if unigram_base {
            unigram_dead(add)
        } else {
            HashSet::new()
        };
        for (c, content) in entries(add, base_form, hf) {
            if content.is_empty() {
                out.skipped.push(Skipped {
                    token: c.content.clone(),
                    reason: "a piece of a character (partial UTF-8): BASE's form has no such token"
                        .into(),
                });
                continue;
            }
            out.converted += usize::from(content != c.content);
            let why = if dead.contains(&c.content) {
                Some("the addition's own Viterbi splits it (its parts score higher): never produced there either".into())
            } else {
                why_not_new(c, &content, base_form, hf, &existing, &taken)
            };
            if let Some(reason) = why {
                if never_produced(base, c, existing.get(content.as_str()).copied()) {
                    out.never_produced.push(content.clone());
                }
                out.skipped.push(Skipped {
                    token: content,
                    reason,
                });
                continue;
            }
            taken.insert(content.clone(), k + 1);
            let place = match base {
                Base::Sp(_) => Place::Piece,
                Base::Hf(_) if c.special && !unigram => Place::AddedToken,
                Base::Hf(_) => Place::Vocab,
            };
            let scored = unigram || matches!(base, Base::Sp(_));
            out.added.push(Assigned {
                token: content,
                id: out.next,
                place,
                special: c.special,
                score: scored.then(|| c.score.or(score).unwrap_or(ids.default_score)),
                from: k + 1,
                template: c.template.clone(),
                piece_type: c.piece_type,
            });
            // Wraps past 2^32 − 1 only to be refused (`refuse_past_last_id`), never written.
            out.next = out.next.wrapping_add(1);
        }
        out.warnings.extend(pipeline_warnings(base, k, add));
    }
    out
}

/// Each token of `add` with the entries it gives in BASE's form (a WordPiece base's normaliser
/// applied); a token that has none gives one empty entry, to be listed as skipped.
fn entries<'a>(
    add: &'a Addition,
    base_form: Form,
    hf: Option<&'a tokenizers::Tokenizer>,
) -> impl Iterator<Item = (&'a Candidate, String)> + 'a {
    add.tokens.iter().flat_map(move |c| {
        let mut forms = in_form(c, add.form, base_form);
        if let (Form::WordPiece, Some(tok), false) = (base_form, hf, c.special) {
            forms = forms.iter().map(|f| wp_normalized(tok, f)).collect();
        }
        let none = forms.is_empty().then(String::new);
        forms.into_iter().chain(none).map(move |t| (c, t))
    })
}

/// An entry wanted as text (not special, not a control or unknown piece of its own addition)
/// whose BASE id, `id`, is a SentencePiece control or unknown piece.
fn never_produced(base: &Base, c: &Candidate, id: Option<u32>) -> bool {
    let (Base::Sp(m), Some(id)) = (base, id) else {
        return false;
    };
    let wanted =
        !c.special && !matches!(c.piece_type, Some(PieceType::Control | PieceType::Unknown));
    let kind = m.pieces.get(id as usize).map(|p| p.kind);
    wanted && matches!(kind, Some(PieceType::Control | PieceType::Unknown))
}

/// Why the entry `content` (from `c`) is not a new token: a WordPiece continuation no word can
/// have, a token BASE has, or one an earlier addition gave.
fn why_not_new(
    c: &Candidate,
    content: &str,
    base_form: Form,
    hf: Option<&tokenizers::Tokenizer>,
    existing: &FxHashMap<&str, u32>,
    taken: &HashMap<String, usize>,
) -> Option<String> {
    if let (Form::WordPiece, Some(tok)) = (base_form, hf) {
        let rest = content.strip_prefix(form::CONTINUES).unwrap_or_default();
        if !rest.is_empty() && content != c.content && !wordpiece::continues(tok, rest) {
            return Some("BASE's pre-tokenizer makes this text a word of its own (punctuation, a CJK character): no word continues with it".into());
        }
    }
    if let Some(id) = existing.get(content) {
        return Some(format!("already in BASE as id {id}"));
    }
    taken
        .get(content)
        .map(|first| format!("repeated: already added from --add #{first}"))
}

/// Where a tokenizer.json addition's pipeline or model type differs from BASE's: what the merged
/// tokenizer keeps and what that means for the new text.
fn pipeline_warnings(base: &Base, k: usize, add: &Addition) -> Vec<String> {
    let mut warnings = Vec::new();
    let (Base::Hf(t), Some(p)) = (base, &add.pipeline) else {
        return warnings;
    };
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
    warnings
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
