//! What a donor init says: its report (serialised as is under `--json`), the per-pursuit
//! figures, the first targets' combinations, and the human lines.

pub use super::pursuits::PursuitReport;
use super::quality::{Figures, Quality};
use crate::rows::init::omp::Combination;
use crate::tokenizer::base::Base;
use crate::tokenizer::surface::by_id;
use serde::Serialize;
use std::path::PathBuf;

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
    /// Held-out shared tokens rebuilt as if new, against their true rows (None: none could be
    /// held out; `notes` says why).
    pub quality: Option<Quality>,
    /// Targets rebuilt from the donor that are numbers (all digits) or bytes (`<0xNN>`, one
    /// byte-level symbol).
    pub number_tokens: usize,
    pub byte_tokens: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The first few new tokens' atoms and coefficients.
    pub sample: Vec<Sample>,
}

/// The first few targets the donor has: their atoms and coefficients. `found` holds positions
/// in `targets` (with the donor's id); a sample names `targets[j]`, the new tokenizer's id.
pub(crate) fn samples(
    found: &[(usize, u32)],
    embedding: &[Option<Combination>],
    (new, base): (&Base, &Base),
    targets: &[u64],
) -> Vec<Sample> {
    let (new_names, base_names) = (by_id(new), by_id(base));
    found
        .iter()
        .take(5)
        .filter_map(|&(j, _)| {
            let c = embedding[j].as_ref()?;
            let id = targets[j];
            Some(Sample {
                token: u32::try_from(id)
                    .ok()
                    .and_then(|i| new_names.get(&i))
                    .cloned()
                    .unwrap_or_default(),
                id,
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
    if let Some(q) = &d.quality {
        render_quality(&mut s, q);
    }
    for n in &d.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    for w in &d.warnings {
        let _ = writeln!(s, "  warning: {w}");
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

/// The held-out report's lines: `--omp-k auto`'s choice, then one line per donor matrix.
fn render_quality(s: &mut String, q: &Quality) {
    use std::fmt::Write as _;
    if let Some(a) = &q.auto_k {
        let tried: Vec<String> = a
            .tried
            .iter()
            .map(|t| format!("k {} {:.4}", t.k, t.median))
            .collect();
        let _ = writeln!(
            s,
            "  --omp-k auto: k = {} (held-out median embedding cosine: {})",
            a.chosen,
            tried.join(", ")
        );
    }
    let fig = |f: &Figures| format!("median {:.4}, 5th percentile {:.4}", f.median, f.p5);
    for m in &q.matrices {
        let base = m.subword_mean.as_ref().map_or_else(
            || "subword-mean: no held-out token splits".to_string(),
            |b| format!("subword-mean {} ({} tokens)", fig(b), b.tokens),
        );
        let _ = writeln!(
            s,
            "  held-out {}: {} of the shared tokens (seed {}) rebuilt from the other {} (k = {}): cosine to their true rows {}; {}",
            m.used_for,
            q.held_out,
            q.seed,
            q.rebuilt_from,
            q.k,
            fig(&m.rebuilt),
            base
        );
    }
}
