//! Text through the base and the pruned tokenizer: the keep set a corpus uses ([`corpus_ids`]) and
//! the check that every line tokenizes to the same token strings with both, and never to the
//! unknown token where the base had none ([`check_corpus`]). A tokenizer.json is run by the
//! `tokenizers` library; a SentencePiece model by our segmenter ([`sp::segmenter`]: BPE joins or
//! unigram Viterbi, byte fallback) after the model's own normaliser as `tokenizers` runs it (its
//! precompiled character map, extra spaces removed, the dummy `▁` prefix, spaces as `▁`).

use super::pruned::PrunedFile;
use crate::error::{Error, Result};
use crate::tokenizer::base::{load_source, Source};
use crate::tokenizer::sentencepiece::{self as sp, Normalizer, PieceType, SpModel};
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;

/// A tokenizer that encodes text: `tokenizers` for a tokenizer.json, or a SentencePiece model.
enum Encoder {
    Hf {
        tok: Box<tokenizers::Tokenizer>,
        unk: Option<u32>,
    },
    Sp {
        model: SpModel,
        norm: Normalizer,
    },
}

/// One line's tokens: ids, their strings, and how many are the unknown token.
struct Encoded {
    ids: Vec<u32>,
    tokens: Vec<String>,
    unknown: usize,
}

/// How the SentencePiece side is run, for the report.
const SP_METHOD: &str = "SentencePiece model: our segmenter (BPE joins by score or unigram Viterbi, byte fallback, user-defined pieces whole, a run of unknown symbols one unknown piece) after the model's normaliser (precompiled character map, extra spaces removed, dummy prefix, spaces as \u{2581})";

impl Encoder {
    fn json(text: &str) -> std::result::Result<Encoder, String> {
        #[derive(serde::Deserialize)]
        struct Doc {
            model: Model,
        }
        #[derive(serde::Deserialize)]
        struct Model {
            unk_token: Option<String>,
            unk_id: Option<u32>,
        }
        let tok: tokenizers::Tokenizer = text.parse().map_err(|e| format!("{e}"))?;
        let doc: Doc = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let unk = doc
            .model
            .unk_id
            .or_else(|| tok.token_to_id(doc.model.unk_token.as_deref()?));
        Ok(Encoder::Hf {
            tok: Box::new(tok),
            unk,
        })
    }

    fn sp(model: SpModel) -> Encoder {
        let norm = sp::normalizer(&model);
        Encoder::Sp { model, norm }
    }

    fn load(path: &Path) -> Result<Encoder> {
        match load_source(path)? {
            Source::Json(text) => Encoder::json(&text).map_err(|e| {
                Error::format(path, format!("the tokenizers library cannot load it: {e}"))
            }),
            Source::Sp(m) => Ok(Encoder::sp(m)),
        }
    }

    fn pruned(base: &Path, file: &PrunedFile) -> Result<Encoder> {
        let bad =
            |e: String| Error::format(base, format!("the pruned tokenizer does not load: {e}"));
        match file {
            PrunedFile::Json(text) => Encoder::json(text).map_err(bad),
            PrunedFile::Sp(bytes) => sp::parse(bytes.clone()).map(Encoder::sp).map_err(bad),
        }
    }

    fn method(&self) -> &'static str {
        match self {
            Encoder::Hf { .. } => "tokenizer.json: the tokenizers library, special tokens added",
            Encoder::Sp { .. } => SP_METHOD,
        }
    }

    /// Every line encoded (in parallel); `special`: with the post-processor's special tokens.
    fn encode(&self, lines: &[&str], special: bool) -> std::result::Result<Vec<Encoded>, String> {
        match self {
            Encoder::Hf { tok, unk } => lines
                .par_iter()
                .map(|l| {
                    let e = tok.encode(*l, special).map_err(|e| e.to_string())?;
                    let ids = e.get_ids().to_vec();
                    let tokens = ids
                        .iter()
                        .map(|&i| tok.id_to_token(i).unwrap_or_default())
                        .collect();
                    let unknown = ids.iter().filter(|&&i| Some(i) == *unk).count();
                    Ok(Encoded {
                        ids,
                        tokens,
                        unknown,
                    })
                })
                .collect(),
            Encoder::Sp { model, norm } => sp_encode(model, norm, lines),
        }
    }
}

/// Lines through a SentencePiece model ([`sp::segmenter`] after [`sp_text`]).
fn sp_encode(
    model: &SpModel,
    norm: &Normalizer,
    lines: &[&str],
) -> std::result::Result<Vec<Encoded>, String> {
    let pieces = model.triples();
    let unk = pieces
        .iter()
        .position(|p| p.2 == PieceType::Unknown)
        .ok_or("the model has no unknown piece")? as u32;
    let charsmap = match norm.charsmap.is_empty() {
        true => None,
        false => Some(
            tokenizers::normalizers::Precompiled::from(&norm.charsmap)
                .map_err(|e| format!("its normaliser's character map: {e}"))?,
        ),
    };
    let split = sp::segmenter(&pieces, model.is_bpe());
    lines
        .par_iter()
        .map(|l| {
            let text = sp_text(l, norm, charsmap.as_ref())?;
            // SentencePiece writes a run of unknown symbols as one unknown piece.
            let mut ids: Vec<u32> = Vec::new();
            let mut after_unknown = false;
            for id in split(&text) {
                if id.is_some() || !after_unknown {
                    ids.push(id.unwrap_or(unk));
                }
                after_unknown = id.is_none();
            }
            let tokens = ids.iter().map(|&i| pieces[i as usize].0.clone()).collect();
            let unknown = ids.iter().filter(|&&i| i == unk).count();
            Ok(Encoded {
                ids,
                tokens,
                unknown,
            })
        })
        .collect()
}

/// `line` as SentencePiece's normaliser leaves it: the character map, extra spaces removed, the
/// dummy prefix, spaces written `▁`.
fn sp_text(
    line: &str,
    norm: &Normalizer,
    charsmap: Option<&tokenizers::normalizers::Precompiled>,
) -> std::result::Result<String, String> {
    use tokenizers::Normalizer as _;
    let mut text = line.to_string();
    if let Some(map) = charsmap {
        let mut n = tokenizers::NormalizedString::from(line);
        map.normalize(&mut n).map_err(|e| e.to_string())?;
        text = n.get().to_string();
    }
    if norm.remove_extra_whitespaces {
        text = text
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
    }
    if text.is_empty() {
        return Ok(text);
    }
    if norm.add_dummy_prefix {
        text.insert(0, ' ');
    }
    if norm.escape_whitespaces {
        text = text.replace(' ', "\u{2581}");
    }
    Ok(text)
}

/// The ids the tokenizer at `base` gives `lines` (without special tokens), with how often each
/// occurs: those used at least `min_count` times, by id.
pub fn corpus_ids(base: &Path, lines: &[String], min_count: u64) -> Result<Vec<(u32, u64)>> {
    let enc = Encoder::load(base)?;
    let mut counts: std::collections::BTreeMap<u32, u64> = Default::default();
    for chunk in lines.chunks(CHUNK) {
        let text: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let encoded = enc
            .encode(&text, false)
            .map_err(|e| Error::format(base, format!("cannot encode the corpus: {e}")))?;
        for id in encoded.iter().flat_map(|e| &e.ids) {
            *counts.entry(*id).or_default() += 1;
        }
    }
    Ok(counts
        .into_iter()
        .filter(|&(_, n)| n >= min_count)
        .collect())
}

/// Lines encoded at a time (memory stays bounded on a large corpus).
const CHUNK: usize = 4096;

/// A line the pruned tokenizer splits otherwise (or into more unknown tokens) than the base.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    /// 1-based, among the lines given.
    pub line: usize,
    pub text: String,
    pub base: Vec<String>,
    pub pruned: Vec<String>,
}

/// The corpus check's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusCheck {
    /// Lines checked (blank lines are skipped) and the base's tokens over them.
    pub lines: usize,
    pub tokens: usize,
    /// Lines whose token strings differ, and the first few.
    pub mismatches: usize,
    pub first_mismatches: Vec<Mismatch>,
    /// Lines with more unknown tokens in the pruned tokenizer than in the base, and the first few.
    pub new_unknown: usize,
    pub first_new_unknown: Vec<Mismatch>,
    /// How the lines were tokenized.
    pub method: &'static str,
}

/// How many mismatches a check keeps.
const FIRST: usize = 5;

/// Encode every non-blank line with the base at `base` and with `pruned`: the token strings must
/// be the same (ids differ only by the renumbering), and the pruned tokenizer must not give more
/// unknown tokens. The figures; a tokenizer that cannot be loaded or encode a line is an error.
pub fn check_corpus(base: &Path, pruned: &PrunedFile, lines: &[String]) -> Result<CorpusCheck> {
    let (old, new) = (Encoder::load(base)?, Encoder::pruned(base, pruned)?);
    let mut c = CorpusCheck {
        lines: 0,
        tokens: 0,
        mismatches: 0,
        first_mismatches: Vec::new(),
        new_unknown: 0,
        first_new_unknown: Vec::new(),
        method: old.method(),
    };
    let numbered: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.as_str()))
        .collect();
    let bad = |e: String| Error::format(base, format!("cannot encode the corpus: {e}"));
    for chunk in numbered.chunks(CHUNK) {
        let text: Vec<&str> = chunk.iter().map(|(_, l)| *l).collect();
        let a = old.encode(&text, true).map_err(bad)?;
        let b = new.encode(&text, true).map_err(bad)?;
        for ((&(line, text), a), b) in chunk.iter().zip(a).zip(b) {
            c.lines += 1;
            c.tokens += a.ids.len();
            let changed = a.tokens != b.tokens;
            let unknown = b.unknown > a.unknown;
            let m = || Mismatch {
                line,
                text: text.to_string(),
                base: a.tokens.clone(),
                pruned: b.tokens.clone(),
            };
            if changed {
                c.mismatches += 1;
                if c.first_mismatches.len() < FIRST {
                    c.first_mismatches.push(m());
                }
            }
            if unknown {
                c.new_unknown += 1;
                if c.first_new_unknown.len() < FIRST {
                    c.first_new_unknown.push(m());
                }
            }
        }
    }
    Ok(c)
}
