//! Each target's next atom from the Gram columns its pursuit selected: the one of largest
//! |α₀ − G_Λ·x| not yet selected (the first on a tie); None when every correlation is 0 and for
//! targets already done. Every value is α₀ minus its target's atoms' terms in selection order,
//! in f32 (the reference [`super::strips`] computes too).

use super::gram::Gram;
use super::pursuit::Pursuit;
use rayon::prelude::*;

/// Values one target works through at a time when reading Gram columns.
const CHUNK: usize = 4096;

/// The picks of every target of a block (a0 row-major, S values per target), one target at a
/// time ([`pick_one`]).
pub(super) fn pick(ps: &[Pursuit], a0: &[f32], gram: &Gram) -> Vec<Option<usize>> {
    let s = gram.s;
    ps.par_iter()
        .zip(a0.par_chunks(s.max(1)))
        .map_init(
            || vec![0f32; s],
            |c, (p, a0)| {
                if p.done {
                    return None;
                }
                let xs: Vec<f32> = p.x.iter().map(|&x| x as f32).collect();
                pick_one(a0, &p.atoms, &xs, gram, c)
            },
        )
        .collect()
}

/// One target's pick: `c` (S values) = α₀ minus each selected atom's term xs\[j\]·column in
/// selection order, streaming the t Gram columns past [`CHUNK`] running values; the selected
/// atoms left out, then the first largest |value|.
pub(super) fn pick_one(
    a0: &[f32],
    atoms: &[usize],
    xs: &[f32],
    gram: &Gram,
    c: &mut [f32],
) -> Option<usize> {
    let cols: Vec<(&[f32], f32)> = atoms
        .iter()
        .zip(xs)
        .map(|(&a, &x)| (gram.col(a), x))
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
    for &a in atoms {
        c[a] = 0.0;
    }
    largest(c).1
}

/// Row n's value as [`pick_one`] computes it.
#[inline]
pub(super) fn value_at(n: usize, a0: &[f32], atoms: &[usize], xs: &[f32], gram: &Gram) -> f32 {
    let mut v = a0[n];
    for (&a, &x) in atoms.iter().zip(xs) {
        v -= x * gram.col(a)[n];
    }
    v
}

/// Values [`largest`] takes the maximum of in one branch-free pass before looking for its row.
const RUN: usize = 64;

/// The first largest |value| above 0 in `c`, as (|value|, row); NaNs are
/// passed over. By runs of [`RUN`] values: each run's largest |value| with no branch (16 lanes,
/// so it vectorises), and only in a run that beats every earlier run the first row holding it —
/// the row a scan value by value keeping the first strictly larger |value| finds.
pub(super) fn largest(c: &[f32]) -> (f32, Option<usize>) {
    let (mut best, mut row) = (0f32, None);
    for (r, run) in c.chunks(RUN).enumerate() {
        let mut lanes = [0f32; 16];
        let lanes_run = run.chunks_exact(16);
        let rest = lanes_run.remainder();
        for vs in lanes_run {
            for (m, v) in lanes.iter_mut().zip(vs) {
                let a = v.abs();
                *m = if a > *m { a } else { *m };
            }
        }
        let more = |m: f32, a: f32| if a > m { a } else { m };
        let top = rest
            .iter()
            .fold(lanes.iter().fold(0f32, |m, &a| more(m, a)), |m, v| {
                more(m, v.abs())
            });
        if top > best {
            best = top;
            row = run.iter().position(|v| v.abs() == top).map(|i| r * RUN + i);
        }
    }
    (best, row)
}
