//! Orthogonal matching pursuit (Batch-OMP): each target row as a sparse combination of at most
//! k dictionary rows (greedy: the atom of largest |correlation| with the residual, then a
//! least-squares refit on every selected atom; no centring). Correlations in f32, from
//! α₀ = D·y (one GEMM per block of targets) minus G_Λ·x, G = D·Dᵀ. When the whole Gram fits and
//! most atoms will be selected anyway it is computed once (each product once) and the pursuit
//! runs one target at a time through all its steps (`strips`): each selected column copied
//! once into the thread's own cache-sized copy (in bf16 where the CPU has AVX-512 BF16, the pick
//! then re-checked exactly), every step's correlations read from there. Otherwise G's columns
//! are computed once per atom some target selects (a GEMM per step, kept across blocks up to
//! [`CACHE_BYTES`]) and every target of a block picks from them step by step (`pick`). The
//! refit in f64: the selected atoms' Gram and D·y entries as f64 dot products, an incremental
//! Cholesky factor, and ‖r‖² = ‖y‖² − ‖L⁻¹·D_Λ·y‖² for the stop. Every value is computed the
//! same way whatever the split of rows between threads, and the parts are joined in row order:
//! results do not depend on the thread count. Where the cost model says so (`strips_pay`,
//! `plain_pays`), plain OMP instead (`plain`: one GEMM R·Dᵀ per step, the same refit), in
//! bf16 where the CPU computes bf16 dot products (`bf16`: AMX tiles or AVX-512 BF16; the pick
//! re-checked exactly, `exact_pick`).
mod bf16;
mod exact_pick;
mod gram;
mod pick;
mod plain;
mod pursuit;
mod strips;

pub(crate) use gram::products;
pub use gram::CACHE_BYTES;
use gram::{huge_zeroed, Gram};
use pursuit::Pursuit;
pub use pursuit::{dot64, Combination, Rows, PIVOT_FLOOR, RESIDUAL_FLOOR};
use rayon::prelude::*;

/// Memory for the targets' α₀ = D·y worked on together (see [`block_targets`]).
const A0_BYTES: usize = 1 << 30;

/// Targets per block when picking from fetched columns: α₀ and the columns one block may add
/// stay near 1 GiB.
fn block_targets(s: usize, k: usize) -> usize {
    (A0_BYTES / (4 * s.max(1) * (k + 1))).clamp(16, 512)
}

/// α₀ = D·y for the targets `ys` (n of them), row-major.
fn correlations(ys: &[f32], n: usize, dict: Rows) -> Vec<f32> {
    let mut a0 = huge_zeroed(n * dict.rows);
    products(ys, n, dict, &mut a0);
    a0
}

/// This CPU's GEMM rate (f32 flop/s, 2 threads) and the rate at which the pick by columns reads
/// Gram columns (bytes/s): docs/benchmarks.md, "Issue 46 item 4" (GEMM 56–66 % of the measured
/// 329.9 GFLOP/s peak; the columns' correlation update 77 % of 299.4 s for 1.58 TB read).
const GEMM_RATE: f64 = 200e9;
const COLUMN_RATE: f64 = 7e9;

/// Whether plain OMP ([`plain::pursue`]: 2·k·S·d flops per target) costs less than Batch-OMP
/// with Gram columns fetched per selected atom (at most min(T·k, S) columns of 2·S·d flops
/// each, and each target reading k·(k − 1)/2 columns of S floats). Both costs divided by 2·S.
fn plain_pays(s: usize, d: usize, t: usize, k: usize) -> bool {
    let (s, d, t, k) = (s as f64, d as f64, t as f64, k as f64);
    let plain = t * k * d / GEMM_RATE;
    let columns = (t * k).min(s) * d / GEMM_RATE + t * k * (k - 1.0) / COLUMN_RATE;
    plain < columns
}

/// The rate at which [`strips`] reads its copy of the selected columns (bytes/s, 2 threads),
/// and plain OMP's in bf16 (flop/s, 2 threads, `vdpbf16ps`): docs/benchmarks.md, "Issue 46:
/// the whole Gram, one target at a time".
const STRIP_RATE: f64 = 110e9;
const BF16_RATE: f64 = 350e9;

/// Whether Batch-OMP by [`strips`] (the whole Gram: S²·d flops, α₀: 2·T·S·d, and each target
/// reading k·(k + 1)/2 columns of S values from its copy) costs less than plain OMP in bf16
/// (2·k·S·d flops per target).
fn strips_pay(s: usize, d: usize, t: usize, k: usize, copy: strips::Copy) -> bool {
    let (s, d, t, k) = (s as f64, d as f64, t as f64, k as f64);
    let bytes = match copy {
        strips::Copy::F32 => 4.0,
        strips::Copy::Bf16 { .. } => 2.0,
    };
    let gram = (s * s * d + 2.0 * t * s * d) / GEMM_RATE;
    let pick = t * k * (k + 1.0) / 2.0 * s * bytes / STRIP_RATE;
    gram + pick < 2.0 * t * k * s * d / BF16_RATE
}

/// Each target row as a combination of at most `k` dictionary rows (same width).
pub fn pursue(dict: Rows, targets: Rows, k: usize) -> Vec<Combination> {
    let s = dict.rows;
    let k = k.min(s);
    // In bf16 plain OMP's GEMM runs at ~5× (AMX) or ~2× (AVX-512 BF16) the f32 rate and needs
    // no correlations stored: where the whole Gram does not fit (issue 46's 2000 tokens) it
    // beats fetching columns; where it fits, the strips' reads of their copy are cheaper than
    // plain OMP's flops once there are enough targets (issue 46's 20000: docs/benchmarks.md).
    let bf16 = plain::bf16_pays(dict, targets);
    if Gram::full_pays(s, targets.rows, k) {
        let copy = strips::copy_for(dict);
        if !bf16 || strips_pay(s, dict.cols, targets.rows, k, copy) {
            return strips::pursue(dict, targets, k, &Gram::full(dict), copy);
        }
        return plain::pursue(dict, targets, k);
    }
    if bf16 || plain_pays(s, dict.cols, targets.rows, k) {
        return plain::pursue(dict, targets, k);
    }
    pursue_with(dict, targets, k, Gram::new(s), block_targets(s, k))
}

/// Batch-OMP step by step for blocks of `b` targets, picking from `gram`'s columns.
fn pursue_with(dict: Rows, targets: Rows, k: usize, mut gram: Gram, b: usize) -> Vec<Combination> {
    let mut out = Vec::with_capacity(targets.rows);
    for r0 in (0..targets.rows).step_by(b) {
        let r1 = (r0 + b).min(targets.rows);
        let ys = &targets.data[r0 * targets.cols..r1 * targets.cols];
        let a0 = correlations(ys, r1 - r0, dict);
        let mut ps: Vec<Pursuit> = (r0..r1).map(|i| Pursuit::new(targets.row(i), k)).collect();
        for _ in 0..k {
            if ps.iter().all(|p| p.done) {
                break;
            }
            let picks = pick::pick(&ps, &a0, &gram);
            ps.par_iter_mut()
                .zip(picks)
                .enumerate()
                .filter(|(_, (p, _))| !p.done)
                .for_each(|(j, (p, a))| match a {
                    Some(a) => p.refit(dict, targets.row(r0 + j), a, k),
                    None => p.done = true,
                });
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

    /// The reference pick: one target, every value computed whole (α₀ minus each selected
    /// atom's term in selection order), then the first largest |value| among atoms not selected.
    fn pick_one(p: &Pursuit, a0: &[f32], gram: &Gram) -> Option<usize> {
        let mut c = a0.to_vec();
        for (&a, &x) in p.atoms.iter().zip(&p.x) {
            for (r, ci) in c.iter_mut().enumerate() {
                *ci -= (x as f32) * gram.col(a)[r];
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

    /// Pick for every target with the Gram `make` holds, step after step, and compare with
    /// [`pick_one`] and with other thread counts.
    fn picks_equal_the_reference(make: impl Fn(Rows) -> Gram) {
        // Rows 10 and 250 equal, so some targets tie and must take the first (in another chunk
        // of the pick); a target finishes before it starts.
        let (s, d, t, k) = (300, 24, 40, 12);
        let (dict, ys) = tie_case(s, d, t);
        let dr = rows(&dict, s, d);
        let mut gram = make(dr);
        let gram = &mut gram;
        let mut rowwise = vec![0f32; t * s];
        products(&ys, t, dr, &mut rowwise);
        let a0 = rowwise.clone();
        let mut ps: Vec<Pursuit> = ys.chunks(d).map(|y| Pursuit::new(y, k)).collect();
        ps[5].done = true;
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for step in 0..k {
            let got = pick::pick(&ps, &a0, gram);
            assert_eq!(one.install(|| pick::pick(&ps, &a0, gram)), got);
            assert_eq!(three.install(|| pick::pick(&ps, &a0, gram)), got);
            for (j, p) in ps.iter_mut().enumerate() {
                let want = (!p.done).then(|| pick_one(p, &rowwise[j * s..(j + 1) * s], gram));
                assert_eq!(got[j], want.flatten(), "target {j}, step {step}");
                if j == 3 && step == 0 {
                    assert_eq!(got[j], Some(10), "a tie goes to the first row");
                }
                match (p.done, got[j]) {
                    (false, Some(a)) => p.refit(dr, &ys[j * d..(j + 1) * d], a, k),
                    _ => p.done = true,
                }
            }
            let mut need: Vec<usize> = ps.iter().filter_map(|p| p.atoms.last().copied()).collect();
            gram.fetch(dr, &mut need);
        }
    }

    /// A dictionary whose rows 10 and 250 are equal and longest, and targets of which the
    /// fourth is that row.
    fn tie_case(s: usize, d: usize, t: usize) -> (Vec<f32>, Vec<f32>) {
        let mut dict = random(s, d, 5);
        dict[10 * d..11 * d].iter_mut().for_each(|v| *v *= 4.0);
        dict.copy_within(10 * d..11 * d, 250 * d);
        let mut ys = random(t, d, 6);
        ys[3 * d..4 * d].copy_from_slice(&dict[10 * d..11 * d]);
        (dict, ys)
    }

    #[test]
    fn picking_from_the_whole_gram_by_columns_equals_picking_each_target_alone() {
        picks_equal_the_reference(Gram::full);
    }

    #[test]
    fn picking_from_columns_equals_picking_each_target_alone() {
        picks_equal_the_reference(|dr| Gram::new(dr.rows));
    }

    fn rows(data: &[f32], rows: usize, cols: usize) -> Rows<'_> {
        Rows { data, rows, cols }
    }

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
        let dr = rows(&dict, s, d);
        let got = pursue(dr, rows(&y, 1, d), 8);
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
        let (s, d) = (gram::TILE + 77, 19);
        let dict = random(s, d, 4);
        let dr = rows(&dict, s, d);
        let full = Gram::full(dr);
        let mut lazy = Gram::new(s);
        let tile = gram::TILE;
        let mut atoms = vec![0, 5, tile - 1, tile, tile + 40, s - 1];
        lazy.fetch(dr, &mut atoms.clone());
        atoms.sort_unstable();
        for a in atoms {
            let f = full.col(a);
            let l = lazy.col(a);
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
    fn the_whole_gram_and_fetched_columns_give_the_same_pursuit() {
        let (s, d, t, k) = (300, 24, 200, 12);
        let (dict, ys) = (random(s, d, 8), random(t, d, 9));
        let dr = rows(&dict, s, d);
        let yr = rows(&ys, t, d);
        // Too small for bf16: the whole Gram, one target at a time by strips.
        assert!(Gram::full_pays(s, t, k) && !plain::bf16_pays(dr, yr));
        let got = pursue(dr, yr, k);
        let by_columns = pursue_with(dr, yr, k, Gram::full(dr), 64);
        let fetched = pursue_with(dr, yr, k, Gram::new(s), 16);
        assert_eq!(got, by_columns);
        assert_eq!(got, fetched);
        assert!(got.iter().all(|c| c.atoms.len() == k));
    }

    /// y = Σ x·D[a] over `want`, rounded to f32.
    fn combine(dict: &[f32], d: usize, want: &[(usize, f64)]) -> Vec<f32> {
        (0..d)
            .map(|c| {
                want.iter()
                    .map(|&(a, x)| x * f64::from(dict[a * d + c]))
                    .sum::<f64>() as f32
            })
            .collect()
    }

    #[test]
    fn plain_omp_recovers_exact_sparse_combinations_and_stops_early() {
        let (s, d) = (500, 48);
        let dict = random(s, d, 11);
        let wants: [&[(usize, f64)]; 3] = [
            &[(3, 0.5), (17, -1.25), (41, 2.0)],
            &[(499, 1.0)],
            &[(0, -0.75), (250, 0.3), (251, 1.5), (420, -2.0), (7, 0.9)],
        ];
        let ys: Vec<f32> = wants.iter().flat_map(|w| combine(&dict, d, w)).collect();
        let got = plain::pursue(rows(&dict, s, d), rows(&ys, wants.len(), d), 16);
        for (c, want) in got.iter().zip(wants) {
            let mut pairs: Vec<(usize, f64)> =
                c.atoms.iter().copied().zip(c.coefs.clone()).collect();
            pairs.sort_by_key(|p| p.0);
            let mut want = want.to_vec();
            want.sort_by_key(|p| p.0);
            assert_eq!(
                pairs.len(),
                want.len(),
                "stops once the residual is gone: {pairs:?}"
            );
            for ((a, x), (wa, wx)) in pairs.iter().zip(want) {
                assert_eq!(*a, wa);
                assert!((x - wx).abs() < 1e-5, "{x} vs {wx}");
            }
        }
    }

    #[test]
    fn plain_omp_picks_the_atoms_of_batch_omp_on_random_data() {
        let (s, d, t, k) = (1200, 64, 300, 16);
        let (dict, ys) = (random(s, d, 12), random(t, d, 13));
        let (dr, yr) = (rows(&dict, s, d), rows(&ys, t, d));
        let batch = pursue_with(dr, yr, k, Gram::full(dr), 64);
        let plain = plain::pursue(dr, yr, k);
        let same = batch
            .iter()
            .zip(&plain)
            .filter(|(b, p)| b.atoms == p.atoms)
            .count();
        assert!(
            100 * same >= 99 * t,
            "{same} of {t} targets pick the same atoms"
        );
        for (b, p) in batch.iter().zip(&plain).filter(|(b, p)| b.atoms == p.atoms) {
            for (x, y) in b.coefs.iter().zip(&p.coefs) {
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1e-3), "{x} vs {y}");
            }
        }
        assert!(plain.iter().all(|c| c.atoms.len() == k));
    }

    #[test]
    fn plain_omp_does_not_depend_on_the_thread_count_or_the_block() {
        let (s, d, t, k) = (300, 24, 40, 10);
        let (dict, ys) = (random(s, d, 14), random(t, d, 15));
        let (dr, yr) = (rows(&dict, s, d), rows(&ys, t, d));
        let all = plain::pursue(dr, yr, k);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(one.install(|| plain::pursue(dr, yr, k)), all);
        assert_eq!(plain::pursue(dr, rows(yr.row(7), 1, d), k)[0], all[7]);
    }

    #[test]
    fn strips_are_chosen_over_plain_bf16_where_many_targets_share_a_gram_that_fits() {
        let half = strips::Copy::Bf16 { gmax: 1.0 };
        // Issue 46's 20000 tokens: S = 30257, width 768, k = 64 (its whole Gram is 3.7 GB).
        assert!(Gram::full_pays(30257, 20000, 64) && strips_pay(30257, 768, 20000, 64, half));
        assert!(strips_pay(30257, 768, 20000, 64, strips::Copy::F32));
        // Its 5 % held out, 100 targets: the Gram's GEMM alone costs more than plain OMP.
        assert!(!strips_pay(30257, 768, 100, 64, half));
    }

    #[test]
    fn plain_omp_is_chosen_where_the_gram_does_not_fit_or_few_atoms_repeat() {
        // The issue 46 bench: S = 48257 (its whole Gram is 9.3 GB), 2000 targets, k = 64.
        assert!(!Gram::full_pays(48257, 2000, 64) && plain_pays(48257, 512, 2000, 64));
        // Few targets (T·k < S): every column is computed for one target anyway.
        assert!(plain_pays(32768, 2048, 100, 64));
        // Many targets sharing few atoms, k small, wide rows: columns are cheaper.
        assert!(!plain_pays(65536, 4096, 200_000, 4));
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count_or_the_block() {
        let (s, d, t) = (300, 24, 40);
        let dict = random(s, d, 2);
        let ys = random(t, d, 3);
        let dr = rows(&dict, s, d);
        let yr = rows(&ys, t, d);
        let all = pursue(dr, yr, 10);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(one.install(|| pursue(dr, yr, 10)), all);
        let alone = pursue(dr, rows(yr.row(7), 1, d), 10);
        assert_eq!(alone[0], all[7]);
        assert!(all.iter().all(|c| c.atoms.len() == 10));
    }
}
