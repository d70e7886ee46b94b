//! Batch-OMP with the whole Gram held, one target at a time through all its steps: as each atom
//! is selected its column of G is copied once into the thread's own strips, where the selected
//! columns' entries for a stretch of [`W`] rows lie together. Each step's correlations
//! α₀ − G_Λ·x then read only that copy (k·S values at most, a few MiB: it stays in the cache
//! between steps), W rows at a time held in registers while every selected column passes.
//! Reading G_Λ from the whole Gram at every step (or, as before, panels of it shared by a block
//! of targets) was bound by memory; this reads each selected column from memory once.
//!
//! The pick is [`super::pick`]'s: the values are α₀ minus each selected atom's term in
//! selection order, in f32, with the same multiplications and subtractions (no FMA), and the
//! first largest |value| among atoms not selected wins; the refit is [`Pursuit::refit`]'s. So the
//! combinations are those of Batch-OMP by columns. Two copies compute that pick:
//! - [`Strips`]: the columns in f32, the values computed exactly as the reference does;
//! - [`half::Half`] (AVX-512 BF16): the columns in bf16 pairs, `vdpbf16ps` computing
//!   approximate values and a bound on their error in one pass; only the rows whose value may be
//!   the largest are recomputed as the reference does, from the f32 Gram.

mod half;

use super::gram::{products, Gram};
use super::pick::largest;
use super::pursuit::{dot64, Combination, Pursuit, Rows};
use rayon::prelude::*;

/// Rows of a strip of [`Strips`]: the values worked on together, kept in registers (four
/// AVX-512 vectors).
const W: usize = 64;
/// Memory for the targets' α₀ = D·y computed by one GEMM (S floats each), one buffer reused.
const A0_BYTES: usize = 64 << 20;

/// Which copy of the selected columns the pursuit keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Copy {
    F32,
    /// bf16 pairs with the exact re-check; `gmax` bounds every |G| entry.
    Bf16 {
        gmax: f32,
    },
}

/// The bf16 copy where this CPU runs `vdpbf16ps` and every Gram entry fits it with room for the
/// bound's sums, else f32.
pub(super) fn copy_for(dict: Rows) -> Copy {
    if !half::usable() {
        return Copy::F32;
    }
    // The largest ‖D[a]‖², NaN if any is.
    let norm2 = (0..dict.rows)
        .map(|a| dot64(dict.row(a), dict.row(a)))
        .fold(0f64, |m, v| if v > m || v.is_nan() { v } else { m });
    // |G[a][n]| ≤ ‖D[a]‖·‖D[n]‖, and the f32 sum exceeds the exact one by at most γ_d.
    let gmax = norm2 * (1.0 + dict.cols as f64 * 2f64.powi(-23)) + f64::from(f32::MIN_POSITIVE);
    if gmax.is_finite() && gmax < 1e30 {
        Copy::Bf16 {
            gmax: (gmax * (1.0 + 1e-6)) as f32,
        }
    } else {
        Copy::F32
    }
}

/// Each target row as a combination of at most `k` dictionary rows, with the whole Gram given.
pub(super) fn pursue(
    dict: Rows,
    targets: Rows,
    k: usize,
    gram: &Gram,
    copy: Copy,
) -> Vec<Combination> {
    let s = dict.rows;
    let b = (A0_BYTES / (4 * s.max(1))).max(16);
    let mut out = Vec::with_capacity(targets.rows);
    let mut all = vec![0f32; b.min(targets.rows) * s];
    for r0 in (0..targets.rows).step_by(b) {
        let r1 = (r0 + b).min(targets.rows);
        let ys = &targets.data[r0 * targets.cols..r1 * targets.cols];
        let a0 = &mut all[..(r1 - r0) * s];
        products(ys, r1 - r0, dict, a0);
        let got: Vec<Combination> = (r0..r1)
            .into_par_iter()
            .map_init(
                || (Columns::new(s, k, copy), Vec::with_capacity(k * dict.cols)),
                |(st, rows), i| {
                    // By index, not by chunks: an empty dictionary still gives every target
                    // its (empty) combination.
                    let a0 = &a0[(i - r0) * s..(i - r0 + 1) * s];
                    one(dict, targets.row(i), a0, gram, k, st, rows)
                },
            )
            .collect();
        out.extend(got);
    }
    out
}

/// One thread's copy of its current target's selected columns.
enum Columns {
    F32(Strips),
    Bf16(half::Half),
}

impl Columns {
    fn new(s: usize, k: usize, copy: Copy) -> Columns {
        match copy {
            Copy::F32 => Columns::F32(Strips::new(s, k)),
            Copy::Bf16 { gmax } => Columns::Bf16(half::Half::new(s, k, gmax)),
        }
    }
}

/// One target's pursuit. `rows` keeps the selected atoms' dictionary rows together for the
/// refit, which would otherwise read them from all over the dictionary at every step.
fn one(
    dict: Rows,
    y: &[f32],
    a0: &[f32],
    gram: &Gram,
    k: usize,
    st: &mut Columns,
    rows: &mut Vec<f32>,
) -> Combination {
    let mut p = Pursuit::new(y, k);
    rows.clear();
    match st {
        Columns::F32(st) => st.clear(),
        Columns::Bf16(st) => st.clear(a0),
    }
    while !p.done {
        let xs: Vec<f32> = p.x.iter().map(|&x| x as f32).collect();
        let pick = match st {
            Columns::F32(st) => st.pick(a0, &xs, &p.atoms),
            Columns::Bf16(st) => st.pick(a0, &xs, &p.atoms, gram),
        };
        match pick {
            Some(a) => {
                p.refit_rows(rows, dict.row(a), y, a, k);
                if !p.done {
                    rows.extend_from_slice(dict.row(a));
                    match st {
                        Columns::F32(st) => st.push(gram.col(a)),
                        Columns::Bf16(st) => st.push(a, gram.col(a)),
                    }
                }
            }
            None => p.done = true,
        }
    }
    p.combination()
}

/// One target's selected Gram columns in f32, by strips of [`W`] rows: strip q holds rows q·W..
/// of column j (in selection order) at (q·k + j)·W, zeros past S; and the values.
struct Strips {
    s: usize,
    k: usize,
    cols: usize,
    data: Vec<f32>,
    c: Vec<f32>,
}

impl Strips {
    fn new(s: usize, k: usize) -> Strips {
        let sp = s.next_multiple_of(W);
        Strips {
            s,
            k,
            cols: 0,
            data: vec![0f32; sp * k],
            c: vec![0f32; sp],
        }
    }

    /// Forget the columns (the next target's start); rows past S stay zero.
    fn clear(&mut self) {
        self.cols = 0;
    }

    /// Append a column of S values (at most k).
    fn push(&mut self, col: &[f32]) {
        if self.cols == self.k {
            return; // A pursuit selects at most k atoms.
        }
        for (q, part) in col.chunks(W).enumerate() {
            let at = (q * self.k + self.cols) * W;
            self.data[at..at + part.len()].copy_from_slice(part);
        }
        self.cols += 1;
    }

    /// The first largest |α₀ − Σ xs\[j\]·column j| among atoms not in `selected`.
    fn pick(&mut self, a0: &[f32], xs: &[f32], selected: &[usize]) -> Option<usize> {
        correlations(self, a0, xs);
        let c = &mut self.c[..self.s];
        for &a in selected {
            c[a] = 0.0;
        }
        largest(c).1
    }
}

/// `st.c` = α₀ − Σ xs\[j\]·column j, strip by strip. Compiled for AVX-512 or AVX where the CPU
/// has them (the same multiplications and subtractions, more at a time: the values do not
/// change).
fn correlations(st: &mut Strips, a0: &[f32], xs: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { correlations_avx512(st, a0, xs) };
        }
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX.
            return unsafe { correlations_avx(st, a0, xs) };
        }
    }
    correlations_body(st, a0, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn correlations_avx512(st: &mut Strips, a0: &[f32], xs: &[f32]) {
    correlations_body(st, a0, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn correlations_avx(st: &mut Strips, a0: &[f32], xs: &[f32]) {
    correlations_body(st, a0, xs)
}

#[inline(always)]
fn correlations_body(st: &mut Strips, a0: &[f32], xs: &[f32]) {
    let (k, n) = (st.k, xs.len().min(st.cols));
    for (q, (out, src)) in st.c.chunks_exact_mut(W).zip(a0.chunks(W)).enumerate() {
        let mut v = [0f32; W];
        v[..src.len()].copy_from_slice(src);
        let strip = &st.data[q * k * W..(q * k + n) * W];
        for (g, &x) in strip.chunks_exact(W).zip(xs) {
            let Ok(g) = <&[f32; W]>::try_from(g) else {
                continue; // Sizes agree by construction.
            };
            for i in 0..W {
                v[i] -= x * g[i];
            }
        }
        out.copy_from_slice(&v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed, 7);
        (0..n * d).map(|_| r.normal() as f32).collect()
    }

    fn rows(data: &[f32], rows: usize, cols: usize) -> Rows<'_> {
        Rows { data, rows, cols }
    }

    /// A dictionary (S not a multiple of W) whose rows 10 and 250 are equal and longest, rows
    /// of very different lengths, and targets of which the fourth is row 10 (a tie the first
    /// row must win) and the sixth is 0.
    fn case(s: usize, d: usize, t: usize) -> (Vec<f32>, Vec<f32>) {
        let mut dict = random(s, d, 21);
        for (a, row) in dict.chunks_mut(d).enumerate() {
            let scale = [1.0, 1e-3, 30.0, 0.5][a % 4];
            row.iter_mut().for_each(|v| *v *= scale);
        }
        dict[10 * d..11 * d].iter_mut().for_each(|v| *v *= 400.0);
        dict.copy_within(10 * d..11 * d, 250 * d);
        let mut ys = random(t, d, 22);
        ys[3 * d..4 * d].copy_from_slice(&dict[10 * d..11 * d]);
        ys[5 * d..6 * d].fill(0.0);
        (dict, ys)
    }

    /// Both copies give Batch-OMP by columns' combinations bit for bit, whatever the threads.
    #[test]
    fn both_copies_give_the_combinations_of_batch_omp_by_columns() {
        let (s, d, t, k) = (300, 24, 60, 14);
        let (dict, ys) = case(s, d, t);
        let (dr, yr) = (rows(&dict, s, d), rows(&ys, t, d));
        let gram = Gram::full(dr);
        let want = super::super::pursue_with(dr, yr, k, Gram::full(dr), 16);
        assert_eq!(want[3].atoms[0], 10, "a tie goes to the first row");
        assert!(want[5].atoms.is_empty());
        let copies = [Copy::F32, copy_for(dr)];
        if copies[1] == Copy::F32 {
            eprintln!("the bf16 copy skipped: this CPU does not run vdpbf16ps");
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        for copy in copies {
            assert_eq!(pursue(dr, yr, k, &gram, copy), want, "{copy:?}");
            assert_eq!(one.install(|| pursue(dr, yr, k, &gram, copy)), want);
        }
    }

    /// No atoms, or k = 0: every target still gets its combination, an empty one.
    #[test]
    fn an_empty_dictionary_or_k_zero_gives_every_target_an_empty_combination() {
        let (d, t) = (8, 5);
        let ys = random(t, d, 25);
        let yr = rows(&ys, t, d);
        let none = rows(&[], 0, d);
        let got = pursue(none, yr, 0, &Gram::full(none), Copy::F32);
        assert_eq!(got.len(), t);
        assert!(got.iter().all(|c| c.atoms.is_empty() && c.coefs.is_empty()));
        let dict = random(30, d, 26);
        let dr = rows(&dict, 30, d);
        let got = pursue(dr, yr, 0, &Gram::full(dr), copy_for(dr));
        assert_eq!(got.len(), t);
        assert!(got.iter().all(|c| c.atoms.is_empty()));
        assert_eq!(super::super::pursue(none, yr, 4).len(), t);
    }

    /// Many equal rows: more rows than [`half::MAX_KEPT`] may hold the largest value, so the
    /// bf16 copy computes that step in full; the combinations stay Batch-OMP's.
    #[test]
    fn many_tied_rows_are_computed_in_full_and_agree() {
        let (s, d, t, k) = (700, 16, 8, 6);
        let mut dict = random(s, d, 23);
        for a in 100..500 {
            dict.copy_within(0..d, a * d);
        }
        // Each target: 3·row 600 + row 0 + noise, so the second step finds 401 equal rows.
        let mut ys = random(t, d, 24);
        for y in ys.chunks_mut(d) {
            for (c, v) in y.iter_mut().enumerate() {
                *v = 3.0 * dict[600 * d + c] + dict[c] + 1e-3 * *v;
            }
        }
        let (dr, yr) = (rows(&dict, s, d), rows(&ys, t, d));
        let gram = Gram::full(dr);
        let want = super::super::pursue_with(dr, yr, k, Gram::full(dr), 16);
        assert_eq!(pursue(dr, yr, k, &gram, copy_for(dr)), want);
        assert_eq!(pursue(dr, yr, k, &gram, Copy::F32), want);
    }

    /// Random awkward cases: S below, at and around multiples of W; k past the width and past
    /// S; rows scaled over twelve orders of magnitude or to 10⁻²⁰, zero rows, rows repeated
    /// (negated or doubled); targets that are dictionary rows, exact combinations of two or
    /// three rows (the residual reaches 0 mid-pursuit), zero, or random. Both copies give
    /// Batch-OMP by columns' combinations bit for bit.
    #[test]
    fn random_awkward_cases_agree_with_batch_omp_by_columns() {
        if !half::usable() {
            eprintln!("the bf16 copy skipped: this CPU does not run vdpbf16ps");
        }
        let mut r = Rng::new(31, 9);
        for case in 0..CASES {
            let s = [1, 2, 5, 63, 64, 65, 127, 128, 129, 200][below(&mut r, 10)];
            let d = 1 + below(&mut r, 24);
            let t = 1 + below(&mut r, 10);
            let k = [1, 2, d, d + 3, s, s + 2, 9][below(&mut r, 7)];
            let dict = awkward_dictionary(&mut r, s, d, 100 + case);
            let ys = awkward_targets(&mut r, &dict, t, d, 200 + case);
            let (dr, yr) = (rows(&dict, s, d), rows(&ys, t, d));
            let gram = Gram::full(dr);
            let want = super::super::pursue_with(dr, yr, k, Gram::full(dr), 16);
            let what = format!("case {case}: S {s}, d {d}, T {t}, k {k}");
            assert_eq!(pursue(dr, yr, k, &gram, Copy::F32), want, "f32, {what}");
            assert_eq!(pursue(dr, yr, k, &gram, copy_for(dr)), want, "bf16, {what}");
        }
    }

    /// Uniform in 0..n.
    fn below(r: &mut Rng, n: usize) -> usize {
        (r.next_u64() % n as u64) as usize
    }

    /// S random rows, each then zeroed, a multiple of an earlier row (−1 or 2), or scaled by
    /// 10⁻⁶…10⁶ or 10⁻²⁰ (Gram entries below f32's normal range).
    fn awkward_dictionary(r: &mut Rng, s: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut dict = random(s, d, seed);
        for a in 0..s {
            let row = a * d..(a + 1) * d;
            match below(r, 8) {
                0 => dict[row].fill(0.0),
                1 if a > 0 => {
                    let from = below(r, a) * d;
                    let sign = [-1.0, 2.0][below(r, 2)];
                    for c in 0..d {
                        dict[a * d + c] = sign * dict[from + c];
                    }
                }
                _ => {
                    let e = match below(r, 6) {
                        0 => -20,
                        _ => below(r, 13) as i32 - 6,
                    };
                    dict[row].iter_mut().for_each(|v| *v *= 10f32.powi(e));
                }
            }
        }
        dict
    }

    /// T targets, each a dictionary row, a combination of two or three rows, zero, or random.
    fn awkward_targets(r: &mut Rng, dict: &[f32], t: usize, d: usize, seed: u64) -> Vec<f32> {
        let s = dict.len() / d;
        let mut ys = random(t, d, seed);
        for y in ys.chunks_mut(d) {
            match below(r, 4) {
                0 => {
                    let from = below(r, s) * d;
                    y.copy_from_slice(&dict[from..from + d]);
                }
                1 => {
                    y.fill(0.0);
                    for _ in 0..2 + below(r, 2) {
                        let (from, coef) = (below(r, s) * d, [1.0, -3.0, 0.5][below(r, 3)]);
                        for (v, x) in y.iter_mut().zip(&dict[from..from + d]) {
                            *v += coef * x;
                        }
                    }
                }
                2 => y.fill(0.0),
                _ => {}
            }
        }
        ys
    }

    /// How many random cases [`random_awkward_cases_agree_with_batch_omp_by_columns`] runs.
    const CASES: u64 = 300;
}
