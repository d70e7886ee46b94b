//! extend-embeddings, vocab-blocks and inspect-checkpoint refuse with typed errors (issue 33): a
//! flag that cannot be carried out is `Error::Arg` naming that flag as the user types it, a file
//! holding what the tool does not handle is `Unsupported`, a CUDA failure is `Device`; every one
//! exits 2, writes nothing, and `--json` names its kind.

mod common;
use ckpt_surgery::error::Error;
use ckpt_surgery::jobs::extend_embeddings::{self as embeddings, donor::Donor, Options, Target};
use ckpt_surgery::jobs::{inspect_checkpoint as inspect, vocab_blocks as blocks};
use ckpt_surgery::rows::{device, Method};
use common::*;

/// The flag a usage error names (`Error::Arg`, or a typed refusal such as `Error::Shrink`), and
/// its message; any other error fails the test.
fn arg_of<T: std::fmt::Debug>(r: Result<T, Error>) -> (&'static str, String) {
    match r {
        Err(e) if e.kind() == "usage" && e.flag().is_some() => {
            (e.flag().unwrap_or_default(), e.to_string())
        }
        other => panic!("expected a usage error naming a flag, got {other:?}"),
    }
}

/// extend-embeddings of the chatterbox T3 file (2454 rows) with `opts`, into a new folder.
fn extend(opts: &Options) -> (Result<embeddings::Report, Error>, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.safetensors");
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let r = embeddings::run(&input, &out, opts);
    let wrote = std::fs::read_dir(tmp.path()).unwrap().next().is_some();
    (r, wrote)
}

fn rows(n: u64) -> Options {
    Options {
        target: Target::Rows(n),
        ..Options::default()
    }
}

/// Each case refused naming its flag, with its text, writing nothing.
fn assert_refusals(cases: Vec<(Options, &str, &str)>) {
    for (opts, flag, text) in cases {
        let (r, wrote) = extend(&opts);
        let (got, msg) = arg_of(r);
        assert_eq!(got, flag, "{msg}");
        assert!(msg.contains(text), "{flag}: {msg}");
        assert!(!wrote, "{flag}: a refusal wrote");
    }
}

#[test]
fn extend_refusals_name_the_flag_to_change_and_write_nothing() {
    let merged = testdata("tokenizers/chatterbox_base.json");
    let cases: Vec<(Options, &str, &str)> = vec![
        (
            Options {
                tensors: vec!["nope.weight".into()],
                ..rows(3000)
            },
            "--tensor",
            "no tensor named 'nope.weight'",
        ),
        (
            rows(2000),
            "--allow-shrink",
            "has 2454 rows; a target of 2000 rows",
        ),
        (
            Options {
                allow_shrink: true,
                ..rows(0)
            },
            "--new-rows",
            "target of 0 rows",
        ),
        (
            Options {
                pad_to_multiple_of: Some(0),
                ..rows(3000)
            },
            "--pad-to-multiple-of",
            "at least 1",
        ),
        (
            Options {
                target: Target::Tokenizer(merged.clone()),
                segments: 2,
                ..Options::default()
            },
            "--segments",
            "--segments takes --new-rows N",
        ),
        (
            Options {
                method: Method::Copy("no-such-token-anywhere".into()),
                ..rows(3000)
            },
            "--init",
            "not an id",
        ),
        (
            Options {
                method: Method::Copy("5000".into()),
                ..rows(6000)
            },
            "--init",
            "is not an old row (< 2454)",
        ),
    ];
    assert_refusals(cases);
}

#[test]
fn extend_refusals_of_an_init_name_the_flag_it_needs_and_write_nothing() {
    let merged = testdata("tokenizers/chatterbox_base.json");
    let donor = Donor {
        path: testdata("gpt2"),
        tokenizer: None,
        k: ckpt_surgery::rows::donor::K::Fixed(8),
    };
    let cases: Vec<(Options, &str, &str)> = vec![
        (
            Options {
                method: Method::SubwordMean,
                ..rows(3000)
            },
            "--tokenizer",
            "--init subword-mean needs",
        ),
        (
            Options {
                method: Method::SubwordMean,
                target: Target::Tokenizer(merged.clone()),
                ..Options::default()
            },
            "--base-tokenizer",
            "--init subword-mean needs",
        ),
        (
            Options {
                donor: Some(donor.clone()),
                ..rows(3000)
            },
            "--donor",
            "--donor is for --init omp",
        ),
        (
            Options {
                method: Method::Omp,
                ..rows(3000)
            },
            "--donor",
            "--init omp needs --donor",
        ),
        (
            Options {
                method: Method::Omp,
                donor: Some(Donor {
                    k: ckpt_surgery::rows::donor::K::Fixed(0),
                    ..donor.clone()
                }),
                ..rows(3000)
            },
            "--omp-k",
            "--omp-k must be at least 1",
        ),
        (
            Options {
                method: Method::Omp,
                donor: Some(donor.clone()),
                ..rows(3000)
            },
            "--tokenizer",
            "--init omp needs --tokenizer MERGED",
        ),
        (
            Options {
                method: Method::Omp,
                donor: Some(donor.clone()),
                segments: 2,
                ..rows(3000)
            },
            "--segments",
            "--segments grows codebooks",
        ),
    ];
    assert_refusals(cases);
}

#[test]
fn device_cuda_that_cannot_run_is_a_device_error_of_exit_code_2() {
    match device::Device::select(device::Request::Cuda, 1 << 30) {
        Ok(d) => eprintln!("skipped: this machine runs CUDA ({})", d.name),
        Err(e) => {
            assert!(matches!(e, Error::Device { .. }), "{e:?}");
            assert_eq!((e.kind(), e.exit_code()), ("device", 2));
            assert!(e.to_string().starts_with("--device cuda:"), "{e}");
        }
    }
}

fn split(tensor: &str, at: u64, names: (&str, &str)) -> blocks::Options {
    blocks::Options {
        op: blocks::Op::Split {
            tensor: tensor.into(),
            at,
            names: (names.0.into(), names.1.into()),
        },
        overwrite: false,
        dry_run: false,
        open: Default::default(),
    }
}

#[test]
fn vocab_blocks_refusals_name_the_flag_or_say_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let x = testdata("audio/codebooks.safetensors");
    let name = "audio_codebook_embeddings.weight";
    let (flag, msg) = arg_of(blocks::run(&x, &out, &split("nope", 5, ("a", "b"))));
    assert_eq!(flag, "--split", "{msg}");
    assert!(msg.contains("no tensor named 'nope'"), "{msg}");
    let (flag, msg) = arg_of(blocks::run(&x, &out, &split(name, 5, (name, "b"))));
    assert_eq!(flag, "--names", "{msg}");
    assert!(msg.contains("exists already"), "{msg}");
    let join = |names: (&str, &str), into: &str| blocks::Options {
        op: blocks::Op::Join {
            names: (names.0.into(), names.1.into()),
            into: into.into(),
        },
        ..split(name, 1, ("a", "b"))
    };
    let (flag, msg) = arg_of(blocks::run(&x, &out, &join(("a_f", "a_u"), "j")));
    assert_eq!(flag, "--names", "{msg}");
    assert!(msg.contains("no tensor named 'a_f'"), "{msg}");
    let sm = testdata("audio/split_model.safetensors");
    let (flag, msg) = arg_of(blocks::run(
        &sm,
        &out,
        &join(
            ("text_emb.weight_frozen", "text_emb.weight_unfrozen"),
            "text_emb.weight_frozen",
        ),
    ));
    assert_eq!(flag, "--join", "{msg}");
    assert!(msg.contains("exists already"), "{msg}");
    // Optimizer state: the file holds what vocab-blocks does not handle.
    let pt = testdata("resume/opt_adamw.pt");
    let e = blocks::run(
        &pt,
        &tmp.path().join("o.pt"),
        &split("model.text_emb.weight", 10, ("a", "b")),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { path, .. } if path == &pt),
        "{e:?}"
    );
    assert_eq!(e.exit_code(), 2);
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}

#[test]
fn vocab_blocks_json_errors_carry_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let x = testdata("audio/codebooks.safetensors");
    let name = "audio_codebook_embeddings.weight";
    let out = tmp.path().join("o.safetensors");
    for (input, extra, kind) in [
        (
            x.clone(),
            vec!["--split", name, "--at", "5", "--names", "one"],
            "usage",
        ),
        (x.clone(), vec!["--split", name], "usage"),
        (x.clone(), vec!["--split", "nope", "--at", "5"], "usage"),
        (
            testdata("resume/opt_adamw.pt"),
            vec!["--split", "model.text_emb.weight", "--at", "10"],
            "unsupported",
        ),
    ] {
        let (code, doc, err) = run_job("vocab-blocks", &input, &out, &extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert_eq!(doc["kind"], kind, "{extra:?}: {doc}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert!(!out.exists());
}

#[test]
fn extend_json_errors_of_the_command_line_carry_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let out = tmp.path().join("o.safetensors");
    for extra in [
        vec!["--new-rows", "3000", "--device", "gpu"],
        vec!["--new-rows", "3000", "--allow-global", "foo"],
        vec!["--new-rows", "3000", "--tensor", "nope.weight"],
    ] {
        let (code, doc, err) = run_job("extend-embeddings", &input, &out, &extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert_eq!(doc["kind"], "usage", "{extra:?}: {doc}");
    }
    assert!(!out.exists());
}

#[test]
fn inspect_names_the_filter_and_the_hash_it_cannot_use() {
    let (flag, msg) = arg_of(inspect::parse_filter("["));
    assert_eq!(flag, "--filter", "{msg}");
    assert!(msg.starts_with("--filter '['"), "{msg}");
    let zero = testdata("zero/zero1");
    let opts = inspect::Options {
        hash: true,
        ..Default::default()
    };
    let ckpt_surgery::formats::Checkpoint::Zero { zero: z, .. } =
        ckpt_surgery::formats::open(&zero, &Default::default()).unwrap()
    else {
        panic!("zero1 is a ZeRO checkpoint")
    };
    let (flag, msg) = arg_of(inspect::zero(z.get().unwrap(), &opts));
    assert_eq!(flag, "--hash", "{msg}");
    assert!(
        msg.contains("--hash is not supported for a DeepSpeed ZeRO"),
        "{msg}"
    );
}

/// A message quotes names taken from files and the command line; a newline or a bidirectional
/// override in one (here the input's path) is escaped, so every binary's refusal stays one line.
#[test]
fn a_refusal_quoting_a_name_with_a_newline_is_still_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("x\nbad\u{202e}.pt");
    std::fs::copy(testdata("torch_hostile/bad_crc.pt"), &bad).unwrap();
    let out = tmp.path().join("o.pt");
    let tok = testdata("tokenizers/gpt2_addition.txt");
    let writers: [(&str, Vec<&str>); 3] = [
        ("sanitize-checkpoint", vec![]),
        (
            "extend-embeddings",
            vec!["--new-rows", "9", "--tensor", "w"],
        ),
        ("vocab-blocks", vec!["--split", "w", "--at", "1"]),
    ];
    for (bin, extra) in writers {
        let (code, doc, err) = run_job(bin, &bad, &out, &extra);
        assert_eq!(code, Some(2), "{bin}: {err}");
        assert_eq!(err.lines().count(), 1, "{bin}: {err}");
        assert!(err.contains("x\\nbad\\u{202e}.pt"), "{bin}: {err}");
        // --json keeps the message as it is: JSON escapes it.
        assert!(
            doc["error"]
                .as_str()
                .unwrap_or("")
                .contains("x\nbad\u{202e}.pt"),
            "{doc}"
        );
    }
    let readers: [(&str, Vec<&std::ffi::OsStr>); 2] = [
        ("inspect-checkpoint", vec![bad.as_os_str()]),
        (
            "check-vocab",
            vec![bad.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
        ),
    ];
    for (bin, args) in readers {
        let o = run(bin, &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{bin}: {err}");
        assert_eq!(err.lines().count(), 1, "{bin}: {err}");
        assert!(err.contains("x\\nbad\\u{202e}.pt"), "{bin}: {err}");
    }
}
