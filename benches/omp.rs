//! --init omp's pursuit alone (in memory): T new tokens over S shared tokens of width D, k atoms,
//! beside a numpy OMP (benches/omp_numpy.py: correlations R·Dᵀ per step, least squares on the
//! selected atoms) over the same inputs in the same run; the atom choices must be identical.
//!
//! Run: `cargo bench --bench omp` (TS=1000,20000 S=32768 D=2048 K=64 RUNS=3 by default;
//! NUMPY=0 skips the Python side, PYTHON picks the interpreter, NUMPY_T=N runs numpy on the first N
//! targets only and scales its time by T / N: blocks of 256 targets are independent there).

use ckpt_surgery::rng::Rng;
use ckpt_surgery::rows::init::omp::{pursue, Rows};
use std::process::Command;
use std::time::Instant;

#[path = "util.rs"]
mod util;
use util::{env, median};

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed, 0);
    (0..n).map(|_| r.normal() as f32).collect()
}

fn save(p: &std::path::Path, v: &[f32]) {
    std::fs::write(
        p,
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
}

/// What any Gram pick must read, from the atoms chosen: choosing atom i + 1 takes the correlations
/// after i atoms, α₀ minus i Gram columns (S floats each). Printed for every target alone and for the
/// ideal where each step reads every distinct column once for all targets, beside how many
/// atoms were ever selected (the Gram's rows any exact Batch-OMP needs).
fn traffic(got: &[ckpt_surgery::rows::init::omp::Combination], s: usize, k: usize) {
    let column = (s * 4) as f64 / 1e9;
    let (mut alone, mut shared) = (0f64, 0f64);
    let mut seen = vec![false; s];
    let mut distinct = 0usize;
    // Choosing atom i + 1 needs the correlations after i atoms: i columns; the k-th atom ends it.
    for i in 1..=k {
        for c in got {
            if let Some(&a) = c.atoms.get(i - 1) {
                distinct += usize::from(!std::mem::replace(&mut seen[a], true));
            }
        }
        if i == k {
            break;
        }
        let columns: usize = got.iter().map(|c| c.atoms.len().min(i)).sum();
        alone += column * columns as f64;
        shared += column * distinct as f64;
    }
    println!(
        "atoms selected by some target: {distinct} of {s}; pick reads {alone:.1} GB with each \
         target alone, {shared:.1} GB if each step read every distinct column once"
    );
}

fn main() {
    let (s, d, k, runs): (usize, usize, usize, usize) = (
        env("S", 32768),
        env("D", 2048),
        env("K", 64),
        env("RUNS", 3),
    );
    let ts: Vec<usize> = std::env::var("TS")
        .unwrap_or_else(|_| "1000,20000".into())
        .split(',')
        .filter_map(|t| t.parse().ok())
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dict = random(s * d, 1);
    save(&tmp.path().join("dict"), &dict);
    for &t in &ts {
        let ys = random(t * d, 2);
        save(&tmp.path().join("y"), &ys);
        let (dr, yr) = (
            Rows {
                data: &dict,
                rows: s,
                cols: d,
            },
            Rows {
                data: &ys,
                rows: t,
                cols: d,
            },
        );
        let mut got = Vec::new();
        let ours = median(
            (0..runs)
                .map(|_| {
                    let t0 = Instant::now();
                    got = pursue(dr, yr, k);
                    t0.elapsed().as_secs_f64()
                })
                .collect(),
        );
        println!("ours  T={t} S={s} D={d} k={k}: {ours:.2} s (median of {runs})");
        traffic(&got, s, k);
        if env("NUMPY", 1) == 0 {
            continue;
        }
        let atoms: Vec<u8> = got
            .iter()
            .flat_map(|c| (0..k).map(move |i| c.atoms.get(i).map_or(-1, |&a| a as i64)))
            .flat_map(|a| a.to_le_bytes())
            .collect();
        std::fs::write(tmp.path().join("atoms"), atoms).unwrap();
        let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let o = Command::new(py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/omp_numpy.py"))
            .args([tmp.path().to_str().unwrap(), &s.to_string(), &d.to_string()])
            .args([t.to_string(), k.to_string(), runs.to_string()])
            .arg(env("NUMPY_T", t).min(t).to_string())
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&o.stdout));
        eprint!("{}", String::from_utf8_lossy(&o.stderr));
    }
}
