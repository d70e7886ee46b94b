//! Plain OMP by blocks of targets, no Gram: each step one GEMM C = R·Dᵀ of the block's residuals
//! R (computed in f64 as y − D_Λ·x, rounded to f32) against the dictionary, then per target the
//! first largest |C| among atoms not selected, and the same f64 refit as Batch-OMP
//! ([`Pursuit::refit`]): the same stops, and the same coefficients whenever the same atoms are
//! picked. The correlations are computed afresh from the residual rather than as α₀ − G_Λ·x, so
//! near-ties may go the other way. 2·k·S·d flops per target (GEMM-bound), memory B × S floats.
//! On a CPU with AMX or AVX-512 BF16 ([`bf16_pays`]) the GEMM runs in bf16 fused with the pick
//! instead (no C stored): approximate correlations only narrow the candidates, and the largest
//! exact |c| among them is taken ([`super::exact_pick`]).
//! Each value is computed the same way whatever the thread count; results do not depend on it.

use super::bf16;
use super::exact_pick;
use super::gram::products;
use super::pick::largest;
use super::pursuit::{dot64, Combination, Pursuit, Rows};
use rayon::prelude::*;

/// Memory for one block's correlations C (B × S floats).
const C_BYTES: usize = 128 << 20;

/// Targets per block: C within [`C_BYTES`], at least 16 (the GEMM's rows), at most 512.
fn block_targets(s: usize) -> usize {
    (C_BYTES / (4 * s.max(1))).clamp(16, 512)
}

/// Targets per block in bf16 (no C is stored: the dictionary is read once per block and step).
const BF16_BLOCK: usize = 2048;

/// Dictionaries smaller than this (S·d values) stay on the f32 GEMM (packing and the exact
/// re-check would not pay).
const BF16_MIN_VALUES: usize = 1 << 20;

/// Each target row as a combination of at most `k` dictionary rows (`k` ≤ S).
pub(super) fn pursue(dict: Rows, targets: Rows, k: usize) -> Vec<Combination> {
    let packed = bf16_pays(dict, targets)
        .then(|| bf16::Packed::new(dict))
        .flatten();
    pursue_packed(dict, targets, k, packed.as_ref())
}

/// [`pursue`] with the bf16 dictionary given (None: the f32 GEMM).
pub(super) fn pursue_packed(
    dict: Rows,
    targets: Rows,
    k: usize,
    packed: Option<&bf16::Packed>,
) -> Vec<Combination> {
    let b = match packed {
        Some(_) => BF16_BLOCK,
        None => block_targets(dict.rows),
    };
    let mut out = Vec::with_capacity(targets.rows);
    for r0 in (0..targets.rows).step_by(b) {
        let r1 = (r0 + b).min(targets.rows);
        out.extend(pursue_block(dict, targets, r0..r1, k, packed));
    }
    out
}

/// A bf16 kernel usable, the dictionary large enough, and every target small enough for bf16
/// (a residual's entries are at most its norm, at most the target's).
pub(super) fn bf16_pays(dict: Rows, targets: Rows) -> bool {
    dict.rows * dict.cols >= BF16_MIN_VALUES
        && bf16::usable()
        && (0..targets.rows).all(|i| {
            let y = targets.row(i);
            dot64(y, y).sqrt() < 1e37
        })
}

/// The targets `range` pursued together, step by step. Each target's residual is formed right
/// after its refit, while the rows the refit read are still in the cache.
fn pursue_block(
    dict: Rows,
    targets: Rows,
    range: std::ops::Range<usize>,
    k: usize,
    packed: Option<&bf16::Packed>,
) -> Vec<Combination> {
    let (s, d) = (dict.rows, dict.cols.max(1));
    let r0 = range.start;
    let mut ps: Vec<Pursuit> = range.map(|i| Pursuit::new(targets.row(i), k)).collect();
    let mut res = vec![0f32; ps.len() * d];
    res.par_chunks_mut(d)
        .zip(&ps)
        .enumerate()
        .for_each(|(j, (r, p))| residual(dict, targets.row(r0 + j), p, r));
    let mut c = Vec::new();
    for _ in 0..k {
        let active: Vec<usize> = (0..ps.len()).filter(|&j| !ps[j].done).collect();
        if active.is_empty() {
            break;
        }
        let r: Vec<f32> = active
            .iter()
            .flat_map(|&j| &res[j * d..(j + 1) * d])
            .copied()
            .collect();
        let picks = match packed.and_then(|p| {
            let selected: Vec<&[usize]> = active.iter().map(|&j| &ps[j].atoms[..]).collect();
            exact_pick::pick(p, dict, &r, active.len(), &selected)
        }) {
            Some(picks) => picks,
            None => {
                // Only grown, never cleared: the GEMM writes every value it is given.
                if c.len() < active.len() * s {
                    c.resize(active.len() * s, 0f32);
                }
                let c = &mut c[..active.len() * s];
                products(&r, active.len(), dict, c);
                c.par_chunks_mut(s.max(1))
                    .zip(&active)
                    .map(|(c, &j)| {
                        for &a in &ps[j].atoms {
                            c[a] = 0.0;
                        }
                        largest(c).1
                    })
                    .collect()
            }
        };
        let mut work: Vec<(usize, (&mut Pursuit, &mut [f32]))> = ps
            .iter_mut()
            .zip(res.chunks_mut(d))
            .enumerate()
            .filter(|(_, (p, _))| !p.done)
            .collect();
        work.par_iter_mut()
            .zip(picks)
            .for_each(|((j, (p, r)), a)| match a {
                Some(a) => {
                    let y = targets.row(r0 + *j);
                    p.refit(dict, y, a, k);
                    if !p.done {
                        residual(dict, y, p, r);
                    }
                }
                None => p.done = true,
            });
    }
    ps.into_iter().map(Pursuit::combination).collect()
}

/// r = y − Σ x_a·D\[a\] in f64 (the atoms in selection order), rounded to f32.
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
