//! What every fuzz target shares: a per-process scratch folder (file-based entry points need a
//! path) and "read everything that opened", so a lazy bug behind a successful open is reached too.

use ckpt_surgery::formats::{self, OpenOptions};
use ckpt_surgery::jobs::inspect_checkpoint as inspect;
use std::path::{Path, PathBuf};

/// A folder of this process's own, on tmpfs when there is one.
pub fn scratch() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("ckpt-surgery-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// Write `data` to `name` in the scratch folder.
pub fn put(name: &str, data: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, data).expect("scratch write");
    p
}

/// Open `path` as a checkpoint (the policy allows argparse.Namespace, as users do) and read
/// through every tensor, the inspect report and the zip CRCs.
pub fn read_through(path: &Path) {
    let mut o = OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    let Ok(opened) = formats::open(path, &o) else {
        return;
    };
    if let formats::Checkpoint::Gguf(at) = &opened {
        let Ok(g) = at.get() else {
            return;
        };
        for t in &g.tensors {
            let _ = std::hint::black_box(g.data(t).map(|b| b.len()));
        }
        let _ = inspect::gguf(g, &inspect::Options::default());
        return;
    }
    let _ = inspect::report(&opened, &inspect::Options::default());
    if let Some(ckpt) = opened.tensors() {
        for t in ckpt.tensors() {
            let _ = std::hint::black_box(t.try_bytes().map(|b| b.len()));
        }
        for t in &ckpt.torch {
            let _ = t.verify_crcs();
        }
    }
}
