//! k-nearest-neighbour interpolation (mergekit tokensurgeon's `common_interpolation`): each
//! target row as a weighted sum of its k nearest dictionary rows, by Euclidean or cosine
//! distance, weighted in proportion to closeness, barycentrically or by least squares. The
//! neighbours come from the GEMM's f32 products t·d (‖t‖² + ‖d‖² − 2·t·d); every row within
//! those products' rounding bound of the k-th is measured again in f64, and the k nearest by
//! that measure (ties: the lower index) are the atoms, nearest first: the same atoms whatever
//! the GEMM's blocking. Weights in f64. Each target is worked on alone and the parts are joined
//! in row order: results do not depend on the thread count or on the chunking of the targets.
//!
//! What mergekit does (`mergekit/tokensurgeon/common_interpolation.py`, called by
//! `mergekit-tokensurgeon --approximation-method common_interpolation`, arcee-ai/mergekit
//! a6e4028): k = 64, Euclidean, distance-proportional by default (`--k`, `--cosine-similarity`,
//! `--weight-scheme`); the metric is taken in the donor's space over the shared tokens' donor
//! rows, nothing centred or normalised; the weights then combine the base's rows of those tokens.
//! It solves in f32 with `torch.linalg.lstsq` (the CPU's gelsy, rank cut at f32's epsilon times
//! the larger side); here the solves are f64 and least-norm (gelsd's answer) with the same cut.
//! Where this differs: mergekit's k must not exceed the dictionary (here it is clipped), its
//! `topk` breaks ties in no stated order (here the lower index first), a target closer than
//! 10⁻⁶ to some rows gives them ≈ 1 − Σ 1/(10⁶·dⱼ) (here exactly 1, shared equally), and its
//! barycentric system borders D·Dᵀ with ones, so with long rows its f32 rank cut drops real
//! directions (weights off by 0.15 on rows of norm ≈ 40; here the border is scaled, which
//! changes no exact solution).

mod pinv;

use super::omp::{dot64, products, Combination, Rows};
use rayon::prelude::*;

/// How distance is measured (in the dictionary's space: the donor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Metric {
    /// ‖t − d‖ (mergekit's default).
    #[default]
    Euclidean,
    /// 1 − t·d / max(‖t‖·‖d‖, 10⁻⁶) (mergekit's `--cosine-similarity`).
    Cosine,
}

/// How the k neighbours' weights are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weighting {
    /// Euclidean: wⱼ ∝ 1 / dⱼ, summing to 1; rows nearer than [`NEAR`] share all the weight
    /// equally. Cosine: wⱼ = (1 − dⱼ) / max(Σ (1 − dᵢ), 10⁻⁶), the similarities (a target equal
    /// to a row gets 1 / Σ similarities on it, as in mergekit). mergekit's default.
    #[default]
    DistanceProportional,
    /// argmin ‖Σ wⱼ·dⱼ − t‖ subject to Σ wⱼ = 1, least norm: mergekit's bordered system
    /// [[D·Dᵀ, 1], [1ᵀ, 0]]·(w, λ) = (D·t, 1), its border scaled to D·Dᵀ's largest diagonal
    /// entry s ([[D·Dᵀ, s·1], [s·1ᵀ, 0]]·(w, λ/s) = (D·t, s): the same w).
    Barycentric,
    /// argmin ‖Σ wⱼ·dⱼ − t‖, least norm (through D·Dᵀ, its eigenvalues cut at the square of
    /// mergekit's cut on D's singular values).
    LeastSquares,
}

/// A kNN init: metric and weighting (`Default`: mergekit's, Euclidean and distance-proportional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Knn {
    pub metric: Metric,
    pub weights: Weighting,
}

/// mergekit's default k.
pub const DEFAULT_K: usize = 64;
/// mergekit's floor on distances, norms' products and weight sums (against dividing by zero).
pub const NEAR: f64 = 1e-6;
/// Memory for one chunk of targets' products (f32, chunk × dictionary rows).
const PRODUCT_BYTES: usize = 256 << 20;
/// Targets per chunk at most.
const CHUNK: usize = 4096;

/// Each target row as a combination of its `k` nearest `dict` rows (same width; k clipped to
/// the dictionary's rows): atoms are row indices into `dict`, nearest first. k = 0, an empty
/// dictionary or a width mismatch: every combination empty.
pub fn knn(dict: Rows, targets: Rows, k: usize, how: Knn) -> Vec<Combination> {
    let chunk = (PRODUCT_BYTES / (4 * dict.rows.max(1))).clamp(1, CHUNK);
    knn_chunked(dict, targets, k, how, chunk)
}

/// [`knn`], `chunk` targets at a time.
fn knn_chunked(dict: Rows, targets: Rows, k: usize, how: Knn, chunk: usize) -> Vec<Combination> {
    let (s, d) = (dict.rows, dict.cols);
    let k = k.min(s);
    if k == 0 || d != targets.cols {
        let empty = Combination {
            atoms: Vec::new(),
            coefs: Vec::new(),
        };
        return vec![empty; targets.rows];
    }
    let norms: Vec<f64> = (0..s)
        .into_par_iter()
        .map(|j| dot64(dict.row(j), dict.row(j)).sqrt())
        .collect();
    let mut out = Vec::with_capacity(targets.rows);
    let mut p = Vec::new();
    for r0 in (0..targets.rows).step_by(chunk) {
        let r1 = (r0 + chunk).min(targets.rows);
        p.clear();
        p.resize((r1 - r0) * s, 0f32);
        products(&targets.data[r0 * d..r1 * d], r1 - r0, dict, &mut p);
        let part: Vec<Combination> = p
            .par_chunks(s)
            .enumerate()
            .map_init(Scratch::default, |sc, (i, pi)| {
                let t = targets.row(r0 + i);
                let near = nearest(dict, t, pi, &norms, k, how.metric, sc);
                let coefs = weights(dict, t, &near, how);
                Combination {
                    atoms: near.iter().map(|n| n.1).collect(),
                    coefs,
                }
            })
            .collect();
        out.extend(part);
    }
    out
}

/// Per-thread buffers of [`nearest`] (one value per dictionary row).
#[derive(Default)]
struct Scratch {
    keys: Vec<f64>,
    errs: Vec<f64>,
    upper: Vec<f64>,
}

/// The `k` nearest rows of `dict` to `t` as (distance, row), nearest first, ties the lower row
/// first. `p`: the f32 products t·dⱼ; `norms`: ‖dⱼ‖.
fn nearest(
    dict: Rows,
    t: &[f32],
    p: &[f32],
    norms: &[f64],
    k: usize,
    metric: Metric,
    sc: &mut Scratch,
) -> Vec<(f64, usize)> {
    let tn = dot64(t, t).sqrt();
    // An f32 sum of n products, in any order, is within n·2⁻²⁴/(1 − n·2⁻²⁴)·Σ|tᵢ·dᵢ| ≤ ‖t‖·‖d‖
    // of the exact one; the f64 measure within about n·2⁻⁵³ of its magnitude. Both doubled.
    let n = t.len() as f64 + 2.0;
    let (g32, g64) = (2.0 * n * f64::from(f32::EPSILON), 2.0 * n * f64::EPSILON);
    sc.keys.clear();
    sc.errs.clear();
    for (&pj, &dn) in p.iter().zip(norms) {
        // The ranking key (distance², less ‖t‖²; or −similarity) and a bound on its error.
        let (key, err) = match metric {
            Metric::Euclidean => (
                dn * dn - 2.0 * f64::from(pj),
                2.0 * g32 * tn * dn + g64 * (tn + dn) * (tn + dn),
            ),
            Metric::Cosine => {
                let den = (tn * dn).max(NEAR);
                (-f64::from(pj) / den, g32 * tn * dn / den + g64)
            }
        };
        sc.keys.push(key);
        sc.errs.push(err);
    }
    sc.upper.clear();
    sc.upper
        .extend(sc.keys.iter().zip(&sc.errs).map(|(k, e)| k + e));
    // Every one of the true k nearest has key − err at most the k-th smallest key + err.
    let (_, &mut u, _) = sc.upper.select_nth_unstable_by(k - 1, f64::total_cmp);
    let mut near: Vec<(f64, usize)> = (0..dict.rows)
        .filter(|&j| sc.keys[j] - sc.errs[j] <= u)
        .map(|j| (distance(metric, t, tn, dict.row(j), norms[j]), j))
        .collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    near.truncate(k);
    near
}

/// The distance from `t` to `d` in f64 (`tn`, `dn`: their norms).
fn distance(metric: Metric, t: &[f32], tn: f64, d: &[f32], dn: f64) -> f64 {
    match metric {
        Metric::Euclidean => dist2(t, d).sqrt(),
        Metric::Cosine => 1.0 - dot64(t, d) / (tn * dn).max(NEAR),
    }
}

/// ‖a − b‖² in f64, eight running sums (summed in a fixed order) so the loop vectorises.
fn dist2(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            let v = f64::from(x[l]) - f64::from(y[l]);
            acc[l] += v * v;
        }
    }
    for (x, y) in ra.iter().zip(rb) {
        let v = f64::from(*x) - f64::from(*y);
        acc[0] += v * v;
    }
    acc.iter().sum()
}

/// The weights of the neighbours `near` (as [`nearest`] gives them) for target `t`.
fn weights(dict: Rows, t: &[f32], near: &[(f64, usize)], how: Knn) -> Vec<f64> {
    let k = near.len();
    let eps = f64::from(f32::EPSILON);
    match how.weights {
        Weighting::DistanceProportional => proportional(near, how.metric),
        Weighting::LeastSquares => {
            let (g, b) = gram(dict, t, near);
            let cut = eps * k.max(dict.cols) as f64;
            pinv::solve(&g, &b, cut * cut)
        }
        Weighting::Barycentric => {
            let (g, mut b) = gram(dict, t, near);
            // The border scaled to the Gram's (largest squared norm): the same w, but a rank cut
            // that does not depend on the rows' scale (mergekit's border of ones, cut in f32,
            // drops real directions when rows are long).
            let s = (0..k).map(|i| g[i * k + i]).fold(0f64, f64::max);
            let s = if s > 0.0 { s } else { 1.0 };
            let m = k + 1;
            let mut a = vec![s; m * m];
            for i in 0..k {
                a[i * m..i * m + k].copy_from_slice(&g[i * k..(i + 1) * k]);
            }
            a[m * m - 1] = 0.0;
            b.push(s);
            let mut w = pinv::solve(&a, &b, eps * m as f64);
            w.truncate(k);
            w
        }
    }
}

/// Distance-proportional weights ([`Weighting::DistanceProportional`]).
fn proportional(near: &[(f64, usize)], metric: Metric) -> Vec<f64> {
    let w: Vec<f64> = match metric {
        Metric::Euclidean => {
            let at = near.iter().filter(|n| n.0 < NEAR).count();
            if at > 0 {
                let share = 1.0 / at as f64;
                return near
                    .iter()
                    .map(|n| if n.0 < NEAR { share } else { 0.0 })
                    .collect();
            }
            near.iter().map(|n| 1.0 / n.0).collect()
        }
        Metric::Cosine => near.iter().map(|n| 1.0 - n.0).collect(),
    };
    let sum = w.iter().sum::<f64>().max(NEAR);
    w.iter().map(|v| v / sum).collect()
}

/// The neighbours' Gram D·Dᵀ (k × k, row-major) and D·t, in f64.
fn gram(dict: Rows, t: &[f32], near: &[(f64, usize)]) -> (Vec<f64>, Vec<f64>) {
    let k = near.len();
    let mut g = vec![0.0; k * k];
    for (i, a) in near.iter().enumerate() {
        for (j, b) in near[..=i].iter().enumerate() {
            let v = dot64(dict.row(a.1), dict.row(b.1));
            g[i * k + j] = v;
            g[j * k + i] = v;
        }
    }
    let b = near.iter().map(|n| dot64(dict.row(n.1), t)).collect();
    (g, b)
}

#[cfg(test)]
mod tests;
