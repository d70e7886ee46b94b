//! The writing binaries, killed at any moment or run out of disk space, leave the destination
//! absent or complete (never partial), no temp file beside it after a clean failure, and inputs
//! untouched. Uses the hidden pause hook (CKPT_SURGERY_TEST_PAUSE_MS) so kills land mid-write.

mod common;
use ckpt_surgery::formats;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

fn exe(name: &str) -> &'static str {
    match name {
        "extend-embeddings" => env!("CARGO_BIN_EXE_extend-embeddings"),
        "sanitize-checkpoint" => env!("CARGO_BIN_EXE_sanitize-checkpoint"),
        _ => panic!("{name}"),
    }
}

/// (binary, input, extra args, output is a folder)
fn jobs() -> Vec<(&'static str, PathBuf, Vec<&'static str>, bool)> {
    vec![
        (
            "extend-embeddings",
            testdata("chatterbox_t3/t3_f32.safetensors"),
            vec!["--new-rows", "2535"],
            false,
        ),
        (
            "extend-embeddings",
            testdata("gpt2_sharded"),
            vec!["--new-rows", "1024"],
            true,
        ),
        (
            "sanitize-checkpoint",
            testdata("sanitize/sgd_2454.pt"),
            vec!["--vocab-rows", "2535"],
            false,
        ),
    ]
}

fn command(bin: &str, input: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(exe(bin));
    c.arg(input).arg("--output").arg(out).args(extra);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// The output is either absent or opens with the strict reader as the complete result.
fn absent_or_complete(out: &Path, is_dir: bool, complete: &[(String, String)]) -> bool {
    let target = if is_dir {
        out.join("model.safetensors.index.json")
    } else {
        out.to_path_buf()
    };
    if !target.exists() {
        return false;
    }
    let c = formats::open(out).expect("a present output opens strictly");
    let mut got: Vec<(String, String)> = c
        .tensors()
        .map(|t| (t.name.to_string(), sha256_hex(&t.bytes())))
        .collect();
    got.sort();
    assert_eq!(
        got,
        complete,
        "{} is present but not the complete result",
        out.display()
    );
    true
}

#[test]
fn killing_a_writing_binary_anywhere_leaves_no_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    for (bin, input, extra, is_dir) in jobs() {
        let before = if input.is_dir() {
            snapshot(&input)
        } else {
            vec![(input.clone(), std::fs::read(&input).unwrap())]
        };
        // A full run: how long it takes and what complete looks like.
        let full = tmp
            .path()
            .join(format!("full-{bin}{}", if is_dir { "" } else { ".out" }));
        let t0 = Instant::now();
        let status = command(bin, &input, &full, &extra)
            .env("CKPT_SURGERY_TEST_PAUSE_MS", "25")
            .status()
            .unwrap();
        assert!(status.success(), "{bin} full run");
        let run_time = t0.elapsed();
        let c = formats::open(&full).unwrap();
        let mut complete: Vec<(String, String)> = c
            .tensors()
            .map(|t| (t.name.to_string(), sha256_hex(&t.bytes())))
            .collect();
        complete.sort();
        let trials = 20u32;
        let (mut absent, mut present) = (0, 0);
        for i in 0..trials {
            let out = tmp
                .path()
                .join(format!("{bin}-{i}{}", if is_dir { "" } else { ".out" }));
            let mut child = command(bin, &input, &out, &extra)
                .env("CKPT_SURGERY_TEST_PAUSE_MS", "25")
                .spawn()
                .unwrap();
            // Spread over the run; the last trial waits well past it (a loaded machine is slower).
            let factor = if i == trials - 1 {
                3.0
            } else {
                f64::from(i) / f64::from(trials) * 1.3
            };
            std::thread::sleep(run_time.mul_f64(factor));
            let _ = child.kill();
            let _ = child.wait();
            if absent_or_complete(&out, is_dir, &complete) {
                present += 1;
            } else {
                absent += 1;
            }
        }
        let after = if input.is_dir() {
            snapshot(&input)
        } else {
            vec![(input.clone(), std::fs::read(&input).unwrap())]
        };
        assert_eq!(before, after, "{bin}: input changed");
        assert!(
            absent > 0,
            "{bin}: no kill landed before the rename ({run_time:?})"
        );
        assert!(present > 0, "{bin}: no run completed ({run_time:?})");
    }
}

#[test]
fn running_out_of_disk_space_is_a_clean_error_with_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    for (bin, input, extra, is_dir) in jobs() {
        let dir = tmp
            .path()
            .join(format!("{bin}-{}", if is_dir { "dir" } else { "file" }));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(if is_dir { "out" } else { "out.bin" });
        // RLIMIT_FSIZE of 64 KiB with SIGXFSZ ignored: writes past it fail with EFBIG, as a full
        // disk fails with ENOSPC.
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg("trap '' XFSZ; ulimit -f 128; exec \"$@\"")
            .arg("bash")
            .arg(exe(bin))
            .arg(&input)
            .arg("--output")
            .arg(&out)
            .args(&extra);
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bin}: {err}");
        assert_eq!(err.lines().count(), 1, "{bin}: one line: {err}");
        assert!(
            err.contains("too large") || err.contains("No space") || err.contains("File too large"),
            "{bin}: {err}"
        );
        let target = if is_dir {
            out.join("model.safetensors.index.json")
        } else {
            out.clone()
        };
        assert!(!target.exists(), "{bin}: no output after a failed write");
        let leftovers: Vec<_> = walk(&dir)
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{bin}: temp files left: {leftovers:?}"
        );
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
