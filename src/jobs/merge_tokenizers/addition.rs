//! The additions a merge reads: tokenizer.json, vocab.json, SentencePiece model or a token list,
//! each as its tokens in id order (with flags and scores), its merges and its pipeline; and the
//! `--special` tokens marked in them or appended as one more addition.

use crate::error::{Error, Result};
use crate::tokenizer::base::{is_json, read, unmergeable};
use crate::tokenizer::form::{self, Form};
use crate::tokenizer::hf;
use crate::tokenizer::sentencepiece::{self as sp, PieceType};
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

/// The parts of a tokenizer.json pipeline that a merge keeps from BASE (differences are warned).
pub(super) const PIPELINE: [&str; 3] = ["normalizer", "pre_tokenizer", "decoder"];

/// Load an addition: tokenizer.json, vocab.json, SentencePiece model, or one token per line.
pub fn load_addition(path: &Path) -> Result<Addition> {
    let mut bytes = read(path)?;
    // A byte-order mark is not part of the first entry (editors on Windows write one).
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.drain(..3);
    }
    let bad = |why: String| Error::format(path, format!("not a usable addition: {why}"));
    if let Some(why) = unmergeable(&bytes) {
        return Err(bad(why.into()));
    }
    if is_json(&bytes) {
        let text = String::from_utf8(bytes.clone()).map_err(|_| bad("not UTF-8".into()))?;
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.get("model").is_some() => return tokenizer_json(path, &text).map_err(bad),
            Ok(_) => return vocab_json(path, &text).map_err(bad),
            // Not JSON, and not named so: a token list whose first entry starts with `{`.
            Err(_) if !named_json(path) => {}
            Err(e) => {
                return Err(bad(format!(
                    "{e} (a token list whose first line starts with '{{' is read as one when not named *.json)"
                )))
            }
        }
    }
    if let Ok(m) = sp::parse(bytes.clone()) {
        return Ok(sp_model(path, &m));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| bad("not JSON, not a SentencePiece model, and not UTF-8 text".into()))?;
    Ok(token_list(path, &text))
}

/// Is the file named *.json (any case)?
fn named_json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// A tokenizer.json addition: its vocab and the added tokens outside it, in id order, with its
/// merges and pipeline.
fn tokenizer_json(path: &Path, text: &str) -> std::result::Result<Addition, String> {
    let t = hf::parse(text)?;
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
    Ok(Addition {
        path: path.to_path_buf(),
        kind: "tokenizer.json",
        tokens: tokens.into_iter().map(|(_, c)| c).collect(),
        merges: t.merges.clone(),
        pipeline: Some(PIPELINE.iter().map(|k| (*k, t.pipeline(k))).collect()),
        model_type: Some(t.model_type.clone()),
        form: Form::of_tokenizer_json(&t.json),
    })
}

/// A token → id vocab.json: only the id order is used.
fn vocab_json(path: &Path, text: &str) -> std::result::Result<Addition, String> {
    let map: crate::formats::json::UniqueMap<u64> = serde_json::from_str(text)
        .map_err(|e| format!("neither tokenizer.json nor a token → id vocab.json ({e})"))?;
    let mut v = map.0;
    v.sort_by_key(|(_, id)| *id);
    // A GPT-2 vocab.json is byte-level: every token in the alphabet, some with its
    // non-ASCII symbols (Ġ for a space). Anything else is read as plain text.
    let byte_level = v.iter().all(|(c, _)| form::byte_level_bytes(c).is_some())
        && v.iter().any(|(c, _)| !c.is_ascii());
    Ok(Addition {
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
    })
}

/// A SentencePiece model's pieces with their scores (byte, unused and unknown pieces left out).
fn sp_model(path: &Path, m: &sp::SpModel) -> Addition {
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
    Addition {
        path: path.to_path_buf(),
        kind: "SentencePiece model",
        tokens,
        merges: Vec::new(),
        pipeline: None,
        model_type: m.model_type.map(|t| format!("SentencePiece type {t}")),
        form: Form::Metaspace,
    }
}

/// One token per non-empty line, in plain text.
fn token_list(path: &Path, text: &str) -> Addition {
    Addition {
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
    }
}

/// A token with nothing but its text.
pub(super) fn plain(content: String) -> Candidate {
    Candidate {
        content,
        special: false,
        score: None,
        piece_type: None,
        template: None,
    }
}

/// Mark the `special` tokens special where the additions list them (a SentencePiece piece becomes
/// USER_DEFINED: matched whole in text); the others become one more addition, after the rest.
pub(super) fn mark_special(adds: &mut Vec<Addition>, special: &[String], sp_base: bool) {
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
