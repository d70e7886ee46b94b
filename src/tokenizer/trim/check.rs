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
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// One line's ids, and how many are the unknown token.
struct Encoded {
    ids: Vec<u32>,
    unknown: usize,
}

/// One line through the base in the corpus pass: the ids without special tokens (what the line
/// uses) and the line as the check compares it (special tokens added).
struct Both {
    plain: Vec<u32>,
    special: Encoded,
}

/// How the SentencePiece side is run, for the report.
const SP_METHOD: &str = "SentencePiece model: our segmenter (BPE joins by score or unigram Viterbi, byte fallback, user-defined pieces whole, a run of unknown symbols one unknown piece) after the model's normaliser (precompiled character map, extra spaces removed, dummy prefix, spaces as \u{2581})";

/// `tok` with a BPE model's `dropout` off: with it, `tokenizers` skips merges at random, and the
/// corpus would be counted and checked against splits no two runs agree on. The written
/// tokenizer keeps its dropout.
fn without_dropout(tok: &mut tokenizers::Tokenizer) {
    if let tokenizers::ModelWrapper::BPE(b) = tok.get_model() {
        if b.dropout.is_some_and(|p| p > 0.0) {
            let mut b = b.clone();
            b.dropout = None;
            tok.with_model(b);
        }
    }
}

impl Encoder {
    /// A tokenizer.json, its truncation, padding and dropout off: whole lines are counted and
    /// checked.
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
        let mut tok = crate::tokenizer::library::load(text.as_bytes())?;
        without_dropout(&mut tok);
        tok.with_truncation(None).map_err(|e| format!("{e}"))?;
        tok.with_padding(None);
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

    /// Each id's token text (what the check compares), "" for an id no token has.
    fn texts(&self) -> Vec<String> {
        match self {
            Encoder::Hf { tok, .. } => {
                let n = tok.get_vocab(true).values().max().map_or(0, |&m| m + 1);
                (0..n)
                    .map(|i| tok.id_to_token(i).unwrap_or_default())
                    .collect()
            }
            Encoder::Sp { model, .. } => model.triples().into_iter().map(|p| p.0).collect(),
        }
    }

    /// Every line encoded (in parallel), with the post-processor's special tokens.
    fn encode(&self, lines: &[&str]) -> std::result::Result<Vec<Encoded>, String> {
        Ok(self
            .encode_both(lines)?
            .into_iter()
            .map(|b| b.special)
            .collect())
    }

    /// Every line encoded once (in parallel): its ids without special tokens, and with them (the
    /// same encoding through the post-processor again, special tokens added).
    fn encode_both(&self, lines: &[&str]) -> std::result::Result<Vec<Both>, String> {
        match self {
            Encoder::Hf { tok, unk } => lines
                .par_iter()
                .map(|l| {
                    // The library panics on some malformed parts (a template naming a special
                    // token it does not list): an error here, as a load's would be.
                    crate::tokenizer::library::quiet_unwind(|| {
                        let e = tok.encode(*l, false).map_err(|e| e.to_string())?;
                        let plain = e.get_ids().to_vec();
                        let e = tok.post_process(e, None, true).map_err(|e| e.to_string())?;
                        let ids = e.get_ids().to_vec();
                        let unknown = ids.iter().filter(|&&i| Some(i) == *unk).count();
                        Ok(Both {
                            plain,
                            special: Encoded { ids, unknown },
                        })
                    })
                })
                .collect(),
            Encoder::Sp { model, norm } => sp_encode(model, norm, lines),
        }
    }
}

/// Lines through a SentencePiece model ([`sp::segmenter`] after [`sp_text`]); it adds no
/// special tokens, so both sides of [`Both`] are the same ids.
fn sp_encode(
    model: &SpModel,
    norm: &Normalizer,
    lines: &[&str],
) -> std::result::Result<Vec<Both>, String> {
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
            let unknown = ids.iter().filter(|&&i| i == unk).count();
            Ok(Both {
                plain: ids.clone(),
                special: Encoded { ids, unknown },
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
    Ok(CorpusPass::new(base, lines)?.ids(min_count))
}

/// The base tokenizer's one pass over a corpus: how often each id occurs (special tokens not
/// added), and each non-blank line's ids as [`CorpusPass::check`] compares them (special tokens
/// added) — so the corpus is encoded by the base once, whatever follows.
pub struct CorpusPass<'a> {
    base: PathBuf,
    enc: Encoder,
    lines: &'a [String],
    counts: BTreeMap<u32, u64>,
    /// The ids of the lines kept whole ([`CorpusPass::with_always`]), not counted, and where
    /// those lines start.
    always: BTreeSet<u32>,
    always_from: usize,
    /// (1-based line number, its encoding) for every non-blank line.
    checked: Vec<(usize, Encoded)>,
}

impl<'a> CorpusPass<'a> {
    /// Load the tokenizer at `base` and encode `lines` with it.
    pub fn new(base: &Path, lines: &'a [String]) -> Result<CorpusPass<'a>> {
        Self::with_always(base, lines, lines.len())
    }

    /// [`CorpusPass::new`], the lines from `always_from` on kept whole (a chat template's literal
    /// text): their ids are [`CorpusPass::always_ids`], not counted; they are checked as the
    /// others are.
    pub fn with_always(
        base: &Path,
        lines: &'a [String],
        always_from: usize,
    ) -> Result<CorpusPass<'a>> {
        let enc = Encoder::load(base)?;
        let mut always = BTreeSet::new();
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        let mut checked = Vec::new();
        let bad = |e: String| Error::format(base, format!("cannot encode the corpus: {e}"));
        for (c, chunk) in lines.chunks(CHUNK).enumerate() {
            let text: Vec<&str> = chunk.iter().map(String::as_str).collect();
            for (i, both) in enc.encode_both(&text).map_err(bad)?.into_iter().enumerate() {
                if c * CHUNK + i >= always_from {
                    always.extend(&both.plain);
                } else {
                    for id in &both.plain {
                        *counts.entry(*id).or_default() += 1;
                    }
                }
                if !text[i].trim().is_empty() {
                    checked.push((c * CHUNK + i + 1, both.special));
                }
            }
        }
        Ok(CorpusPass {
            base: base.to_path_buf(),
            enc,
            lines,
            counts,
            always,
            always_from: always_from.min(lines.len()),
            checked,
        })
    }

    /// The ids of the lines kept whole, by id.
    pub fn always_ids(&self) -> Vec<u32> {
        self.always.iter().copied().collect()
    }

    /// The lines kept whole.
    pub fn always_lines(&self) -> &[String] {
        &self.lines[self.always_from..]
    }

    /// The ids used at least `min_count` times, with their counts, by id.
    pub fn ids(&self, min_count: u64) -> Vec<(u32, u64)> {
        let used = self.counts.iter().filter(|&(_, &n)| n >= min_count);
        used.map(|(&i, &n)| (i, n)).collect()
    }

    /// Encode the lines with `pruned` and compare with the base's pass: the token strings must be
    /// the same (ids differ only by the renumbering), and the pruned tokenizer must not give more
    /// unknown tokens. With `partial` (the pruner's old → new map, when the keep set was asked to
    /// leave out some of the corpus's tokens: `--keep-top`, `--min-count`), a line that uses a
    /// token the map drops is split otherwise by design: it is counted in `resplit` and checked
    /// for new unknown tokens only. The figures; a tokenizer that cannot be loaded or encode a
    /// line is an error.
    pub fn check(
        &self,
        pruned: &PrunedFile,
        partial: Option<&[Option<u32>]>,
    ) -> Result<CorpusCheck> {
        let new = Encoder::pruned(&self.base, pruned)?;
        let (old_text, new_text) = (self.enc.texts(), new.texts());
        let text = |t: &[String], ids: &[u32]| -> Vec<String> {
            ids.iter()
                .map(|&i| t.get(i as usize).cloned().unwrap_or_default())
                .collect()
        };
        let same = |a: &[u32], b: &[u32]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(&x, &y)| token(&old_text, x) == token(&new_text, y))
        };
        let dropped = |ids: &[u32]| {
            partial.is_some_and(|m| {
                ids.iter()
                    .any(|&i| m.get(i as usize).is_none_or(Option::is_none))
            })
        };
        let mut c = CorpusCheck {
            lines: 0,
            tokens: 0,
            mismatches: 0,
            first_mismatches: Vec::new(),
            new_unknown: 0,
            first_new_unknown: Vec::new(),
            resplit: 0,
            method: self.enc.method(),
        };
        let bad = |e: String| Error::format(&self.base, format!("cannot encode the corpus: {e}"));
        for chunk in self.checked.chunks(CHUNK) {
            let lines: Vec<&str> = chunk
                .iter()
                .map(|(n, _)| self.lines[n - 1].as_str())
                .collect();
            let b = new.encode(&lines).map_err(bad)?;
            for ((&(line, ref a), b), l) in chunk.iter().zip(b).zip(&lines) {
                c.lines += 1;
                c.tokens += a.ids.len();
                let m = || Mismatch {
                    line,
                    text: l.to_string(),
                    base: text(&old_text, &a.ids),
                    pruned: text(&new_text, &b.ids),
                };
                if dropped(&a.ids) {
                    c.resplit += 1;
                } else if !same(&a.ids, &b.ids) {
                    c.mismatches += 1;
                    if c.first_mismatches.len() < FIRST {
                        c.first_mismatches.push(m());
                    }
                }
                if b.unknown > a.unknown {
                    c.new_unknown += 1;
                    if c.first_new_unknown.len() < FIRST {
                        c.first_new_unknown.push(m());
                    }
                }
            }
        }
        Ok(c)
    }
}

/// Id `i`'s text in a table of [`Encoder::texts`] ("" past its end).
fn token(texts: &[String], i: u32) -> &str {
    texts.get(i as usize).map_or("", String::as_str)
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
    /// Lines that use a token the keep set left out on purpose (`--keep-top`, `--min-count`):
    /// split otherwise by design, checked for new unknown tokens only (0 when every token the
    /// corpus uses is kept).
    pub resplit: usize,
    /// How the lines were tokenized.
    pub method: &'static str,
}

/// How many mismatches a check keeps.
const FIRST: usize = 5;

/// Encode every non-blank line with the base at `base` and with `pruned`: the token strings must
/// be the same (ids differ only by the renumbering), and the pruned tokenizer must not give more
/// unknown tokens. The figures; a tokenizer that cannot be loaded or encode a line is an error.
pub fn check_corpus(base: &Path, pruned: &PrunedFile, lines: &[String]) -> Result<CorpusCheck> {
    CorpusPass::new(base, lines)?.check(pruned, None)
}
