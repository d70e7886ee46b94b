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
        "merge-tokenizers" => env!("CARGO_BIN_EXE_merge-tokenizers"),
        "vocab-blocks" => env!("CARGO_BIN_EXE_vocab-blocks"),
        "transplant-tokenizer" => env!("CARGO_BIN_EXE_transplant-tokenizer"),
        "trim-vocab" => env!("CARGO_BIN_EXE_trim-vocab"),
        _ => panic!("{name}"),
    }
}

/// What a job writes: a checkpoint file, a sharded checkpoint folder, or a tokenizer file.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Out {
    File,
    Folder,
    Tokenizer,
}

/// One writing job: binary, arguments before `--output`, arguments after, what it writes, and
/// environment (the hidden hooks).
struct Job {
    bin: &'static str,
    inputs: Vec<PathBuf>,
    args: Vec<String>,
    extra: Vec<&'static str>,
    out: Out,
    env: Vec<(&'static str, &'static str)>,
}

fn jobs() -> Vec<Job> {
    let checkpoint = |bin, input: &str, extra, out| {
        let p = testdata(input);
        Job {
            bin,
            inputs: vec![p.clone()],
            args: vec![p.to_string_lossy().into_owned()],
            extra,
            out,
            env: vec![],
        }
    };
    let base = testdata("tokenizers/chatterbox_base.json");
    let add = testdata("tokenizers/amharic_addition.json");
    let mut all = vec![
        checkpoint(
            "extend-embeddings",
            "chatterbox_t3/t3_f32.safetensors",
            vec!["--new-rows", "2535"],
            Out::File,
        ),
        // The direct writer (used for outputs of 256 MiB and more), on the small fixture.
        Job {
            env: vec![("CKPT_SURGERY_TEST_DIRECT_FROM", "0")],
            ..checkpoint(
                "extend-embeddings",
                "chatterbox_t3/t3_bf16.safetensors",
                vec!["--new-rows", "2535"],
                Out::File,
            )
        },
        checkpoint(
            "extend-embeddings",
            "gpt2_sharded",
            vec!["--new-rows", "1024"],
            Out::Folder,
        ),
        // A model folder: weights, config.json and every other file appear together.
        checkpoint(
            "extend-embeddings",
            "gpt2",
            vec!["--new-rows", "1024"],
            Out::Folder,
        ),
        checkpoint(
            "sanitize-checkpoint",
            "sanitize/sgd_2454.pt",
            vec!["--vocab-rows", "2535"],
            Out::File,
        ),
        // The sixth binary: a split of a codebook table (safetensors).
        checkpoint(
            "vocab-blocks",
            "audio/codebooks.safetensors",
            vec![
                "--split",
                "audio_codebook_embeddings.weight",
                "--at",
                "5000",
            ],
            Out::File,
        ),
        // Multi-codebook growth (interleaved old and new rows).
        checkpoint(
            "extend-embeddings",
            "audio/codebooks.safetensors",
            vec![
                "--new-rows",
                "8224",
                "--segments",
                "8",
                "--tensor",
                "audio_codebook_embeddings.weight",
            ],
            Out::File,
        ),
        // A Trainer checkpoint folder: weights, optimizer.pt and the carried files together.
        checkpoint(
            "sanitize-checkpoint",
            "trainer/checkpoint-2",
            vec!["--vocab-rows", "1010"],
            Out::Folder,
        ),
        Job {
            bin: "merge-tokenizers",
            args: vec![
                "--base".into(),
                base.to_string_lossy().into_owned(),
                "--add".into(),
                add.to_string_lossy().into_owned(),
            ],
            inputs: vec![base, add],
            extra: vec![],
            out: Out::Tokenizer,
            env: vec![],
        },
    ];
    all.extend(row_map_jobs());
    all
}

/// The jobs that write by a row map: a model folder transplanted (weights gathered, NEW's
/// tokenizer, config edits, the carried files) and trimmed (with its token_map.json).
fn row_map_jobs() -> Vec<Job> {
    let (bytelevel, corpus) = (
        testdata("tokenizers/bytelevel_bpe.json"),
        testdata("tokenizers/amharic_words.txt"),
    );
    let folder = |bin, extra: Vec<String>, input: &PathBuf| {
        Job {
            bin,
            inputs: vec![testdata("gpt2"), input.clone()],
            args: vec![testdata("gpt2").to_string_lossy().into_owned()],
            extra: vec![],
            out: Out::Folder,
            env: vec![],
        }
        .with(extra)
    };
    vec![
        folder(
            "transplant-tokenizer",
            vec![
                "--tokenizer".into(),
                bytelevel.to_string_lossy().into_owned(),
                "--allow-shrink".into(),
            ],
            &bytelevel,
        ),
        folder(
            "trim-vocab",
            vec![
                "--keep-corpus".into(),
                corpus.to_string_lossy().into_owned(),
                "--allow-shrink".into(),
            ],
            &corpus,
        ),
    ]
}

impl Job {
    /// The job with `args` after the input (owned arguments: paths made at run time).
    fn with(mut self, args: Vec<String>) -> Job {
        self.args.extend(args);
        self
    }

    fn command(&self, out: &Path) -> Command {
        let mut c = Command::new(exe(self.bin));
        c.args(&self.args)
            .arg("--output")
            .arg(out)
            .args(&self.extra)
            .envs(self.env.iter().copied());
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    fn output_path(&self, dir: &Path, name: &str) -> PathBuf {
        match self.out {
            Out::Folder => dir.join(name),
            Out::File => dir.join(format!("{name}.out")),
            Out::Tokenizer => dir.join(format!("{name}.json")),
        }
    }

    /// Every input's bytes (folders: every file in them).
    fn input_bytes(&self) -> Vec<(PathBuf, Vec<u8>)> {
        self.inputs
            .iter()
            .flat_map(|p| {
                if p.is_dir() {
                    snapshot(p)
                } else {
                    vec![(p.clone(), std::fs::read(p).unwrap())]
                }
            })
            .collect()
    }

    /// What a complete output holds: each tensor's sha256, or the tokenizer's bytes; for a
    /// folder also every file's name and, apart from the weights, its bytes.
    fn contents(&self, out: &Path) -> Vec<(String, String)> {
        if self.out == Out::Tokenizer {
            return vec![(String::new(), sha256_hex(&std::fs::read(out).unwrap()))];
        }
        let c = formats::open_tensors(out, &Default::default())
            .expect("a present output opens strictly");
        let mut got: Vec<(String, String)> = c
            .tensors()
            .map(|t| (t.name.to_string(), sha256_hex(&t.try_bytes().unwrap())))
            .collect();
        if self.out == Out::Folder {
            for e in std::fs::read_dir(out).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let bytes = if name.ends_with(".safetensors") {
                    String::new()
                } else {
                    sha256_hex(&std::fs::read(&p).unwrap())
                };
                got.push((format!("file {name}"), bytes));
            }
        }
        got.sort();
        got
    }

    /// The output is either absent, or present and exactly the complete result (a folder: never
    /// visible under its name before every file in it is).
    fn absent_or_complete(&self, out: &Path, complete: &[(String, String)]) -> bool {
        if !out.exists() {
            return false;
        }
        assert_eq!(
            self.contents(out),
            complete,
            "{} is present but not the complete result",
            out.display()
        );
        true
    }
}

/// Kill points per job, spread at random over 1.3 × a full run, run four at a time.
const TRIALS: usize = 50;
const AT_ONCE: usize = 4;

#[test]
fn killing_a_writing_binary_anywhere_leaves_no_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = ckpt_surgery::rng::Rng::new(2026, 11);
    for (n, job) in jobs().into_iter().enumerate() {
        let before = job.input_bytes();
        // A full run: how long it takes and what complete looks like.
        let full = job.output_path(tmp.path(), &format!("full-{}{n}", job.bin));
        let t0 = Instant::now();
        let status = job
            .command(&full)
            .env("CKPT_SURGERY_TEST_PAUSE_MS", "25")
            .status()
            .unwrap();
        assert!(status.success(), "{} full run", job.bin);
        let run_time = t0.elapsed();
        let complete = job.contents(&full);
        // Random points over the run; the last trial is not killed (it ends on its own, however
        // loaded the machine: with four runs at once on two cores a run can take several times
        // the lone run's time), so a complete output is always among the outcomes checked.
        let mut factors: Vec<f64> = (0..TRIALS - 1)
            .map(|_| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 1.3)
            .collect();
        factors.push(f64::INFINITY);
        let outcomes: Vec<bool> = std::thread::scope(|s| {
            let (job, complete, dir) = (&job, &complete, tmp.path());
            let workers: Vec<_> = factors
                .chunks(TRIALS.div_ceil(AT_ONCE))
                .enumerate()
                .map(|(w, fs)| {
                    s.spawn(move || {
                        fs.iter()
                            .enumerate()
                            .map(|(i, &f)| {
                                let out = job.output_path(dir, &format!("{}{n}-{w}-{i}", job.bin));
                                let mut child = job
                                    .command(&out)
                                    .env("CKPT_SURGERY_TEST_PAUSE_MS", "25")
                                    .spawn()
                                    .unwrap();
                                if f.is_finite() {
                                    std::thread::sleep(run_time.mul_f64(f));
                                    let _ = child.kill();
                                }
                                let _ = child.wait();
                                job.absent_or_complete(&out, complete)
                            })
                            .collect::<Vec<bool>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let present = outcomes.iter().filter(|&&p| p).count();
        let absent = outcomes.len() - present;
        assert_eq!(outcomes.len(), TRIALS);
        assert_eq!(before, job.input_bytes(), "{}: input changed", job.bin);
        assert!(
            absent > 0,
            "{}: no kill landed before the rename ({run_time:?})",
            job.bin
        );
        assert!(present > 0, "{}: no run completed ({run_time:?})", job.bin);
        assert!(
            outcomes[TRIALS - 1],
            "{}: the run left alone is complete",
            job.bin
        );
        eprintln!(
            "{} ({:?}): {TRIALS} kills, {absent} absent, {present} complete",
            job.bin, job.out
        );
    }
}

#[test]
fn running_out_of_disk_space_is_a_clean_error_with_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut full_disks = 0;
    for (n, job) in jobs().into_iter().enumerate() {
        let bin = job.bin;
        let dir = tmp.path().join(format!("{bin}-{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let out = job.output_path(&dir, "out");
        // RLIMIT_FSIZE of 64 KiB with SIGXFSZ ignored: writes past it fail with EFBIG, as a full
        // disk fails with ENOSPC.
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg("trap '' XFSZ; ulimit -f 128; exec \"$@\"")
            .arg("bash")
            .arg(exe(bin))
            .args(&job.args)
            .arg("--output")
            .arg(&out)
            .args(&job.extra)
            .envs(job.env.iter().copied());
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bin}: {err}");
        assert_eq!(err.lines().count(), 1, "{bin}: one line: {err}");
        assert!(
            err.contains("too large") || err.contains("No space") || err.contains("File too large"),
            "{bin}: {err}"
        );
        assert!(!out.exists(), "{bin}: no output after a failed write");
        let leftovers: Vec<_> = walk(&dir)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(".ckpt-surgery-"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{bin}: temp files left: {leftovers:?}"
        );

        // A real full disk where the machine allows one: a 64 KiB tmpfs mounted in a private
        // mount namespace (unshare -rm). The binary's message goes to stderr; what is left on the
        // tmpfs afterwards is listed on stdout before the namespace (and the tmpfs) goes away.
        let mnt = dir.join("full-disk");
        std::fs::create_dir_all(&mnt).unwrap();
        let out = job.output_path(&mnt, "out");
        let o = Command::new("unshare")
            .args(["-rm", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o size=64k none \"$0\" 2>/dev/null || exit 97; \
                 \"$@\"; rc=$?; find \"$0\" -mindepth 1; exit $rc",
            )
            .arg(&mnt)
            .arg(exe(bin))
            .args(&job.args)
            .arg("--output")
            .arg(&out)
            .args(&job.extra)
            .envs(job.env.iter().copied())
            .output();
        match o {
            Ok(o) if o.status.code() != Some(97) && o.status.code().is_some() => {
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "{bin} on a full tmpfs: {err}");
                assert_eq!(err.lines().count(), 1, "{bin}: one line: {err}");
                assert!(
                    err.contains("No space left") && err.contains(&*out.to_string_lossy()),
                    "{bin}: names the destination and the cause: {err}"
                );
                let left = String::from_utf8_lossy(&o.stdout);
                assert!(left.trim().is_empty(), "{bin}: files left: {left}");
                full_disks += 1;
            }
            _ => eprintln!("{bin}: no private tmpfs here (unshare -rm); RLIMIT_FSIZE only"),
        }
    }
    eprintln!("full tmpfs runs: {full_disks}");
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push(p.clone());
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
