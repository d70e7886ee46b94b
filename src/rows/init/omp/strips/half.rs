//! The selected columns in bf16 and the pick re-checked exactly (AVX-512 BF16).
//!
//! Row n's value as the reference computes it is v = α₀ ⊖ x₁⊗g₁ ⊖ … ⊖ x_t⊗g_t in f32 (xⱼ the
//! coefficients rounded to f32, gⱼ = G\[aⱼ\]\[n\]). Here x̃ⱼ and g̃ⱼ are their bf16 roundings, and
//! one pass of `vdpbf16ps` gives c̃ = α₀ ⊖ fl(Σ x̃ⱼ·g̃ⱼ) and e = fl(Σ |x̃ⱼ|·|g̃ⱼ|) (the products
//! of bf16 pairs are exact in f32; the sums round to nearest, subnormals flushed). With
//! u = 2⁻⁸ (bf16's rounding), γₘ = m·2⁻²⁴/(1 − m·2⁻²⁴) (f32 sums of m terms) and E the exact
//! α₀ − Σ xⱼ·gⱼ:
//! - |v − E| ≤ γ₂ₜ·(|α₀| + P), P = Σ |xⱼ·gⱼ|;
//! - |c̃ − Ẽ| ≤ γₜ₊₁·(|α₀| + P̃), Ẽ = α₀ − Σ x̃ⱼ·g̃ⱼ, P̃ = Σ |x̃ⱼ·g̃ⱼ| ≤ e/(1 − γₜ);
//! - |Ẽ − E| ≤ (2u + u²)·P, and P ≤ P̃/(1 − u)².
//!
//! So |c̃ − v| ≤ β·e + γ·|α₀| + τ with β = ((2u + u² + γ₂ₜ)/(1 − u)² + γₜ₊₁)/(1 − γₜ),
//! γ = γ₂ₜ + γₜ₊₁, and τ covering the flushed subnormals (at most 2⁻¹²⁶ per product or sum,
//! |x|·2⁻¹²⁶ or gmax·2⁻¹²⁶ per flushed input). [`bounds`] takes β and γ a quarter larger (at
//! least 2⁻¹⁸ for γ): that covers the f32 roundings in computing the bound B and |c̃| ± B. The
//! row holding the largest |v| has |c̃| + B at least the largest |c̃| − B of any row, so it is
//! among the rows kept; those are recomputed as the reference does and the first largest wins.
//! Selected atoms count as 0 in both (their value and bound masked to 0). Where the sums could
//! overflow, or too many rows are kept, the step is computed the reference's way in full.

use super::super::bf16::{bf16, usable as bf16_usable, Kernel};
use super::super::gram::Gram;
use super::super::pick::{pick_one, value_at};

/// Rows of a strip: four AVX-512 vectors of results in [`x86::scan`].
const W: usize = 64;

/// Rows kept for the exact re-check above which the step is computed in full instead.
const MAX_KEPT: usize = 256;

/// Whether this CPU runs the kernel (and bf16 is not switched off).
pub(super) fn usable() -> bool {
    bf16_usable() && Kernel::Avx512Bf16.runs_here()
}

/// One target's selected columns as bf16 pairs: strip q, pair p holds rows q·W.. at
/// (q·kp + p)·W, column 2p in the low half of each word and 2p + 1 in the high half (zeros
/// past S; a pair's unused half holds an earlier target's finite value, multiplied by 0).
pub(super) struct Half {
    s: usize,
    kp: usize,
    cols: usize,
    data: Vec<u32>,
    /// Per strip, its rows that are selected atoms.
    sel: Vec<u64>,
    /// α₀ padded with zeros to whole strips, and its largest |value|.
    a0: Vec<f32>,
    a0_max: f32,
    /// Per row |c̃| + B (0 for selected atoms), and per strip its largest.
    upper: Vec<f32>,
    strip_upper: Vec<f32>,
    /// The coefficients' bf16 pairs, as they are and without their signs.
    xw: Vec<u32>,
    xa: Vec<u32>,
    gmax: f32,
    kept: Vec<usize>,
}

impl Half {
    pub(super) fn new(s: usize, k: usize, gmax: f32) -> Half {
        let (sp, kp) = (s.next_multiple_of(W), k.div_ceil(2));
        Half {
            s,
            kp,
            cols: 0,
            data: vec![0; sp * kp],
            sel: vec![0; sp / W],
            a0: vec![0.0; sp],
            a0_max: 0.0,
            upper: vec![0.0; sp],
            strip_upper: vec![0.0; sp / W],
            xw: Vec::with_capacity(kp),
            xa: Vec::with_capacity(kp),
            gmax,
            kept: Vec::new(),
        }
    }

    /// Start a target with correlations `a0`.
    pub(super) fn clear(&mut self, a0: &[f32]) {
        self.cols = 0;
        self.sel.fill(0);
        self.a0[..a0.len()].copy_from_slice(a0);
        // NaN if any value is (then every step is computed in full).
        self.a0_max = a0.iter().fold(0f32, |m, v| {
            if v.abs() > m || v.is_nan() {
                v.abs()
            } else {
                m
            }
        });
    }

    /// Append atom `a`'s column of S values (at most 2·kp).
    pub(super) fn push(&mut self, a: usize, col: &[f32]) {
        if self.cols == 2 * self.kp {
            return; // A pursuit selects at most k atoms.
        }
        let (p, shift) = (self.cols / 2, 16 * (self.cols % 2));
        let keep = !(0xffffu32 << shift);
        for (q, part) in col.chunks(W).enumerate() {
            let at = (q * self.kp + p) * W;
            for (w, &g) in self.data[at..at + part.len()].iter_mut().zip(part) {
                *w = (*w & keep) | (u32::from(bf16(g)) << shift);
            }
        }
        self.sel[a / W] |= 1 << (a % W);
        self.cols += 1;
    }

    /// The reference pick (see the module's text).
    pub(super) fn pick(
        &mut self,
        a0: &[f32],
        xs: &[f32],
        atoms: &[usize],
        gram: &Gram,
    ) -> Option<usize> {
        let sx: f64 = xs.iter().map(|x| f64::from(x.abs())).sum();
        let big = 1.1 * (f64::from(self.a0_max) + sx * f64::from(self.gmax));
        // Also where a coefficient is not a number (`big` is then NaN).
        let fits = big < 1e30;
        if fits && xs.len() == self.cols && self.keep(xs, sx) {
            self.best_kept(a0, xs, atoms, gram)
        } else {
            pick_one(a0, atoms, xs, gram, &mut vec![0f32; self.s])
        }
    }

    /// Fill `kept` with every row that may hold the largest |v|; false where the kernel does not
    /// run here or too many are kept.
    fn keep(&mut self, xs: &[f32], sx: f64) -> bool {
        self.xw.clear();
        self.xa.clear();
        for pair in xs.chunks(2) {
            let lo = u32::from(bf16(pair[0]));
            let hi = pair.get(1).map_or(0, |&x| u32::from(bf16(x)));
            self.xw.push(lo | hi << 16);
            self.xa.push((lo | hi << 16) & 0x7fff_7fff);
        }
        let b = bounds(xs.len(), sx, f64::from(self.gmax));
        let Some(top) = scan(self, b) else {
            return false;
        };
        self.kept.clear();
        for (q, &u) in self.strip_upper.iter().enumerate() {
            if u < top {
                continue;
            }
            for (i, &v) in self.upper[q * W..(q + 1) * W].iter().enumerate() {
                let n = q * W + i;
                if v >= top && n < self.s {
                    self.kept.push(n);
                }
            }
            if self.kept.len() > MAX_KEPT {
                return false;
            }
        }
        true
    }

    /// The first largest exact |v| > 0 among the kept rows not selected.
    fn best_kept(&self, a0: &[f32], xs: &[f32], atoms: &[usize], gram: &Gram) -> Option<usize> {
        let (mut best, mut at) = (0f32, None);
        for &n in &self.kept {
            if self.sel[n / W] >> (n % W) & 1 == 1 {
                continue;
            }
            let v = value_at(n, a0, atoms, xs, gram).abs();
            if v > best {
                (best, at) = (v, Some(n));
            }
        }
        at
    }
}

/// The bound's factors for t terms: (β, γ, τ) as in the module's text, rounded up to f32.
fn bounds(t: usize, sx: f64, gmax: f64) -> [f32; 3] {
    let u = 2f64.powi(-8);
    let g = |m: usize| {
        let m = m as f64 * 2f64.powi(-24);
        m / (1.0 - m)
    };
    let beta = ((2.0 * u + u * u + g(2 * t)) / ((1.0 - u) * (1.0 - u)) + g(t + 1)) / (1.0 - g(t));
    let gamma = (g(2 * t) + g(t + 1)).max(2f64.powi(-18));
    let tau = (sx + t as f64 * (gmax + 8.0) + 8.0) * 2f64.powi(-120);
    [
        (1.25 * beta) as f32,
        (1.25 * gamma) as f32,
        (2.0 * tau) as f32,
    ]
}

/// One pass over the strips: `upper` and `strip_upper`, and the largest |c̃| − B of any row
/// (the floor the largest |v| is at or above). None where the kernel does not run here.
fn scan(h: &mut Half, b: [f32; 3]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    if usable() {
        // SAFETY: the CPU has AVX-512F and AVX-512 BF16 (`usable`).
        return Some(unsafe { x86::scan(h, b) });
    }
    let _ = (h, b);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::rows::init::omp::strips::half::{Half, W};
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn bh(x: __m512i) -> __m512bh {
        // SAFETY: both are 64 bytes of plain bits.
        unsafe { std::mem::transmute(x) }
    }

    /// [`super::scan`]: per strip, c̃ and e for its W rows in 4 × 2 accumulators while every
    /// selected pair passes, then B = β·e + γ·|α₀| + τ, masked to 0 with c̃ on selected rows.
    ///
    /// # Safety
    /// AVX-512F and AVX-512 BF16 present.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn scan(h: &mut Half, [beta, gamma, tau]: [f32; 3]) -> f32 {
        let (np, kp) = (h.xw.len(), h.kp);
        let signs = _mm512_set1_epi32(0x7fff_7fff);
        let (vb, vg, vt) = (
            _mm512_set1_ps(beta),
            _mm512_set1_ps(gamma),
            _mm512_set1_ps(tau),
        );
        let mut floor = _mm512_set1_ps(f32::NEG_INFINITY);
        for q in 0..h.sel.len() {
            let strip = &h.data[q * kp * W..(q * kp + np) * W];
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut err = [_mm512_setzero_ps(); 4];
            for (pair, (&xw, &xa)) in strip.chunks_exact(W).zip(h.xw.iter().zip(&h.xa)) {
                let (w, a) = (
                    bh(_mm512_set1_epi32(xw as i32)),
                    bh(_mm512_set1_epi32(xa as i32)),
                );
                for r in 0..4 {
                    // SAFETY: `pair` holds W = 64 words, 16 per r.
                    let g = unsafe { _mm512_loadu_si512(pair.as_ptr().add(16 * r).cast()) };
                    acc[r] = _mm512_dpbf16_ps(acc[r], bh(g), w);
                    err[r] = _mm512_dpbf16_ps(err[r], bh(_mm512_and_si512(g, signs)), a);
                }
            }
            let mut most = _mm512_setzero_ps();
            for r in 0..4 {
                let at = q * W + 16 * r;
                let free = !((h.sel[q] >> (16 * r)) as u16);
                // SAFETY: `a0` and `upper` hold whole strips: 16 values at `at`.
                let x0 = unsafe { _mm512_loadu_ps(h.a0.as_ptr().add(at)) };
                let c = _mm512_abs_ps(_mm512_sub_ps(x0, acc[r]));
                let bound = _mm512_add_ps(
                    _mm512_add_ps(
                        _mm512_mul_ps(vb, err[r]),
                        _mm512_mul_ps(vg, _mm512_abs_ps(x0)),
                    ),
                    vt,
                );
                let (c, bound) = (
                    _mm512_maskz_mov_ps(free, c),
                    _mm512_maskz_mov_ps(free, bound),
                );
                let up = _mm512_add_ps(c, bound);
                floor = _mm512_max_ps(floor, _mm512_sub_ps(c, bound));
                most = _mm512_max_ps(most, up);
                // SAFETY: as above.
                unsafe { _mm512_storeu_ps(h.upper.as_mut_ptr().add(at), up) };
            }
            h.strip_upper[q] = _mm512_reduce_max_ps(most);
        }
        _mm512_reduce_max_ps(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::pursuit::Rows;
    use super::*;
    use crate::rng::Rng;

    /// After each column is added, every row's |c̃| + B is at least its exact |v| (computed in
    /// f64 from the same f32 inputs, within the reference's own rounding), and the floor is at
    /// most the largest: the kernel's values and the bound hold together. Columns of very
    /// different sizes and coefficients of both signs.
    #[test]
    fn every_value_is_within_its_bound() {
        if !usable() {
            eprintln!("skipped: this CPU does not run vdpbf16ps");
            return;
        }
        let (s, d, k) = (333, 40, 9);
        let mut r = Rng::new(31, 7);
        let dict: Vec<f32> = (0..s * d)
            .map(|i| (r.normal() * [1.0, 1e-4, 50.0][i / d % 3]) as f32)
            .collect();
        let dr = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let gram = Gram::full(dr);
        let super::super::Copy::Bf16 { gmax } = super::super::copy_for(dr) else {
            panic!("dictionary fits bf16");
        };
        let a0: Vec<f32> = (0..s).map(|_| (r.normal() * 30.0) as f32).collect();
        let mut h = Half::new(s, k, gmax);
        h.clear(&a0);
        let (mut atoms, mut xs) = (Vec::new(), Vec::new());
        for j in 0..k {
            let sx: f64 = xs.iter().map(|x: &f32| f64::from(x.abs())).sum();
            let _kept_few = h.keep(&xs, sx); // `upper` is filled either way

            let exact: Vec<f64> = (0..s)
                .map(|n| {
                    let v = f64::from(a0[n])
                        - atoms
                            .iter()
                            .zip(&xs)
                            .map(|(&a, &x): (&usize, &f32)| {
                                f64::from(x) * f64::from(gram.col(a)[n])
                            })
                            .sum::<f64>();
                    if atoms.contains(&n) {
                        0.0
                    } else {
                        v.abs()
                    }
                })
                .collect();
            let slack = |n: usize| 1e-6 * f64::from(h.upper[n]) + 1e-30;
            for (n, v) in exact.iter().enumerate() {
                assert!(
                    f64::from(h.upper[n]) + slack(n) >= *v,
                    "step {j}, row {n}: {} < {v}",
                    h.upper[n]
                );
            }
            let a = (j * 37 + 5) % s;
            atoms.push(a);
            xs.push((r.normal() * [1.0, 300.0, 0.01][j % 3]) as f32);
            h.push(a, gram.col(a));
        }
    }
}
