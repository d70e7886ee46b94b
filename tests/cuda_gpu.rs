//! Feature `cuda`, on a machine with a GPU: every GPU path against the CPU reference, with cuBLAS
//! and with the kernels alone (`Gpu::open_kernels_only`), on matrices large enough to stream in
//! several row blocks. Without a driver each test says "skipped: no GPU" (CI has none; run these
//! where a GPU is lent: `cargo test --features cuda --test cuda_gpu`).
#![cfg(feature = "cuda")]

use ckpt_surgery::dtype::DType;
use ckpt_surgery::rows::cuda::{self, Gpu};
use ckpt_surgery::rows::init::omp::{self, Combination, Rows};
use ckpt_surgery::rows::init::{self, Init, Matrix, Stats};

/// Both GPU flavours (cuBLAS when it loads, and the kernels alone), or None without a GPU.
fn gpus() -> Option<Vec<Gpu>> {
    if let Some(why) = cuda::missing() {
        eprintln!("skipped: no GPU ({why})");
        return None;
    }
    let mut v = vec![Gpu::open_kernels_only().expect("a GPU with the kernels")];
    let full = Gpu::open().expect("a GPU");
    if full.describe().contains("cuBLAS") {
        v.push(full);
    } else {
        eprintln!("note: cuBLAS did not load; the kernels alone are tested");
    }
    Some(v)
}

/// xorshift values in [-0.5, 0.5).
fn random(n: usize, mut x: u64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64) / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

fn matrix(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    init::encode(dtype, &random(rows * cols, seed))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-300)
}

/// Shapes that stream in more than one 64 MiB block for each dtype.
const CASES: [(DType, usize, usize); 3] = [
    (DType::BF16, 20_000, 4096),
    (DType::F16, 9_000, 8192),
    (DType::F32, 40_000, 1000),
];

#[test]
fn column_statistics_equal_the_cpu_path() {
    let Some(gpus) = gpus() else { return };
    for (dtype, rows, cols) in CASES {
        let bytes = matrix(dtype, rows, cols, 7 + rows as u64);
        let m = Matrix {
            dtype,
            rows,
            cols,
            bytes: &bytes,
        };
        let cpu = init::stats(&m);
        for g in &gpus {
            let got = g.stats(&m).unwrap();
            // Sums of ~10⁴ values of magnitude ≤ 0.5 in another order: relative to the sum of
            // magnitudes, 1e-12 is far above f64 rounding and far below one value's effect.
            for (c, (a, b)) in got.mean.iter().zip(&cpu.mean).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-12,
                    "{} {dtype:?} col {c}: gpu {a} cpu {b}",
                    g.describe()
                );
            }
            assert!(
                close(got.mean_row_norm, cpu.mean_row_norm, 1e-12),
                "{} {dtype:?}: row norm gpu {} cpu {}",
                g.describe(),
                got.mean_row_norm,
                cpu.mean_row_norm
            );
        }
    }
}

#[test]
fn subword_means_equal_the_cpu_path() {
    let Some(gpus) = gpus() else { return };
    for (dtype, rows, cols) in CASES {
        let bytes = matrix(dtype, rows, cols, 11 + cols as u64);
        let m = Matrix {
            dtype,
            rows,
            cols,
            bytes: &bytes,
        };
        let stats = init::stats(&m);
        // 3000 new rows: most with 1–5 pieces from anywhere in the table (the last row
        // included), every 7th with none (the column mean).
        let mut x = 99u64;
        let lists: Vec<Option<Vec<usize>>> = (0..3000)
            .map(|j| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (j % 7 != 0).then(|| {
                    let n = 1 + (x % 5) as usize;
                    (0..n)
                        .map(|p| {
                            if j % 11 == 1 {
                                rows - 1
                            } else {
                                ((x >> (8 * p + 3)) as usize) % rows
                            }
                        })
                        .collect()
                })
            })
            .collect();
        let how = Init::SubwordMean(lists.clone());
        let cpu = init::new_rows(&m, &stats, &how, lists.len());
        for g in &gpus {
            let got = g.subword_mean(&m, &stats.mean, &lists).unwrap();
            assert_eq!(got.len(), cpu.len());
            // Each value a mean of ≤ 5 exact values summed in list order, as on the CPU.
            for (i, (a, b)) in got.iter().zip(&cpu).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-15,
                    "{} {dtype:?} value {i}: gpu {a} cpu {b}",
                    g.describe()
                );
            }
        }
    }
}

#[test]
fn hewitt_rows_equal_the_cpu_path() {
    let Some(gpus) = gpus() else { return };
    // 70000 × 512 f32 streams in three blocks; k below and above nothing special (k ≤ d).
    for (dtype, rows, cols, k) in [
        (DType::F32, 70_000, 512, 81),
        (DType::BF16, 50_000, 768, 500),
    ] {
        let bytes = matrix(dtype, rows, cols, 5);
        let m = Matrix {
            dtype,
            rows,
            cols,
            bytes: &bytes,
        };
        let stats: Stats = init::stats(&m);
        let how = Init::Hewitt {
            epsilon: 1e-3,
            seed: 42,
        };
        let cpu = init::new_rows(&m, &stats, &how, k);
        for g in &gpus {
            let got = g.hewitt_sigma_free(&m, &stats.mean, k, 1e-3, 42).unwrap();
            assert_eq!(got.len(), cpu.len());
            // The deviation from the mean (what Hewitt adds) agrees to 1e-5 relative in norm
            // (f32 products summed in another order; TF32 would be ~1e-3), and no value is off
            // by more than 1e-4 of the deviations' largest magnitude.
            let (mut diff, mut norm, mut big) = (0f64, 0f64, 0f64);
            for (i, (a, b)) in got.iter().zip(&cpu).enumerate() {
                let dev = b - stats.mean[i % cols];
                diff += (a - b) * (a - b);
                norm += dev * dev;
                big = big.max(dev.abs());
            }
            let rel = (diff / norm).sqrt();
            assert!(rel <= 1e-5, "{} {dtype:?} k={k}: rel {rel}", g.describe());
            for (i, (a, b)) in got.iter().zip(&cpu).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * big,
                    "{} {dtype:?} k={k} value {i}: gpu {a} cpu {b}",
                    g.describe()
                );
            }
        }
    }
}

fn residual(dict: Rows, y: &[f32], c: &Combination) -> f64 {
    let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
    for (&a, &x) in c.atoms.iter().zip(&c.coefs) {
        for (rv, &dv) in r.iter_mut().zip(dict.row(a)) {
            *rv -= x * f64::from(dv);
        }
    }
    r.iter().map(|v| v * v).sum::<f64>().sqrt()
}

#[test]
fn omp_finds_exact_combinations_as_the_cpu_path_does() {
    // 3000 atoms of width 128; 700 targets each an exact combination of 1–6 atoms: both paths
    // must find that support and its coefficients.
    let (s, d, t, k) = (3000usize, 128usize, 700usize, 16usize);
    let dict: Vec<f32> = random(s * d, 3).iter().map(|&v| v as f32).collect();
    let coef = random(t * 12, 17);
    let mut supports = Vec::new();
    let mut ys = vec![0f32; t * d];
    for j in 0..t {
        let n = 1 + j % 6;
        let atoms: Vec<usize> = (0..n).map(|q| (j * 131 + q * 977) % s).collect();
        for (q, &a) in atoms.iter().enumerate() {
            let x = (coef[j * 12 + q] + 0.5f64.copysign(coef[j * 12 + q])) as f32;
            for c in 0..d {
                ys[j * d + c] += x * dict[a * d + c];
            }
        }
        let mut sorted = atoms;
        sorted.sort_unstable();
        supports.push(sorted);
    }
    let dr = Rows {
        data: &dict,
        rows: s,
        cols: d,
    };
    let tr = Rows {
        data: &ys,
        rows: t,
        cols: d,
    };
    let exact = |who: &str, got: &[Combination]| {
        assert_eq!(got.len(), t);
        for j in 0..t {
            let y = &ys[j * d..(j + 1) * d];
            let norm = y.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
            let c = &got[j];
            let mut a = c.atoms.clone();
            a.truncate(supports[j].len());
            a.sort_unstable();
            assert_eq!(a, supports[j], "{who}: target {j}");
            let r = residual(dr, y, c);
            assert!(r <= 1e-5 * norm, "{who}: target {j}: residual {r}");
        }
    };
    // The CPU path on every machine; the GPU where there is one.
    exact("cpu", &omp::pursue(dr, tr, k));
    let Some(gpus) = gpus() else { return };
    for g in &gpus {
        exact(&g.describe(), &g.omp(dr, tr, k).unwrap());
    }
}

#[test]
fn omp_on_random_targets_agrees_with_the_cpu_path() {
    let Some(gpus) = gpus() else { return };
    // Random targets: no exact answer; near-ties of f32 correlations may send a step another
    // way, so: the same atoms for nearly every target, and never a worse fit.
    let (s, d, t, k) = (5000usize, 128usize, 1200usize, 24usize);
    let dict: Vec<f32> = random(s * d, 23).iter().map(|&v| v as f32).collect();
    let ys: Vec<f32> = random(t * d, 29).iter().map(|&v| v as f32).collect();
    let dr = Rows {
        data: &dict,
        rows: s,
        cols: d,
    };
    let tr = Rows {
        data: &ys,
        rows: t,
        cols: d,
    };
    let cpu = omp::pursue(dr, tr, k);
    for g in &gpus {
        let got = g.omp(dr, tr, k).unwrap();
        let same = (0..t).filter(|&j| got[j].atoms == cpu[j].atoms).count();
        assert!(
            same * 100 >= t * 95,
            "{}: the same atoms for only {same} of {t} targets",
            g.describe()
        );
        for j in 0..t {
            let y = &ys[j * d..(j + 1) * d];
            let (rg, rc) = (residual(dr, y, &got[j]), residual(dr, y, &cpu[j]));
            assert!(
                rg <= rc * 1.01 + 1e-9,
                "{} target {j}: gpu residual {rg} cpu {rc}",
                g.describe()
            );
            if got[j].atoms == cpu[j].atoms {
                for (a, b) in got[j].coefs.iter().zip(&cpu[j].coefs) {
                    assert!(
                        close(*a, *b, 1e-4),
                        "{} target {j}: coef {a} {b}",
                        g.describe()
                    );
                }
            }
        }
    }
}
