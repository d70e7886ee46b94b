//! The CUDA kernels on 262144 × 4096 bf16 (feature `cuda`, a GPU), called directly (`cuda::Gpu`,
//! whatever `--device auto` would choose): column statistics, segment mean of 10⁵ new tokens × ~3
//! pieces, Hewitt's Σ-free product for each k of KS, and omp (OMP_S atoms of width OMP_D, OMP_T
//! targets, OMP_K); each beside the CPU path where it finishes in reasonable time. Floors: the
//! matrix crossing PCIe at the measured pinned host → device rate (it lives in host memory), and
//! flops ÷ PEAK_TFLOPS (default 51: an H100 SXM's f32 rate without tensor cores, as cuBLAS's
//! sgemm runs by default).
//!
//! Run: `bash benches/cuda.sh` (this, then torch on the same GPU). RUNS=3 by default; N, D, KS
//! override the sizes; CPU=0 skips the CPU path.

use ckpt_surgery::dtype::DType;
use ckpt_surgery::rows::cuda::Gpu;
use ckpt_surgery::rows::init::omp::{self, Rows};
use ckpt_surgery::rows::init::{self, Init, Matrix, Stats};

#[path = "util.rs"]
mod util;
use util::{env, time};

/// The sizes and floors, from the environment.
struct Setup {
    runs: usize,
    n: usize,
    d: usize,
    /// Also time the CPU path.
    cpu: bool,
    /// Host → device bytes per second (measured) and flops per second: the floors' rates.
    bw: f64,
    peak: f64,
    ks: Vec<usize>,
}

impl Setup {
    fn from_env() -> Setup {
        Setup {
            runs: env("RUNS", 3),
            n: env("N", 262_144),
            d: env("D", 4096),
            cpu: env("CPU", 1) == 1,
            bw: 0.0,
            peak: env("PEAK_TFLOPS", 51.0) * 1e12,
            ks: std::env::var("KS")
                .unwrap_or_else(|_| "81,1024,4096,10000".into())
                .split(',')
                .filter_map(|k| k.parse().ok())
                .collect(),
        }
    }
}

/// One result line: the GPU's time, the CPU's (when run), the floor and the ratio to it.
fn line(what: &str, g: f64, c: Option<f64>, floor: f64) {
    println!(
        "{what:<34} gpu {g:>9.4} s   cpu {}   floor {floor:.4} s   gpu/floor {:.1}×",
        c.map_or("      —  ".into(), |c| format!("{c:>9.4} s")),
        g / floor
    )
}

/// `n` × `d` xorshift values in [-0.5, 0.5) as bf16, and the generator's state after them.
fn random_bf16(n: usize, d: usize) -> (Vec<u8>, u64) {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let vals: Vec<f64> = (0..n * d)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f64) / (1u64 << 24) as f64 - 0.5
        })
        .collect();
    (init::encode(DType::BF16, &vals), x)
}

/// Segment mean of SEGMENTS new tokens of 2–4 random pieces each (`r` seeds the pieces).
fn bench_segment_mean(gpu: &Gpu, m: &Matrix, stats: &Stats, mut r: u64, s: &Setup) {
    let k_seg: usize = env("SEGMENTS", 100_000);
    let lists: Vec<Option<Vec<usize>>> = (0..k_seg)
        .map(|_| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            Some(
                (0..2 + (r % 3) as usize)
                    .map(|p| ((r >> (8 * p)) as usize) % s.n)
                    .collect(),
            )
        })
        .collect();
    let g = time(s.runs, || {
        gpu.subword_mean(m, &stats.mean, &lists).unwrap();
    });
    let seg = Init::SubwordMean(lists);
    let c = s.cpu.then(|| {
        time(s.runs, || {
            init::new_rows(m, stats, &seg, k_seg);
        })
    });
    // Floor: the whole matrix copied once (the rows are gathered on the device).
    line(
        &format!("segment mean, {k_seg} tokens"),
        g,
        c,
        m.bytes.len() as f64 / s.bw,
    );
}

/// Hewitt's Σ-free product for each k of KS (the CPU path for k > d forms Σ instead: not
/// compared).
fn bench_hewitt(gpu: &Gpu, m: &Matrix, stats: &Stats, s: &Setup) {
    let floor_bytes = m.bytes.len() as f64 / s.bw;
    for &k in &s.ks {
        let g = time(s.runs, || {
            gpu.hewitt_sigma_free(m, &stats.mean, k, 1e-9, 1).unwrap();
        });
        // The CPU path at k = 10⁵ is ~10¹⁴ flops: hours on a few cores; only small k are run.
        let c = (s.cpu && k <= 1000).then(|| {
            time(1, || {
                init::hewitt_sigma_free(m, &stats.mean, k, 1e-9, 1);
            })
        });
        let flops = 2.0 * s.n as f64 * s.d as f64 * k as f64;
        line(
            &format!("hewitt k = {k}"),
            g,
            c,
            (flops / s.peak).max(floor_bytes),
        );
    }
}

/// omp: OMP_T targets over OMP_S atoms of width OMP_D, OMP_K atoms each; the floor is the
/// correlation GEMMs (2·T·S·d per step) at the peak rate.
fn bench_omp(gpu: &Gpu, s: &Setup) {
    let (atoms, d, t, k) = (
        env("OMP_S", 32_768usize),
        env("OMP_D", 1024usize),
        env("OMP_T", 4096usize),
        env("OMP_K", 64usize),
    );
    if t == 0 {
        return;
    }
    let (dict, ys) = (util::random_f32(atoms * d, 3), util::random_f32(t * d, 5));
    let dr = Rows {
        data: &dict,
        rows: atoms,
        cols: d,
    };
    let tr = Rows {
        data: &ys,
        rows: t,
        cols: d,
    };
    let mut got = Vec::new();
    let g = time(s.runs, || got = gpu.omp(dr, tr, k).unwrap());
    let mut cpu = Vec::new();
    let c = s.cpu.then(|| time(1, || cpu = omp::pursue(dr, tr, k)));
    let flops = 2.0 * (t * atoms * d * k) as f64;
    line(
        &format!("omp S={atoms} d={d} T={t} k={k}"),
        g,
        c,
        flops / s.peak,
    );
    if s.cpu {
        let same = got
            .iter()
            .zip(&cpu)
            .filter(|(a, b)| a.atoms == b.atoms)
            .count();
        println!(
            "{:<34} the same atoms as the CPU for {same} of {t} targets",
            ""
        );
    }
}

fn main() {
    let mut s = Setup::from_env();
    let (n, d) = (s.n, s.d);
    let gpu = match Gpu::open() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    s.bw = gpu.h2d_rate().unwrap();
    println!(
        "device: {}; host → device {:.1} GB/s (pinned); matrix {n} × {d} bf16 ({:.2} GiB); {} CPU threads",
        gpu.describe(),
        s.bw / 1e9,
        (n * d * 2) as f64 / (1u64 << 30) as f64,
        std::thread::available_parallelism().map_or(1, |p| p.get())
    );
    let (bytes, x) = random_bf16(n, d);
    let m = Matrix {
        dtype: DType::BF16,
        rows: n,
        cols: d,
        bytes: &bytes,
    };
    let floor_bytes = bytes.len() as f64 / s.bw;
    let stats = init::stats(&m);
    let g = time(s.runs, || {
        gpu.stats(&m).unwrap();
    });
    let c = s.cpu.then(|| {
        time(s.runs, || {
            init::stats(&m);
        })
    });
    line("column mean + row norms", g, c, floor_bytes);
    bench_segment_mean(&gpu, &m, &stats, x, &s);
    bench_hewitt(&gpu, &m, &stats, &s);
    bench_omp(&gpu, &s);
}
