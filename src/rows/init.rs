//! Initialising new rows: the CPU reference (rayon). Maths in f64 (sums) and f32 (the Hewitt
//! product), results rounded once to the matrix dtype. Work is split into a fixed number of
//! chunks summed in order, so results do not depend on the thread count.

use crate::rng::{normal_at, normals_f32, Rng};

pub mod knn;
pub mod omp;
use omp::Combination;
use std::sync::Arc;

/// The Cholesky sampler's normals are a stream apart from the Σ-free sampler's.
pub const CHOLESKY_STREAM: u64 = 0xC601_E5C7_0000_0001;
use super::gemm::sgemm;
use crate::dtype::{self, DType};
use ndarray::{s, Array2, ArrayViewMut2, ShapeBuilder};
use rayon::prelude::*;

/// A row-major matrix of F16/BF16/F32/F64 elements.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
}

impl Matrix<'_> {
    fn row_bytes(&self) -> usize {
        self.cols * (self.dtype.bits() / 8) as usize
    }

    #[inline(always)]
    fn row(&self, i: usize) -> &[u8] {
        let w = self.row_bytes();
        &self.bytes[i * w..(i + 1) * w]
    }

    #[inline(always)]
    fn row_f64(&self, i: usize, out: &mut [f64]) {
        // Lengths match by construction; the dtype was checked to be a float type.
        let _ = dtype::decode_row_f64(self.dtype, self.row(i), out);
    }
}

/// How new rows are made.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// Column mean of the old rows (f64).
    Mean,
    /// N(μ, ε·Σ) of the old rows, sampled without forming Σ.
    Hewitt {
        epsilon: f64,
        seed: u64,
    },
    Zeros,
    Normal {
        std: f64,
        seed: u64,
    },
    /// Mean of the listed old rows, per new row; None falls back to the column mean.
    SubwordMean(Vec<Option<Vec<usize>>>),
    /// A copy of one old row.
    Copy(usize),
    /// Per new row a weighted sum of old rows (a donor init's atoms and coefficients); None:
    /// the column mean.
    Combine(Arc<Vec<Option<Combination>>>),
    /// A donor init (`omp`): the embedding's combinations, and the head's (and its bias's);
    /// [`Init::for_role`] picks one. Used as is, the embedding's.
    Donor {
        embedding: Arc<Vec<Option<Combination>>>,
        head: Arc<Vec<Option<Combination>>>,
    },
}

impl Init {
    /// Its name in plans and reports (the `--init` method it comes from).
    pub fn name(&self) -> &'static str {
        match self {
            Init::Mean => "mean",
            Init::Hewitt { .. } => "hewitt",
            Init::Zeros => "zeros",
            Init::Normal { .. } => "normal",
            Init::SubwordMean(_) => "subword-mean",
            Init::Copy(_) => "copy",
            Init::Combine(_) | Init::Donor { .. } => "omp",
        }
    }

    /// The init for a matrix of `role`: a donor init's head combinations for a head and its bias.
    pub fn for_role(&self, role: crate::vocab::Role) -> Init {
        use crate::vocab::Role;
        match self {
            Init::Donor { head, .. } if matches!(role, Role::Head | Role::HeadBias) => {
                Init::Combine(head.clone())
            }
            Init::Donor { embedding, .. } => Init::Combine(embedding.clone()),
            other => other.clone(),
        }
    }
}

/// Column mean and mean row L2 norm of the old rows, in f64.
pub struct Stats {
    pub mean: Vec<f64>,
    pub mean_row_norm: f64,
}

/// The first old value that is NaN or infinite, as (row, column), if any (read only when new
/// rows came out non-finite, to say where from).
pub fn first_nonfinite(m: &Matrix) -> Option<(usize, usize)> {
    let mut row = vec![0f64; m.cols];
    (0..m.rows).find_map(|r| {
        m.row_f64(r, &mut row);
        row.iter().position(|v| !v.is_finite()).map(|c| (r, c))
    })
}

/// Fixed chunking: the same split for any thread count.
fn chunks(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.clamp(1, n.max(1));
    (0..parts)
        .map(|p| (p * n / parts)..((p + 1) * n / parts))
        .collect()
}

/// One pass over the rows: column sums and row norms.
pub fn stats(m: &Matrix) -> Stats {
    let partial: Vec<(Vec<f64>, f64)> = chunks(m.rows, 64)
        .into_par_iter()
        .map(|r| {
            let mut sum = vec![0f64; m.cols];
            let norms = sum_rows(m, r, &mut sum);
            (sum, norms)
        })
        .collect();
    let mut sum = vec![0f64; m.cols];
    let mut norms = 0f64;
    for (s, n) in partial {
        for (a, b) in sum.iter_mut().zip(s) {
            *a += b;
        }
        norms += n;
    }
    let n = m.rows.max(1) as f64;
    Stats {
        mean: sum.into_iter().map(|s| s / n).collect(),
        mean_row_norm: norms / n,
    }
}

/// Add rows `r` into `sum` (per column) and return the sum of their L2 norms. Compiled twice:
/// with AVX2 where the CPU has it, and for the baseline; the same operations in the same order
/// either way, so results do not depend on the CPU.
fn sum_rows(m: &Matrix, r: std::ops::Range<usize>, sum: &mut [f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { sum_rows_avx2(m, r, sum) };
    }
    sum_rows_any(m, r, sum)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_rows_avx2(m: &Matrix, r: std::ops::Range<usize>, sum: &mut [f64]) -> f64 {
    sum_rows_any(m, r, sum)
}

#[inline(always)]
fn sum_rows_any(m: &Matrix, r: std::ops::Range<usize>, sum: &mut [f64]) -> f64 {
    let mut norms = 0f64;
    let mut row = vec![0f64; m.cols];
    for i in r {
        m.row_f64(i, &mut row);
        // Eight running sums of squares (summed in a fixed order) let the loop vectorise.
        let mut sq = [0f64; 8];
        let mut sums = sum.chunks_exact_mut(8);
        let mut vals = row.chunks_exact(8);
        for (s8, v8) in (&mut sums).zip(&mut vals) {
            for l in 0..8 {
                s8[l] += v8[l];
                sq[l] += v8[l] * v8[l];
            }
        }
        for (s, v) in sums.into_remainder().iter_mut().zip(vals.remainder()) {
            *s += v;
            sq[0] += v * v;
        }
        norms += sq.iter().sum::<f64>().sqrt();
    }
    norms
}

/// `k` new rows (f64, row-major k × cols).
pub fn new_rows(m: &Matrix, stats: &Stats, init: &Init, k: usize) -> Vec<f64> {
    let d = m.cols;
    match init {
        Init::Mean => stats.mean.repeat(k),
        Init::Zeros => vec![0.0; k * d],
        Init::Copy(i) => {
            let mut row = vec![0f64; d];
            m.row_f64(*i, &mut row);
            row.repeat(k)
        }
        Init::Normal { std, seed } => {
            let mut out = vec![0f64; k * d];
            out.par_chunks_mut(d.max(1))
                .enumerate()
                .for_each(|(j, row)| {
                    let mut r = Rng::new(*seed, j as u64);
                    for v in row {
                        *v = std * r.normal();
                    }
                });
            out
        }
        Init::SubwordMean(lists) => {
            let mut out = vec![0f64; k * d];
            out.par_chunks_mut(d.max(1))
                .enumerate()
                .for_each(|(j, dst)| {
                    match lists
                        .get(j)
                        .and_then(|l| l.as_ref())
                        .filter(|l| !l.is_empty())
                    {
                        Some(ids) => {
                            let mut row = vec![0f64; d];
                            for &i in ids {
                                m.row_f64(i, &mut row);
                                for (a, b) in dst.iter_mut().zip(&row) {
                                    *a += b;
                                }
                            }
                            for a in dst.iter_mut() {
                                *a /= ids.len() as f64;
                            }
                        }
                        None => dst.copy_from_slice(&stats.mean),
                    }
                });
            out
        }
        Init::Hewitt { epsilon, seed } => hewitt(m, &stats.mean, k, *epsilon, *seed),
        Init::Combine(rows)
        | Init::Donor {
            embedding: rows, ..
        } => combine(m, stats, rows, k),
    }
}

/// Each new row Σ coef·old row in f64 (None, or past the list: the column mean).
fn combine(m: &Matrix, stats: &Stats, rows: &[Option<Combination>], k: usize) -> Vec<f64> {
    let d = m.cols;
    let mut out = vec![0f64; k * d];
    out.par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(j, dst)| match rows.get(j).and_then(|c| c.as_ref()) {
            Some(c) => {
                let mut row = vec![0f64; d];
                for (&a, &x) in c.atoms.iter().zip(&c.coefs) {
                    m.row_f64(a, &mut row);
                    for (o, v) in dst.iter_mut().zip(&row) {
                        *o += x * v;
                    }
                }
            }
            None => dst.copy_from_slice(&stats.mean),
        });
    out
}

/// Rows of N(μ, ε·Σ), Σ the covariance of the old rows. For k ≤ d (the usual case: tens to
/// thousands of new tokens, widths in the thousands) Σ is never formed ([`hewitt_sigma_free`]:
/// k·N·d work). For k > d, forming Σ once is cheaper (N·d² + d³/3 + k·d²), so Σ is formed and
/// factored ([`hewitt_cholesky`]); when Σ is singular (N ≤ d) that falls back to Σ-free, which
/// needs no factorisation.
pub fn hewitt(m: &Matrix, mu: &[f64], k: usize, epsilon: f64, seed: u64) -> Vec<f64> {
    if k > m.cols && m.rows > m.cols {
        if let Some(rows) = hewitt_cholesky(m, mu, k, epsilon, seed) {
            return rows;
        }
    }
    hewitt_sigma_free(m, mu, k, epsilon, seed)
}

/// Centred rows r0..r1 as f32, into the first r1 - r0 rows of `xc` (reused across blocks).
fn centre_block(m: &Matrix, mu32: &[f32], r0: usize, r1: usize, xc: &mut Array2<f32>) {
    for (i, mut dst) in (r0..r1).zip(xc.rows_mut()) {
        if let Some(dst) = dst.as_slice_mut() {
            let _ = dtype::decode_row_f32(m.dtype, m.row(i), dst);
            for (o, c) in dst.iter_mut().zip(mu32) {
                *o -= c;
            }
        }
    }
}

/// ε·Σ formed with blocked GEMMs (fixed partition, summed in order, in f64), factored by
/// Cholesky, then μ + L·z for each new row. None when εΣ is not positive definite.
pub fn hewitt_cholesky(
    m: &Matrix,
    mu: &[f64],
    k: usize,
    epsilon: f64,
    seed: u64,
) -> Option<Vec<f64>> {
    let (n, d) = (m.rows, m.cols);
    const BLOCK: usize = 1024;
    let mu32: Vec<f32> = mu.iter().map(|&v| v as f32).collect();
    let parts = ((64usize << 20) / (d * d * 4).max(1)).clamp(1, 16);
    let partial: Vec<Array2<f32>> = chunks(n.div_ceil(BLOCK), parts)
        .into_par_iter()
        .map(|blocks| {
            let mut acc = Array2::<f32>::zeros((d, d));
            let mut xc = Array2::<f32>::zeros((BLOCK, d));
            for b in blocks {
                let (r0, r1) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
                centre_block(m, &mu32, r0, r1, &mut xc);
                let xc = xc.slice(s![..r1 - r0, ..]);
                sgemm(&xc.t(), &xc, &mut acc.view_mut(), true);
            }
            acc
        })
        .collect();
    let mut l = vec![0f64; d * d];
    for i in 0..d {
        for j in 0..d {
            l[i * d + j] =
                epsilon * partial.iter().map(|a| f64::from(a[[i, j]])).sum::<f64>() / n as f64;
        }
    }
    // In-place Cholesky (lower triangle), row by row.
    for i in 0..d {
        for j in 0..=i {
            let mut s = l[i * d + j];
            for p in 0..j {
                s -= l[i * d + p] * l[j * d + p];
            }
            if i == j {
                if s <= 0.0 || !s.is_finite() {
                    return None;
                }
                l[i * d + i] = s.sqrt();
            } else {
                l[i * d + j] = s / l[j * d + j];
            }
        }
        for j in i + 1..d {
            l[i * d + j] = 0.0;
        }
    }
    let mut out = vec![0f64; k * d];
    out.par_chunks_mut(d).enumerate().for_each(|(j, dst)| {
        let z: Vec<f64> = (0..d)
            .map(|p| normal_at(seed ^ CHOLESKY_STREAM, (j * d + p) as u64))
            .collect();
        for (i, o) in dst.iter_mut().enumerate() {
            *o = mu[i] + (0..=i).map(|p| l[i * d + p] * z[p]).sum::<f64>();
        }
    });
    Some(out)
}

/// Rows of N(μ, ε·Σ) without forming Σ: with X_c the centred old rows (N × d) and z ~ N(0, I_N),
/// μ + sqrt(ε/N)·X_cᵀz has covariance ε·X_cᵀX_c/N = ε·Σ exactly. All k rows at once are
/// μ + sqrt(ε/N)·X_cᵀZ (Z: N × k), one pass over X in blocks, each block a GEMM.
pub fn hewitt_sigma_free(m: &Matrix, mu: &[f64], k: usize, epsilon: f64, seed: u64) -> Vec<f64> {
    let (n, d) = (m.rows, m.cols);
    if n == 0 || k == 0 {
        return mu.repeat(k);
    }
    const BLOCK: usize = 1024;
    let blocks = n.div_ceil(BLOCK);
    // Enough accumulators to keep both cores busy, few enough to bound memory (≈ 64 MiB).
    let parts = (64usize << 20) / (d * k * 4).max(1);
    let ranges = chunks(blocks, parts.clamp(1, 16));
    let mu32: Vec<f32> = mu.iter().map(|&v| v as f32).collect();
    let partial: Vec<Array2<f32>> = ranges
        .into_par_iter()
        .map(|blocks| {
            // Block buffers allocated once per part: fresh ones per block cost page faults.
            // The accumulator column-major (k runs of d): the GEMM's kernels then tile along d,
            // 2.5× faster at k = 81 than row-major (docs/benchmarks.md, "GEMM").
            let mut acc = Array2::<f32>::zeros((d, k).f());
            let mut xc = Array2::<f32>::zeros((BLOCK, d));
            let mut z = Array2::<f32>::zeros((BLOCK, k));
            for b in blocks {
                let (r0, r1) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
                centre_block(m, &mu32, r0, r1, &mut xc);
                // Counter-based: z[r][j] is normal number r·k + j, on any device, whatever
                // the split.
                let z = {
                    let mut z = z.slice_mut(s![..r1 - r0, ..]);
                    fill_normals(&mut z, seed, (r0 * k) as u64);
                    z
                };
                sgemm(
                    &xc.slice(s![..r1 - r0, ..]).t(),
                    &z.view(),
                    &mut acc.view_mut(),
                    true,
                );
            }
            acc
        })
        .collect();
    let scale = (epsilon / n as f64).sqrt();
    let mut out = vec![0f64; k * d];
    for (j, dst) in out.chunks_mut(d).enumerate() {
        for (c, o) in dst.iter_mut().enumerate() {
            let s: f64 = partial.iter().map(|a| f64::from(a[[c, j]])).sum();
            *o = mu[c] + scale * s;
        }
    }
    out
}

/// z\[r\]\[j\] = normal number `first + r·cols + j` of `seed` (as f32): in one batch where `z` is
/// contiguous and row-major (the blocks hewitt draws), else one by one.
fn fill_normals(z: &mut ArrayViewMut2<f32>, seed: u64, first: u64) {
    let cols = z.ncols();
    if let Some(flat) = z.as_slice_mut() {
        return normals_f32(seed, first, flat);
    }
    for ((r, j), v) in z.indexed_iter_mut() {
        *v = normal_at(seed, first + (r * cols + j) as u64) as f32;
    }
}

/// Encode f64 rows as `dtype`, rounding once to nearest even.
pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * (dtype.bits() / 8) as usize];
    let _ = dtype::encode_row_f64(dtype, values, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut r = Rng::new(seed, 99);
        // Correlated columns: column c = a·c + noise, so Σ is far from diagonal.
        let v: Vec<f32> = (0..rows)
            .flat_map(|_| {
                let a = r.normal();
                (0..cols)
                    .map(|c| (a * (c as f64 + 1.0) * 0.3 + r.normal() + c as f64) as f32)
                    .collect::<Vec<_>>()
            })
            .collect();
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn mean_is_the_f64_column_mean_and_independent_of_threads() {
        let bytes = matrix(1000, 7, 1);
        let m = Matrix {
            dtype: DType::F32,
            rows: 1000,
            cols: 7,
            bytes: &bytes,
        };
        let s = stats(&m);
        let mut want = vec![0f64; 7];
        let mut row = vec![0f64; 7];
        for i in 0..1000 {
            m.row_f64(i, &mut row);
            for (a, b) in want.iter_mut().zip(&row) {
                *a += b;
            }
        }
        for (a, b) in s.mean.iter().zip(&want) {
            assert!((a - b / 1000.0).abs() < 1e-12);
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let s1 = one.install(|| stats(&m));
        assert_eq!(s1.mean, s.mean);
    }

    #[test]
    fn hewitt_samples_have_mean_mu_and_covariance_epsilon_sigma() {
        let (n, d, k) = (200, 4, 20_000);
        let bytes = matrix(n, d, 3);
        let m = Matrix {
            dtype: DType::F32,
            rows: n,
            cols: d,
            bytes: &bytes,
        };
        let s = stats(&m);
        // Reference Σ in f64.
        let mut x = vec![0f64; n * d];
        for i in 0..n {
            m.row_f64(i, &mut x[i * d..(i + 1) * d]);
        }
        let mut sigma = vec![0f64; d * d];
        for i in 0..n {
            for a in 0..d {
                for b in 0..d {
                    sigma[a * d + b] +=
                        (x[i * d + a] - s.mean[a]) * (x[i * d + b] - s.mean[b]) / n as f64;
                }
            }
        }
        let eps = 1e-2;
        // k > d takes the Cholesky path; the Σ-free path must give the same distribution.
        check_moments(&hewitt(&m, &s.mean, k, eps, 5), &s.mean, &sigma, d, k, eps);
        check_moments(
            &hewitt_sigma_free(&m, &s.mean, k, eps, 5),
            &s.mean,
            &sigma,
            d,
            k,
            eps,
        );
        // Same seed, same numbers, whatever the thread count, on both paths.
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        for kk in [3, 50] {
            assert_eq!(
                one.install(|| hewitt(&m, &s.mean, kk, eps, 5)),
                hewitt(&m, &s.mean, kk, eps, 5)
            );
        }
        assert_ne!(
            hewitt(&m, &s.mean, 50, eps, 6),
            hewitt(&m, &s.mean, 50, eps, 5)
        );
    }

    /// Sample mean within 5 standard errors of μ, sample covariance within 5 of εΣ.
    fn check_moments(rows: &[f64], mu: &[f64], sigma: &[f64], d: usize, k: usize, eps: f64) {
        for a in 0..d {
            let mean: f64 = (0..k).map(|j| rows[j * d + a]).sum::<f64>() / k as f64;
            let se = (eps * sigma[a * d + a] / k as f64).sqrt();
            assert!(
                (mean - mu[a]).abs() < 5.0 * se,
                "mean[{a}] off by {} (se {se})",
                mean - mu[a]
            );
            for b in 0..d {
                let cov: f64 = (0..k)
                    .map(|j| (rows[j * d + a] - mu[a]) * (rows[j * d + b] - mu[b]))
                    .sum::<f64>()
                    / k as f64;
                let want = eps * sigma[a * d + b];
                // Standard error of a sample covariance: sqrt((σ_aa σ_bb + σ_ab²)/k).
                let se = eps
                    * ((sigma[a * d + a] * sigma[b * d + b] + sigma[a * d + b].powi(2)) / k as f64)
                        .sqrt();
                assert!(
                    (cov - want).abs() < 5.0 * se,
                    "cov[{a},{b}] = {cov}, want {want} (se {se})"
                );
            }
        }
    }

    #[test]
    fn subword_mean_averages_the_listed_rows_and_falls_back_to_the_mean() {
        let bytes = matrix(10, 3, 2);
        let m = Matrix {
            dtype: DType::F32,
            rows: 10,
            cols: 3,
            bytes: &bytes,
        };
        let s = stats(&m);
        let out = new_rows(&m, &s, &Init::SubwordMean(vec![Some(vec![2, 5]), None]), 2);
        let (mut a, mut b) = (vec![0f64; 3], vec![0f64; 3]);
        m.row_f64(2, &mut a);
        m.row_f64(5, &mut b);
        for c in 0..3 {
            assert!((out[c] - (a[c] + b[c]) / 2.0).abs() < 1e-12);
            assert_eq!(out[3 + c], s.mean[c]);
        }
    }
}
