//! One target's pursuit (the refit on the atoms selected so far, its stops) and the rows it works on.

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
        let da = dict.row(a);
        let w: Vec<f64> = self.atoms.iter().map(|&b| dot64(dict.row(b), da)).collect();
        self.refit_with(w, da, y, a, k);
    }

    /// [`Pursuit::refit`] with the selected atoms' rows given, in selection order, one after
    /// the other (`rows`: t·d values, a copy the caller keeps in the cache): the same dot
    /// products, so the same result.
    pub fn refit_rows(&mut self, rows: &[f32], da: &[f32], y: &[f32], a: usize, k: usize) {
        let w: Vec<f64> = rows
            .chunks_exact(da.len().max(1))
            .take(self.atoms.len())
            .map(|r| dot64(r, da))
            .collect();
        self.refit_with(w, da, y, a, k);
    }

    /// The refit from the selected atoms' dot products with atom `a`'s row `da`.
    fn refit_with(&mut self, mut w: Vec<f64>, da: &[f32], y: &[f32], a: usize, k: usize) {
        let t = self.atoms.len();
        debug_assert_eq!(w.len(), t, "one dot product per selected atom");
        let gaa = dot64(da, da);
        // Solve L·w = G_Λa (forward substitution).
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

/// Σ a·b in f64, eight running sums (summed in a fixed order) so the loop vectorises; compiled
/// for AVX-512 where the CPU has it (the same multiplications and additions, eight at a time:
/// the same result).
#[inline]
pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { dot64_avx512(a, b) };
    }
    dot64_body(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot64_avx512(a: &[f32], b: &[f32]) -> f64 {
    dot64_body(a, b)
}

#[inline(always)]
fn dot64_body(a: &[f32], b: &[f32]) -> f64 {
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
