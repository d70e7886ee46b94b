//! How good a donor init is, measured before any training (issue 46): a seeded 5 % of the
//! shared tokens are held out and rebuilt as if new — the same solver and k, from the other
//! shared tokens only — and each rebuilt base row is compared with the base's true row (cosine:
//! median and 5th percentile, per donor matrix), beside subword-mean's figures for the same
//! tokens. `--omp-k auto` picks k by this score. Also the warning about number and byte tokens
//! among the rebuilt targets.
//!
//! Subword-mean's pieces for a held-out token (the tokenizer would give the token itself): its
//! text split greedily from the left into the longest base tokens other than it (WordPiece's
//! `##` on every piece after the first), the row the mean of theirs. Byte-level and
//! byte-fallback vocabularies always split; a text no base token begins is left out of the
//! baseline (its count says how many it covers).

use super::pursuits::Pursuits;
use super::read::{rows_f32, Matrix};
use crate::dtype::{decode_row_f32, DType};
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::rows::init::omp::{Combination, Rows};
use crate::tokenizer::base::Base;
use crate::tokenizer::form::Form;
use crate::tokenizer::surface::{self, by_id, by_surface};
use crate::vocab::Role;
use rayon::prelude::*;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// At most this many shared tokens are held out (5 % of GPT-2's 50k would be 2500). Their
/// pursuit cannot reuse the main one's Gram (its dictionary lacks them), so it costs about what
/// as many new tokens do: 2000 would double the pursuit of issue 46's 2000-token benchmark,
/// 500 adds a quarter. 500 still puts 25 tokens below the 5th percentile (its rank uncertain by
/// about ±5, one percentile point), and `--omp-k auto` compares every k on the same tokens, so
/// its differences are steadier than either figure alone.
pub const MAX_HELD_OUT: usize = 500;

/// The k that `--omp-k auto` tries (each clipped to the donor's width and the shared tokens).
pub const AUTO_KS: [usize; 5] = [8, 16, 32, 64, 128];

/// `--omp-k`: a number of atoms, or `auto` (the best of [`AUTO_KS`] on the held-out tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum K {
    Fixed(usize),
    Auto,
}

impl Default for K {
    fn default() -> Self {
        K::Fixed(64)
    }
}

impl K {
    /// `auto` or a whole number (clap's value parser).
    pub fn parse(s: &str) -> std::result::Result<K, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(K::Auto);
        }
        s.parse()
            .map(K::Fixed)
            .map_err(|_| format!("'{s}' is neither a whole number nor auto"))
    }
}

/// The base's own matrices (a tie's followers left out), with their roles: the held-out rows
/// are compared with their rows.
#[derive(Clone, Copy)]
pub struct BaseRows<'a> {
    pub ckpt: &'a Tensors,
    pub matrices: &'a [(String, Role)],
}

/// Cosines of rebuilt rows to the true rows over held-out tokens.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Held-out tokens measured (those whose rows are finite and not zero; for subword-mean,
    /// those whose text splits).
    pub tokens: usize,
    pub median: f64,
    pub p5: f64,
}

/// One donor matrix's held-out figures.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixQuality {
    /// `embedding` or `head`, as the pursuit.
    pub used_for: String,
    pub donor_tensor: String,
    pub base_tensor: String,
    /// The solver's rows (same solver and k as the new tokens').
    pub rebuilt: Figures,
    /// Subword-mean's rows for the same tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subword_mean: Option<Figures>,
}

/// One k that `--omp-k auto` tried: its held-out embedding cosines.
#[derive(Debug, Clone, Serialize)]
pub struct KScore {
    pub k: usize,
    pub median: f64,
    pub p5: f64,
}

/// What `--omp-k auto` chose and why.
#[derive(Debug, Clone, Serialize)]
pub struct AutoK {
    pub chosen: usize,
    pub tried: Vec<KScore>,
}

/// The held-out report.
#[derive(Debug, Clone, Serialize)]
pub struct Quality {
    pub seed: u64,
    /// Shared tokens held out and rebuilt.
    pub held_out: usize,
    /// The shared tokens they were rebuilt from (all the others).
    pub rebuilt_from: usize,
    pub k: usize,
    pub matrices: Vec<MatrixQuality>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_k: Option<AutoK>,
}

/// SplitMix64's step: a seeded hash of an id.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The shared tokens (positions in `shared`, in base id order) held out, and the rest.
pub struct Split {
    pub held: Vec<usize>,
    pub rest: Vec<usize>,
}

/// Hold out round(5 %) of the shared tokens (at least 1, at most [`MAX_HELD_OUT`], and never
/// all): those of the smallest `mix(mix(seed) ^ base id)`, ties by base id. A hash of the id,
/// not a draw in sequence, so the choice is the same on any thread count and any order.
pub fn held_out(shared: &[(u32, u32)], seed: u64) -> Split {
    let n = shared.len();
    if n < 2 {
        return Split {
            held: Vec::new(),
            rest: (0..n).collect(),
        };
    }
    let h = ((n * 5 + 50) / 100).clamp(1, MAX_HELD_OUT).min(n - 1);
    let s = mix(seed);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| (mix(s ^ u64::from(shared[i].0)), shared[i].0));
    let mut held = order[..h].to_vec();
    held.sort_unstable();
    let mut is_held = vec![false; n];
    held.iter().for_each(|&i| is_held[i] = true);
    let rest = (0..n).filter(|&i| !is_held[i]).collect();
    Split { held, rest }
}

/// The 100·q-th percentile of sorted values, numpy's default (linear between neighbours).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Median and 5th percentile of the cosines that exist; None when none does.
fn figures(cosines: &[Option<f64>]) -> Option<Figures> {
    let mut v: Vec<f64> = cosines.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    Some(Figures {
        tokens: v.len(),
        median: percentile(&v, 0.5),
        p5: percentile(&v, 0.05),
    })
}

/// A base matrix whose rows the report reads.
struct BaseMatrix<'a> {
    path: &'a Path,
    name: String,
    bytes: Cow<'a, [u8]>,
    dtype: DType,
    cols: usize,
}

impl<'a> BaseMatrix<'a> {
    /// The base's matrix of `role` (None: the base has none of 2 dimensions).
    fn open(base: BaseRows<'a>, role: Role) -> Result<Option<BaseMatrix<'a>>> {
        let Some((name, _)) = base.matrices.iter().find(|(_, r)| *r == role) else {
            return Ok(None);
        };
        let Some(t) = base.ckpt.tensor(name).filter(|t| t.shape.len() == 2) else {
            return Ok(None);
        };
        Ok(Some(BaseMatrix {
            path: &base.ckpt.path,
            name: name.clone(),
            bytes: t.try_bytes()?,
            dtype: t.dtype,
            cols: t.shape[1] as usize,
        }))
    }

    /// Σ weight · row, in f64; None when a row holds NaN or inf.
    fn combine(&self, parts: &[(usize, f64)]) -> Result<Option<Vec<f64>>> {
        let w = self.cols * (self.dtype.bits() / 8) as usize;
        let (mut out, mut row) = (vec![0f64; self.cols], vec![0f32; self.cols]);
        for &(id, x) in parts {
            let src = self.bytes.get(id * w..(id + 1) * w).ok_or_else(|| {
                Error::tensor(self.path, &self.name, format!("row {id} lies past its end"))
            })?;
            decode_row_f32(self.dtype, src, &mut row)
                .map_err(|e| Error::tensor(self.path, &self.name, format!("{e:?}")))?;
            if row.iter().any(|v| !v.is_finite()) {
                return Ok(None);
            }
            out.iter_mut()
                .zip(&row)
                .for_each(|(o, &v)| *o += x * f64::from(v));
        }
        Ok(Some(out))
    }

    /// The cosine between the row `parts` make and row `truth` (None: a row not finite, or zero).
    fn cosine(&self, parts: &[(usize, f64)], truth: usize) -> Result<Option<f64>> {
        let (Some(a), Some(b)) = (self.combine(parts)?, self.combine(&[(truth, 1.0)])?) else {
            return Ok(None);
        };
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        // A true row of zero has no direction; a rebuilt row of zero (no atoms) points nowhere.
        let (aa, bb) = (dot(&a, &a), dot(&b, &b));
        Ok(match (aa > 0.0, bb > 0.0) {
            (_, false) => None,
            (false, true) => Some(0.0),
            (true, true) => Some(dot(&a, &b) / (aa * bb).sqrt()),
        })
    }

    /// Each held-out token's cosine between the row its combination (or pieces) makes and its
    /// true row; `base_ids` are the held-out tokens' base ids, `parts` their combinations.
    fn cosines(
        &self,
        base_ids: &[usize],
        parts: &[Option<Vec<(usize, f64)>>],
    ) -> Result<Vec<Option<f64>>> {
        base_ids
            .par_iter()
            .zip(parts)
            .map(|(&b, p)| match p {
                Some(p) => self.cosine(p, b),
                None => Ok(None),
            })
            .collect()
    }
}

/// Subword-mean's pieces of a held-out token, from the base's vocabulary by text.
pub(crate) struct Pieces {
    by_text: HashMap<Vec<u8>, u32>,
    text_of: HashMap<u32, Vec<u8>>,
    longest: usize,
    wordpiece: bool,
}

impl Pieces {
    /// The base's tokens below `old_rows`, by text.
    pub(crate) fn new(base: &Base, old_rows: u64) -> Pieces {
        let by_text: HashMap<Vec<u8>, u32> = by_surface(base)
            .into_iter()
            .filter(|(_, id)| u64::from(*id) < old_rows)
            .collect();
        Pieces {
            longest: by_text.keys().map(Vec::len).max().unwrap_or(0),
            text_of: by_text.iter().map(|(t, &id)| (id, t.clone())).collect(),
            by_text,
            wordpiece: base.form() == Form::WordPiece,
        }
    }

    /// Base token `id`'s text as the longest other base tokens from the left, each piece's
    /// row weighted equally (None: some position begins no base token).
    fn parts(&self, id: usize) -> Option<Vec<(usize, f64)>> {
        let pieces = self.split(self.text_of.get(&u32::try_from(id).ok()?)?)?;
        let w = 1.0 / pieces.len() as f64;
        Some(pieces.into_iter().map(|p| (p, w)).collect())
    }

    /// `text` as the longest base tokens from the left, never `text` itself (None: some
    /// position begins no base token).
    fn split(&self, text: &[u8]) -> Option<Vec<usize>> {
        let cont: &[u8] = b"##";
        let (marked, body) = match text.strip_prefix(cont) {
            Some(b) if self.wordpiece && !b.is_empty() => (true, b),
            _ => (false, text),
        };
        let (mut at, mut out) = (0, Vec::new());
        while at < body.len() {
            let mark = self.wordpiece && (marked || at > 0);
            let (len, id) = (1..=(body.len() - at).min(self.longest))
                .rev()
                .find_map(|l| {
                    let piece = &body[at..at + l];
                    let key = if mark {
                        [cont, piece].concat()
                    } else {
                        piece.to_vec()
                    };
                    (key != text)
                        .then(|| self.by_text.get(&key))
                        .flatten()
                        .map(|&id| (l, id as usize))
                })?;
            out.push(id);
            at += len;
        }
        (!out.is_empty()).then_some(out)
    }
}

/// The held-out runs of one donor init: its pursuits' inputs, the split, the base's rows and
/// subword-mean's pieces.
pub(crate) struct HeldOut<'a> {
    pub pursuits: &'a Pursuits<'a>,
    pub split: Split,
    pub base: BaseRows<'a>,
    pub pieces: Pieces,
    pub seed: u64,
}

impl HeldOut<'_> {
    /// The held-out tokens' base ids.
    fn base_ids(&self) -> Vec<usize> {
        let shared = self.pursuits.shared;
        self.split
            .held
            .iter()
            .map(|&i| shared[i].0 as usize)
            .collect()
    }

    /// The held-out tokens as if new: their donor rows in matrix `m` as combinations of the
    /// other shared tokens' donor rows, with at most k atoms (atoms: base ids).
    fn combinations(&self, m: &Matrix, k: usize) -> Result<Vec<Combination>> {
        let p = self.pursuits;
        let donor_ids = |ix: &[usize]| -> Vec<u32> { ix.iter().map(|&i| p.shared[i].1).collect() };
        let (rest, held) = (donor_ids(&self.split.rest), donor_ids(&self.split.held));
        let dict = rows_f32(p.ckpt, &m.0, &rest, p.what)?;
        let ys = rows_f32(p.ckpt, &m.0, &held, p.what)?;
        let dr = Rows {
            data: &dict,
            rows: rest.len(),
            cols: m.3,
        };
        let yr = Rows {
            data: &ys,
            rows: held.len(),
            cols: m.3,
        };
        let mut got = p.solve(dr, yr, k.min(rest.len()))?;
        for c in &mut got {
            c.atoms
                .iter_mut()
                .for_each(|a| *a = p.shared[self.split.rest[*a]].0 as usize);
        }
        Ok(got)
    }

    /// The solver's figures for donor matrix `m` with k, against base matrix `bm`.
    fn rebuilt(&self, m: &Matrix, bm: &BaseMatrix, k: usize) -> Result<Option<Figures>> {
        let parts: Vec<Option<Vec<(usize, f64)>>> = self
            .combinations(m, k)?
            .into_iter()
            .map(|c| Some(c.atoms.into_iter().zip(c.coefs).collect()))
            .collect();
        Ok(figures(&bm.cosines(&self.base_ids(), &parts)?))
    }

    /// Subword-mean's figures against base matrix `bm`.
    fn baseline(&self, bm: &BaseMatrix) -> Result<Option<Figures>> {
        let ids = self.base_ids();
        let parts: Vec<_> = ids.iter().map(|&b| self.pieces.parts(b)).collect();
        Ok(figures(&bm.cosines(&ids, &parts)?))
    }

    /// The base's matrix for a donor pursuit: the head for the head's, else the embedding.
    fn base_matrix(&self, m: &Matrix) -> Result<Option<BaseMatrix<'_>>> {
        let role = if m.1 == Role::Head {
            Role::Head
        } else {
            Role::Embedding
        };
        BaseMatrix::open(self.base, role)
    }

    /// Why there is no report, or None when there can be one.
    fn unmeasurable(&self, mats: &[Matrix]) -> Result<Option<String>> {
        if self.split.held.is_empty() {
            return Ok(Some(format!(
                "{} shared token(s): none can be held out, so there is no held-out report",
                self.split.rest.len()
            )));
        }
        Ok(self
            .base_matrix(&mats[0])?
            .is_none()
            .then(|| "the base has no embedding matrix of 2 dimensions to compare held-out rows with: no held-out report".to_string()))
    }

    /// `--omp-k auto`: each of [`AUTO_KS`] (clipped to `limit`, each once) on the held-out
    /// tokens of the donor's embedding; the best median cosine wins, a tie the smaller k. None
    /// when nothing can be measured (`notes` says why).
    pub fn auto_k(
        &self,
        mats: &[Matrix],
        limit: usize,
        notes: &mut Vec<String>,
    ) -> Result<Option<(AutoK, Figures)>> {
        if let Some(why) = self.unmeasurable(mats)? {
            notes.push(why);
            return Ok(None);
        }
        let Some(bm) = self.base_matrix(&mats[0])? else {
            return Ok(None);
        };
        let mut ks: Vec<usize> = AUTO_KS.iter().map(|&k| k.min(limit).max(1)).collect();
        ks.dedup();
        let mut tried: Vec<(usize, Figures)> = Vec::new();
        for k in ks {
            if let Some(f) = self.rebuilt(&mats[0], &bm, k)? {
                tried.push((k, f));
            }
        }
        let best = tried
            .iter()
            .max_by(|a, b| a.1.median.total_cmp(&b.1.median).then(b.0.cmp(&a.0)))
            .cloned();
        Ok(best.map(|(chosen, f)| {
            let tried = tried
                .iter()
                .map(|(k, f)| KScore {
                    k: *k,
                    median: f.median,
                    p5: f.p5,
                })
                .collect();
            (AutoK { chosen, tried }, f)
        }))
    }

    /// The held-out report at k for every donor matrix; `known` the embedding's figures when
    /// `--omp-k auto` measured them already. None when nothing can be measured (`notes` says why).
    pub fn report(
        &self,
        mats: &[Matrix],
        k: usize,
        (known, auto_k): (Option<Figures>, Option<AutoK>),
        notes: &mut Vec<String>,
    ) -> Result<Option<Quality>> {
        if let Some(why) = self.unmeasurable(mats)? {
            // `--omp-k auto` may have said it already.
            if !notes.contains(&why) {
                notes.push(why);
            }
            return Ok(None);
        }
        let mut known = known;
        let mut matrices = Vec::new();
        for m in mats {
            let Some(bm) = self.base_matrix(m)? else {
                continue;
            };
            let rebuilt = match known.take() {
                Some(f) => Some(f),
                None => self.rebuilt(m, &bm, k)?,
            };
            let Some(rebuilt) = rebuilt else { continue };
            matrices.push(MatrixQuality {
                used_for: if m.1 == Role::Head {
                    "head"
                } else {
                    "embedding"
                }
                .into(),
                donor_tensor: m.0.clone(),
                base_tensor: bm.name.clone(),
                rebuilt,
                subword_mean: self.baseline(&bm)?,
            });
        }
        Ok(Some(Quality {
            seed: self.seed,
            held_out: self.split.held.len(),
            rebuilt_from: self.split.rest.len(),
            k,
            matrices,
            auto_k,
        }))
    }
}

/// What a token's text is, for the transplant's known risk.
#[derive(Debug, PartialEq, Eq)]
enum Risk {
    /// All ASCII digits after the form's space or `##` mark.
    Number,
    /// `<0xNN>`, or one symbol of a byte-level vocabulary (that is not a digit).
    Byte,
}

/// A token's [`Risk`], None for the rest; `f` its tokenizer's form.
fn risk(f: surface::Form, wordpiece: bool, tok: &str) -> Option<Risk> {
    let text = surface::surface(f, tok);
    let mut t: &[u8] = &text;
    if wordpiece {
        t = t.strip_prefix(b"##").unwrap_or(t);
    }
    let t = t.strip_prefix(b" ").unwrap_or(t);
    if !t.is_empty() && t.iter().all(u8::is_ascii_digit) {
        return Some(Risk::Number);
    }
    let byte_piece = tok.len() == 6
        && tok.starts_with("<0x")
        && tok.ends_with('>')
        && u8::from_str_radix(&tok[3..5], 16).is_ok();
    (byte_piece || (f == surface::Form::ByteLevel && tok.chars().count() == 1))
        .then_some(Risk::Byte)
}

/// Targets rebuilt from the donor that are numbers or bytes ([`Risk`]): how many of each, and
/// the first ten of them.
pub(crate) fn numbers_and_bytes(
    new: &Base,
    found: &[(usize, u32)],
    targets: &[u64],
) -> (usize, usize, Vec<String>) {
    let (names, f) = (by_id(new), surface::form(new));
    let wordpiece = new.form() == Form::WordPiece;
    let (mut numbers, mut bytes, mut first) = (0, 0, Vec::new());
    for &(j, _) in found {
        let Some(tok) = u32::try_from(targets[j]).ok().and_then(|i| names.get(&i)) else {
            continue;
        };
        match risk(f, wordpiece, tok) {
            Some(Risk::Number) => numbers += 1,
            Some(Risk::Byte) => bytes += 1,
            None => continue,
        }
        if first.len() < 10 {
            first.push(tok.clone());
        }
    }
    (numbers, bytes, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_bytes_are_told_in_every_form() {
        use surface::Form::{ByteLevel, Plain};
        assert_eq!(risk(ByteLevel, false, "\u{120}2024"), Some(Risk::Number));
        assert_eq!(risk(ByteLevel, false, "7"), Some(Risk::Number));
        assert_eq!(
            risk(ByteLevel, false, "\u{10a}"),
            Some(Risk::Byte),
            "Ċ: a newline byte"
        );
        assert_eq!(risk(ByteLevel, false, "\u{120}the"), None);
        assert_eq!(risk(Plain, false, "\u{2581}19"), Some(Risk::Number));
        assert_eq!(risk(Plain, false, "<0xE1>"), Some(Risk::Byte));
        assert_eq!(
            risk(Plain, false, "<0x33>"),
            Some(Risk::Number),
            "the byte of '3'"
        );
        assert_eq!(
            risk(Plain, false, "a"),
            None,
            "a character is not a byte token"
        );
        assert_eq!(risk(Plain, true, "##00"), Some(Risk::Number));
        assert_eq!(risk(Plain, false, "1st"), None);
    }

    fn pieces(vocab: &[&str], wordpiece: bool) -> Pieces {
        let by_text: HashMap<Vec<u8>, u32> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_bytes().to_vec(), i as u32))
            .collect();
        Pieces {
            longest: vocab.iter().map(|t| t.len()).max().unwrap_or(0),
            text_of: by_text.iter().map(|(t, &i)| (i, t.clone())).collect(),
            by_text,
            wordpiece,
        }
    }

    #[test]
    fn a_held_out_token_splits_into_the_longest_other_tokens_never_itself() {
        let p = pieces(
            &["h", "e", "l", "o", "hell", "hello", " he", " hello"],
            false,
        );
        assert_eq!(p.split(b"hello"), Some(vec![4, 3]), "hell + o");
        assert_eq!(
            p.split(b" hello"),
            Some(vec![6, 2, 2, 3]),
            "' he' + l + l + o"
        );
        assert_eq!(
            p.split(b"h"),
            None,
            "a single character has no other pieces"
        );
        assert_eq!(p.split(b"hex"), None, "no token begins at 'x'");
        let w = pieces(
            &["un", "##a", "##ble", "##able", "unable", "a", "##un"],
            true,
        );
        assert_eq!(w.split(b"unable"), Some(vec![0, 3]), "un + ##able");
        assert_eq!(w.split(b"##able"), Some(vec![1, 2]), "##a + ##ble");
        let parts = p.parts(5).unwrap();
        assert_eq!(
            parts,
            vec![(4, 0.5), (3, 0.5)],
            "each piece weighs the same"
        );
    }

    #[test]
    fn percentiles_interpolate_as_numpy_does() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert!((percentile(&v, 0.05) - 1.15).abs() < 1e-12);
        assert_eq!(percentile(&[0.25], 0.05), 0.25);
        let f = figures(&[Some(0.5), None, Some(0.1), Some(0.9)]).unwrap();
        assert_eq!((f.tokens, f.median), (3, 0.5));
        assert!(figures(&[None]).is_none());
    }

    #[test]
    fn held_out_is_five_percent_at_least_one_at_most_500_never_all() {
        let shared = |n: u32| -> Vec<(u32, u32)> { (0..n).map(|i| (i, i)).collect() };
        let count = |n: u32| held_out(&shared(n), 0).held.len();
        assert_eq!(
            [count(1), count(2), count(9), count(10), count(300)],
            [0, 1, 1, 1, 15]
        );
        assert_eq!(count(100_000), MAX_HELD_OUT);
        assert_ne!(
            held_out(&shared(300), 0).held,
            held_out(&shared(300), 1).held
        );
    }
}
