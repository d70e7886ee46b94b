//! Row values as the reference pick computes them ([`super::super::pick`]), from the f32 Gram:
//! what the bf16 copy re-checks.

use super::super::gram::Gram;
use super::super::pick::largest;

/// Row n's value as the reference computes it: α₀[n] minus each selected atom's term in order.
#[inline]
pub(super) fn exact_at(n: usize, a0: &[f32], xs: &[f32], atoms: &[usize], gram: &Gram) -> f32 {
    let mut v = a0[n];
    for (&a, &x) in atoms.iter().zip(xs) {
        v -= x * gram.col(a)[n];
    }
    v
}

/// The reference pick over every row, reading the selected columns from the Gram.
pub(super) fn exact_all(a0: &[f32], xs: &[f32], atoms: &[usize], gram: &Gram) -> Option<usize> {
    let mut c = a0.to_vec();
    for (&a, &x) in atoms.iter().zip(xs) {
        for (v, g) in c.iter_mut().zip(gram.col(a)) {
            *v -= x * g;
        }
    }
    for &a in atoms {
        c[a] = 0.0;
    }
    largest(&c).1
}
