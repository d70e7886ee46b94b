//! The one GEMM of the init maths (Hewitt's product and Σ, omp's Gram and correlations): f32,
//! `c = a·b` or `c += a·b` on ndarray views of any strides, on the calling thread (callers split
//! the work over rayon). Through the `gemm` crate, whose kernels are chosen at run time: AVX-512
//! where the CPU has it, else AVX2/FMA, else scalar. On this project's 2-core AVX-512 machine it
//! reaches 56–66 % of the measured FMA peak on Hewitt's blocks and omp's Gram (torch's sgemm
//! 40–71 % on the same shapes; matrixmultiply's AVX-512 build 1.4–2.5× slower on Hewitt's
//! blocks): docs/benchmarks.md, "Issue 45 item 1". `tests` below check it against f64.

use ndarray::{ArrayView2, ArrayViewMut2};

/// `c = a·b` (`accumulate`: `c += a·b`). Shapes must agree: a is m × k, b is k × n, c is m × n
/// (they do by construction at every caller; a mismatch is a bug, caught in debug builds).
pub fn sgemm(
    a: &ArrayView2<f32>,
    b: &ArrayView2<f32>,
    c: &mut ArrayViewMut2<f32>,
    accumulate: bool,
) {
    let (m, k) = a.dim();
    let (k2, n) = b.dim();
    debug_assert_eq!(k, k2, "inner dimensions");
    debug_assert_eq!(c.dim(), (m, n), "output shape");
    if m == 0 || n == 0 || k != k2 || c.dim() != (m, n) {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    let (cs, as_, bs) = (c.strides().to_vec(), a.strides(), b.strides());
    // SAFETY: the three views are valid for their shapes and strides (ndarray guarantees it);
    // `c` is a mutable borrow, so it aliases neither input. gemm reads m × k, k × n and writes
    // m × n elements at exactly those strides; dst = alpha·dst + beta·a·b, dst read only when
    // `accumulate`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            cs[1],
            cs[0],
            accumulate,
            a.as_ptr(),
            as_[1],
            as_[0],
            b.as_ptr(),
            bs[1],
            bs[0],
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};

    fn rnd(n: usize, mut x: u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32) / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Every stride pattern the callers use (a transposed, b transposed, c a column window of a
    /// wider matrix), odd sizes past every kernel's tile, against an f64 reference: within
    /// f32 rounding of the sum of |products| (k · 2⁻²³ relative, with room).
    #[test]
    fn products_equal_an_f64_reference_for_every_layout() {
        for (m, n, k) in [
            (1, 1, 1),
            (7, 5, 3),
            (67, 33, 129),
            (130, 81, 257),
            (5, 300, 17),
        ] {
            let at = Array2::from_shape_vec((k, m), rnd(m * k, 1 + m as u64)).unwrap();
            let bt = Array2::from_shape_vec((n, k), rnd(k * n, 2 + n as u64)).unwrap();
            let (a, b) = (at.t(), bt.t());
            let mut wide = Array2::<f32>::from_elem((m, n + 9), 0.25);
            for accumulate in [false, true] {
                let mut c = wide.slice_mut(s![.., 4..4 + n]);
                let before = c.to_owned();
                sgemm(&a, &b, &mut c, accumulate);
                for i in 0..m {
                    for j in 0..n {
                        let (mut exact, mut mag) = (0f64, 0f64);
                        for q in 0..k {
                            let p = f64::from(a[[i, q]]) * f64::from(b[[q, j]]);
                            exact += p;
                            mag += p.abs();
                        }
                        let base = if accumulate {
                            f64::from(before[[i, j]])
                        } else {
                            0.0
                        };
                        let got = f64::from(c[[i, j]]);
                        let tol = (k as f64 + 2.0) * f64::from(f32::EPSILON) * (mag + base.abs());
                        assert!(
                            (got - (exact + base)).abs() <= tol,
                            "{m}x{n}x{k} acc={accumulate} [{i},{j}]: {got} vs {}",
                            exact + base
                        );
                    }
                }
            }
            // The columns outside the window are untouched.
            assert!(wide.slice(s![.., ..4]).iter().all(|&v| v == 0.25));
            assert!(wide.slice(s![.., 4 + n..]).iter().all(|&v| v == 0.25));
        }
    }
}
