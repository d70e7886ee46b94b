//! Limits the repository keeps: the committed fixtures stay small (docs/fixtures.md).

use std::path::Path;

/// Every file under `dir`, skipping Python's `__pycache__` (written when the generator scripts run).
fn files(dir: &Path, out: &mut Vec<(std::path::PathBuf, u64)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            if e.file_name() != "__pycache__" {
                files(&e.path(), out);
            }
        } else {
            out.push((e.path(), e.metadata().unwrap().len()));
        }
    }
}

#[test]
fn testdata_stays_under_twenty_megabytes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut all = Vec::new();
    files(&root, &mut all);
    let total: u64 = all.iter().map(|(_, n)| n).sum();
    all.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let largest: Vec<String> = all
        .iter()
        .take(5)
        .map(|(p, n)| format!("{} ({n} bytes)", p.display()))
        .collect();
    assert!(
        all.len() > 100 && total > 1_000_000,
        "testdata not found whole: {} files, {total} bytes",
        all.len()
    );
    assert!(
        total < 20_000_000,
        "testdata holds {total} bytes in {} files, over the 20 MB the guide allows; largest: {}",
        all.len(),
        largest.join(", ")
    );
}
