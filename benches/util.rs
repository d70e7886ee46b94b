//! Helpers every bench shares (included with `#[path = "util.rs"] mod util;`).
#![allow(dead_code)]

/// The environment variable `k` parsed, or `d`.
pub fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
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
