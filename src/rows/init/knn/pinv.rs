//! Minimum-norm least-squares solutions of small symmetric systems in f64, through the
//! eigendecomposition (Householder reduction to tridiagonal form, then implicit QL): what
//! `numpy.linalg.lstsq` / LAPACK gelsd give for a symmetric matrix, eigenvalues of magnitude at
//! most `rel` times the largest treated as zero. A singular system gets its minimum-norm
//! solution, an all-zero one the zero vector: never NaN from finite input.

/// QL iterations allowed per eigenvalue (it converges in two or three; the cap only bounds the
/// loop on non-finite input).
const MAX_ITER: usize = 64;

/// x minimising ‖A·x − b‖ of least norm, A symmetric n × n (row-major, n = b.len()), its
/// eigenvalues with |λ| ≤ rel · max |λ| dropped.
pub fn solve(a: &[f64], b: &[f64], rel: f64) -> Vec<f64> {
    let n = b.len();
    let mut x = vec![0.0; n];
    if n == 0 || a.len() != n * n {
        return x;
    }
    let mut v = a.to_vec();
    let (mut d, mut e) = (vec![0.0; n], vec![0.0; n]);
    tridiagonalize(&mut v, n, &mut d, &mut e);
    diagonalize(&mut v, n, &mut d, &mut e);
    let top = d.iter().fold(0f64, |m, l| m.max(l.abs()));
    for (j, &l) in d.iter().enumerate() {
        // Also skips a NaN eigenvalue (non-finite input).
        let kept = l.abs() > rel * top;
        if !kept {
            continue;
        }
        let c = (0..n).map(|r| v[r * n + j] * b[r]).sum::<f64>() / l;
        for (r, xr) in x.iter_mut().enumerate() {
            *xr += c * v[r * n + j];
        }
    }
    x
}

/// Householder reduction of the symmetric `v` (n × n) to tridiagonal form: on return `d` is
/// the diagonal, `e[1..]` the subdiagonal, `v` the orthogonal transform (EISPACK's tred2).
fn tridiagonalize(v: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64]) {
    d.copy_from_slice(&v[(n - 1) * n..]);
    for i in (1..n).rev() {
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[(i - 1) * n + j];
                v[i * n + j] = 0.0;
                v[j * n + i] = 0.0;
            }
        } else {
            for dk in &mut d[..i] {
                *dk /= scale;
                h += *dk * *dk;
            }
            let f = d[i - 1];
            let g = if f > 0.0 { -h.sqrt() } else { h.sqrt() };
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            reflect(v, n, i, h, d, e);
        }
        d[i] = h;
    }
    accumulate(v, n, d);
    for j in 0..n {
        d[j] = v[(n - 1) * n + j];
        v[(n - 1) * n + j] = 0.0;
    }
    v[n * n - 1] = 1.0;
    e[0] = 0.0;
}

/// One Householder step of [`tridiagonalize`]: the reflector u = d[..i] (with h = ‖u‖²/2)
/// applied to the leading i × i block.
fn reflect(v: &mut [f64], n: usize, i: usize, h: f64, d: &mut [f64], e: &mut [f64]) {
    e[..i].fill(0.0);
    for j in 0..i {
        let f = d[j];
        v[j * n + i] = f;
        let mut g = e[j] + v[j * n + j] * f;
        for k in j + 1..i {
            g += v[k * n + j] * d[k];
            e[k] += v[k * n + j] * f;
        }
        e[j] = g;
    }
    let mut f = 0.0;
    for j in 0..i {
        e[j] /= h;
        f += e[j] * d[j];
    }
    let hh = f / (h + h);
    for j in 0..i {
        e[j] -= hh * d[j];
    }
    for j in 0..i {
        let (f, g) = (d[j], e[j]);
        for k in j..i {
            v[k * n + j] -= f * e[k] + g * d[k];
        }
        d[j] = v[(i - 1) * n + j];
        v[i * n + j] = 0.0;
    }
}

/// The product of [`tridiagonalize`]'s reflectors, built in `v`.
fn accumulate(v: &mut [f64], n: usize, d: &mut [f64]) {
    for i in 0..n - 1 {
        v[(n - 1) * n + i] = v[i * n + i];
        v[i * n + i] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[k * n + i + 1] / h;
            }
            for j in 0..=i {
                let g: f64 = (0..=i).map(|k| v[k * n + i + 1] * v[k * n + j]).sum();
                for k in 0..=i {
                    v[k * n + j] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[k * n + i + 1] = 0.0;
        }
    }
}

/// Implicit QL on the tridiagonal (d, e) from [`tridiagonalize`]: `d` becomes the eigenvalues,
/// the columns of `v` their eigenvectors (EISPACK's tql2, unsorted).
fn diagonalize(v: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64]) {
    e.copy_within(1.., 0);
    e[n - 1] = 0.0;
    let (mut f, mut tst1) = (0.0f64, 0.0f64);
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let m = (l..n)
            .find(|&m| e[m].abs() <= f64::EPSILON * tst1)
            .unwrap_or(n - 1);
        if m > l {
            for _ in 0..MAX_ITER {
                f += ql_step(v, n, d, e, l, m);
                let unconverged = e[l].abs() > f64::EPSILON * tst1;
                if !unconverged {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
}

/// One implicitly shifted QL sweep over rows l..=m; returns the shift taken out of d.
fn ql_step(v: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64], l: usize, m: usize) -> f64 {
    let g = d[l];
    let mut p = (d[l + 1] - g) / (2.0 * e[l]);
    let r = if p < 0.0 { -p.hypot(1.0) } else { p.hypot(1.0) };
    d[l] = e[l] / (p + r);
    d[l + 1] = e[l] * (p + r);
    let dl1 = d[l + 1];
    let shift = g - d[l];
    for di in &mut d[l + 2..n] {
        *di -= shift;
    }
    p = d[m];
    let (mut c, mut c2, mut c3) = (1.0, 1.0, 1.0);
    let el1 = e[l + 1];
    let (mut s, mut s2) = (0.0, 0.0);
    for i in (l..m).rev() {
        c3 = c2;
        c2 = c;
        s2 = s;
        let g = c * e[i];
        let h = c * p;
        let r = p.hypot(e[i]);
        e[i + 1] = s * r;
        s = e[i] / r;
        c = p / r;
        p = c * d[i] - s * g;
        d[i + 1] = h + s * (c * g + s * d[i]);
        for k in 0..n {
            let h = v[k * n + i + 1];
            v[k * n + i + 1] = s * v[k * n + i] + c * h;
            v[k * n + i] = c * v[k * n + i] - s * h;
        }
    }
    p = -s * s2 * c3 * el1 * e[l] / dl1;
    e[l] = s * p;
    d[l] = c * p;
    shift
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn matvec(a: &[f64], x: &[f64]) -> Vec<f64> {
        let n = x.len();
        (0..n)
            .map(|r| (0..n).map(|c| a[r * n + c] * x[c]).sum())
            .collect()
    }

    /// A random symmetric matrix (indefinite) is solved to f64 precision.
    #[test]
    fn solves_a_nonsingular_symmetric_system() {
        let mut rng = Rng::new(7, 0);
        for n in [1, 2, 3, 9, 65] {
            let mut a = vec![0.0; n * n];
            for r in 0..n {
                for c in 0..=r {
                    let v = rng.normal();
                    a[r * n + c] = v;
                    a[c * n + r] = v;
                }
            }
            let x: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
            let b = matvec(&a, &x);
            let got = solve(&a, &b, 1e-14);
            for (g, w) in got.iter().zip(&x) {
                assert!((g - w).abs() < 1e-8, "n={n}: {g} vs {w}");
            }
        }
    }

    /// A = [[1, 1], [1, 1]] (rank 1), b = (2, 2): every x with x₀ + x₁ = 2 solves it; the
    /// least-norm one is (1, 1). The zero matrix gives zero, not NaN.
    #[test]
    fn a_singular_system_gets_its_minimum_norm_solution() {
        let x = solve(&[1.0, 1.0, 1.0, 1.0], &[2.0, 2.0], 1e-12);
        assert!(
            (x[0] - 1.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12,
            "{x:?}"
        );
        assert_eq!(solve(&[0.0; 9], &[1.0, 2.0, 3.0], 1e-12), vec![0.0; 3]);
    }
}
