//! Donor initialisation (`--init omp`): rows for a list of ids of a tokenizer (the *targets*),
//! from a donor model whose tokenizer has their tokens. Shared tokens are matched by text
//! (tokenizer::surface), never by id; for each target, the solver (orthogonal matching pursuit,
//! init::omp) writes the donor's row of it as a combination of the donor's rows of shared
//! tokens, and the base's row is the same combination of the base's rows of those tokens. The
//! donor's head, when it is its own, gets its own pursuit (the base's head and bias follow it).
//! Targets the donor lacks get subword-mean over the base's pieces (the mean where that fails).
//! Reads only: the combinations go into an [`Init::Donor`], row j of it for `targets[j]`.
//!
//! The request names no job's options: extend-embeddings asks for its merged tokenizer's ids
//! `old_rows..new_rows`, a transplant for the new tokenizer's ids the base lacks. Each job finds
//! the base's and the new tokenizer its own way (extend: `--tokenizer`, `--base-tokenizer` or
//! the folder's own), so those come resolved. The donor's tokenizer is found here (the one
//! given, else the donor folder's own): it belongs to `--donor`, the same for every job, and so
//! do the refusals that name `--donor`, `--donor-tokenizer` and `--omp-k`.

mod pursuits;
mod quality;
mod read;
mod report;
pub use pursuits::Solver;
pub use quality::{
    held_out, AutoK, BaseRows, Figures, KScore, MatrixQuality, Quality, Split, AUTO_KS, K,
    MAX_HELD_OUT,
};
pub use report::{render, DonorReport, PursuitReport, Sample};

use crate::error::{Error, Result};
use crate::formats::{self, OpenOptions};
use crate::rows::device::{self, Device};
use crate::rows::init::omp::Combination;
use crate::rows::init::Init;
use crate::rows::subword::subword_lists;
use crate::tokenizer::base::{load_tokenizer, Base};
use crate::tokenizer::surface::{by_id, by_surface, form, surface};
use pursuits::Pursuits;
use quality::{numbers_and_bytes, HeldOut, Pieces};
use read::{donor_matrices, donor_tokenizer, Matrix};
use report::samples;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a donor init is asked.
pub struct DonorRequest<'a> {
    /// The donor: a model file or folder (`--donor`).
    pub donor: &'a Path,
    /// Its tokenizer (`--donor-tokenizer`); None: the donor folder's own.
    pub donor_tokenizer: Option<&'a Path>,
    /// At most this many atoms per target, or the best of [`AUTO_KS`] on the held-out
    /// tokens (`--omp-k`).
    pub k: K,
    /// Which shared tokens are held out for the quality report ([`held_out`]).
    pub seed: u64,
    /// The base's matrices: the held-out rows are compared with theirs.
    pub base: BaseRows<'a>,
    /// The tokenizer of the model being changed: the atoms are its ids (its old rows).
    pub base_tokenizer: &'a Path,
    /// The tokenizer whose ids `targets` are.
    pub new_tokenizer: &'a Path,
    /// The base's and the new tokenizer as the job loaded them from those paths (None: loaded
    /// here): a GPT-2-sized tokenizer holds ~25 MB, so the pursuit should not hold copies.
    pub loaded: Option<(&'a Base, &'a Base)>,
    /// The base's rows: atoms (and subword pieces) are ids below it.
    pub old_rows: u64,
    /// Ids of `new_tokenizer` to make rows for, in output order.
    pub targets: &'a [u64],
    /// The base has a head of its own: the donor's head (when it has one) gets its own pursuit.
    pub untied_head: bool,
    pub open: &'a OpenOptions,
    pub device: device::Request,
    pub solver: Solver,
}

/// `--omp-k` 0 is refused (a combination of no atoms is no init).
pub fn check_k(k: K) -> Result<()> {
    if k == K::Fixed(0) {
        return Err(Error::arg("--omp-k", "--omp-k must be at least 1"));
    }
    Ok(())
}

/// The donor init: a combination for every target (row j for `targets[j]`), and its report
/// (with the held-out quality report). `inputs` gets every file it reads (outputs must not
/// overwrite them); `fallbacks` the targets that get the column mean.
pub fn plan(
    req: &DonorRequest,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, DonorReport)> {
    check_k(req.k)?;
    let donor_p = donor_tokenizer(req.donor, req.donor_tokenizer)?;
    let ckpt = formats::open(req.donor, req.open)?
        .into_tensors_for("--donor", "a model file or folder as the donor")?;
    inputs.extend(ckpt.input_paths().iter().map(|p| p.to_path_buf()));
    inputs.extend([req.base_tokenizer.to_path_buf(), donor_p.clone()]);
    let owned;
    let (base, new) = match req.loaded {
        Some(both) => both,
        None => {
            owned = (
                load_tokenizer(req.base_tokenizer)?,
                load_tokenizer(req.new_tokenizer)?,
            );
            (&owned.0, &owned.1)
        }
    };
    // A transplant onto the donor's own tokenizer (NEW is the donor's file): one parse.
    let donor_owned;
    let donor = if same_file(&donor_p, req.new_tokenizer) {
        new
    } else {
        donor_owned = load_tokenizer(&donor_p)?;
        &donor_owned
    };
    let mut mats = donor_matrices(&ckpt)?;
    if !req.untied_head {
        mats.truncate(1);
    }
    let donor_rows = mats[0].2 as u64;
    if donor.size() > donor_rows {
        return Err(Error::format(
            &donor_p,
            format!(
                "the donor's tokenizer has {} ids but its {} has {donor_rows} rows: tokenizer and weights disagree, so a donor id could name a row that is not there; give the donor's own tokenizer (--donor-tokenizer), or check the donor with check-vocab",
                donor.size(),
                mats[0].0
            ),
        ));
    }
    let donor_ids = by_surface(donor);
    let paths = (req.base_tokenizer, donor_p.as_path());
    let shared = shared_tokens(base, &donor_ids, req.old_rows, donor_rows, paths)?;
    let (found, missing) = new_tokens(new, &donor_ids, req.targets, donor_rows);
    let device = Device::select(req.device, (shared.len() * mats[0].3 * 4) as u64)?;
    let donor_names = by_id(donor);
    let what = |id: u32| {
        donor_names
            .get(&id)
            .map_or(format!("id {id}"), |t| format!("'{t}'"))
    };
    let pursuits = Pursuits {
        ckpt: &ckpt,
        shared: &shared,
        found: &found,
        targets: req.targets.len(),
        solver: req.solver,
        device: &device,
        what: &what,
    };
    let held = HeldOut {
        pursuits: &pursuits,
        split: held_out(&shared, req.seed),
        base: req.base,
        pieces: Pieces::new(base, req.old_rows),
        seed: req.seed,
    };
    let mut notes = Vec::new();
    let (k, quality) = choose_k(req.k, &held, &mats, &mut notes)?;
    let (mut combos, pursuits) = pursuits.run(&mats, k)?;
    fill_missing(req, &missing, &mut combos, fallbacks, &mut notes);
    let embedding = Arc::new(combos.remove(0));
    let head = combos.pop().map_or_else(|| embedding.clone(), Arc::new);
    let (number_tokens, byte_tokens, risky) = numbers_and_bytes(new, &found, req.targets);
    let report = DonorReport {
        donor: req.donor.to_path_buf(),
        donor_tokenizer: donor_p,
        base_tokenizer: req.base_tokenizer.to_path_buf(),
        k,
        shared_tokens: shared.len(),
        from_donor: found.len(),
        pursuits,
        missing: missing.len(),
        missing_first: missing.iter().take(10).map(|m| m.1.clone()).collect(),
        device: device.name.clone(),
        notes,
        quality,
        number_tokens,
        byte_tokens,
        warnings: risky_warning(number_tokens, byte_tokens, &risky),
        sample: samples(&found, &embedding, (new, base), req.targets),
    };
    Ok((Init::Donor { embedding, head }, report))
}

/// Whether two paths name one file (both resolve to the same place).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// k for the new tokens (`--omp-k N` clipped, or `auto`'s choice) and the held-out report at
/// that k.
fn choose_k(
    k: K,
    held: &HeldOut,
    mats: &[Matrix],
    notes: &mut Vec<String>,
) -> Result<(usize, Option<Quality>)> {
    let shared = held.pursuits.shared.len();
    let (k, known) = match k {
        K::Fixed(k) => (clip_k(k, mats, shared, notes), None),
        K::Auto => {
            let width = mats.iter().map(|m| m.3).min().unwrap_or(1);
            match held.auto_k(mats, width.min(held.split.rest.len()), notes)? {
                Some((auto, f)) => (clip_k(auto.chosen, mats, shared, notes), Some((f, auto))),
                None => {
                    notes.push("--omp-k auto had nothing to measure: k = 64".into());
                    (clip_k(64, mats, shared, notes), None)
                }
            }
        }
    };
    let (known, auto) = known.map_or((None, None), |(f, a)| (Some(f), Some(a)));
    let quality = held.report(mats, k, (known, auto), notes)?;
    Ok((k, quality))
}

/// The warning when number or byte tokens are rebuilt from the donor.
fn risky_warning(numbers: usize, bytes: usize, first: &[String]) -> Vec<String> {
    if numbers + bytes == 0 {
        return Vec::new();
    }
    vec![format!(
        "{numbers} number token(s) and {bytes} byte token(s) are rebuilt from the donor ({}{}): how numbers are tokenized is the main risk of a tokenizer transplant (the OMP-transplant paper); check these rows, or train them",
        first.join(" "),
        if numbers + bytes > first.len() { " …" } else { "" }
    )]
}

/// Shared tokens: base tokens (old rows) whose text the donor has, as (base id, donor id), in
/// base id order; none is refused.
fn shared_tokens(
    base: &Base,
    donor_ids: &HashMap<Vec<u8>, u32>,
    old_rows: u64,
    donor_rows: u64,
    (base_p, donor_p): (&Path, &Path),
) -> Result<Vec<(u32, u32)>> {
    let mut shared: Vec<(u32, u32)> = by_surface(base)
        .into_iter()
        .filter(|(_, b)| u64::from(*b) < old_rows)
        .filter_map(|(s, b)| donor_ids.get(&s).map(|&dn| (b, dn)))
        .filter(|&(_, dn)| u64::from(dn) < donor_rows)
        .collect();
    shared.sort_unstable();
    if shared.is_empty() {
        return Err(Error::format(
            donor_p,
            format!(
                "shares no token with the base tokenizer {}: is it the right --donor?",
                base_p.display()
            ),
        ));
    }
    Ok(shared)
}

/// Targets the donor has: (position in targets, donor id); and those it lacks, by token.
type NewTokens = (Vec<(usize, u32)>, Vec<(usize, String)>);

/// Split the targets by whether the donor has their text.
fn new_tokens(
    new: &Base,
    donor_ids: &HashMap<Vec<u8>, u32>,
    targets: &[u64],
    donor_rows: u64,
) -> NewTokens {
    let names = by_id(new);
    let f = form(new);
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for (j, &id) in targets.iter().enumerate() {
        let tok = u32::try_from(id).ok().and_then(|i| names.get(&i));
        match tok.and_then(|t| donor_ids.get(&surface(f, t))) {
            Some(&dn) if u64::from(dn) < donor_rows => found.push((j, dn)),
            _ => missing.push((j, tok.cloned().unwrap_or_else(|| format!("<id {id}>")))),
        }
    }
    (found, missing)
}

/// k clipped to the donor's width and the shared tokens, saying so.
fn clip_k(k: usize, mats: &[Matrix], shared: usize, notes: &mut Vec<String>) -> usize {
    let width = mats.iter().map(|m| m.3).min().unwrap_or(k);
    let mut k2 = k;
    if k2 > width {
        notes.push(format!(
            "--omp-k {k} is more than the donor's width {width}: clipped to {width}"
        ));
        k2 = width;
    }
    if k2 > shared {
        notes.push(format!(
            "--omp-k {k2} is more than the {shared} shared tokens: clipped to {shared}"
        ));
        k2 = shared;
    }
    if k2 >= width {
        notes.push(format!(
            "k = {k2} reaches the donor's width {width}: any {width} independent shared tokens rebuild every donor row exactly (relative residual 0), so the residual says nothing and the atoms are not a few-token explanation of the new token; a k well below the width (the default 64, or 8–32) is what carries information"
        ));
    }
    k2
}

/// Targets the donor lacks: subword-mean over the base's pieces (the mean where that fails).
fn fill_missing(
    req: &DonorRequest,
    missing: &[(usize, String)],
    combos: &mut [Vec<Option<Combination>>],
    fallbacks: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if missing.is_empty() {
        return;
    }
    // Only the missing targets are split: each token's pieces depend on it alone.
    let ids: Vec<u64> = missing.iter().map(|m| req.targets[m.0]).collect();
    let (new, base) = (req.new_tokenizer, req.base_tokenizer);
    let lists = match subword_lists(new, base, req.old_rows, &ids, &mut Vec::new()) {
        Ok(l) => l,
        Err(e) => {
            notes.push(format!("subword-mean for the tokens the donor lacks is not possible ({e}): they get the mean"));
            vec![None; ids.len()]
        }
    };
    for ((j, tok), list) in missing.iter().zip(&lists) {
        let c = list.as_ref().map(|ids| Combination {
            atoms: ids.clone(),
            coefs: vec![1.0 / ids.len() as f64; ids.len()],
        });
        if c.is_none() {
            fallbacks.push(tok.clone());
        }
        for rows in combos.iter_mut() {
            rows[*j] = c.clone();
        }
    }
}
