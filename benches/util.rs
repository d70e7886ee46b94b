//! Helpers every bench shares (included with `#[path = "util.rs"] mod util;`).
#![allow(dead_code)]

use ckpt_surgery::rows::gemm::sgemm;
use ndarray::{Array2, ShapeBuilder};
use rayon::prelude::*;
use std::time::Instant;

/// The environment variable `k` parsed, or `d`.
pub fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// Seconds `f` takes, median of `runs` calls.
pub fn time(runs: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `n` xorshift values in [-0.5, 0.5) as f32 (the timings do not depend on the distribution).
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32) / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Seconds (median of `runs`) of Hewitt's product as init.rs runs it: `blocks` blocks of 1024
/// rows, split over the threads, each thread accumulating its own d × k (benches gemm, hewitt).
pub fn hewitt_blocks(d: usize, k: usize, blocks: usize, runs: usize) -> f64 {
    let xc = Array2::from_shape_vec((1024, d), random_f32(1024 * d, 1)).unwrap_or_default();
    let z = Array2::from_shape_vec((1024, k), random_f32(1024 * k, 2)).unwrap_or_default();
    time(runs, || {
        let parts: Vec<Array2<f32>> = (0..rayon::current_num_threads())
            .into_par_iter()
            .map(|p| {
                let mut acc = Array2::<f32>::zeros((d, k).f());
                let n = rayon::current_num_threads();
                for _ in (p..blocks).step_by(n) {
                    sgemm(&xc.t(), &z.view(), &mut acc.view_mut(), true);
                }
                acc
            })
            .collect();
        std::hint::black_box(parts);
    })
}
