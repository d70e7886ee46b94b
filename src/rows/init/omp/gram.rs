//! G = D·Dᵀ for the pursuit, and α₀ = Y·Dᵀ: either columns of G computed as atoms are selected
//! (kept across blocks up to [`CACHE_BYTES`]), or all of G at once (row a is column a).

use super::pursuit::Rows;
use crate::rows::gemm::sgemm;
use ndarray::{s, ArrayView2, ArrayViewMut2, Axis, ShapeBuilder};
use rayon::prelude::*;

/// Memory for cached Gram columns, kept across blocks of targets.
pub const CACHE_BYTES: usize = 4 << 30;
/// Rows of the full Gram computed by one GEMM (its upper part from the diagonal on).
pub(super) const TILE: usize = 1024;
/// Columns of D computed by one GEMM in [`products`].
const BLOCK: usize = 1024;

/// Columns of G = D·Dᵀ for the atoms selected so far (by atom), or all of G.
pub(super) struct Gram {
    pub s: usize,
    slot: Vec<u32>,
    pub data: Vec<f32>,
    cap: usize,
}

impl Gram {
    pub fn new(s: usize) -> Gram {
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
    /// Row a is column a (G is symmetric). The values are those `fetch` would give: the same
    /// products summed in the same order.
    pub fn full(dict: Rows) -> Gram {
        let s = dict.rows;
        let mut data = huge_zeroed(s * s);
        upper_rows(dict, &mut data, s);
        mirror(&mut data, s, s);
        Gram {
            s,
            slot: (0..s as u32).collect(),
            data,
            cap: s,
        }
    }

    /// Whether [`Gram::full`] is the cheaper way: it fits, and the selections expected
    /// (targets × k) reach the dictionary's size.
    pub fn full_pays(s: usize, targets: usize, k: usize) -> bool {
        s.saturating_mul(s).saturating_mul(4) <= CACHE_BYTES && targets.saturating_mul(k) >= s
    }

    /// Column `a`.
    pub fn col(&self, a: usize) -> &[f32] {
        let i = self.slot[a] as usize;
        &self.data[i * self.s..(i + 1) * self.s]
    }

    /// Compute the columns of `atoms` not held yet.
    pub fn fetch(&mut self, dict: Rows, atoms: &mut Vec<usize>) {
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
    pub fn trim(&mut self) {
        if self.data.len() / self.s.max(1) > self.cap {
            for v in self.slot.iter_mut().filter(|v| **v as usize >= self.cap) {
                *v = u32::MAX;
            }
            self.data.truncate(self.cap * self.s);
        }
    }
}

/// out (n × S, row-major) = a (n × d) · dictᵀ, in column blocks over the threads (knn's
/// distances too).
pub(crate) fn products(a: &[f32], n: usize, dict: Rows, out: &mut [f32]) {
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
        sgemm(&a, &dm.t(), &mut o, false);
    });
}

/// `n` zeros, in memory the kernel is asked to back with huge pages (Linux, a hint: ignored where
/// refused): the Gram and α₀ are GiBs read in scattered stretches.
pub(super) fn huge_zeroed(n: usize) -> Vec<f32> {
    let v = vec![0f32; n];
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (p, len) = (v.as_ptr() as usize, std::mem::size_of_val(v.as_slice()));
        let start = p.next_multiple_of(HUGE);
        if let Some(span) = (p + len).checked_sub(start).filter(|&l| l >= HUGE) {
            // SAFETY: the range lies inside `v`'s allocation; MADV_HUGEPAGE changes how its
            // pages are backed, never their contents.
            let _ = unsafe { libc::madvise(start as *mut libc::c_void, span, libc::MADV_HUGEPAGE) };
        }
    }
    v
}

/// Rows [r0, r0 + TILE) of G from column r0 on, one GEMM per band over the threads; rows `ld`
/// floats apart (rows past S are left alone).
fn upper_rows(dict: Rows, g: &mut [f32], ld: usize) {
    let (n, d) = (dict.rows, dict.cols);
    let Ok(dm) = ArrayView2::from_shape((n, d), dict.data) else {
        return; // Shapes agree by construction.
    };
    g.par_chunks_mut(TILE * ld.max(1))
        .enumerate()
        .for_each(|(band, rows)| {
            let r0 = band * TILE;
            let h = (rows.len() / ld).min(n.saturating_sub(r0));
            if h == 0 {
                return;
            }
            let Ok(mut o) = ArrayViewMut2::from_shape((h, n).strides((ld, 1)), rows) else {
                return;
            };
            let a = dm.slice(s![r0..r0 + h, ..]);
            let b = dm.slice(s![r0.., ..]);
            sgemm(&a, &b.t(), &mut o.slice_mut(s![.., r0..]), false);
        });
}

/// Fill G below the computed bands from their transposes, 32 × 32 at a time (rows `ld` apart).
fn mirror(g: &mut [f32], n: usize, ld: usize) {
    const B: usize = 32;
    for r0 in (TILE..n).step_by(TILE) {
        let (above, band) = g.split_at_mut(r0 * ld);
        let band = &mut band[..(n - r0).min(TILE) * ld];
        band.par_chunks_mut(B * ld)
            .enumerate()
            .for_each(|(q, rows)| {
                let first = r0 + q * B;
                let h = rows.len() / ld;
                for c0 in (0..r0).step_by(B) {
                    for c in c0..c0 + B {
                        let src = &above[c * ld + first..c * ld + first + h];
                        for (i, v) in src.iter().enumerate() {
                            rows[i * ld + c] = *v;
                        }
                    }
                }
            });
    }
}
