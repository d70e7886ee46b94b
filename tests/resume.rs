//! sanitize-checkpoint on what people train (testdata/resume, made by generate.py with the real
//! torch and transformers): every optimizer's per-parameter state, ties, EMA copies, the
//! Lightning layout, and the coverage rule that refuses a checkpoint that could not resume.

mod common;
use ckpt_surgery::formats::{self, Tensors};
use common::*;
use std::path::{Path, PathBuf};

const OLD: u64 = 30;
const NEW: u64 = 40;

fn open(p: &Path) -> Tensors {
    formats::open_tensors(p, &Default::default()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every tensor of `a` against `b`: vocabulary-shaped ones (leading axis OLD, the rest as a
/// vocabulary matrix, a bias or a row factor) grow to NEW rows with the old rows bit-identical
/// and the new rows equal to `fill(name)`; every other tensor is byte-identical.
fn check_grown(a: &Tensors, b: &Tensors, what: &str, fill: &dyn Fn(&str) -> f32) -> usize {
    let mut grown = 0;
    for x in a.tensors() {
        let y = b
            .tensor(x.name)
            .unwrap_or_else(|| panic!("{what}: {} missing", x.name));
        let vocab_like = x.shape.first() == Some(&OLD)
            && (x.shape.len() == 1 || x.shape[1..] == [8] || x.shape[1..] == [1]);
        if !vocab_like {
            assert_eq!(x.shape, y.shape, "{what}: {}", x.name);
            assert_eq!(
                x.try_bytes().unwrap(),
                y.try_bytes().unwrap(),
                "{what}: {} changed",
                x.name
            );
            continue;
        }
        grown += 1;
        assert_eq!(y.shape[0], NEW, "{what}: {}", x.name);
        assert_eq!(x.shape[1..], y.shape[1..], "{what}: {}", x.name);
        let (xb, yb) = (x.try_bytes().unwrap(), y.try_bytes().unwrap());
        assert_eq!(&yb[..xb.len()], &xb[..], "{what}: old rows of {}", x.name);
        if x.name.contains(".state.") {
            let want: Vec<u8> = fill(x.name).to_le_bytes().repeat((yb.len() - xb.len()) / 4);
            assert_eq!(&yb[xb.len()..], &want[..], "{what}: new rows of {}", x.name);
        }
    }
    grown
}

#[test]
fn every_optimizers_per_parameter_state_grows_with_the_vocabulary() {
    let tmp = tempfile::tempdir().unwrap();
    // (file, state tensors that follow the vocabulary: 3 parameters × entries)
    let cases = [
        ("opt_adam_amsgrad.pt", 9),
        ("opt_adamw.pt", 6),
        ("opt_sgd_nesterov.pt", 3),
        ("opt_adagrad.pt", 3),
        ("opt_nadam.pt", 6),
        ("opt_radam.pt", 6),
        ("opt_rmsprop_centered.pt", 9),
        ("opt_adamax.pt", 6),
        ("opt_adadelta.pt", 6),
        ("opt_adafactor_torch.pt", 3),
        ("opt_adafactor_hf.pt", 3),
    ];
    for (file, moments) in cases {
        let (input, out, r) = sanitized(tmp.path(), file, &["--vocab-rows", "40"]);
        let repaired = r["optimizers"][0]["repaired"].as_array().unwrap().len();
        assert_eq!(repaired, moments, "{file}: {}", r["optimizers"][0]);
        // Adagrad's accumulator starts at initial_accumulator_value (0.1), every other at 0.
        let fill = |n: &str| {
            if file == "opt_adagrad.pt" && n.ends_with(".sum") {
                0.1f32
            } else {
                0.0
            }
        };
        // 3 model tensors (embedding, head, head bias) + the moments.
        let grown = check_grown(&open(&input), &open(&out), file, &fill);
        assert_eq!(grown, 3 + moments, "{file}");
    }
}

fn sanitize(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    run_job("sanitize-checkpoint", input, out, extra)
}

/// Sanitize `testdata/resume/<file>` into `dir` with `args`, expecting success: (input, output,
/// report).
fn sanitized(dir: &Path, file: &str, args: &[&str]) -> (PathBuf, PathBuf, serde_json::Value) {
    let input = testdata("resume").join(file);
    let out = dir.join(file);
    let (code, r, err) = sanitize(&input, &out, args);
    assert_eq!(code, Some(0), "{file}: {err}");
    (input, out, r)
}

#[test]
fn a_tied_gpt2_is_one_parameter_grown_once_and_stays_tied() {
    let tmp = tempfile::tempdir().unwrap();
    for file in ["tied_gpt2_adamw.pt", "tied_gpt2_adamw_legacy.pt"] {
        let (input, out, r) = sanitized(tmp.path(), file, &["--vocab-rows", "60"]);
        assert_eq!(r["optimizers"][0]["matched_by"], "position", "{file}");
        assert_eq!(
            r["optimizers"][0]["vocabulary_params"],
            serde_json::json!([[0, "model.transformer.wte.weight"]])
        );
        let b = open(&out);
        let t = &b.torch[0];
        let wte = t.tensor_node("model.transformer.wte.weight").unwrap();
        let head = t.tensor_node("model.lm_head.weight").unwrap();
        assert_eq!(wte.shape, [60, 8]);
        assert_eq!(
            wte.storage.key, head.storage.key,
            "{file}: the tie survives"
        );
        assert_eq!(
            b.tensor("optimizer.state.0.exp_avg").unwrap().shape,
            [60, 8]
        );
        let a = open(&input);
        let old = a
            .tensor("model.transformer.wte.weight")
            .unwrap()
            .try_bytes()
            .unwrap();
        let new = b
            .tensor("model.transformer.wte.weight")
            .unwrap()
            .try_bytes()
            .unwrap();
        assert_eq!(&new[..old.len()], &old[..], "{file}: old rows");
    }
}

#[test]
fn an_ema_copy_grows_with_the_same_new_rows_and_lightning_optimizer_states_are_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, out, _) = sanitized(tmp.path(), "ema.pt", &["--vocab-rows", "40"]);
    let (a, b) = (open(&input), open(&out));
    assert_eq!(check_grown(&a, &b, "ema", &|_| 0.0), 3 + 3 + 6);
    for n in ["text_emb.weight", "text_head.weight", "text_head.bias"] {
        let m = b
            .tensor(&format!("model.{n}"))
            .unwrap()
            .try_bytes()
            .unwrap()
            .into_owned();
        let e = b
            .tensor(&format!("ema.{n}"))
            .unwrap()
            .try_bytes()
            .unwrap()
            .into_owned();
        let old = a.tensor(&format!("ema.{n}")).unwrap().nbytes() as usize;
        assert_eq!(m[old..], e[old..], "ema.{n}: new rows as the model's");
    }

    let (input, out, r) = sanitized(tmp.path(), "lightning.ckpt", &["--vocab-rows", "40"]);
    assert_eq!(r["optimizers"][0]["key"], "optimizer_states.0");
    assert_eq!(
        check_grown(&open(&input), &open(&out), "lightning", &|_| 0.0),
        3 + 6
    );
}

#[test]
fn a_table_left_at_the_old_rows_stops_the_write_unless_kept_on_purpose() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("resume/teacher.pt");
    let out = tmp.path().join("teacher.pt");
    let (code, _, err) = sanitize(&input, &out, &["--vocab-rows", "40"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("teacher.emb [30, 8]") && err.contains("--keep NAME"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    let (_, out, _) = sanitized(
        tmp.path(),
        "teacher.pt",
        &["--vocab-rows", "40", "--keep", "teacher.emb"],
    );
    let b = open(&out);
    assert_eq!(b.tensor("teacher.emb").unwrap().shape, [30, 8]);
    assert_eq!(b.tensor("model.text_emb.weight").unwrap().shape, [40, 8]);
}

#[test]
fn several_optimizers_each_hold_their_slice_of_the_model_and_are_repaired_apart() {
    // Lightning's optimizer_states with a generator's AdamW (the vocabulary) and a
    // discriminator's Adam: indices count from 0 in each; position matching runs across both.
    let tmp = tempfile::tempdir().unwrap();
    let file = "lightning_two_optimizers.ckpt";
    let (input, out, r) = sanitized(tmp.path(), file, &["--vocab-rows", "40"]);
    let opts = r["optimizers"].as_array().unwrap();
    assert_eq!(opts.len(), 2, "{r}");
    assert_eq!(opts[0]["key"], "optimizer_states.0");
    assert_eq!(opts[0]["matched_by"], "position");
    assert_eq!(
        opts[0]["vocabulary_params"],
        serde_json::json!([
            [0, "state_dict.generator.text_emb.weight"],
            [3, "state_dict.generator.text_head.weight"],
            [4, "state_dict.generator.text_head.bias"]
        ])
    );
    assert_eq!(opts[1]["vocabulary_params"], serde_json::json!([]));
    assert_eq!(opts[1]["repaired"], serde_json::json!([]));
    // The expected state, as torch wrote it: what grows is exactly the generator's moments.
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata("resume/expected.json")).unwrap()).unwrap();
    let want: usize = expected[file]["state"][0]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(i, _)| ["0", "3", "4"].contains(&i.as_str()))
        .map(|(_, st)| {
            st.as_object()
                .unwrap()
                .values()
                .filter(|s| s[0] == 30)
                .count()
        })
        .sum();
    assert_eq!(want, 6);
    let grown = check_grown(&open(&input), &open(&out), file, &|_| 0.0);
    assert_eq!(grown, 3 + want);

    // Dropping removes the whole list and the schedulers.
    let dropped = tmp.path().join("drop");
    std::fs::create_dir(&dropped).unwrap();
    let (_, out, _) = sanitized(
        &dropped,
        file,
        &["--vocab-rows", "40", "--optimizer", "drop"],
    );
    let b = open(&out);
    let p = &b.torch[0].pickle;
    assert!(p.get(p.root, "optimizer_states").is_none());
    assert!(p.get(p.root, "lr_schedulers").is_none());
    assert!(p.get(p.root, "loops").is_some(), "the rest is kept");
}

#[test]
fn a_trainer_checkpoint_folder_grows_with_its_optimizer_and_keeps_every_other_file() {
    // testdata/trainer/checkpoint-2: written by transformers' Trainer (tied GPT-2, AdamW with
    // weight-decay / no-decay groups, 2 steps), on the GPT-2 fixture's tokenizer.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer/checkpoint-2");
    let merged = merged_gpt2_tokenizer(tmp.path());
    let out = tmp.path().join("checkpoint-2-am");
    let (code, r, err) = sanitize(&input, &out, &["--tokenizer", merged.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["target_rows"], 1047);
    assert_eq!(r["optimizers"][0]["matched_by"], "shape");
    assert_eq!(
        r["optimizers"][0]["vocabulary_params"],
        serde_json::json!([[0, "transformer.wte.weight"]])
    );
    let (before, after) = (files_of(&input), files_of(&out));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for name in [
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "training_args.bin",
        "generation_config.json",
    ] {
        assert_eq!(before[name], after[name], "{name} carried byte for byte");
    }
    assert_eq!(after["tokenizer.json"], std::fs::read(&merged).unwrap());
    let cfg: serde_json::Value = serde_json::from_slice(&after["config.json"]).unwrap();
    assert_eq!(cfg["vocab_size"], 1047);

    // Weights: the embedding grows, old rows bit-identical; every other tensor untouched.
    let (a, b) = (open(&input), open(&out));
    for x in a.tensors() {
        let y = b.tensor(x.name).unwrap();
        if x.name == "transformer.wte.weight" {
            assert_eq!(y.shape, [1047, 16]);
            assert_eq!(
                &y.try_bytes().unwrap()[..x.try_bytes().unwrap().len()],
                &x.try_bytes().unwrap()[..]
            );
        } else {
            assert_eq!(x.try_bytes().unwrap(), y.try_bytes().unwrap(), "{}", x.name);
        }
    }
    // The optimizer: the embedding's moments grow with zero rows, everything else identical.
    let (oa, ob) = (
        open(&input.join("optimizer.pt")),
        open(&out.join("optimizer.pt")),
    );
    let mut grown = 0;
    for x in oa.tensors() {
        let y = ob.tensor(x.name).unwrap();
        if x.name.starts_with("state.0.exp_avg") {
            grown += 1;
            assert_eq!(y.shape, [1047, 16]);
            let (xb, yb) = (x.try_bytes().unwrap(), y.try_bytes().unwrap());
            assert_eq!(&yb[..xb.len()], &xb[..]);
            assert!(yb[xb.len()..].iter().all(|&b| b == 0));
        } else {
            assert_eq!(x.shape, y.shape, "{}", x.name);
            assert_eq!(x.try_bytes().unwrap(), y.try_bytes().unwrap(), "{}", x.name);
        }
    }
    assert_eq!(grown, 2);

    // --optimizer drop leaves optimizer.pt and scheduler.pt out (Trainer then starts fresh).
    let dropped = tmp.path().join("dropped");
    let (code, r, err) = sanitize(
        &input,
        &dropped,
        &["--vocab-rows", "1010", "--optimizer", "drop"],
    );
    assert_eq!(code, Some(0), "{err}");
    let names = files_of(&dropped);
    assert!(!names.contains_key("optimizer.pt") && !names.contains_key("scheduler.pt"));
    assert!(names.contains_key("rng_state.pth"));
    let left: Vec<&str> = r["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["optimizer.pt", "scheduler.pt"]);

    // A DeepSpeed ZeRO folder is refused with what to run first.
    let ds = tmp.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    for (n, bytes) in files_of(&input) {
        std::fs::write(ds.join(n), bytes).unwrap();
    }
    std::fs::create_dir(ds.join("global_step2")).unwrap();
    let (code, _, err) = sanitize(&ds, &tmp.path().join("ds-out"), &["--vocab-rows", "1010"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("DeepSpeed") && err.contains("zero_to_fp32.py"),
        "{err}"
    );
}

/// testdata/audio/train_codebooks.pt's 4 codebooks of 34 rows grown to 36 each.
const CODEBOOK_GROWTH: [&str; 10] = [
    "--vocab-rows",
    "144",
    "--segments",
    "4",
    "--tensor",
    "model.codebook_emb.weight",
    "--tensor",
    "model.codebook_head.weight",
    "--tensor",
    "model.codebook_head.bias",
];

#[test]
fn a_multi_codebook_training_checkpoint_grows_each_codebook_and_its_moments() {
    // 4 codebooks × 34 rows (embedding, head, head bias) + AdamW, grown to 4 × 36: every old row
    // and moment at c·36 + j, new moment rows zero (testdata/audio/train_codebooks.pt, torch).
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("audio/train_codebooks.pt");
    let out = tmp.path().join("tc.pt");
    let (code, r, err) = sanitize(&input, &out, &CODEBOOK_GROWTH);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["optimizers"][0]["repaired"].as_array().unwrap().len(), 6);
    let (a, b) = (open(&input), open(&out));
    let (c, s, s2) = (4usize, 34usize, 36usize);
    let mut grown = 0;
    for x in a.tensors() {
        let y = b.tensor(x.name).unwrap();
        if x.shape.first() != Some(&((c * s) as u64)) {
            assert_eq!(
                x.try_bytes().unwrap(),
                y.try_bytes().unwrap(),
                "{} untouched",
                x.name
            );
            continue;
        }
        grown += 1;
        assert_eq!(y.shape[0], (c * s2) as u64, "{}", x.name);
        let row = (x.nbytes() as usize) / (c * s);
        let (xb, yb) = (x.try_bytes().unwrap(), y.try_bytes().unwrap());
        for k in 0..c {
            assert_eq!(
                &yb[k * s2 * row..(k * s2 + s) * row],
                &xb[k * s * row..(k + 1) * s * row],
                "{} codebook {k}",
                x.name
            );
            if x.name.contains(".state.") {
                assert!(
                    yb[(k * s2 + s) * row..(k + 1) * s2 * row]
                        .iter()
                        .all(|&v| v == 0),
                    "{} codebook {k}: new moment rows zero",
                    x.name
                );
            }
        }
    }
    assert_eq!(grown, 3 + 6);
    // A total that is not 4 × a codebook size is refused.
    let (code, _, err) = sanitize(
        &input,
        &tmp.path().join("bad.pt"),
        &[
            "--vocab-rows",
            "145",
            "--segments",
            "4",
            "--tensor",
            "model.codebook_emb.weight",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn torch_outputs_through_the_direct_writer_are_the_files_the_buffered_writer_writes() {
    // Torch outputs of 256 MiB and more are written with O_DIRECT, their grown tensors as the
    // input's old rows (copied as the file is written) then the new rows; the hidden hook sends
    // every output that way, so the fixtures compare byte for byte with the buffered path.
    let tmp = tempfile::tempdir().unwrap();
    let rows = NEW.to_string();
    let cases: [(&str, &str, Vec<&str>); 5] = [
        (
            "sanitize-checkpoint",
            "resume/opt_adagrad.pt",
            vec!["--vocab-rows", &rows],
        ),
        (
            "sanitize-checkpoint",
            "resume/ema.pt",
            vec!["--vocab-rows", &rows],
        ),
        (
            "sanitize-checkpoint",
            "resume/tied_gpt2_adamw_legacy.pt",
            vec!["--vocab-rows", "60"],
        ),
        (
            "sanitize-checkpoint",
            "audio/train_codebooks.pt",
            CODEBOOK_GROWTH.to_vec(),
        ),
        (
            "extend-embeddings",
            "bert_mlm_bin/pytorch_model.bin",
            vec!["--new-rows", "130"],
        ),
    ];
    for (tool, fixture, args) in cases {
        let exe = match tool {
            "sanitize-checkpoint" => env!("CARGO_BIN_EXE_sanitize-checkpoint"),
            _ => env!("CARGO_BIN_EXE_extend-embeddings"),
        };
        let mut files = Vec::new();
        for (run, direct) in [("buffered", None), ("direct", Some("0"))] {
            let out = tmp.path().join(run).join(fixture.replace('/', "-"));
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            let mut cmd = std::process::Command::new(exe);
            cmd.arg(testdata(fixture))
                .arg("--output")
                .arg(&out)
                .args(&args)
                .arg("--json");
            if let Some(from) = direct {
                cmd.env("CKPT_SURGERY_TEST_DIRECT_FROM", from);
            }
            let o = cmd.output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{fixture} {run}: {}", stderr(&o));
            files.push(std::fs::read(&out).unwrap());
        }
        assert!(files[0] == files[1], "{fixture}: same bytes either way");
        assert!(files[0].len() > 1000, "{fixture}: written");
    }
}
