//! The merged tokenizer built in memory and checked before anything is written: BASE's
//! tokenizer.json with the planned edits (or BASE's model with the pieces appended), verified,
//! base text and the `--check-text` files encoded before and after, fertility for `--train`.

use super::assign::{Assigned, Place};
use super::bpe::{chars, BpeSteps};
use super::merged::{merged_bpe, Prepared};
use super::options::Options;
use super::verify::{
    check_all, hf_shadowed, sp_ids, sp_shadowed, sp_unreachable, verify_hf, verify_sp,
};
use crate::error::{Error, Result};
use crate::tokenizer::form::{self, Form};
use crate::tokenizer::hf::{self, Edit, HfTokenizer};
use crate::tokenizer::sample::{Coverage, TextCheck};
use crate::tokenizer::sentencepiece::{self as sp, PieceType, SpModel};
use crate::tokenizer::train;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// BASE in the `tokenizers` crate: a tokenizer.json base starts loading on the other core as
/// soon as the merge starts (base text is encoded with it), and is taken when first needed.
pub(super) struct HfBase {
    path: PathBuf,
    loading: Option<JoinHandle<std::result::Result<tokenizers::Tokenizer, String>>>,
    loaded: Option<tokenizers::Tokenizer>,
}

impl HfBase {
    /// Start loading `base_path` when it is a JSON file.
    pub fn start(base_path: &Path, is_json: bool) -> Self {
        let loading = is_json.then(|| {
            let p = base_path.to_path_buf();
            std::thread::spawn(move || crate::tokenizer::library::load_file(&p))
        });
        HfBase {
            path: base_path.to_path_buf(),
            loading,
            loaded: None,
        }
    }

    /// Wait for (or do) the load now.
    pub fn load(&mut self) -> Result<()> {
        if self.loaded.is_none() {
            self.loaded = Some(self.take()?);
        }
        Ok(())
    }

    /// The tokenizer, when [`HfBase::load`] has been called.
    pub fn loaded(&self) -> Option<&tokenizers::Tokenizer> {
        self.loaded.as_ref()
    }

    /// The tokenizer: loaded before, or waited for (loaded here when no thread was started).
    fn take(&mut self) -> Result<tokenizers::Tokenizer> {
        self.take_raw()
            .map_err(|e| Error::format(&self.path, format!("does not load in tokenizers: {e}")))
    }

    fn take_raw(&mut self) -> std::result::Result<tokenizers::Tokenizer, String> {
        if let Some(t) = self.loaded.take() {
            return Ok(t);
        }
        match self.loading.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err("the loading thread panicked".into())),
            None => crate::tokenizer::library::load_file(&self.path),
        }
    }

    /// The check [`hf::parse_unloaded`] leaves to the caller, with this load: BASE's added
    /// tokens outside model.vocab have the ids the file gives them. Nothing to do (and no wait)
    /// for a base without such tokens.
    pub fn check_base(&mut self, t: &HfTokenizer) -> Result<()> {
        if t.added_only().is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let bad = |why: String| Error::format(&path, format!("not a usable base tokenizer: {why}"));
        let loaded = self
            .take_raw()
            .map_err(|e| bad(format!("does not load in tokenizers: {e}")))?;
        t.check_loaded(&loaded).map_err(bad)?;
        self.loaded = Some(loaded);
        Ok(())
    }
}

/// The merged tokenizer's bytes and what checking them found.
pub(super) struct Built {
    pub bytes: Vec<u8>,
    /// New tokens that do not encode alone to their id.
    pub unreachable: Vec<String>,
    /// What could not be checked here.
    pub not_checked: Vec<String>,
    /// BASE's added tokens outside model.vocab, written into it at their ids.
    pub pinned: Vec<String>,
    /// Tokens per word of the `--train` corpus, before and after.
    pub fertility: Option<(f64, f64)>,
    pub base_sample: TextCheck,
    pub check_text: Vec<TextCheck>,
    /// BASE's pieces a new piece now beats on their own text: (base piece, new piece).
    pub shadowed: Vec<(String, String)>,
}

/// What building needs besides BASE: the new tokens, the BPE step, the score for pieces nothing
/// scores, the `--train` corpus's words and which lines the new tokens cover.
pub(super) struct Parts<'a> {
    pub out: &'a Path,
    pub added: &'a [Assigned],
    pub bpe: &'a BpeSteps,
    pub default_score: f64,
    pub corpus: &'a train::Words,
    pub cover: &'a Coverage,
    pub opts: &'a Options,
}

/// BASE's tokenizer.json with the new tokens, BASE's added tokens pinned, and the merges: in
/// `tokenizers` and verified; base text encoded with BASE and with the result.
pub(super) fn build_hf(
    t: &HfTokenizer,
    hf_base: &mut HfBase,
    prepared: impl FnOnce() -> Option<Prepared>,
    p: &Parts,
) -> Result<Built> {
    let (edits, pinned) = hf_edits(t, p);
    let extra = hf::extra_of(t, &edits).map_err(|e| Error::format(p.out, e))?;
    // The text is written on one core while the merged model is built on the other.
    let (text, built) = std::thread::scope(|s| {
        let writing = s.spawn(|| hf::write(t, &extra));
        let built = merged_bpe(t, prepared(), &extra);
        let text = writing
            .join()
            .unwrap_or_else(|_| Err("the writing thread panicked".into()));
        (text, built)
    });
    let text = text.map_err(|e| Error::format(p.out, e))?;
    let failed = |problem| Error::Verify {
        path: p.out.to_path_buf(),
        problem,
    };
    let mut unreachable = Vec::new();
    let form = base_form(t);
    let merged = verify_hf(
        t,
        &text,
        built.map_err(failed)?,
        p.added,
        form,
        &mut unreachable,
    )
    .map_err(failed)?;
    let before = hf_base.take()?;
    let mut fertility = None;
    if !p.opts.train.is_empty() {
        use tokenizers::Model;
        let n = |t: &tokenizers::Tokenizer, w: &str| {
            t.get_model().tokenize(w).map_or(chars(w), |v| v.len())
        };
        fertility = Some((
            train::fertility(p.corpus, |w| n(&before, w)),
            train::fertility(p.corpus, |w| n(&merged, w)),
        ));
    }
    let enc = |t: &tokenizers::Tokenizer, line: &str| {
        t.encode(line, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    };
    let (base_sample, check_text) = check_all(
        &hf_base.path,
        &p.opts.check_text,
        p.cover,
        &|l| enc(&before, l),
        &|l| enc(&merged, l),
    )?;
    let shadowed = hf_shadowed(t, &before, &merged, p.added);
    crate::release::later((before, merged));
    Ok(Built {
        bytes: text.into_bytes(),
        unreachable,
        not_checked: Vec::new(),
        pinned,
        fertility,
        base_sample,
        check_text,
        shadowed,
    })
}

fn base_form(t: &HfTokenizer) -> Form {
    Form::of_tokenizer_json(&t.json)
}

/// The edits to BASE's tokenizer.json: BASE's added tokens above its vocab pinned into it (when
/// anything is added), every new token into the vocab (and the added tokens where it is matched
/// whole), the merges appended and synthesized. Also the pinned tokens.
fn hf_edits<'a>(t: &'a HfTokenizer, p: &Parts<'a>) -> (Vec<Edit<'a>>, Vec<String>) {
    let mut edits = Vec::new();
    let mut pinned = Vec::new();
    if !p.added.is_empty() {
        let mut above = t.added_only();
        above.sort_by_key(|a| a.id);
        for a in above {
            // In a Unigram, scored below every piece: added tokens are matched before
            // the model sees text, and the piece never wins a segmentation.
            edits.push(Edit::Vocab {
                content: &a.content,
                id: a.id,
                score: p.default_score,
            });
            pinned.push(a.content.clone());
        }
    }
    for a in p.added {
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
        p.bpe
            .appended
            .iter()
            .chain(&p.bpe.synthesized)
            .map(|(a, b)| Edit::Merge { a, b }),
    );
    (edits, pinned)
}

/// BASE's model with the new pieces appended, verified by re-parsing; reachability and base text
/// by SentencePiece's own algorithm over the pieces.
pub(super) fn build_sp(m: &SpModel, base_path: &Path, p: &Parts) -> Result<Built> {
    let new: Vec<(String, f32, PieceType)> = p
        .added
        .iter()
        .map(|a| {
            (
                a.token.clone(),
                a.score.unwrap_or(p.default_score) as f32,
                a.piece_type.unwrap_or(PieceType::Normal),
            )
        })
        .collect();
    let bytes = sp::append(m, &new);
    verify_sp(m, &bytes, &new).map_err(|e| Error::Verify {
        path: p.out.to_path_buf(),
        problem: e,
    })?;
    let before: Vec<(String, f32, PieceType)> = m
        .pieces
        .iter()
        .map(|p| (p.piece.clone(), p.score, p.kind))
        .collect();
    let all: Vec<(String, f32, PieceType)> = before.iter().chain(&new).cloned().collect();
    let bpe = m.model_type == Some(2);
    let mut fertility = None;
    if !p.opts.train.is_empty() {
        // As the model encodes each word: byte pieces (or one unknown) where no piece
        // has a character. One index per model, not per word.
        let (enc_before, enc_after) = (sp_ids(&before, bpe), sp_ids(&all, bpe));
        let n = |enc: &dyn Fn(&str) -> std::result::Result<Vec<u32>, String>, w: &str| {
            enc(w.trim_start_matches(form::WORD_MARK)).map_or(chars(w), |v| v.len())
        };
        fertility = Some((
            train::fertility(p.corpus, |w| n(&enc_before, w)),
            train::fertility(p.corpus, |w| n(&enc_after, w)),
        ));
    }
    let (unreachable, not_checked) = sp_unreachable(m, p.added, &all);
    let shadowed = sp_shadowed(m, &new, &all);
    let (base_sample, check_text) = check_all(
        base_path,
        &p.opts.check_text,
        p.cover,
        &sp_ids(&before, bpe),
        &sp_ids(&all, bpe),
    )?;
    Ok(Built {
        bytes,
        unreachable,
        not_checked,
        pinned: Vec::new(),
        fertility,
        base_sample,
        check_text,
        shadowed,
    })
}
