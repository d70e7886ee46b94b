//! subword-mean's lists: each new token's ids in the base tokenizer (its pieces). Each tokenizer is
//! told by its content: a tokenizer.json (split by the `tokenizers` library with the base's own
//! model or pipeline) or a SentencePiece model (split by the base's own pieces, as its model type
//! does: [`sp::segmenter`]).

use crate::error::{Error, Result};
use crate::tokenizer::base::{load_source, Source};
use crate::tokenizer::form::{byte_level, Form, WORD_MARK};
use crate::tokenizer::sentencepiece::{self as sp, SpModel};
use std::path::Path;

/// A tokenizer as subword-mean reads it.
enum Tok {
    Json(Box<tokenizers::Tokenizer>),
    Sp(SpModel),
}

impl Tok {
    fn load(p: &Path) -> Result<Tok> {
        match load_source(p)? {
            Source::Json(text) => text.parse().map(|t| Tok::Json(Box::new(t))).map_err(|e| {
                Error::format(
                    p,
                    format!("subword-mean cannot read this tokenizer.json: {e}"),
                )
            }),
            Source::Sp(m) => Ok(Tok::Sp(m)),
        }
    }

    /// How its vocabulary writes text (a SentencePiece model: `▁`).
    fn form(&self) -> Form {
        match self {
            Tok::Json(t) => json_form(t),
            Tok::Sp(_) => Form::Metaspace,
        }
    }

    /// Token `id` as this (merged or new) tokenizer writes it, and whether it is a tokenizer.json's added
    /// token (its content is text, not vocabulary symbols).
    fn token(&self, id: u64) -> Option<(String, bool)> {
        let id = u32::try_from(id).ok()?;
        match self {
            Tok::Json(m) => {
                let t = m.id_to_token(id)?;
                let added = m
                    .get_added_tokens_decoder()
                    .get(&id)
                    .is_some_and(|a| a.content == t);
                Some((t, added))
            }
            Tok::Sp(m) => m.pieces.get(id as usize).map(|p| (p.piece.clone(), false)),
        }
    }
}

/// A tokenizer.json's form by its normalizer and pre-tokenizer (never WordPiece: its model is not
/// asked).
fn json_form(t: &tokenizers::Tokenizer) -> Form {
    let pipeline = serde_json::json!({
        "pre_tokenizer": serde_json::to_value(t.get_pre_tokenizer()).unwrap_or_default(),
        "normalizer": serde_json::to_value(t.get_normalizer()).unwrap_or_default(),
    });
    Form::of_tokenizer_json(&pipeline)
}

/// For subword-mean: for each id of `ids` (ids of the tokenizer `new`, in order), the base
/// tokenizer's ids of its text (None: fall back). A piece must be a base row (< `old_rows`).
/// extend's new rows are the range `old_rows..new_rows` of its merged tokenizer; a transplant's
/// are any ids of the new tokenizer.
pub(crate) fn subword_lists(
    new: &Path,
    base: &Path,
    old_rows: u64,
    ids: &[u64],
    fallbacks: &mut Vec<String>,
) -> Result<Vec<Option<Vec<usize>>>> {
    let (m, b) = (Tok::load(new)?, Tok::load(base)?);
    let news: Vec<Option<(String, bool)>> = ids.iter().map(|&id| m.token(id)).collect();
    let (splits, unk) = match &b {
        Tok::Json(b) => {
            let unk = ["[UNK]", "<unk>", "<|unk|>"]
                .iter()
                .find_map(|u| b.token_to_id(u));
            (json_splits(b, &m, &news), unk)
        }
        Tok::Sp(b) => (sp_splits(b, m.form(), &news), None),
    };
    let mut out = Vec::new();
    for (id, (token, pieces)) in ids.iter().zip(news.into_iter().zip(splits)) {
        match pieces {
            Some(v)
                if !v.is_empty()
                    && v.iter().all(|&i| Some(i) != unk && u64::from(i) < old_rows) =>
            {
                out.push(Some(v.into_iter().map(|i| i as usize).collect()))
            }
            _ => {
                fallbacks.push(token.map_or_else(|| format!("<id {id}>"), |t| t.0));
                out.push(None);
            }
        }
    }
    Ok(out)
}

/// A tokenizer.json base: a token written in the model's own symbols (byte-level, `▁`) is split
/// by BASE's model (its text, encoded again, would be the symbols' bytes); plain tokens and added
/// tokens are text, encoded by BASE's whole pipeline. A SentencePiece piece from a `.model` MERGED
/// is first written in BASE's form.
fn json_splits(
    b: &tokenizers::Tokenizer,
    m: &Tok,
    news: &[Option<(String, bool)>],
) -> Vec<Option<Vec<u32>>> {
    use tokenizers::Model;
    let base_form = json_form(b);
    let symbols = base_form != Form::Plain;
    let piece = matches!(m, Tok::Sp(_));
    news.iter()
        .map(|new| {
            let (t, added) = new.as_ref()?;
            let text = Form::Metaspace.text_of(t);
            let t = match (piece, base_form) {
                (false, _) | (true, Form::Metaspace) => t.clone(),
                (true, Form::ByteLevel) => byte_level(&text),
                (true, _) => text,
            };
            if symbols && !added {
                let tokens = b.get_model().tokenize(&t).ok()?;
                Some(tokens.iter().map(|t| t.id).collect())
            } else {
                b.encode(t.as_str(), false)
                    .ok()
                    .map(|e| e.get_ids().to_vec())
            }
        })
        .collect()
}

/// A SentencePiece base: each new token's text in `▁` form (a tokenizer.json MERGED's token
/// decoded from its form, spaces as `▁`), split as BASE's model type splits it over its pieces
/// (no normaliser), byte-fallback `<0xNN>` pieces for characters it has no piece for; a
/// character with neither is unknown (None: fall back).
fn sp_splits(
    b: &SpModel,
    merged_form: Form,
    news: &[Option<(String, bool)>],
) -> Vec<Option<Vec<u32>>> {
    let pieces = b.triples();
    let split = sp::segmenter(&pieces, b.is_bpe());
    news.iter()
        .map(|new| {
            let (t, added) = new.as_ref()?;
            let text = if *added {
                t.clone()
            } else {
                merged_form.text_of(t)
            };
            split(&text.replace(' ', &WORD_MARK.to_string()))
                .into_iter()
                .collect()
        })
        .collect()
}
