//! omp's pick from approximate correlations ([`super::bf16`]): every atom whose |c̃| could
//! be the largest |c| given the rounding bound is recomputed exactly (f64 dot product with the
//! f32 residual), and the largest exact |c| among atoms not selected wins, the lowest index on a
//! tie. So the pick is the exact argmax whatever the approximation: the atom holding it has
//! |c̃| within 2·bound of the largest |c̃| (of any atom), so it is always among those recomputed.

use super::bf16::{self, Packed};
use super::pursuit::{dot64, Rows};
use rayon::prelude::*;

/// Per target (rows of `r`, n × d f32): the atom to add, or None (no atom with |c| > 0). None
/// overall when the bf16 scan is not available.
pub(super) fn pick(
    p: &Packed,
    dict: Rows,
    r: &[f32],
    n: usize,
    selected: &[&[usize]],
) -> Option<Vec<Option<usize>>> {
    let d = dict.cols.max(1);
    let (stats, slack) = bf16::slacks(p, r, d);
    let a = bf16::targets_bf16(p, r, n);
    let found = bf16::scan(p, &a, n, &slack)?;
    let mut near: Vec<Vec<(f32, u32)>> = vec![Vec::new(); n];
    for &(t, v, at) in &found {
        near[t as usize].push((v, at));
    }
    Some(
        near.par_iter()
            .enumerate()
            .map(|(t, near)| {
                let rt = &r[t * d..(t + 1) * d];
                exact(p, dict, rt, stats[t], near, selected[t])
            })
            .collect(),
    )
}

/// The exact pick among `near`, or among every atom when `near` is empty (every |c̃| was 0, so
/// every |c| is within its bound of 0).
fn exact(
    p: &Packed,
    dict: Rows,
    r: &[f32],
    (rn, ra): (f64, f64),
    near: &[(f32, u32)],
    selected: &[usize],
) -> Option<usize> {
    let bound = |a: usize| bf16::bound(p, rn, ra, p.norms[a]);
    let mut cands: Vec<usize> = if near.is_empty() {
        (0..dict.rows).collect()
    } else {
        // The largest |c| is at least max(|c̃| − bound) over any atom; an atom whose |c̃| + bound
        // is below that cannot be the largest.
        let floor = near
            .iter()
            .map(|&(v, a)| f64::from(v) - bound(a as usize))
            .fold(f64::NEG_INFINITY, f64::max);
        near.iter()
            .filter(|&&(v, a)| f64::from(v) + bound(a as usize) >= floor)
            .map(|&(_, a)| a as usize)
            .collect()
    };
    // Each (target, atom) is scanned once, so `near` holds an atom once; sorted, the first of
    // equal exact values is the lowest index.
    cands.sort_unstable();
    let (mut best, mut at) = (0f64, None);
    for a in cands {
        if selected.contains(&a) {
            continue;
        }
        let c = dot64(dict.row(a), r).abs();
        if c > best {
            (best, at) = (c, Some(a));
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::super::bf16::tests::{each_kernel, normals};
    use super::super::bf16::Kernel;
    use super::super::plain::pursue_packed;
    use super::*;

    /// The pursuit in bf16 (each kernel the CPU runs) against the f32 GEMM's on random rows:
    /// the same atoms in the same order for every target (near-ties aside, both pick the
    /// largest |c|), the coefficients within 1e-9; exact combinations found exactly; and of two
    /// atoms that bf16 cannot tell apart, the one the exact correlation prefers.
    #[test]
    fn bf16_pursuit_picks_the_f32_paths_atoms_and_separates_what_bf16_cannot() {
        each_kernel(picks_the_f32_paths_atoms);
    }

    fn picks_the_f32_paths_atoms(kernel: Kernel) {
        let (s, d, n, k) = (700, 96, 40, 12);
        let mut dict = normals(s * d, 1);
        // Atom 3 made of bf16 values, atom 600 = atom 3 nudged by 2⁻¹⁴ of each entry (under
        // half a bf16 step): the same bf16 row. Target 2 is atom 600 exactly, so only the exact
        // re-check picks 600 first.
        for c in 0..d {
            let v = f32::from_bits(u32::from(bf16::bf16(dict[3 * d + c])) << 16);
            dict[3 * d + c] = v;
            dict[600 * d + c] = v + v * (1.0 / 16384.0);
        }
        let mut ys = normals(n * d, 2);
        for c in 0..d {
            ys[c] = 0.5 * dict[10 * d + c] - 2.0 * dict[444 * d + c] + 0.25 * dict[699 * d + c];
            ys[2 * d + c] = dict[600 * d + c];
        }
        let dr = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let tr = Rows {
            data: &ys,
            rows: n,
            cols: d,
        };
        let p = Packed::for_kernel(dr, kernel).unwrap();
        assert_eq!(
            (0..d)
                .map(|c| bf16::bf16(dict[3 * d + c]))
                .collect::<Vec<_>>(),
            (0..d)
                .map(|c| bf16::bf16(dict[600 * d + c]))
                .collect::<Vec<_>>(),
            "atoms 3 and 600 are one bf16 row"
        );
        let got = pursue_packed(dr, tr, k, Some(&p));
        let want = pursue_packed(dr, tr, k, None);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.atoms, w.atoms, "{kernel:?} target {j}");
            for (a, b) in g.coefs.iter().zip(&w.coefs) {
                assert!(
                    (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                    "{kernel:?} target {j}"
                );
            }
        }
        let mut exact = got[0].atoms.clone();
        exact.sort_unstable();
        assert_eq!(
            exact,
            [10, 444, 699],
            "an exact combination is found exactly"
        );
        assert_eq!(
            got[2].atoms[0], 600,
            "the exact correlation separates 600 from 3"
        );
    }
}
