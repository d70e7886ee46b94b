//! The checks on the merged tokenizer before it is written: it loads (or re-parses), every base
//! id is kept, every new token is produced by the merged model, and base text keeps its ids; and
//! the two refusals (base text changed, tokens unreachable) with what to do about them.

use super::assign::{Assigned, Place};
use super::options::Options;
use crate::error::{Error, Result};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::{self, Form};
use crate::tokenizer::hf::HfTokenizer;
use crate::tokenizer::sample::{self, Coverage, TextCheck};
use crate::tokenizer::sentencepiece::{self as sp, PieceType, SpModel};
use crate::tokenizer::wordpiece;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The merged tokenizer as `tokenizers` loads `text`: `built` where [`merged_bpe`](super::merged::merged_bpe) made it (a BPE
/// base, none of whose entries an appended one replaced: every base token keeps its id), else
/// `text` loaded and every base token checked for its id. Each new token maps to its id and is
/// produced: in a byte-level or `▁` base, the merged model (the `tokenizers` crate's, on the
/// token's own symbols) gives exactly that token; in a plain base, and for added tokens, the
/// token's text encoded alone gives exactly its id. Others are listed as unreachable. The tokens
/// are checked on every core.
pub(super) fn verify_hf(
    base: &HfTokenizer,
    text: &str,
    built: Option<tokenizers::Tokenizer>,
    added: &[Assigned],
    form: Form,
    unreachable: &mut Vec<String>,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    use rayon::prelude::*;
    use tokenizers::Model;
    let merged = match built {
        Some(m) => m,
        None => loaded_keeping_base_ids(base, text)?,
    };
    let produced = |a: &Assigned| {
        if merged.token_to_id(&a.token) != Some(a.id) {
            return Err(format!(
                "new token '{}' does not have its id {}",
                a.token, a.id
            ));
        }
        Ok(if form == Form::WordPiece && a.place == Place::Vocab {
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
        })
    };
    let found: Vec<std::result::Result<bool, String>> = added.par_iter().map(produced).collect();
    for (a, ok) in added.iter().zip(found) {
        if !ok? {
            unreachable.push(a.token.clone());
        }
    }
    Ok(merged)
}

/// The merged tokenizer.json loaded in `tokenizers`, every base token with its id.
pub(super) fn loaded_keeping_base_ids(
    base: &HfTokenizer,
    text: &str,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    let merged = crate::tokenizer::library::load(text.as_bytes())
        .map_err(|e| format!("the merged tokenizer.json does not load in tokenizers: {e}"))?;
    for (token, id) in base.ids() {
        if merged.token_to_id(token) != Some(id) {
            return Err(format!("base token '{token}' no longer has id {id}"));
        }
    }
    Ok(merged)
}

/// Every base piece byte-identical in place; the new pieces exactly as planned after them; all
/// bytes around the insertion unchanged.
pub(super) fn verify_sp(
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

/// The built-in sample and each `--check-text` file, encoded with BASE (at `base_path`) and with
/// the result. Built-in lines BASE cannot encode are skipped and counted (the sample's scripts are
/// not the user's text); a `--check-text` line BASE cannot encode is an error.
pub(super) fn check_all(
    base_path: &Path,
    files: &[PathBuf],
    cover: &Coverage,
    before: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>,
    after: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>,
) -> Result<(TextCheck, Vec<TextCheck>)> {
    let built_in = sample::check(
        PathBuf::from("(built-in sample)"),
        sample::BUILT_IN,
        cover,
        true,
        before,
        after,
    )
    .map_err(|e| {
        Error::format(
            base_path,
            format!("cannot encode a line of the built-in sample: {e}"),
        )
    })?;
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| Error::io(f, "read", e))?;
        let lines: Vec<&str> = text.lines().collect();
        let bad = |e: String| Error::format(f, format!("cannot encode a line: {e}"));
        out.push(sample::check(f.clone(), &lines, cover, false, before, after).map_err(bad)?);
    }
    Ok((built_in, out))
}

/// Ids of `line` in a SentencePiece model's pieces, as the model type splits it (spaces as `▁`, a
/// `▁` first; no normaliser): unigram Viterbi or BPE joins. A character no piece has becomes its
/// byte pieces where the model has them, else one unknown id.
pub(super) fn sp_ids(
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

/// A token for a one-line message: control characters escaped, at most 40 characters shown.
fn shown_token(t: &str) -> String {
    let mut escaped = String::new();
    for c in t.chars() {
        match c.is_control() {
            true => escaped.extend(c.escape_debug()),
            false => escaped.push(c),
        }
    }
    match escaped.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &escaped[..at]),
        None => escaped,
    }
}

/// Why new tokens do not encode to their id, as far as BASE's pipeline tells.
fn why_unreachable(base: &Base, tokens: &[String]) -> String {
    let general = general_reason(base, tokens);
    match particular_reason(base, tokens) {
        Some((why, n)) if n < tokens.len() => format!("{n} of them: {why}; the others: {general}"),
        Some((why, _)) => why,
        None => general,
    }
}

/// A cause that explains some of `tokens` by what they are (a control piece, capitals under case
/// folding, an added token inside), and how many it explains.
fn particular_reason(base: &Base, tokens: &[String]) -> Option<(String, usize)> {
    if let Base::Sp(m) = base {
        let normalizer = sp::normalizer(m);
        let capitals = tokens.iter().filter(|t| t.to_lowercase() != **t).count();
        if normalizer.folds_case() && capitals > 0 {
            let name = normalizer.name;
            return Some((format!("BASE's normaliser ({name}) folds text to lower case before the model sees it, so a piece with capitals is never produced: add them in lower case"), capitals));
        }
        let reserved: Vec<&sp::Piece> = m
            .pieces
            .iter()
            .filter(|p| matches!(p.kind, PieceType::Control | PieceType::Unknown))
            .filter(|p| tokens.contains(&p.piece))
            .collect();
        if let Some(p) = reserved.first() {
            let why = format!(
                "'{}' is BASE's {} piece, which SentencePiece never produces from text: leave it out of the addition",
                shown_token(&p.piece),
                if p.kind == PieceType::Control { "control" } else { "unknown" }
            );
            return Some((why, reserved.len()));
        }
    }
    let (token, inner, n) = holds_added_token(base, tokens)?;
    let (what, or) = match base {
        Base::Hf(_) => ("added token", ", or add the whole token with --special"),
        Base::Sp(_) => ("user-defined piece", ""),
    };
    let why = format!(
        "'{}' holds BASE's {what} '{}', which is matched whole before the model sees the rest: leave it out of the token{or}",
        shown_token(token),
        shown_token(inner)
    );
    Some((why, n))
}

/// Why `tokens` are not produced, from what BASE's pipeline and model are.
fn general_reason(base: &Base, tokens: &[String]) -> String {
    let sp_pieces = tokens.iter().any(|t| t.contains('\u{2581}'));
    match base {
        Base::Hf(t) if t.json["pre_tokenizer"].to_string().contains("ByteLevel") => format!(
            "BASE is a byte-level BPE: text becomes byte symbols before the vocabulary is looked up, so a token written in raw characters{} is never produced; add tokens in BASE's byte-level form, or use a base with a character-level vocabulary",
            if sp_pieces { " (SentencePiece '\u{2581}' pieces, non-ASCII letters)" } else { " (non-ASCII letters)" }
        ),
        Base::Hf(t) if t.model_type == "Unigram" => "a unigram model picks the best-scoring segmentation, and their score loses to the pieces they split into: give a higher --score".into(),
        Base::Hf(t) if t.model_type == "WordPiece" => "WordPiece tokens are looked up in words: BASE's normalizer or pre-tokenizer splits or changes their text (BERT makes each punctuation mark and CJK character a word of its own)".into(),
        Base::Sp(m) if m.is_bpe() => "SentencePiece BPE joins only into normal pieces, and a join on their way is BASE's control or unused piece (<s>, </s>, <unk>): add such a token with --special (matched whole), or leave that part out".into(),
        Base::Sp(_) => "a unigram model picks the best-scoring segmentation, and their score loses to the pieces they split into: give a higher --score (0 makes a whole new piece win over any split)".into(),
        _ if sp_pieces => "they are SentencePiece pieces ('\u{2581}' marks a word start) and BASE's pre-tokenizer does not produce that mark".into(),
        _ => "BASE's normalizer or pre-tokenizer splits or changes them before the vocabulary is looked up".into(),
    }
}

/// The first of `tokens` that holds one of BASE's added tokens (`[UNK]`, `<|endoftext|>`) or, in
/// a SentencePiece BASE, user-defined pieces inside it, and that token: both are matched whole
/// before the model sees the rest; and how many of `tokens` hold one.
fn holds_added_token<'a>(
    base: &'a Base,
    tokens: &'a [String],
) -> Option<(&'a str, &'a str, usize)> {
    let inner: Vec<&str> = match base {
        Base::Hf(t) => t
            .json
            .get("added_tokens")
            .and_then(serde_json::Value::as_array)?
            .iter()
            .filter_map(|a| a.get("content").and_then(serde_json::Value::as_str))
            .collect(),
        // A unigram model scores user-defined pieces (higher than most): only BPE matches them
        // whole before the model.
        Base::Sp(m) if m.is_bpe() => m
            .pieces
            .iter()
            .filter(|p| p.kind == PieceType::UserDefined)
            .map(|p| p.piece.as_str())
            .collect(),
        Base::Sp(_) => return None,
    };
    let inside = |t: &'a String| {
        inner
            .iter()
            .find(|c| !c.is_empty() && **c != t.as_str() && t.contains(**c))
            .map(|c| (t.as_str(), *c))
    };
    let (token, piece) = tokens.iter().find_map(inside)?;
    Some((token, piece, tokens.iter().filter_map(inside).count()))
}

/// New pieces of a SentencePiece merge that the model does not produce (unigram Viterbi or BPE
/// joins over all pieces; USER_DEFINED pieces are matched whole), and what that leaves unchecked.
pub(super) fn sp_unreachable(
    m: &SpModel,
    added: &[Assigned],
    all: &[(String, f32, PieceType)],
) -> (Vec<String>, Vec<String>) {
    let bpe = m.model_type == Some(2);
    if m.model_type.unwrap_or(1) != 1 && !bpe {
        let not_checked = "reachability of new pieces (BASE is a word or char model)".into();
        return (Vec::new(), vec![not_checked]);
    }
    let index = sp::piece_index(all);
    // BPE as SentencePiece encodes: BASE's user-defined pieces matched whole first.
    let split = sp::segmenter(all, true);
    let mut unreachable = Vec::new();
    // nmt_nfkc_cf / nfkc_cf fold case before the model sees the text (user-defined pieces are
    // matched before the normaliser).
    let folds = sp::normalizer(m).folds_case();
    for a in added
        .iter()
        .filter(|a| a.piece_type != Some(PieceType::Control))
    {
        let user = a.piece_type == Some(PieceType::UserDefined);
        let ok = if folds && !user && a.token.to_lowercase() != a.token {
            false
        } else if bpe && user {
            true // matched whole before any join, as SentencePiece does
        } else if bpe {
            split(&a.token) == [Some(a.id)]
        } else {
            sp::viterbi_with(all, &index, &a.token) == [a.id as usize]
        };
        if !ok {
            unreachable.push(a.token.clone());
        }
    }
    let not_checked = format!(
        "reachability and base text use SentencePiece's {} over the pieces, without the model's normaliser",
        if bpe { "BPE joins" } else { "unigram Viterbi" }
    );
    (unreachable, vec![not_checked])
}

/// BASE's normal pieces that a unigram model produced for their own text before the merge and no
/// longer does, each with the new piece that now wins there (`ሓሁ` scored 0 beats `▁ሓሁ` at −4.6
/// by way of `▁` + `ሓሁ`). Only pieces holding a new piece can change: Viterbi over a text uses
/// only pieces inside it.
pub(super) fn sp_shadowed(
    m: &SpModel,
    new: &[(String, f32, PieceType)],
    all: &[(String, f32, PieceType)],
) -> Vec<(String, String)> {
    if m.model_type.unwrap_or(1) != 1 || new.is_empty() {
        return Vec::new();
    }
    let fresh = NewPieces::of(new.iter().map(|n| n.0.as_str()));
    let before = &all[..m.pieces.len()];
    let (index_before, index_all) = (sp::piece_index(before), sp::piece_index(all));
    use rayon::prelude::*;
    let beaten = |(id, p): (usize, &sp::Piece)| {
        if p.kind != PieceType::Normal || !fresh.inside(&p.piece) {
            return None;
        }
        let after = sp::viterbi_with(all, &index_all, &p.piece);
        if after == [id] || sp::viterbi_with(before, &index_before, &p.piece) != [id] {
            return None;
        }
        let winner = after.iter().find(|&&i| i >= before.len() && i < all.len());
        let winner = winner.map_or_else(String::new, |&i| all[i].0.clone());
        Some((p.piece.clone(), winner))
    };
    m.pieces.par_iter().enumerate().filter_map(beaten).collect()
}

/// [`sp_shadowed`] for a tokenizer.json Unigram BASE, by `tokenizers`' own models: BASE's vocab
/// entries holding a new token that `before` produced for their own text and `merged` does not.
pub(super) fn hf_shadowed(
    t: &HfTokenizer,
    before: &tokenizers::Tokenizer,
    merged: &tokenizers::Tokenizer,
    added: &[Assigned],
) -> Vec<(String, String)> {
    use rayon::prelude::*;
    use tokenizers::Model;
    if t.model_type != "Unigram" || added.is_empty() {
        return Vec::new();
    }
    let fresh = NewPieces::of(added.iter().map(|a| a.token.as_str()));
    let (was, now) = (before.get_model(), merged.get_model());
    let alone = |m: &tokenizers::ModelWrapper, piece: &str, id: u32| {
        m.tokenize(piece)
            .is_ok_and(|v| v.len() == 1 && v[0].id == id)
    };
    let beaten = |(piece, id): &(String, u32)| {
        if fresh.set.contains(piece.as_str()) || !fresh.inside(piece) {
            return None;
        }
        if alone(now, piece, *id) || !alone(was, piece, *id) {
            return None;
        }
        let after = now.tokenize(piece).unwrap_or_default();
        let winner = after
            .into_iter()
            .find(|t| fresh.set.contains(t.value.as_str()));
        Some((piece.clone(), winner.map(|t| t.value).unwrap_or_default()))
    };
    t.vocab.par_iter().filter_map(beaten).collect()
}

/// The new pieces of a merge, for finding BASE's pieces that hold one: the set, and the fewest
/// and most characters a new piece has.
struct NewPieces<'a> {
    set: std::collections::HashSet<&'a str>,
    chars: (usize, usize),
}

impl<'a> NewPieces<'a> {
    fn of(pieces: impl Iterator<Item = &'a str>) -> Self {
        let set: std::collections::HashSet<&str> = pieces.collect();
        let lengths = set.iter().map(|p| p.chars().count());
        let chars = (
            lengths.clone().min().unwrap_or(1),
            lengths.max().unwrap_or(1),
        );
        NewPieces { set, chars }
    }

    /// Whether `s` holds one of the new pieces inside it.
    fn inside(&self, s: &str) -> bool {
        let (lo, hi) = self.chars;
        let starts: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
        (0..starts.len()).any(|a| {
            (a + lo..=(a + hi).min(starts.len() - 1))
                .any(|b| self.set.contains(&s[starts[a]..starts[b]]))
        })
    }
}

/// Refuse a merge after which BASE's own pieces are no longer produced for their text (unless
/// `--allow-base-change`): a failed check naming the first and the new piece that beats it.
pub(super) fn refuse_shadowed(
    base_path: &Path,
    shadowed: &[(String, String)],
    opts: &Options,
) -> Result<()> {
    let Some((piece, winner)) = shadowed.first().filter(|_| !opts.allow_base_change) else {
        return Ok(());
    };
    Err(Error::Check {
        path: base_path.to_path_buf(),
        problem: format!(
            "BASE's piece '{}' is no longer what its own text encodes to: the new piece '{}' scores above it ({} of BASE's pieces are beaten so); give the new pieces a lower --score, or --allow-base-change to write it anyway",
            shown_token(piece),
            shown_token(winner),
            shadowed.len()
        ),
    })
}

/// Refuse a merge that changes base text (unless `--allow-base-change`): a failed check naming
/// the first such line, nothing written.
pub(super) fn refuse_base_change(
    base_sample: &TextCheck,
    check_text: &[TextCheck],
    opts: &Options,
) -> Result<()> {
    let changed = std::iter::once(base_sample)
        .chain(check_text)
        .find_map(|c| c.first_base_change.as_ref().map(|l| (c, l)));
    let (Some((c, (n, line))), false) = (changed, opts.allow_base_change) else {
        return Ok(());
    };
    let shown: String = line.chars().take(80).collect();
    Err(Error::Check {
        path: c.file.clone(),
        problem: format!(
            "line {n} ('{shown}') is base text (no new token covers it) and encodes to other ids after the merge ({} of {} such lines do); nothing written (--allow-base-change writes it anyway)",
            c.base_changed, c.base_lines
        ),
    })
}

/// Refuse new tokens the merged model does not produce (unless `--allow-unreachable`): the
/// input's problem, named with BASE's path, the tokens and why.
pub(super) fn refuse_unreachable(
    base: &Base,
    base_path: &Path,
    unreachable: &[String],
    added: usize,
    opts: &Options,
) -> Result<()> {
    if unreachable.is_empty() || opts.allow_unreachable {
        return Ok(());
    }
    // On one line, whatever the tokens hold, and not too long of it.
    let shown: Vec<String> = unreachable.iter().take(8).map(|t| shown_token(t)).collect();
    Err(Error::format(
        base_path,
        format!(
            "{} of {} new tokens do not encode alone to their id ({}{}): {}; nothing written (--allow-unreachable writes them anyway)",
            unreachable.len(),
            added,
            shown.join(" "),
            if unreachable.len() > shown.len() { " …" } else { "" },
            why_unreachable(base, unreachable)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::shown_token;

    #[test]
    fn a_token_in_a_message_stays_on_one_line_and_short() {
        assert_eq!(shown_token("a\nb\u{1}c"), "a\\nb\\u{1}c");
        assert_eq!(shown_token("ሀ▁x"), "ሀ▁x");
        let long = "ab".repeat(100);
        assert_eq!(shown_token(&long), format!("{}…", &long[..40]));
    }
}
