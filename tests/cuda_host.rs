//! The CUDA kernels (src/rows/cuda/kernels.cu) compiled as host C++ under
//! tests/cuda_host/shim.h, which runs each grid as loops, against the CPU reference on random
//! matrices: column mean and segment mean within 1 ulp of the dtype after rounding, Hewitt's
//! normals bit-identical for the same seed, the product within 1e-5 relative. Runs on every
//! machine with g++ (no GPU, no CUDA); outputs are poisoned first, so every element must be
//! written.

use ckpt_surgery::dtype::{decode_row_f32, DType};
use ckpt_surgery::rng::{normal_at, Rng};
use ckpt_surgery::rows::init::{self, Init, Matrix, Stats};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The harness, built once per test run; None (and a line saying so) without g++.
fn harness(dir: &Path) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join("harness");
    let o = Command::new("g++")
        .args([
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-o",
        ])
        .arg(&exe)
        .arg(root.join("tests/cuda_host/harness.cpp"))
        .output();
    match o {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!(
            "kernels.cu does not compile as host C++: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            eprintln!("skipped: g++ not found");
            None
        }
    }
}

fn run(exe: &Path, args: &[String]) {
    let o = Command::new(exe).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "harness {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn f64s(p: &Path) -> Vec<f64> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32s(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => 3,
    }
}

/// A random `rows` × `cols` matrix of `dtype` (values ~ N(0.1, 0.5)).
fn matrix(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed, 0);
    let v: Vec<f64> = (0..rows * cols).map(|_| 0.1 + 0.5 * r.normal()).collect();
    init::encode(dtype, &v)
}

/// Elements of `dtype` as integers of their own width: adjacent floats differ by 1.
fn ulps(dtype: DType, bytes: &[u8]) -> Vec<i64> {
    let w = (dtype.bits() / 8) as usize;
    bytes
        .chunks_exact(w)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            let u = u64::from_le_bytes(b);
            let sign = u >> (dtype.bits() - 1) & 1;
            let mag = (u & ((1u64 << (dtype.bits() - 1)) - 1)) as i64;
            if sign == 1 {
                -mag
            } else {
                mag
            }
        })
        .collect()
}

/// Column mean (f64 sums divided once, rounded once: within 1 ulp) and row norms (their mean
/// within 1e-12) of `m`, in `dir`/x.
fn check_column_mean_and_row_norms(exe: &Path, dir: &Path, m: &Matrix, stats: &Stats) {
    let p = |n: &str| dir.join(n);
    let s = |p: PathBuf| p.display().to_string();
    let (dtype, rows, cols) = (m.dtype, m.rows, m.cols);
    // Column mean: f64 sums divided once, rounded once to the dtype.
    run(
        exe,
        &[
            "colsum".into(),
            code(dtype).to_string(),
            rows.to_string(),
            cols.to_string(),
            s(p("x")),
            s(p("sum")),
        ],
    );
    let mean: Vec<f64> = f64s(&p("sum")).iter().map(|v| v / rows as f64).collect();
    let (a, b) = (
        ulps(dtype, &init::encode(dtype, &mean)),
        ulps(dtype, &init::encode(dtype, &stats.mean)),
    );
    for (c, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1, "{dtype} column {c}: {x} vs {y} ulp");
    }
    // Row norms: the same lanes as the CPU path; their mean differs by summation order only.
    run(
        exe,
        &[
            "rownorm".into(),
            code(dtype).to_string(),
            rows.to_string(),
            cols.to_string(),
            s(p("x")),
            s(p("norm")),
        ],
    );
    let norms = f64s(&p("norm"));
    assert!(norms.iter().all(|n| n.is_finite()), "every row written");
    let mean_norm = norms.iter().sum::<f64>() / rows as f64;
    assert!((mean_norm - stats.mean_row_norm).abs() <= 1e-12 * stats.mean_row_norm);
}

/// Segment mean (subword-mean) of `m`, in `dir`/x: within 1 ulp of the CPU path.
fn check_segment_mean(exe: &Path, dir: &Path, m: &Matrix, stats: &Stats) {
    let p = |n: &str| dir.join(n);
    let s = |p: PathBuf| p.display().to_string();
    let (dtype, rows, cols) = (m.dtype, m.rows, m.cols);
    // Segment mean (subword-mean): the same additions in the same order.
    let mut r = Rng::new(9, 1);
    let lists: Vec<Vec<usize>> = (0..50)
        .map(|_| {
            (0..1 + r.next_u64() % 4)
                .map(|_| (r.next_u64() % rows as u64) as usize)
                .collect()
        })
        .collect();
    let ids: Vec<u8> = lists
        .iter()
        .flatten()
        .flat_map(|&i| (i as i64).to_le_bytes())
        .collect();
    let mut offsets = vec![0i64];
    for l in &lists {
        offsets.push(offsets.last().unwrap() + l.len() as i64);
    }
    let offs: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    std::fs::write(p("ids"), ids).unwrap();
    std::fs::write(p("offs"), offs).unwrap();
    run(
        exe,
        &[
            "segmean".into(),
            code(dtype).to_string(),
            cols.to_string(),
            lists.len().to_string(),
            s(p("x")),
            s(p("ids")),
            s(p("offs")),
            s(p("seg")),
        ],
    );
    let got = f64s(&p("seg"));
    let want = init::new_rows(
        m,
        stats,
        &Init::SubwordMean(lists.iter().cloned().map(Some).collect()),
        lists.len(),
    );
    let (a, b) = (
        ulps(dtype, &init::encode(dtype, &got)),
        ulps(dtype, &init::encode(dtype, &want)),
    );
    assert!(
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1),
        "{dtype} segment mean"
    );
}

/// The harness's centring of `dir`/x (`m`'s bytes) by the f32 mean into `dir`/xc; the mean.
fn centre(exe: &Path, dir: &Path, m: &Matrix, stats: &Stats) -> Vec<f32> {
    let s = |n: &str| dir.join(n).display().to_string();
    let mu32: Vec<f32> = stats.mean.iter().map(|&v| v as f32).collect();
    let bytes: Vec<u8> = mu32.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("mu"), bytes).unwrap();
    run(
        exe,
        &[
            "centre".into(),
            code(m.dtype).to_string(),
            m.rows.to_string(),
            m.cols.to_string(),
            s("x"),
            s("mu"),
            s("xc"),
        ],
    );
    mu32
}

/// Centring of `m`, in `dir`/x: bit-identical to the CPU path.
fn check_centring(exe: &Path, dir: &Path, m: &Matrix, stats: &Stats) {
    let p = |n: &str| dir.join(n);
    let (dtype, rows, cols, x) = (m.dtype, m.rows, m.cols, m.bytes);
    // Centring: f32 of the element minus the f32 mean, exactly as the CPU path.
    let mu32 = centre(exe, dir, m, stats);
    let got = f32s(&p("xc"));
    let mut row = vec![0f32; cols];
    for i in 0..rows {
        decode_row_f32(
            dtype,
            &x[i * cols * (dtype.bits() / 8) as usize..][..cols * (dtype.bits() / 8) as usize],
            &mut row,
        )
        .unwrap();
        for c in 0..cols {
            assert_eq!(
                got[i * cols + c].to_bits(),
                (row[c] - mu32[c]).to_bits(),
                "{dtype} centred [{i}][{c}]"
            );
        }
    }
}

/// Hewitt's normals: bit-identical to the CPU path's for the same seed and counters.
fn check_normals(exe: &Path, dir: &Path) {
    let p = |n: &str| dir.join(n);
    let s = |p: PathBuf| p.display().to_string();
    let (seed, start, count) = (42u64, 1_000_000u64, 20_000usize);
    run(
        exe,
        &[
            "normals".into(),
            seed.to_string(),
            start.to_string(),
            count.to_string(),
            s(p("z")),
        ],
    );
    let z = f32s(&p("z"));
    for (i, v) in z.iter().enumerate() {
        assert_eq!(
            v.to_bits(),
            (normal_at(seed, start + i as u64) as f32).to_bits(),
            "normal {i}"
        );
    }
}

/// The product Xcᵀ·Z against an f64 reference, and the whole Σ-free sampler against the CPU
/// path's hewitt.
fn check_hewitt_product(exe: &Path, dir: &Path) {
    let p = |n: &str| dir.join(n);
    let s = |p: PathBuf| p.display().to_string();
    // The product and the whole Σ-free sampler: centre, normals, Xcᵀ·Z, then μ + sqrt(ε/N)·acc,
    // against the CPU path's hewitt (matrixmultiply's GEMM: another summation order).
    let (rows, d, k, eps, seed) = (2100usize, 24usize, 7usize, 1e-2, 11u64);
    let x = matrix(DType::F32, rows, d, 8);
    std::fs::write(p("x"), &x).unwrap();
    let m = Matrix {
        dtype: DType::F32,
        rows,
        cols: d,
        bytes: &x,
    };
    let stats = init::stats(&m);
    centre(exe, dir, &m, &stats);
    run(
        exe,
        &[
            "normals".into(),
            seed.to_string(),
            "0".into(),
            (rows * k).to_string(),
            s(p("z")),
        ],
    );
    run(
        exe,
        &[
            "xtz".into(),
            rows.to_string(),
            d.to_string(),
            k.to_string(),
            s(p("xc")),
            s(p("z")),
            s(p("acc")),
        ],
    );
    let acc = f32s(&p("acc"));
    // The product against an f64 reference.
    let (xc, z) = (f32s(&p("xc")), f32s(&p("z")));
    for c in 0..d {
        for j in 0..k {
            let want: f64 = (0..rows)
                .map(|r| f64::from(xc[r * d + c]) * f64::from(z[r * k + j]))
                .sum();
            let scale: f64 = (0..rows)
                .map(|r| (f64::from(xc[r * d + c]) * f64::from(z[r * k + j])).abs())
                .sum();
            assert!(
                (f64::from(acc[c * k + j]) - want).abs() <= 1e-5 * scale,
                "Xcᵀ·Z [{c}][{j}]"
            );
        }
    }
    // The whole sampler against the CPU path: both products within 1e-5 of the sum of the
    // terms' magnitudes, so the rows within 2e-5 of it, times sqrt(ε/N).
    let cpu = init::hewitt_sigma_free(&m, &stats.mean, k, eps, seed);
    let sc = (eps / rows as f64).sqrt();
    for c in 0..d {
        for j in 0..k {
            let gpu = stats.mean[c] + sc * f64::from(acc[c * k + j]);
            let scale: f64 = (0..rows)
                .map(|r| (f64::from(xc[r * d + c]) * f64::from(z[r * k + j])).abs())
                .sum();
            assert!(
                (gpu - cpu[j * d + c]).abs() <= 2e-5 * sc * scale,
                "hewitt row {j} col {c}: {gpu} vs {}",
                cpu[j * d + c]
            );
        }
    }
}

#[test]
fn host_emulated_kernels_equal_the_cpu_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = harness(tmp.path()) else {
        return;
    };
    let (rows, cols) = (333usize, 37usize);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = matrix(dtype, rows, cols, 5);
        std::fs::write(tmp.path().join("x"), &x).unwrap();
        let m = Matrix {
            dtype,
            rows,
            cols,
            bytes: &x,
        };
        let stats = init::stats(&m);
        check_column_mean_and_row_norms(&exe, tmp.path(), &m, &stats);
        check_segment_mean(&exe, tmp.path(), &m, &stats);
        check_centring(&exe, tmp.path(), &m, &stats);
    }
    check_normals(&exe, tmp.path());
    check_hewitt_product(&exe, tmp.path());
}

/// The OMP kernels' loop (harness `omp`) against the CPU pursuit on random inputs: the same
/// atoms in the same order, coefficients within 1e-6 (correlations are formed another way on
/// the GPU, D·r rather than α₀ − G·x; the refit is the same operations).
#[test]
fn host_emulated_omp_kernels_pick_the_cpu_paths_atoms_and_coefficients() {
    use ckpt_surgery::rows::init::omp::{dot64, pursue, Rows};
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = harness(tmp.path()) else {
        return;
    };
    let p = |n: &str| tmp.path().join(n);
    let s = |p: PathBuf| p.display().to_string();
    let (b, n, d, k) = (24usize, 150usize, 20usize, 9usize);
    let mut r = Rng::new(35, 2);
    let mut dict: Vec<f32> = (0..n * d).map(|_| r.normal() as f32).collect();
    let mut ys: Vec<f32> = (0..b * d).map(|_| r.normal() as f32).collect();
    // Atom 100 repeats atom 3 (another of the pick's parts scans it): a target along them ties,
    // and the first, 3, must be taken.
    dict.copy_within(3 * d..4 * d, 100 * d);
    // One target exactly two atoms (stops early), one zero (no atoms), one on the tie.
    for c in 0..d {
        ys[c] = 0.75 * dict[5 * d + c] - 1.5 * dict[77 * d + c];
        ys[d + c] = 0.0;
        ys[2 * d + c] = -2.0 * dict[3 * d + c];
    }
    let yy: Vec<f64> = ys.chunks(d).map(|y| dot64(y, y)).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(p("dict"), bytes(&dict)).unwrap();
    std::fs::write(p("y"), bytes(&ys)).unwrap();
    std::fs::write(
        p("yy"),
        yy.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    let args: Vec<String> = [
        "omp".into(),
        b.to_string(),
        n.to_string(),
        d.to_string(),
        k.to_string(),
    ]
    .into_iter()
    .chain([p("dict"), p("y"), p("yy"), p("atoms"), p("x")].map(s))
    .collect();
    run(&exe, &args);
    let atoms: Vec<i64> = std::fs::read(p("atoms"))
        .unwrap()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let x = f64s(&p("x"));
    let cpu = pursue(
        Rows {
            data: &dict,
            rows: n,
            cols: d,
        },
        Rows {
            data: &ys,
            rows: b,
            cols: d,
        },
        k,
    );
    for (j, c) in cpu.iter().enumerate() {
        let got: Vec<usize> = atoms[j * k..(j + 1) * k]
            .iter()
            .take_while(|&&a| a >= 0)
            .map(|&a| a as usize)
            .collect();
        assert_eq!(got, c.atoms, "target {j}");
        for (q, want) in c.coefs.iter().enumerate() {
            assert!(
                (x[j * k + q] - want).abs() <= 1e-6 * want.abs().max(1.0),
                "target {j} coef {q}"
            );
        }
    }
    assert_eq!(cpu[0].atoms.len(), 2, "an exact target stops early");
    assert!(cpu[1].atoms.is_empty(), "a zero target takes no atom");
    assert_eq!(
        cpu[2].atoms,
        [3],
        "the first of two equal atoms, and then no other"
    );
}
