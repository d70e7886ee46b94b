//! Plain OMP by blocks of targets, no Gram: each step one GEMM C = R·Dᵀ of the block's residuals
//! R (computed in f64 as y − D_Λ·x, rounded to f32) against the dictionary, then per target the
//! first largest |C| among atoms not selected, and the same f64 refit as Batch-OMP
//! ([`Pursuit::refit`]): the same stops, and the same coefficients whenever the same atoms are
//! picked. The correlations are computed afresh from the residual rather than as α₀ − G_Λ·x, so
//! near-ties may go the other way. 2·k·S·d flops per target (GEMM-bound), memory B × S floats.
//! Each value is computed the same way whatever the thread count; results do not depend on it.

use super::gram::products;
use super::pick::largest;
use super::pursuit::{Combination, Pursuit, Rows};
use rayon::prelude::*;

/// Memory for one block's correlations C (B × S floats).
const C_BYTES: usize = 128 << 20;

/// Targets per block: C within [`C_BYTES`], at least 16 (the GEMM's rows), at most 512.
fn block_targets(s: usize) -> usize {
    (C_BYTES / (4 * s.max(1))).clamp(16, 512)
}

/// Each target row as a combination of at most `k` dictionary rows (`k` ≤ S).
pub(super) fn pursue(dict: Rows, targets: Rows, k: usize) -> Vec<Combination> {
    let b = block_targets(dict.rows);
    let mut out = Vec::with_capacity(targets.rows);
    for r0 in (0..targets.rows).step_by(b) {
        let r1 = (r0 + b).min(targets.rows);
        out.extend(pursue_block(dict, targets, r0..r1, k));
    }
    out
}

/// The targets `range` pursued together, step by step.
fn pursue_block(
    dict: Rows,
    targets: Rows,
    range: std::ops::Range<usize>,
    k: usize,
) -> Vec<Combination> {
    let (s, d) = (dict.rows, dict.cols);
    let r0 = range.start;
    let mut ps: Vec<Pursuit> = range.map(|i| Pursuit::new(targets.row(i), k)).collect();
    let mut c = Vec::new();
    for _ in 0..k {
        let active: Vec<usize> = (0..ps.len()).filter(|&j| !ps[j].done).collect();
        if active.is_empty() {
            break;
        }
        let mut r = vec![0f32; active.len() * d];
        r.par_chunks_mut(d.max(1))
            .zip(&active)
            .for_each(|(r, &j)| residual(dict, targets.row(r0 + j), &ps[j], r));
        // Only grown, never cleared: the GEMM writes every value it is given.
        if c.len() < active.len() * s {
            c.resize(active.len() * s, 0f32);
        }
        let c = &mut c[..active.len() * s];
        products(&r, active.len(), dict, c);
        let mut work: Vec<(&mut Pursuit, &mut [f32])> = ps
            .iter_mut()
            .filter(|p| !p.done)
            .zip(c.chunks_mut(s.max(1)))
            .collect();
        work.par_iter_mut().zip(&active).for_each(|((p, c), &j)| {
            for &a in &p.atoms {
                c[a] = 0.0;
            }
            match largest(c, 0).1 {
                Some(a) => p.refit(dict, targets.row(r0 + j), a, k),
                None => p.done = true,
            }
        });
    }
    ps.into_iter().map(Pursuit::combination).collect()
}

/// r = y − Σ x_a·D[a] in f64 (the atoms in selection order), rounded to f32.
fn residual(dict: Rows, y: &[f32], p: &Pursuit, r: &mut [f32]) {
    let mut acc: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
    for (&a, &x) in p.atoms.iter().zip(&p.x) {
        for (v, &da) in acc.iter_mut().zip(dict.row(a)) {
            *v -= x * f64::from(da);
        }
    }
    for (o, v) in r.iter_mut().zip(acc) {
        *o = v as f32;
    }
}
