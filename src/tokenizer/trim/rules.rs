//! What each family keeps beyond the asked tokens. Byte-level and SentencePiece BPE: the set is
//! closed under the joins BPE makes to build each kept token from its characters (every symbol of
//! that trace is kept), so BPE over any text whose base tokens are all kept takes the same steps:
//! each step's join is still there, and the joins left are a subset of the base's, so none ranks
//! before it. Unigram and WordPiece need no closure: the base's best segmentation (or longest
//! match) is still there and nothing new beats it. Every family keeps its specials and what text
//! outside the kept set falls back to: the byte alphabet, byte-fallback pieces, or else the
//! one-character tokens (and WordPiece's `##` + character).

use super::pruned::reason;
use crate::error::{Error, Result};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::{self, Form};
use crate::tokenizer::fxhash::{self, FxHashMap, FxHashSet};
use crate::tokenizer::hf::HfTokenizer;
use crate::tokenizer::sentencepiece::{PieceType, SpModel};
use serde_json::Value;
use std::path::Path;

/// The kept ids and why those beyond the asked set are kept.
pub(super) struct Keep {
    pub kept: Vec<bool>,
    pub added: Vec<(u32, &'static str)>,
}

impl Keep {
    fn mark(&mut self, id: u32, why: &'static str) {
        if let Some(k) = self.kept.get_mut(id as usize) {
            if !*k {
                *k = true;
                self.added.push((id, why));
            }
        }
    }

    fn ids(&self) -> Vec<u32> {
        (0..self.kept.len() as u32)
            .filter(|&i| self.kept[i as usize])
            .collect()
    }
}

/// `keep` and what the family needs with it.
pub(super) fn kept(b: &Base, tokens: &[Option<&str>], path: &Path, keep: &[u32]) -> Result<Keep> {
    let mut k = Keep {
        kept: vec![false; tokens.len()],
        added: Vec::new(),
    };
    for &id in keep {
        if tokens.get(id as usize).copied().flatten().is_none() {
            return Err(Error::arg(
                "--keep-list",
                format!(
                    "--keep-list: id {id} is not a token of {} (its ids are 0..{})",
                    path.display(),
                    tokens.len()
                ),
            ));
        }
        k.kept[id as usize] = true;
    }
    let ids = b.ids();
    match b {
        Base::Hf(t) => hf(t, &ids, &mut k),
        Base::Sp(m) => sp(m, &ids, &mut k),
    }
    Ok(k)
}

/// A tokenizer.json's specials, fallback symbols and closure.
fn hf(t: &HfTokenizer, ids: &FxHashMap<&str, u32>, k: &mut Keep) {
    for a in &t.added {
        k.mark(a.id, reason::SPECIAL);
    }
    let model = &t.json["model"];
    let unk = match model.get("unk_id").and_then(Value::as_u64) {
        Some(i) => u32::try_from(i).ok(),
        None => model["unk_token"]
            .as_str()
            .and_then(|u| ids.get(u).copied()),
    };
    let mut named = Vec::new();
    processor_ids(&t.json["post_processor"], &mut named);
    named.extend(t.json.pointer("/padding/pad_id").and_then(Value::as_u64));
    for id in unk
        .into_iter()
        .chain(named.into_iter().filter_map(|i| u32::try_from(i).ok()))
    {
        k.mark(id, reason::SPECIAL);
    }
    let form = Form::of_tokenizer_json(&t.json);
    let prefix = model["continuing_subword_prefix"].as_str().unwrap_or("");
    if form == Form::ByteLevel {
        for b in 0..=255u8 {
            if let Some(&id) = ids.get(form::byte_symbol(b).to_string().as_str()) {
                k.mark(id, reason::BYTE_ALPHABET);
            }
        }
    } else if !(model["byte_fallback"].as_bool() == Some(true) && byte_pieces(ids, k)) {
        alphabet(t.vocab.iter().map(|(s, i)| (s.as_str(), *i)), prefix, k);
    }
    match t.model_type.as_str() {
        "BPE" => hf_closure(t, ids, prefix, k),
        "Unigram" => {
            let lowest = (0..t.scores.len()).min_by(|&a, &b| t.scores[a].total_cmp(&t.scores[b]));
            if let Some(i) = lowest {
                k.mark(i as u32, reason::LOWEST_SCORE);
            }
        }
        _ => {}
    }
}

/// Ids a post-processor names (TemplateProcessing's special tokens, BERT/RoBERTa's sep and cls),
/// through Sequence.
fn processor_ids(p: &Value, out: &mut Vec<u64>) {
    match p["type"].as_str() {
        Some("TemplateProcessing") => {
            if let Some(m) = p["special_tokens"].as_object() {
                for s in m.values() {
                    let ids = s["ids"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                    out.extend(ids.iter().filter_map(Value::as_u64));
                }
            }
        }
        Some("BertProcessing" | "RobertaProcessing") => {
            out.extend(["sep", "cls"].iter().filter_map(|k| p[k][1].as_u64()));
        }
        Some("Sequence") => {
            for q in p["processors"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                processor_ids(q, out);
            }
        }
        _ => {}
    }
}

/// Mark the 256 `<0xNN>` pieces; false (nothing marked) unless all are there.
fn byte_pieces(ids: &FxHashMap<&str, u32>, k: &mut Keep) -> bool {
    let found: Option<Vec<u32>> = (0..=255u8)
        .map(|b| ids.get(format!("<0x{b:02X}>").as_str()).copied())
        .collect();
    let Some(found) = found else { return false };
    for id in found {
        k.mark(id, reason::BYTE_FALLBACK);
    }
    true
}

/// Mark the one-character tokens, and (WordPiece, `prefix` not empty) `prefix` + one character.
fn alphabet<'a>(tokens: impl Iterator<Item = (&'a str, u32)>, prefix: &str, k: &mut Keep) {
    let one = |s: &str| s.chars().count() == 1;
    for (tok, id) in tokens {
        if one(tok) {
            k.mark(id, reason::ALPHABET);
        } else if !prefix.is_empty() && tok.strip_prefix(prefix).is_some_and(one) {
            k.mark(id, reason::CONTINUATION);
        }
    }
}

/// A SentencePiece model's specials, fallback pieces and closure.
fn sp(m: &SpModel, ids: &FxHashMap<&str, u32>, k: &mut Keep) {
    for (i, p) in m.pieces.iter().enumerate() {
        let why = match p.kind {
            PieceType::Normal => continue,
            PieceType::Byte => reason::BYTE_FALLBACK,
            PieceType::Unused => reason::UNUSED,
            _ => reason::SPECIAL,
        };
        k.mark(i as u32, why);
    }
    if !m.pieces.iter().any(|p| p.kind == PieceType::Byte) {
        let normal = m
            .pieces
            .iter()
            .enumerate()
            .filter(|p| p.1.kind == PieceType::Normal);
        alphabet(normal.map(|(i, p)| (p.piece.as_str(), i as u32)), "", k);
    }
    if m.is_bpe() {
        let score = |s: &str| ids.get(s).map(|&i| &m.pieces[i as usize]);
        let join = |a: &str, b: &str| {
            let joined = format!("{a}{b}");
            let p = score(&joined)?;
            matches!(p.kind, PieceType::Normal | PieceType::UserDefined)
                .then(|| (-f64::from(p.score), joined))
        };
        let start = |t: &str| t.chars().map(String::from).collect();
        // USER_DEFINED pieces are matched whole before any join.
        let normal = |id: u32| m.pieces[id as usize].kind == PieceType::Normal;
        close(k, ids, normal, start, join);
        return;
    }
    // SentencePiece's unknown score is the lowest normal piece's; our segmenter's, the lowest
    // of all: keep both.
    let lowest = |normal: bool| {
        (0..m.pieces.len())
            .filter(|&i| !normal || m.pieces[i].kind == PieceType::Normal)
            .min_by(|&a, &b| m.pieces[a].score.total_cmp(&m.pieces[b].score))
    };
    for i in [lowest(true), lowest(false)].into_iter().flatten() {
        k.mark(i as u32, reason::LOWEST_SCORE);
    }
}

/// A tokenizer.json BPE's closure: its merges by rank, symbols as `tokenizers` starts a word
/// (`prefix` before each character but a word's first, `end_of_word_suffix` after its last).
fn hf_closure(t: &HfTokenizer, ids: &FxHashMap<&str, u32>, prefix: &str, k: &mut Keep) {
    let suffix = t.json["model"]["end_of_word_suffix"].as_str().unwrap_or("");
    let mut ranks: FxHashMap<(&str, &str), usize> = fxhash::map_with_capacity(t.merges.len());
    for (i, (a, b)) in t.merges.iter().enumerate() {
        ranks.entry((a.as_str(), b.as_str())).or_insert(i);
    }
    let join = |a: &str, b: &str| {
        let r = *ranks.get(&(a, b))?;
        Some((
            r as f64,
            format!("{a}{}", b.strip_prefix(prefix).unwrap_or(b)),
        ))
    };
    let start = |tok: &str| start_symbols(tok, prefix, suffix);
    // Added tokens are matched whole before the model sees text.
    let added: FxHashSet<u32> = t.added.iter().map(|a| a.id).collect();
    close(k, ids, |id| !added.contains(&id), start, join);
}

/// The symbols `tokenizers`' BPE starts from for a word piece that is `tok`.
pub(super) fn start_symbols(tok: &str, prefix: &str, suffix: &str) -> Vec<String> {
    let (body, inside) = match tok.strip_prefix(prefix).filter(|_| !prefix.is_empty()) {
        Some(b) => (b, true),
        None => (tok, false),
    };
    let (body, last) = match body.strip_suffix(suffix).filter(|_| !suffix.is_empty()) {
        Some(b) => (b, suffix),
        None => (body, ""),
    };
    let n = body.chars().count();
    body.chars()
        .enumerate()
        .map(|(i, c)| {
            let p = if i > 0 || inside { prefix } else { "" };
            let s = if i + 1 == n { last } else { "" };
            format!("{p}{c}{s}")
        })
        .collect()
}

/// Close the kept set under BPE: for each kept token, every symbol BPE makes from its starting
/// symbols (`start`) on the way to it is kept (tokens `traced` says are matched otherwise are not
/// traced). `join` gives a pair's priority (lower first; the
/// leftmost among equals) and the symbol it makes, or None where the pair is never joined.
fn close(
    k: &mut Keep,
    ids: &FxHashMap<&str, u32>,
    traced: impl Fn(u32) -> bool,
    start: impl Fn(&str) -> Vec<String>,
    join: impl Fn(&str, &str) -> Option<(f64, String)>,
) {
    let by_id: FxHashMap<u32, &str> = ids.iter().map(|(s, i)| (*i, *s)).collect();
    for id in k.ids().into_iter().filter(|&i| traced(i)) {
        let Some(tok) = by_id.get(&id) else { continue };
        let mut syms = start(tok);
        let mark = |k: &mut Keep, s: &str| {
            if let Some(&i) = ids.get(s) {
                k.mark(i, reason::MERGE_CLOSURE);
            }
        };
        for s in &syms {
            mark(k, s);
        }
        loop {
            let mut best: Option<(f64, usize, String)> = None;
            for (i, w) in syms.windows(2).enumerate() {
                if let Some((p, joined)) = join(&w[0], &w[1]) {
                    if best.as_ref().is_none_or(|b| p < b.0) {
                        best = Some((p, i, joined));
                    }
                }
            }
            let Some((_, i, joined)) = best else { break };
            mark(k, &joined);
            syms[i] = joined;
            syms.remove(i + 1);
        }
    }
}
