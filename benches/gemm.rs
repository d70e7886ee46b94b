//! The init maths' GEMM (rows/gemm.rs) against this CPU's measured FMA peak and torch.matmul on
//! the same shapes in the same run (issue 45 item 1): Hewitt's blocks (c (d × k) += Xcᵀ · Z over
//! 1024-row blocks, both threads each on its own accumulator, as init.rs runs them), and omp's
//! Gram band (a (n × d) · dictᵀ). The peak: two threads of independent AVX-512 FMA chains.
//!
//! Run: `cargo bench --bench gemm` (RUNS=5; PYTHON=python with torch for the torch column,
//! TORCH=0 to skip it). torch runs in its own process with OPENBLAS_CORETYPE and
//! OPENBLAS_L2_SIZE unset and 2 threads.

use ckpt_surgery::rows::gemm::sgemm;
use ndarray::Array2;
use rayon::prelude::*;
use std::process::Command;
use std::time::Instant;

#[path = "util.rs"]
mod util;
use util::{env, hewitt_blocks as hewitt, median, random_f32 as rnd, time};

// AVX-512 intrinsics are stable since Rust 1.89: the bench needs it, the library (MSRV 1.88)
// does not (its AVX-512 kernels are the gemm crate's).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::incompatible_msrv)]
unsafe fn fma_chains(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 12];
    let (a, b) = (_mm512_set1_ps(1.000_000_1), _mm512_set1_ps(0.999_999_9));
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm512_fmadd_ps(*r, a, b);
        }
    }
    let mut s = _mm512_setzero_ps();
    for r in acc {
        s = _mm512_add_ps(s, r);
    }
    _mm512_reduce_add_ps(s)
}

/// FLOP/s of `threads` threads of 12 independent AVX-512 FMA chains (None without AVX-512).
fn fma_peak(threads: usize) -> Option<f64> {
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return None;
    }
    let iters = 20_000_000u64;
    let t = Instant::now();
    let v: f32 = std::thread::scope(|sc| {
        let h: Vec<_> = (0..threads)
            // SAFETY: avx512f was detected above.
            .map(|_| sc.spawn(move || unsafe { fma_chains(iters) }))
            .collect();
        h.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    });
    std::hint::black_box(v);
    Some(threads as f64 * (iters * 12 * 16 * 2) as f64 / t.elapsed().as_secs_f64())
}

/// omp's Gram band: a (n × d) · dictᵀ (s × d), column blocks of 256 over the threads.
fn gram(n: usize, s: usize, d: usize, runs: usize) -> f64 {
    let a = Array2::from_shape_vec((n, d), rnd(n * d, 3)).unwrap_or_default();
    let dm = Array2::from_shape_vec((s, d), rnd(s * d, 4)).unwrap_or_default();
    let mut out = Array2::<f32>::zeros((n, s));
    time(runs, || {
        let parts: Vec<_> = out
            .axis_chunks_iter_mut(ndarray::Axis(1), 256)
            .zip(dm.axis_chunks_iter(ndarray::Axis(0), 256))
            .collect();
        parts.into_par_iter().for_each(|(mut o, dm)| {
            sgemm(&a.view(), &dm.t(), &mut o, false);
        });
    })
}

const TORCH: &str = r#"
import sys, time, torch
torch.set_num_threads(2)
runs = int(sys.argv[1])
def med(f):
    v = []
    for _ in range(runs):
        t = time.perf_counter(); f(); v.append(time.perf_counter() - t)
    return sorted(v)[len(v) // 2]
for spec in sys.argv[2:]:
    kind, *dims = spec.split(":")
    dims = [int(x) for x in dims]
    if kind == "hewitt":
        d, k, blocks = dims
        xc, z = torch.rand(1024, d) - 0.5, torch.rand(1024, k) - 0.5
        acc = torch.zeros(d, k)
        def f():
            for _ in range(blocks): acc.addmm_(xc.T, z)
    else:
        n, s, d = dims
        a, dm = torch.rand(n, d) - 0.5, torch.rand(s, d) - 0.5
        def f(): return a @ dm.T
    f()
    print(med(f))
"#;

fn torch_times(python: &str, runs: usize, specs: &[String]) -> Option<Vec<f64>> {
    let o = Command::new(python)
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .arg("-c")
        .arg(TORCH)
        .arg(runs.to_string())
        .args(specs)
        .output()
        .ok()?;
    if !o.status.success() {
        eprintln!("torch: {}", String::from_utf8_lossy(&o.stderr));
        return None;
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim().parse().ok())
        .collect()
}

fn main() {
    let runs: usize = env("RUNS", 5);
    let threads = rayon::current_num_threads();
    let peaks: Vec<f64> = (0..3).filter_map(|_| fma_peak(threads)).collect();
    let peak = if peaks.is_empty() {
        f64::NAN
    } else {
        median(peaks)
    };
    println!(
        "FMA peak, {threads} threads, AVX-512: {:.1} GFLOP/s (median of 3)",
        peak / 1e9
    );
    // (what, spec for torch, flops, our seconds)
    let cases: Vec<(String, String, f64, f64)> = vec![
        {
            let (d, k, b) = (2560, 81, 64);
            (
                "hewitt d=2560 k=81 (64 blocks)".into(),
                format!("hewitt:{d}:{k}:{b}"),
                2.0 * (1024 * d * k * b) as f64,
                hewitt(d, k, b, runs),
            )
        },
        {
            let (d, k, b) = (2560, 1000, 16);
            (
                "hewitt d=2560 k=1000 (16 blocks)".into(),
                format!("hewitt:{d}:{k}:{b}"),
                2.0 * (1024 * d * k * b) as f64,
                hewitt(d, k, b, runs),
            )
        },
        {
            let (n, s, d) = (4096, 8192, 1024);
            (
                "omp gram n=4096 S=8192 d=1024".into(),
                format!("gram:{n}:{s}:{d}"),
                2.0 * (n * s * d) as f64,
                gram(n, s, d, runs),
            )
        },
    ];
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let specs: Vec<String> = cases.iter().map(|c| c.1.clone()).collect();
    let torch = (env("TORCH", 1) == 1)
        .then(|| torch_times(&python, runs, &specs))
        .flatten();
    for (i, (what, _, flops, ours)) in cases.iter().enumerate() {
        let t = torch.as_ref().map(|t| t[i]);
        println!(
            "{what:<34} ours {ours:>8.4} s {:>6.1} GFLOP/s ({:>3.0} % of peak)   torch {}",
            flops / ours / 1e9,
            100.0 * flops / ours / peak,
            t.map_or("—".into(), |t| format!(
                "{t:>8.4} s {:>6.1} GFLOP/s ({:>3.0} %)",
                flops / t / 1e9,
                100.0 * flops / t / peak
            ))
        );
    }
}
