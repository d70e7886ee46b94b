//! Orthogonal matching pursuit (Batch-OMP): each target row as a sparse combination of at most
//! k dictionary rows (greedy: the atom of largest |correlation| with the residual, then a
//! least-squares refit on every selected atom; no centring). Correlations in f32, from
//! α₀ = D·y (one GEMM per block of targets) minus G·x, G = D·Dᵀ's columns computed once per atom
//! some target selects (a GEMM per step, kept across blocks up to [`CACHE_BYTES`]), or all of G at
//! once with each product computed once when it fits and most atoms will be selected anyway. The refit in
//! f64: the selected atoms' Gram and D·y entries as f64 dot products, an incremental Cholesky
//! factor, and ‖r‖² = ‖y‖² − ‖L⁻¹·D_Λ·y‖² for the stop. Every target is worked on by one thread
//! in a fixed order, so results do not depend on the thread count.

use ndarray::{linalg::general_mat_mul, s, ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;
use serde::Serialize;

/// A new row as a weighted sum of old rows: `Σ coefs[i] · row[atoms[i]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Combination {
    pub atoms: Vec<usize>,
    pub coefs: Vec<f64>,
}

/// Row-major f32 rows.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
}

impl Rows<'_> {
    #[inline(always)]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// Stop once the residual's energy is at most this fraction of the target's (below what f32
/// rows resolve: an exact combination has been found).
pub const RESIDUAL_FLOOR: f64 = 1e-12;
/// An atom whose squared distance to the selected atoms' span is below this fraction of its
/// squared norm adds nothing the refit can use: the pursuit stops there.
pub const PIVOT_FLOOR: f64 = 1e-10;
/// Memory for cached Gram columns, kept across blocks of targets.
pub const CACHE_BYTES: usize = 4 << 30;
/// Rows of the full Gram computed by one GEMM (its upper part from the diagonal on).
const TILE: usize = 1024;
/// Correlations are updated this many at a time, through every selected atom, so the running
/// values stay in the L1 cache while the Gram columns stream past.
const CHUNK: usize = 4096;

/// One target's pursuit so far: atoms, the Cholesky factor of their Gram (row-major, stride k),
/// z = L⁻¹·D_Λ·y, the coefficients x, ‖y‖².
pub(crate) struct Pursuit {
    pub atoms: Vec<usize>,
    l: Vec<f64>,
    z: Vec<f64>,
    pub x: Vec<f64>,
    yy: f64,
    pub done: bool,
}

impl Pursuit {
    pub fn new(y: &[f32], k: usize) -> Pursuit {
        let yy = dot64(y, y);
        Pursuit {
            atoms: Vec::with_capacity(k),
            l: vec![0.0; k * k],
            z: Vec::with_capacity(k),
            x: Vec::new(),
            yy,
            done: yy == 0.0 || k == 0,
        }
    }

    /// Add atom `a` (of `dict`) and refit; marks the pursuit done when the atom adds nothing,
    /// the residual is exhausted, or k atoms are in.
    pub fn refit(&mut self, dict: Rows, y: &[f32], a: usize, k: usize) {
        let t = self.atoms.len();
        let da = dict.row(a);
        let gaa = dot64(da, da);
        // Solve L·w = G_Λa (forward substitution).
        let mut w: Vec<f64> = self.atoms.iter().map(|&b| dot64(dict.row(b), da)).collect();
        for i in 0..t {
            let s = w[i] - (0..i).map(|p| self.l[i * k + p] * w[p]).sum::<f64>();
            w[i] = s / self.l[i * k + i];
        }
        let pivot = gaa - w.iter().map(|v| v * v).sum::<f64>();
        if pivot.is_nan() || pivot <= PIVOT_FLOOR * gaa {
            self.done = true;
            return;
        }
        let lt = pivot.sqrt();
        self.l[t * k..t * k + t].copy_from_slice(&w);
        self.l[t * k + t] = lt;
        let zt = (dot64(da, y) - w.iter().zip(&self.z).map(|(a, b)| a * b).sum::<f64>()) / lt;
        self.z.push(zt);
        self.atoms.push(a);
        // x = L⁻ᵀ·z (back substitution).
        let n = t + 1;
        let mut x = self.z.clone();
        for i in (0..n).rev() {
            let s = x[i] - (i + 1..n).map(|p| self.l[p * k + i] * x[p]).sum::<f64>();
            x[i] = s / self.l[i * k + i];
        }
        self.x = x;
        let energy = self.yy - self.z.iter().map(|v| v * v).sum::<f64>();
        if energy <= RESIDUAL_FLOOR * self.yy || n >= k {
            self.done = true;
        }
    }

    pub fn combination(self) -> Combination {
        Combination {
            atoms: self.atoms,
            coefs: self.x,
        }
    }
}

/// Σ a·b in f64, eight running sums (summed in a fixed order) so the loop vectorises.
#[inline]
pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += f64::from(x[l]) * f64::from(y[l]);
        }
    }
    for (x, y) in ra.iter().zip(rb) {
        acc[0] += f64::from(*x) * f64::from(*y);
    }
    acc.iter().sum()
}

/// out (n × S, row-major) = a (n × d) · dictᵀ, in column blocks over the threads.
fn products(a: &[f32], n: usize, dict: Rows, out: &mut [f32]) {
    const BLOCK: usize = 1024;
    let (s, d) = (dict.rows, dict.cols);
    let (Ok(a), Ok(dm), Ok(mut o)) = (
        ArrayView2::from_shape((n, d), a),
        ArrayView2::from_shape((s, d), dict.data),
        ArrayViewMut2::from_shape((n, s), out),
    ) else {
        return; // Shapes agree by construction.
    };
    let parts: Vec<_> = o
        .axis_chunks_iter_mut(Axis(1), BLOCK)
        .zip(dm.axis_chunks_iter(Axis(0), BLOCK))
        .collect();
    parts.into_par_iter().for_each(|(mut o, dm)| {
        general_mat_mul(1.0, &a, &dm.t(), 0.0, &mut o);
    });
}

/// Columns of G = D·Dᵀ for the atoms selected so far, by atom.
struct Gram {
    s: usize,
    slot: Vec<u32>,
    data: Vec<f32>,
    cap: usize,
}

impl Gram {
    fn new(s: usize) -> Gram {
        Gram {
            s,
            slot: vec![u32::MAX; s],
            data: Vec::new(),
            cap: (CACHE_BYTES / (4 * s.max(1))).min(s),
        }
    }

    /// All of G at once, when it fits [`CACHE_BYTES`] and the targets are expected to select
    /// most atoms anyway: the upper part by GEMM, the lower part mirrored from it, so every
    /// product is computed once (fetching columns one by one computes G[i, j] and G[j, i]).
    /// The values are those `fetch` would give: the same products summed in the same order.
    fn full(dict: Rows) -> Gram {
        let s = dict.rows;
        let mut data = vec![0f32; s * s];
        upper_rows(dict, &mut data);
        mirror(&mut data, s);
        Gram {
            s,
            slot: (0..s as u32).collect(),
            data,
            cap: s,
        }
    }

    /// Whether [`Gram::full`] is the cheaper way: it fits, and the selections expected
    /// (targets × k) reach the dictionary's size.
    fn full_pays(s: usize, targets: usize, k: usize) -> bool {
        s.saturating_mul(s).saturating_mul(4) <= CACHE_BYTES && targets.saturating_mul(k) >= s
    }

    fn col(&self, a: usize) -> &[f32] {
        let i = self.slot[a] as usize;
        &self.data[i * self.s..(i + 1) * self.s]
    }

    /// Compute the columns of `atoms` not held yet.
    fn fetch(&mut self, dict: Rows, atoms: &mut Vec<usize>) {
        atoms.retain(|&a| self.slot[a] == u32::MAX);
        atoms.sort_unstable();
        atoms.dedup();
        if atoms.is_empty() {
            return;
        }
        let d = dict.cols;
        let mut rows = vec![0f32; atoms.len() * d];
        for (dst, &a) in rows.chunks_mut(d).zip(atoms.iter()) {
            dst.copy_from_slice(dict.row(a));
        }
        let first = self.data.len() / self.s;
        self.data
            .resize(self.data.len() + atoms.len() * self.s, 0.0);
        products(&rows, atoms.len(), dict, &mut self.data[first * self.s..]);
        for (i, &a) in atoms.iter().enumerate() {
            self.slot[a] = (first + i) as u32;
        }
    }

    /// Between blocks: keep at most `cap` columns (the first computed).
    fn trim(&mut self) {
        if self.data.len() / self.s.max(1) > self.cap {
            for v in self.slot.iter_mut().filter(|v| **v as usize >= self.cap) {
                *v = u32::MAX;
            }
            self.data.truncate(self.cap * self.s);
        }
    }
}

/// The atom of largest |α₀ − G_Λ·x| not yet selected (the first on a tie); None when every
/// correlation is 0. Each value subtracts the atoms' terms in selection order, [`CHUNK`] values
/// at a time.
fn pick(p: &Pursuit, a0: &[f32], gram: &Gram, c: &mut [f32]) -> Option<usize> {
    let cols: Vec<(&[f32], f32)> = p
        .atoms
        .iter()
        .zip(&p.x)
        .map(|(&a, &x)| (gram.col(a), x as f32))
        .collect();
    for (i, (cs, src)) in c.chunks_mut(CHUNK).zip(a0.chunks(CHUNK)).enumerate() {
        cs.copy_from_slice(src);
        let at = i * CHUNK;
        for (g, x) in &cols {
            for (ci, gi) in cs.iter_mut().zip(&g[at..at + src.len()]) {
                *ci -= x * gi;
            }
        }
    }
    for &a in &p.atoms {
        c[a] = 0.0;
    }
    let (mut best, mut at) = (0f32, None);
    for (i, v) in c.iter().enumerate() {
        if v.abs() > best {
            best = v.abs();
            at = Some(i);
        }
    }
    at
}

/// Rows [r0, r0 + TILE) of G from column r0 on, one GEMM per band over the threads.
fn upper_rows(dict: Rows, g: &mut [f32]) {
    let (n, d) = (dict.rows, dict.cols);
    let Ok(dm) = ArrayView2::from_shape((n, d), dict.data) else {
        return; // Shapes agree by construction.
    };
    g.par_chunks_mut(TILE * n)
        .enumerate()
        .for_each(|(band, rows)| {
            let r0 = band * TILE;
            let h = rows.len() / n;
            let Ok(mut o) = ArrayViewMut2::from_shape((h, n), rows) else {
                return;
            };
            let a = dm.slice(s![r0..r0 + h, ..]);
            let b = dm.slice(s![r0.., ..]);
            general_mat_mul(1.0, &a, &b.t(), 0.0, &mut o.slice_mut(s![.., r0..]));
        });
}

/// Fill G below the computed bands from their transposes, 32 × 32 at a time.
fn mirror(g: &mut [f32], n: usize) {
    const B: usize = 32;
    for r0 in (TILE..n).step_by(TILE) {
        let (above, band) = g.split_at_mut(r0 * n);
        let band = &mut band[..(n - r0).min(TILE) * n];
        band.par_chunks_mut(B * n)
            .enumerate()
            .for_each(|(q, rows)| {
                let first = r0 + q * B;
                let h = rows.len() / n;
                for c0 in (0..r0).step_by(B) {
                    for c in c0..c0 + B {
                        let src = &above[c * n + first..c * n + first + h];
                        for (i, v) in src.iter().enumerate() {
                            rows[i * n + c] = *v;
                        }
                    }
                }
            });
    }
}

/// Targets per block: α₀ and the columns one block may add stay near 1 GiB.
fn block_targets(s: usize, k: usize) -> usize {
    ((1usize << 30) / (4 * s.max(1) * (k + 1))).clamp(16, 512)
}

/// Each target row as a combination of at most `k` dictionary rows (same width).
pub fn pursue(dict: Rows, targets: Rows, k: usize) -> Vec<Combination> {
    let s = dict.rows;
    let k = k.min(s);
    let mut gram = if Gram::full_pays(s, targets.rows, k) {
        Gram::full(dict)
    } else {
        Gram::new(s)
    };
    let b = block_targets(s, k);
    let mut out = Vec::with_capacity(targets.rows);
    for r0 in (0..targets.rows).step_by(b) {
        let r1 = (r0 + b).min(targets.rows);
        let ys = &targets.data[r0 * targets.cols..r1 * targets.cols];
        let mut a0 = vec![0f32; (r1 - r0) * s];
        products(ys, r1 - r0, dict, &mut a0);
        let mut ps: Vec<Pursuit> = (r0..r1).map(|i| Pursuit::new(targets.row(i), k)).collect();
        for _ in 0..k {
            if ps.iter().all(|p| p.done) {
                break;
            }
            ps.par_iter_mut()
                .zip(a0.par_chunks(s))
                .enumerate()
                .for_each_init(
                    || vec![0f32; s],
                    |c, (j, (p, a0))| {
                        if p.done {
                            return;
                        }
                        match pick(p, a0, &gram, c) {
                            Some(a) => p.refit(dict, targets.row(r0 + j), a, k),
                            None => p.done = true,
                        }
                    },
                );
            let mut need: Vec<usize> = ps
                .iter()
                .filter(|p| !p.done)
                .filter_map(|p| p.atoms.last().copied())
                .collect();
            gram.fetch(dict, &mut need);
        }
        gram.trim();
        out.extend(ps.into_iter().map(Pursuit::combination));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed, 7);
        (0..n * d).map(|_| r.normal() as f32).collect()
    }

    #[test]
    fn an_exact_sparse_combination_is_recovered_and_stops_early() {
        let (s, d) = (60, 32);
        let dict = random(s, d, 1);
        let want = [(3usize, 0.5f64), (17, -1.25), (41, 2.0)];
        let y: Vec<f32> = (0..d)
            .map(|c| {
                want.iter()
                    .map(|&(a, x)| x * f64::from(dict[a * d + c]))
                    .sum::<f64>() as f32
            })
            .collect();
        let dr = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let got = pursue(
            dr,
            Rows {
                data: &y,
                rows: 1,
                cols: d,
            },
            8,
        );
        let mut pairs: Vec<(usize, f64)> = got[0]
            .atoms
            .iter()
            .copied()
            .zip(got[0].coefs.clone())
            .collect();
        pairs.sort_by_key(|p| p.0);
        assert_eq!(pairs.len(), 3, "stops once the residual is gone: {pairs:?}");
        for ((a, x), (wa, wx)) in pairs.iter().zip(want) {
            assert_eq!(*a, wa);
            assert!((x - wx).abs() < 1e-5, "{x} vs {wx}");
        }
    }

    #[test]
    fn the_full_gram_equals_the_columns_fetched_one_by_one_bit_for_bit() {
        // Two bands (TILE + 77 rows): the second band's lower part is mirrored from the first.
        let (s, d) = (TILE + 77, 19);
        let dict = random(s, d, 4);
        let dr = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let full = Gram::full(dr);
        let mut lazy = Gram::new(s);
        let mut atoms = vec![0, 5, TILE - 1, TILE, TILE + 40, s - 1];
        lazy.fetch(dr, &mut atoms.clone());
        atoms.sort_unstable();
        for a in atoms {
            let (f, l) = (full.col(a), lazy.col(a));
            assert!(
                f.iter().zip(l).all(|(x, y)| x.to_bits() == y.to_bits()),
                "column {a}"
            );
            let want: Vec<f64> = (0..s).map(|j| dot64(dr.row(a), dr.row(j))).collect();
            for (j, (x, w)) in f.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*x) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "G[{j}, {a}]"
                );
            }
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count_or_the_block() {
        let (s, d, t) = (300, 24, 40);
        let dict = random(s, d, 2);
        let ys = random(t, d, 3);
        let dr = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let yr = Rows {
            data: &ys,
            rows: t,
            cols: d,
        };
        let all = pursue(dr, yr, 10);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(one.install(|| pursue(dr, yr, 10)), all);
        let alone = pursue(
            dr,
            Rows {
                data: yr.row(7),
                rows: 1,
                cols: d,
            },
            10,
        );
        assert_eq!(alone[0], all[7]);
        assert!(all.iter().all(|c| c.atoms.len() == 10));
    }
}
