//! Donor initialisation (`--init omp`): the new tokens' rows from a donor model whose tokenizer
//! has them. Shared tokens are matched by text (tokenizer::surface), never by id; for each new
//! token, orthogonal matching pursuit (init::omp) writes the donor's row of it as a combination
//! of the donor's rows of shared tokens, and the base's new row is the same combination of the
//! base's rows of those tokens. The donor's head, when it is its own, gets its own pursuit (the
//! base's head and bias follow it). Reads only: the combinations go into an [`Init::Donor`].

pub use super::options::Donor;
use super::options::{Options, Target};
use crate::dtype::decode_row_f32;
use crate::error::{Error, Result};
use crate::formats::vocabulary::select;
use crate::formats::{self, Tensors};
use crate::rows::device::Device;
use crate::rows::init::omp::{Combination, Rows};
use crate::rows::init::Init;
use crate::rows::subword::subword_lists;
use crate::tokenizer::base::{load_tokenizer, Base};
use crate::tokenizer::surface::{by_id, by_surface, form, surface};
use crate::vocab::{Role, VocabTensor, Vocabulary};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One pursuit: the donor matrix it read and how well it did.
#[derive(Debug, Clone, Serialize)]
pub struct PursuitReport {
    pub donor_tensor: String,
    /// `embedding`, or `head` (the base's head and its bias).
    pub used_for: String,
    pub mean_atoms: f64,
    /// Mean ‖donor row − its combination‖ / ‖donor row‖.
    pub mean_relative_residual: f64,
}

/// A new token's combination, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub token: String,
    pub id: u64,
    /// (base id, token, coefficient), embedding pursuit.
    pub atoms: Vec<(usize, String, f64)>,
}

/// What the donor init did.
#[derive(Debug, Clone, Serialize)]
pub struct DonorReport {
    pub donor: PathBuf,
    pub donor_tokenizer: PathBuf,
    pub base_tokenizer: PathBuf,
    pub k: usize,
    pub shared_tokens: usize,
    pub from_donor: usize,
    pub pursuits: Vec<PursuitReport>,
    /// New tokens the donor's vocabulary lacks: subword-mean instead.
    pub missing: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_first: Vec<String>,
    pub device: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The first few new tokens' atoms and coefficients.
    pub sample: Vec<Sample>,
}

/// A folder's tokenizer: tokenizer.json, else tokenizer.model, else its one `*.model`.
pub fn folder_tokenizer(dir: &Path) -> Option<PathBuf> {
    for n in ["tokenizer.json", "tokenizer.model"] {
        if dir.join(n).is_file() {
            return Some(dir.join(n));
        }
    }
    let mut models: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "model") && p.is_file())
        .collect();
    models.sort();
    (models.len() == 1).then(|| models.remove(0))
}

/// The three tokenizers: base, merged, donor (paths), each checked to be there.
fn tokenizer_paths(input: &Path, opts: &Options, d: &Donor) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let Target::Tokenizer(merged) = &opts.target else {
        return Err(Error::arg(
            "--tokenizer",
            "--init omp needs --tokenizer MERGED (the new tokens are its ids past the base's)",
        ));
    };
    let base = match &opts.base_tokenizer {
        Some(b) => b.clone(),
        None => input
            .is_dir()
            .then(|| folder_tokenizer(input))
            .flatten()
            .ok_or_else(|| {
                Error::arg(
                    "--base-tokenizer",
                    format!(
                        "{}: --init omp needs the base's tokenizer: give --base-tokenizer",
                        input.display()
                    ),
                )
            })?,
    };
    let donor = match &d.tokenizer {
        Some(t) => t.clone(),
        None if d.path.is_dir() => folder_tokenizer(&d.path).ok_or_else(|| {
            Error::format(
                &d.path,
                "the donor folder has no tokenizer.json or .model: give --donor-tokenizer",
            )
        })?,
        None => {
            return Err(Error::format(
                &d.path,
                "a donor weight file needs its tokenizer: give --donor-tokenizer",
            ))
        }
    };
    Ok((base, merged.clone(), donor))
}

/// The donor's embedding and, when it is not tied to it, its head: (name, rows, cols).
fn donor_matrices(ckpt: &Tensors) -> Result<Vec<(String, Role, usize, usize)>> {
    let sel = select(ckpt, &[])?;
    let mats: Vec<(String, Role, Vec<u64>)> = sel
        .into_iter()
        .filter(|(_, r)| *r != Role::HeadBias)
        .filter_map(|(n, r)| ckpt.tensor(&n).map(|t| (n, r, t.shape.to_vec())))
        .collect();
    let config = formats::config_beside(&ckpt.path)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let vocabulary = Vocabulary {
        rows: mats.first().map_or(0, |m| m.2[0]),
        tensors: mats
            .iter()
            .map(|(n, r, s)| VocabTensor {
                name: n.clone(),
                role: *r,
                shape: s.clone(),
            })
            .collect(),
    };
    let followers =
        crate::ties::followers(&crate::ties::find(ckpt, Some(&vocabulary), config.as_ref()));
    let mut out: Vec<(String, Role, usize, usize)> = mats
        .into_iter()
        .filter(|(n, _, s)| !followers.contains_key(n) && s.len() == 2)
        .map(|(n, r, s)| (n, r, s[0] as usize, s[1] as usize))
        .collect();
    out.sort_by_key(|m| m.1 != Role::Embedding);
    if out.first().is_none_or(|m| m.1 != Role::Embedding) {
        return Err(Error::format(
            &ckpt.path,
            "the donor has no embedding matrix: is it the right --donor?",
        ));
    }
    out.truncate(2);
    Ok(out)
}

/// Rows `ids` of a donor matrix as f32; a row that is not finite is refused.
fn rows_f32(
    ckpt: &Tensors,
    name: &str,
    ids: &[u32],
    what: &dyn Fn(u32) -> String,
) -> Result<Vec<f32>> {
    let t = ckpt
        .tensor(name)
        .ok_or_else(|| Error::format(&ckpt.path, format!("no tensor named '{name}'")))?;
    let cols = t.shape[1] as usize;
    let bytes = t.try_bytes()?;
    let w = cols * (t.dtype.bits() / 8) as usize;
    let mut out = vec![0f32; ids.len() * cols];
    for (dst, &id) in out.chunks_mut(cols).zip(ids) {
        let src = bytes
            .get(id as usize * w..(id as usize + 1) * w)
            .ok_or_else(|| {
                Error::tensor(&ckpt.path, name, format!("row {id} lies past its end"))
            })?;
        decode_row_f32(t.dtype, src, dst)
            .map_err(|e| Error::tensor(&ckpt.path, name, format!("{e:?}")))?;
        if dst.iter().any(|v| !v.is_finite()) {
            return Err(Error::tensor(
                &ckpt.path,
                name,
                format!(
                    "row {id} ({}) holds NaN or inf: fix the donor or give another --donor",
                    what(id)
                ),
            ));
        }
    }
    Ok(out)
}

/// `--donor` with its k, refusing what omp cannot do.
fn checked_donor(opts: &Options) -> Result<&Donor> {
    let d = opts.donor.as_ref().ok_or_else(|| {
        Error::arg(
            "--donor",
            "--init omp needs --donor DONOR (a model folder, or its weight file with --donor-tokenizer)",
        )
    })?;
    if d.k == 0 {
        return Err(Error::arg("--omp-k", "--omp-k must be at least 1"));
    }
    if opts.segments > 1 {
        return Err(Error::arg(
            "--segments",
            "--segments grows codebooks: --init omp names rows of one vocabulary",
        ));
    }
    Ok(d)
}

/// Shared tokens: base tokens (old rows) whose text the donor has, as (base id, donor id), in
/// base id order; none is refused.
fn shared_tokens(
    base: &Base,
    donor_ids: &std::collections::HashMap<Vec<u8>, u32>,
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

/// Per donor matrix, each new row's combination (None: the donor lacks the token).
type Combinations = Vec<Vec<Option<Combination>>>;

/// What every pursuit of one donor init shares: the donor, the shared and the found tokens.
struct Pursuits<'a> {
    ckpt: &'a Tensors,
    shared: &'a [(u32, u32)],
    /// New rows the donor has: (index from old_rows, donor id).
    found: &'a [(usize, u32)],
    /// How many new rows.
    new: usize,
    k: usize,
    device: &'a Device,
    /// A donor id as the user knows it (its token), for errors.
    what: &'a dyn Fn(u32) -> String,
}

impl Pursuits<'_> {
    /// One pursuit per donor matrix: each new row the donor has as a combination of the base's
    /// rows of shared tokens (the atoms are base ids), and the pursuit's report.
    fn run(
        &self,
        mats: &[(String, Role, usize, usize)],
    ) -> Result<(Combinations, Vec<PursuitReport>)> {
        let dn_ids: Vec<u32> = self.shared.iter().map(|s| s.1).collect();
        let tg_ids: Vec<u32> = self.found.iter().map(|f| f.1).collect();
        let (mut combos, mut pursuits) = (Vec::new(), Vec::new());
        for (name, role, _, cols) in mats {
            let dict = rows_f32(self.ckpt, name, &dn_ids, self.what)?;
            let ys = rows_f32(self.ckpt, name, &tg_ids, self.what)?;
            let dr = Rows {
                data: &dict,
                rows: dn_ids.len(),
                cols: *cols,
            };
            let yr = Rows {
                data: &ys,
                rows: tg_ids.len(),
                cols: *cols,
            };
            let got = self.device.omp(dr, yr, self.k)?;
            pursuits.push(pursuit_report(name, *role, dr, yr, &got));
            let mut rows: Vec<Option<Combination>> = vec![None; self.new];
            for ((j, _), mut c) in self.found.iter().zip(got) {
                c.atoms
                    .iter_mut()
                    .for_each(|a| *a = self.shared[*a].0 as usize);
                rows[*j] = Some(c);
            }
            combos.push(rows);
        }
        Ok((combos, pursuits))
    }
}

/// The first few new tokens' atoms and coefficients, for the report.
fn samples(
    found: &[(usize, u32)],
    embedding: &[Option<Combination>],
    merged: &Base,
    base: &Base,
    old_rows: u64,
) -> Vec<Sample> {
    let (merged_names, base_names) = (by_id(merged), by_id(base));
    found
        .iter()
        .take(5)
        .filter_map(|&(j, _)| {
            let c = embedding[j].as_ref()?;
            Some(Sample {
                token: merged_names
                    .get(&(old_rows as u32 + j as u32))
                    .cloned()
                    .unwrap_or_default(),
                id: old_rows + j as u64,
                atoms: c
                    .atoms
                    .iter()
                    .zip(&c.coefs)
                    .map(|(&a, &x)| {
                        (
                            a,
                            base_names.get(&(a as u32)).cloned().unwrap_or_default(),
                            x,
                        )
                    })
                    .collect(),
            })
        })
        .collect()
}

/// The donor init: the combinations for every new row, and its report.
pub(crate) fn plan(
    input: &Path,
    opts: &Options,
    (old_rows, new_rows): (u64, u64),
    untied_head: bool,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, DonorReport)> {
    let d = checked_donor(opts)?;
    let (base_p, merged_p, donor_p) = tokenizer_paths(input, opts, d)?;
    let ckpt = formats::open(&d.path, &opts.open)?
        .into_tensors_for("--donor", "a model file or folder as the donor")?;
    inputs.extend(ckpt.input_paths().iter().map(|p| p.to_path_buf()));
    inputs.extend([base_p.clone(), donor_p.clone()]);
    let (base, merged, donor) = (
        load_tokenizer(&base_p)?,
        load_tokenizer(&merged_p)?,
        load_tokenizer(&donor_p)?,
    );
    let mut mats = donor_matrices(&ckpt)?;
    if !untied_head {
        mats.truncate(1);
    }
    let donor_rows = mats[0].2 as u64;
    let donor_ids = by_surface(&donor);
    let shared = shared_tokens(&base, &donor_ids, old_rows, donor_rows, (&base_p, &donor_p))?;
    let (found, missing) = new_tokens(&merged, &donor_ids, old_rows, new_rows, donor_rows);
    let mut notes = Vec::new();
    let k = clip_k(d.k, &mats, shared.len(), &mut notes);
    let device = Device::select(opts.device, (shared.len() * mats[0].3 * 4) as u64)?;
    let donor_names = by_id(&donor);
    let what = |id: u32| {
        donor_names
            .get(&id)
            .map_or(format!("id {id}"), |t| format!("'{t}'"))
    };
    let pursuits = Pursuits {
        ckpt: &ckpt,
        shared: &shared,
        found: &found,
        new: (new_rows - old_rows) as usize,
        k,
        device: &device,
        what: &what,
    };
    let (mut combos, pursuits) = pursuits.run(&mats)?;
    fill_missing(
        &merged_p,
        &base_p,
        old_rows,
        new_rows,
        &missing,
        &mut combos,
        fallbacks,
        &mut notes,
    );
    let embedding = Arc::new(combos.remove(0));
    let head = combos.pop().map_or_else(|| embedding.clone(), Arc::new);
    let sample = samples(&found, &embedding, &merged, &base, old_rows);
    let report = DonorReport {
        donor: d.path.clone(),
        donor_tokenizer: donor_p,
        base_tokenizer: base_p,
        k,
        shared_tokens: shared.len(),
        from_donor: found.len(),
        pursuits,
        missing: missing.len(),
        missing_first: missing.iter().take(10).map(|m| m.1.clone()).collect(),
        device: device.name.clone(),
        notes,
        sample,
    };
    Ok((Init::Donor { embedding, head }, report))
}

/// New rows (index j from old_rows) the donor has, with its id; and those it lacks, by token.
type NewTokens = (Vec<(usize, u32)>, Vec<(usize, String)>);

/// Split the new rows by whether the donor has their text.
fn new_tokens(
    merged: &Base,
    donor_ids: &std::collections::HashMap<Vec<u8>, u32>,
    old_rows: u64,
    new_rows: u64,
    donor_rows: u64,
) -> NewTokens {
    let names = by_id(merged);
    let f = form(merged);
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for (j, id) in (old_rows..new_rows).enumerate() {
        let tok = u32::try_from(id).ok().and_then(|i| names.get(&i));
        match tok.and_then(|t| donor_ids.get(&surface(f, t))) {
            Some(&dn) if u64::from(dn) < donor_rows => found.push((j, dn)),
            _ => missing.push((j, tok.cloned().unwrap_or_else(|| format!("<id {id}>")))),
        }
    }
    (found, missing)
}

/// k clipped to the donor's width and the shared tokens, saying so.
fn clip_k(
    k: usize,
    mats: &[(String, Role, usize, usize)],
    shared: usize,
    notes: &mut Vec<String>,
) -> usize {
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

/// Tokens the donor lacks: subword-mean over the base's pieces (the mean where that fails).
#[allow(clippy::too_many_arguments)]
fn fill_missing(
    merged: &Path,
    base: &Path,
    old_rows: u64,
    new_rows: u64,
    missing: &[(usize, String)],
    combos: &mut [Vec<Option<Combination>>],
    fallbacks: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if missing.is_empty() {
        return;
    }
    let lists = match subword_lists(merged, base, old_rows, new_rows, &mut Vec::new()) {
        Ok(l) => l,
        Err(e) => {
            notes.push(format!("subword-mean for the tokens the donor lacks is not possible ({e}): they get the mean"));
            vec![None; (new_rows - old_rows) as usize]
        }
    };
    for (j, tok) in missing {
        let c = lists[*j].as_ref().map(|ids| Combination {
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

fn pursuit_report(
    name: &str,
    role: Role,
    dict: Rows,
    ys: Rows,
    got: &[Combination],
) -> PursuitReport {
    let n = got.len().max(1) as f64;
    let resid: f64 = got
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let y = ys.row(i);
            let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
            for (&a, &x) in c.atoms.iter().zip(&c.coefs) {
                for (o, &v) in r.iter_mut().zip(dict.row(a)) {
                    *o -= x * f64::from(v);
                }
            }
            let yy: f64 = y.iter().map(|&v| f64::from(v).powi(2)).sum();
            if yy == 0.0 {
                0.0
            } else {
                (r.iter().map(|v| v * v).sum::<f64>() / yy).sqrt()
            }
        })
        .sum();
    PursuitReport {
        donor_tensor: name.to_string(),
        used_for: if role == Role::Head {
            "head"
        } else {
            "embedding"
        }
        .into(),
        mean_atoms: got.iter().map(|c| c.atoms.len()).sum::<usize>() as f64 / n,
        mean_relative_residual: resid / n,
    }
}

/// The human lines of the donor init: one line per pursuit; the first new tokens' combinations
/// too with `verbose` (`--verbose`; `--json` always has them, under `sample`).
pub fn render(d: &DonorReport, verbose: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "donor {} (tokenizer {}): {} shared tokens, k = {}, pursuit on {}",
        d.donor.display(),
        d.donor_tokenizer.display(),
        d.shared_tokens,
        d.k,
        d.device
    );
    for p in &d.pursuits {
        let _ = writeln!(
            s,
            "  {} pursuit on the donor's {}: {:.1} atoms per token, mean relative residual {:.4}",
            p.used_for, p.donor_tensor, p.mean_atoms, p.mean_relative_residual
        );
    }
    let _ = writeln!(s, "  {} new tokens from the donor", d.from_donor);
    if d.missing > 0 {
        let _ = writeln!(
            s,
            "  {} new tokens not in the donor's vocabulary (subword-mean instead): {}{}",
            d.missing,
            d.missing_first.join(" "),
            if d.missing > d.missing_first.len() {
                " …"
            } else {
                ""
            }
        );
    }
    for n in &d.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    for x in d.sample.iter().filter(|_| verbose) {
        let atoms: Vec<String> = x
            .atoms
            .iter()
            .map(|(id, t, c)| format!("{c:+.4}·{t}({id})"))
            .collect();
        let _ = writeln!(s, "  {} ({}) = {}", x.token, x.id, atoms.join(" "));
    }
    s
}
