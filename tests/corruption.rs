//! Corrupted inputs end in success or a clean error — never a panic. For each fixture, a few
//! hundred deterministic mutations (bit flips, truncations, header-length edits, overwritten
//! bytes near the header and the zip directory) are opened with the library, and what opens is
//! read through (every tensor's bytes, the inspect report, tokenizer parsing). A counting
//! allocator holds the whole test binary's peak heap under 1 GiB (a hostile length field that
//! makes us reserve memory fails the test even when the reservation is never touched).

mod common;
use ckpt_surgery::formats::{self, OpenOptions};
use ckpt_surgery::jobs::inspect_checkpoint as inspect;
use ckpt_surgery::jobs::merge_tokenizers as merge;
use ckpt_surgery::jobs::sanitize_checkpoint as sanitize;
use ckpt_surgery::tokenizer::sentencepiece;
use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting live bytes and their peak.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
const MEMORY_LIMIT: usize = 1 << 30;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            grew(new);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap of this whole test binary so far (all tests together) stays under 1 GiB.
fn assert_memory_bounded(what: &str) {
    let peak = PEAK.load(Ordering::Relaxed);
    eprintln!("{what}: peak heap so far {} MiB", peak >> 20);
    assert!(
        peak < MEMORY_LIMIT,
        "{what}: heap reached {peak} bytes (limit {MEMORY_LIMIT})"
    );
}

/// The library's seeded generator, with a bounded draw.
struct Rng(ckpt_surgery::rng::Rng);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(ckpt_surgery::rng::Rng::new(seed, 0))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The `i`-th mutation of `data`.
fn mutate(data: &[u8], r: &mut Rng, i: usize) -> Vec<u8> {
    let mut d = data.to_vec();
    let n = d.len();
    match i % 6 {
        0 => {
            for _ in 0..1 + r.below(4) {
                let at = r.below(n);
                d[at] ^= 1 << r.below(8);
            }
        }
        1 => d.truncate(r.below(n)),
        2 if n >= 8 => {
            // The first 8 bytes: a safetensors header length, or zip/pickle magic.
            let v = match r.below(4) {
                0 => 0u64,
                1 => u64::MAX,
                2 => n as u64 + r.below(100) as u64,
                _ => r.next() % (n as u64 * 2),
            };
            d[..8].copy_from_slice(&v.to_le_bytes());
        }
        3 => {
            // Overwrite a few bytes near the start (headers, pickles).
            let at = r.below(n.min(2048));
            for b in d.iter_mut().skip(at).take(1 + r.below(8)) {
                *b = r.next() as u8;
            }
        }
        4 => {
            // Overwrite a few bytes near the end (zip central directory, end records).
            let at = n.saturating_sub(1 + r.below(n.min(1024)));
            for b in d.iter_mut().skip(at).take(1 + r.below(8)) {
                *b = r.next() as u8;
            }
        }
        _ => {
            // Duplicate a slice into another place.
            let (a, b) = (r.below(n), r.below(n));
            let len = r.below(64).min(n - a.max(b));
            d.copy_within(a..a + len, b);
        }
    }
    d
}

fn exercise_checkpoint(path: &Path) {
    let mut o = OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    let Ok(opened) = formats::open(path, &o) else {
        return;
    };
    let _ = inspect::report(&opened, &inspect::Options::default());
    if let Some(ckpt) = opened.tensors() {
        for t in ckpt.tensors() {
            let _ = t.try_bytes().unwrap().len();
        }
        for t in &ckpt.torch {
            let _ = t.verify_crcs();
        }
        if !ckpt.torch.is_empty() {
            // Optimizer discovery, matching and the coverage rule walk the whole tree.
            let opts = sanitize::Options {
                target: sanitize::RowsFrom::Rows(7),
                optimizer: sanitize::OptimizerAction::Repair,
                scheduler: sanitize::SchedulerAction::Keep,
                method: ckpt_surgery::rows::Method::Mean,
                seed: 0,
                fail_on_nonfinite: false,
                dry_run: true,
                open: o.clone(),
                keep: Vec::new(),
                overwrite: false,
                tensors: Vec::new(),
                segments: 1,
                optimizer_params: Vec::new(),
                // Rows 7 is a cut: allowed, so the walk goes on past the shrink rule.
                allow_shrink: true,
            };
            let _ =
                ckpt_surgery::jobs::sanitize_checkpoint::run(&opened, Path::new("unused"), &opts);
        }
    }
}

fn exercise_tokenizer(path: &Path) {
    let _ = merge::load_base(path);
    let _ = merge::load_addition(path);
    if let Ok(b) = std::fs::read(path) {
        let _ = sentencepiece::parse(b);
    }
}

fn run_mutations(fixtures: &[&str], per_file: usize, exercise: fn(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Rng::new(2026);
    let mut tried = 0;
    for f in fixtures {
        let data = std::fs::read(testdata(f)).unwrap();
        let name = Path::new(f)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for i in 0..per_file {
            let bad = mutate(&data, &mut r, i);
            let p = tmp.path().join(&name);
            std::fs::write(&p, &bad).unwrap();
            let ok = catch_unwind(AssertUnwindSafe(|| exercise(&p)));
            if ok.is_err() {
                let keep = tmp.path().join(format!("panic-{name}"));
                std::fs::write(&keep, &bad).unwrap();
                let saved = std::env::temp_dir().join(format!("ckpt-surgery-panic-{i}-{name}"));
                std::fs::write(&saved, &bad).unwrap();
                panic!(
                    "{f}: mutation {i} panicked (input saved to {})",
                    saved.display()
                );
            }
            tried += 1;
        }
    }
    assert_eq!(tried, fixtures.len() * per_file);
    assert_memory_bounded(&format!(
        "{} fixtures x {per_file} mutations",
        fixtures.len()
    ));
}

#[test]
fn mutated_checkpoints_never_panic() {
    run_mutations(
        &[
            "chatterbox_t3/t3_bf16.safetensors",
            "gpt2/model.safetensors",
            "torch/state_dict.pt",
            "torch/train_ckpt.pt",
            "torch/train_ckpt_legacy.pt",
            "torch/tied_state_dict.pt",
            "bert_mlm_bin/pytorch_model.bin",
            "resume/lightning_two_optimizers.ckpt",
            "torch_eras/py2_ordereddict.pth",
            "torch_eras/dtypes.pt",
            "sanitize/sgd_2454_legacy.pt",
        ],
        300,
        exercise_checkpoint,
    );
}

#[test]
fn mutated_tokenizers_never_panic() {
    run_mutations(
        &[
            "tokenizers/chatterbox_base.json",
            "tokenizers/amharic_vocab.json",
            "tokenizers/sp_english.model",
            "tokenizers/sp_amharic.model",
        ],
        150,
        exercise_tokenizer,
    );
}

#[test]
fn mutated_pickles_are_refused_or_read_and_written_back_without_panic() {
    use ckpt_surgery::formats::torch::pickle::{unpickle, GlobalPolicy, Limits, Origin};
    use ckpt_surgery::formats::torch::{tensor_paths, writer::emit_pickle};
    let at = Origin {
        path: Path::new("mutated.pkl"),
        record: "",
    };
    let mut policy = GlobalPolicy::default();
    policy.extra.insert("argparse.Namespace".into());
    let mut r = Rng::new(7);
    let (mut read, mut refused) = (0, 0);
    for f in [
        "torch/train_ckpt.pt",
        "torch/state_dict.pt",
        "torch_eras/py2_ordereddict.pth",
        "torch_eras/dtypes.pt",
    ] {
        let o = OpenOptions {
            globals: policy.clone(),
        };
        let ckpt = formats::open_tensors(&testdata(f), &o).unwrap();
        let t = &ckpt.torch[0];
        let pkl = t.map.slice(t.pickle_start, t.pickle_len).unwrap().to_vec();
        for i in 0..1500 {
            let bad = mutate(&pkl, &mut r, i);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                match unpickle(&bad, at, &policy, Limits::default()) {
                    Ok((p, _)) => {
                        let _ = tensor_paths(&p);
                        if let Ok(e) = emit_pickle(&p) {
                            let bytes = e.bytes;
                            // What we write must read back.
                            assert!(unpickle(&bytes, at, &policy, Limits::default()).is_ok());
                        }
                        true
                    }
                    Err(_) => false,
                }
            }));
            match outcome {
                Ok(true) => read += 1,
                Ok(false) => refused += 1,
                Err(_) => {
                    let saved =
                        std::env::temp_dir().join(format!("ckpt-surgery-panic-pickle-{i}.pkl"));
                    std::fs::write(&saved, &bad).unwrap();
                    panic!(
                        "{f}: pickle mutation {i} panicked (saved to {})",
                        saved.display()
                    );
                }
            }
        }
    }
    eprintln!("pickle mutations: {read} read, {refused} refused");
    assert_memory_bounded("pickle mutations");
    assert!(
        read > 100 && refused > 100,
        "both outcomes exercised: {read} read, {refused} refused"
    );
}
