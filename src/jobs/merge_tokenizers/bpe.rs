//! The BPE step of a merge: the additions' merges appended after BASE's, and the merges (or, in a
//! SentencePiece BPE model, the pieces) synthesized so that the model produces every new token.

use super::addition::Addition;
use super::assign::{Assigned, Place};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::{Bpe, Form};
use crate::tokenizer::fxhash::{FxHashMap, FxHashSet};
use crate::tokenizer::hf::HfTokenizer;
use crate::tokenizer::sentencepiece::{self as sp, PieceType, SpModel};
use std::collections::HashSet;

/// The BPE step BASE's model calls for (nothing for the other models): merges or pieces after
/// BASE's so that the model produces each new token; intermediate pieces take ids from `next`.
pub(super) fn plan(
    base: &Base,
    adds: &[Addition],
    added: &mut Vec<Assigned>,
    next: &mut u32,
) -> BpeSteps {
    match base {
        Base::Hf(t) if t.model_type == "BPE" => plan_bpe(t, adds, added, next),
        Base::Sp(m) if m.model_type == Some(2) => plan_sp_bpe(m, added, next),
        _ => BpeSteps::default(),
    }
}

/// What the BPE step decided.
#[derive(Default)]
pub(super) struct BpeSteps {
    pub appended: Vec<(String, String)>,
    pub not_appended: usize,
    pub synthesized: Vec<(String, String)>,
    pub intermediates: Vec<String>,
    pub became_added_tokens: Vec<String>,
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
) -> BpeSteps {
    let form = Form::of_tokenizer_json(&t.json);
    let mut plan = BpeSteps::default();
    let all: Vec<&(String, String)> = adds.iter().flat_map(|a| &a.merges).collect();
    // BASE's tokens borrowed (a 262k vocabulary is not copied), the new ones owned.
    let mut base_vocab: FxHashSet<&str> = FxHashSet::default();
    base_vocab.reserve(t.vocab.len());
    base_vocab.extend(t.vocab.iter().map(|(c, _)| c.as_str()));
    // BASE's added tokens outside its vocab are pinned into it at their ids: a piece equal to
    // one (a word holding `<|endoftext|>`) is that entry, not a new one.
    base_vocab.extend(t.added_only().into_iter().map(|a| a.content.as_str()));
    let mut new_vocab: FxHashSet<String> = added.iter().map(|a| a.token.clone()).collect();
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
    let mut made = String::new();
    for (token, from) in wanted {
        let merges = bpe.reach(&token, form);
        // Its characters, then what each merge makes (a piece of `token` or one buffer: no
        // allocation for the pieces BASE or an earlier token has).
        let mut note = |piece: &str| {
            if !base_vocab.contains(piece) && !new_vocab.contains(piece) {
                new_vocab.insert(piece.to_string());
                plan.intermediates.push(piece.to_string());
                added.push(Assigned {
                    token: piece.to_string(),
                    id: *next,
                    place: Place::Vocab,
                    special: false,
                    score: None,
                    from,
                    template: None,
                    piece_type: None,
                });
                *next = next.wrapping_add(1); // refused past 2^32 − 1, see assign
            }
        };
        for (i, c) in token.char_indices() {
            note(&token[i..i + c.len_utf8()]);
        }
        for (a, b) in &merges {
            made.clear();
            made.push_str(a);
            made.push_str(b);
            note(&made);
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
fn plan_sp_bpe(m: &SpModel, added: &mut Vec<Assigned>, next: &mut u32) -> BpeSteps {
    // Every piece string, of any type: a model never has one twice.
    let taken: HashSet<&str> = m.pieces.iter().map(|p| p.piece.as_str()).collect();
    let mut scores: FxHashMap<String, f32> = FxHashMap::default();
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
    let mut plan = BpeSteps::default();
    let wanted: Vec<(String, usize)> = added
        .iter()
        .filter(|a| a.piece_type.unwrap_or(PieceType::Normal) == PieceType::Normal)
        .map(|a| (a.token.clone(), a.from))
        .collect();
    let mut add = |piece: String, from: usize, scores: &mut FxHashMap<String, f32>| {
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
        *next = next.wrapping_add(1); // refused past 2^32 − 1, see assign
    };
    for (token, from) in wanted {
        for c in token.chars().map(String::from) {
            if !scores.contains_key(&c) && !taken.contains(c.as_str()) {
                add(c, from, &mut scores);
            }
        }
        // Each join scores below every piece, so BPE takes every step it took before and only
        // then the new join: it continues from the pieces it left (a long token is not joined
        // again from its characters at every step).
        let mut pieces = sp::bpe_pieces(|p| scores.get(p).copied(), &token);
        loop {
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
            pieces = sp::bpe_join(|p| scores.get(p).copied(), pieces);
        }
    }
    plan
}

/// Piece types SentencePiece BPE joins into.
fn joinable(kind: PieceType) -> bool {
    matches!(kind, PieceType::Normal | PieceType::UserDefined)
}

/// How many characters `s` has.
pub(super) fn chars(s: &str) -> usize {
    s.chars().count()
}
