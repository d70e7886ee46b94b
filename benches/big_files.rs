//! Big-file benchmarks for inspect-checkpoint. Run: `cargo bench --bench big_files`
//! (BENCH_DIR=/some/disk to choose where the 4 GiB sparse and 2 GiB real files go; RUNS=N).
//!
//! 1. Open + list a 4 GiB safetensors file: wall time and peak RSS, median of RUNS, beside the same
//!    command on the 673 KiB GPT-2 fixture (a ratio near 1 means the size of the data is not read).
//! 2. `--hash` over a 2 GiB file of 32 × 64 MiB tensors, page cache warm: throughput and CPU use
//!    beside `sha256sum` of the same file, medians of RUNS.

use ckpt_surgery::dtype::DType;
use ckpt_surgery::formats::safetensors::{serialize_header, HeaderEntry};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const EXE: &str = env!("CARGO_BIN_EXE_inspect-checkpoint");

fn write_file(path: &Path, tensors: u32, rows: u64, cols: u64, fill: bool) -> u64 {
    let names: Vec<String> = (0..tensors).map(|i| format!("layers.{i}.weight")).collect();
    let shape = [rows, cols];
    let entries: Vec<HeaderEntry> = names
        .iter()
        .map(|n| HeaderEntry {
            name: n,
            dtype: DType::F32,
            shape: &shape,
            len: rows * cols * 4,
        })
        .collect();
    let header = serialize_header(path, None, &entries).expect("header");
    let data = u64::from(tensors) * rows * cols * 4;
    let f = std::fs::File::create(path).expect("create bench file");
    let mut w = std::io::BufWriter::with_capacity(8 << 20, &f);
    w.write_all(&header).expect("write");
    if fill {
        // xorshift bytes: incompressible enough, fast to make.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut buf = vec![0u8; 8 << 20];
        let mut left = data;
        while left > 0 {
            for c in buf.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            let n = left.min(buf.len() as u64) as usize;
            w.write_all(&buf[..n]).expect("write");
            left -= n as u64;
        }
        w.flush().expect("flush");
    } else {
        w.flush().expect("flush");
        // Sparse: the data region is a hole, so making a 4 GiB file costs nothing.
        f.set_len(header.len() as u64 + data).expect("set_len");
    }
    header.len() as u64 + data
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Wall seconds of running `cmd args` (output discarded).
fn wall(cmd: &str, args: &[&str]) -> f64 {
    let t = Instant::now();
    let s = Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("run");
    assert!(s.success(), "{cmd} {args:?} failed");
    t.elapsed().as_secs_f64()
}

/// (peak RSS KiB, CPU percent) from /usr/bin/time.
fn rss_cpu(cmd: &str, args: &[&str]) -> (f64, f64) {
    let o = Command::new("/usr/bin/time")
        .args(["-f", "%M %P"])
        .arg(cmd)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("/usr/bin/time");
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().last().unwrap_or("0 0%");
    let mut it = last.split_whitespace();
    let rss = it.next().and_then(|x| x.parse().ok()).unwrap_or(0.0);
    let cpu = it
        .next()
        .and_then(|x| x.trim_end_matches('%').parse().ok())
        .unwrap_or(0.0);
    (rss, cpu)
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7);
    let dir = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = dir.join("ckpt-surgery-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let small = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/gpt2/model.safetensors"
    );

    // 1. Open + list.
    let big = dir.join("sparse_4gib.safetensors");
    let size = write_file(&big, 64, 16384, 1024, false);
    let bigs = big.to_str().expect("utf-8 path");
    let list_big = median((0..runs).map(|_| wall(EXE, &[bigs, "--json"])).collect());
    let list_small = median((0..runs).map(|_| wall(EXE, &[small, "--json"])).collect());
    let rss_big = median(
        (0..runs)
            .map(|_| rss_cpu(EXE, &[bigs, "--json"]).0)
            .collect(),
    );
    let rss_small = median(
        (0..runs)
            .map(|_| rss_cpu(EXE, &[small, "--json"]).0)
            .collect(),
    );
    println!("## open + list (median of {runs})");
    println!("| file | size | wall | peak RSS |");
    println!("|---|---|---|---|");
    println!(
        "| sparse 4 GiB, 64 tensors | {size} B | {:.1} ms | {:.1} MiB |",
        list_big * 1e3,
        rss_big / 1024.0
    );
    println!(
        "| gpt2 fixture (baseline) | 689 KiB | {:.1} ms | {:.1} MiB |",
        list_small * 1e3,
        rss_small / 1024.0
    );
    println!(
        "ratio 4 GiB / fixture: wall {:.2}×, RSS {:.2}×\n",
        list_big / list_small,
        rss_big / rss_small
    );
    std::fs::remove_file(&big).ok();

    // 2. Hashing.
    let real = dir.join("real_2gib.safetensors");
    let size = write_file(&real, 32, 16384, 1024, true);
    let reals = real.to_str().expect("utf-8 path");
    wall("cat", &[reals]); // warm the page cache for both contenders
    let mb = size as f64 / 1e6;
    let ours: Vec<f64> = (0..runs)
        .map(|_| wall(EXE, &[reals, "--hash", "--json"]))
        .collect();
    let base: Vec<f64> = (0..runs).map(|_| wall("sha256sum", &[reals])).collect();
    // A single-threaded hasher that uses the CPU's SHA extensions, when openssl is installed.
    let openssl: Option<Vec<f64>> = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| {
            (0..runs)
                .map(|_| wall("openssl", &["dgst", "-sha256", reals]))
                .collect()
        });
    let (_, cpu_ours) = rss_cpu(EXE, &[reals, "--hash", "--json"]);
    let (_, cpu_base) = rss_cpu("sha256sum", &[reals]);
    let (o, b) = (median(ours), median(base));
    println!(
        "## sha256 of a 2 GiB file, 32 × 64 MiB tensors, warm cache (median of {runs}, {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!("| command | wall | throughput | CPU |");
    println!("|---|---|---|---|");
    println!(
        "| inspect-checkpoint --hash | {o:.2} s | {:.0} MB/s | {cpu_ours:.0} % |",
        mb / o
    );
    println!(
        "| sha256sum (baseline) | {b:.2} s | {:.0} MB/s | {cpu_base:.0} % |",
        mb / b
    );
    if let Some(v) = openssl {
        let s = median(v);
        println!(
            "| openssl dgst -sha256 (baseline, 1 thread) | {s:.2} s | {:.0} MB/s | |",
            mb / s
        );
        println!("speed-up over openssl: {:.2}×", s / o);
    }
    println!("speed-up over sha256sum: {:.2}×", b / o);
    std::fs::remove_file(&real).ok();
}
