//! hewitt on a 262144 × 2560 f32 matrix (the maths only, in memory), k = 81, 1000, 5000 new rows,
//! beside transformers' `_init_added_embeddings_weights_with_mean` on the same sizes (run by
//! benches/hewitt_transformers.py, which needs torch and transformers).
//!
//! Run: `cargo bench --bench hewitt` (RUNS=5 by default; N, D and KS override the sizes;
//! TRANSFORMERS=0 skips the Python side; PYTHON names the interpreter with torch + transformers).
//! PARTS=1 also times the Σ-free path's two parts alone, split over two threads as init.rs splits
//! them: the N·k normals (`rng::normals_f32`, 1024-row blocks) and the product (`gemm::sgemm`,
//! d × k += Xcᵀ·Z per block: `util::hewitt_blocks`, which `cargo bench --bench gemm` times too), so a goal can be set against what each part costs on this CPU.

use ckpt_surgery::dtype::DType;
use ckpt_surgery::rng::normals_f32;
use ckpt_surgery::rows::init::{self, Matrix};
use rayon::prelude::*;
use std::process::Command;

#[path = "util.rs"]
mod util;
use util::{env, hewitt_blocks, time};

fn main() {
    let runs: usize = env("RUNS", 5);
    let n: usize = env("N", 262_144);
    let d: usize = env("D", 2560);
    let ks: Vec<usize> = std::env::var("KS")
        .unwrap_or_else(|_| "81,1000,5000".into())
        .split(',')
        .filter_map(|k| k.parse().ok())
        .collect();
    // Uniform-ish values from a xorshift: the timing does not depend on the distribution.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let bytes: Vec<u8> = (0..n * d)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (((x >> 40) as f32) / (1u64 << 24) as f32 - 0.5).to_le_bytes()
        })
        .collect();
    let m = Matrix {
        dtype: DType::F32,
        rows: n,
        cols: d,
        bytes: &bytes,
    };
    let stats = init::stats(&m);
    let ours: Vec<f64> = ks
        .iter()
        .map(|&k| {
            let mut seed = 0u64;
            time(runs, || {
                let rows = init::hewitt(&m, &stats.mean, k, 1e-9, seed);
                assert_eq!(rows.len(), k * d);
                seed += 1;
            })
        })
        .collect();
    // TRANSFORMERS=0 times ours alone (for profiling).
    let skip = std::env::var("TRANSFORMERS").is_ok_and(|v| v == "0");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let theirs: Option<serde_json::Value> = Command::new(if skip { "false" } else { &python })
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/hewitt_transformers.py"
        ))
        .env("N", n.to_string())
        .env("D", d.to_string())
        .env(
            "KS",
            ks.iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .env("RUNS", runs.to_string())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| serde_json::from_slice(&o.stdout).ok());
    println!(
        "## hewitt, {n} × {d} f32, maths only, median of {runs} ({} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!("| new rows k | ckpt-surgery | transformers | speed-up |");
    println!("|---|---|---|---|");
    for (k, o) in ks.iter().zip(&ours) {
        let t = theirs.as_ref().and_then(|v| v[k.to_string()].as_f64());
        match t {
            Some(t) => println!("| {k} | {o:.2} s | {t:.2} s | {:.1}× |", t / o),
            None => println!("| {k} | {o:.2} s | (transformers not run) | |"),
        }
    }
    println!("path: Σ-free product for k ≤ d, Σ + Cholesky for k > d (d = {d})");
    if env("PARTS", 0) == 1 {
        parts(n, d, &ks, runs);
    }
}

/// The Σ-free path's normals and product timed apart (medians of `runs`), for each k ≤ d.
fn parts(n: usize, d: usize, ks: &[usize], runs: usize) {
    const BLOCK: usize = 1024;
    let halves = |blocks: usize| [0..blocks / 2, blocks / 2..blocks];
    println!("\n| k | normals alone | product alone | GFLOP/s |");
    println!("|---|---|---|---|");
    for &k in ks.iter().filter(|&&k| k <= d) {
        let blocks = n.div_ceil(BLOCK);
        let mut seed = 0u64;
        let normals = time(runs, || {
            halves(blocks).into_par_iter().for_each(|part| {
                let mut z = vec![0f32; BLOCK * k];
                for b in part {
                    normals_f32(seed, (b * BLOCK * k) as u64, &mut z);
                }
                std::hint::black_box(&z);
            });
            seed += 1;
        });
        let product = hewitt_blocks(d, k, blocks, runs);
        let flop = 2.0 * (blocks * BLOCK * d * k) as f64;
        println!(
            "| {k} | {normals:.2} s | {product:.2} s | {:.0} |",
            flop / product / 1e9
        );
    }
}
