//! sanitize-checkpoint on real training checkpoints (AdamW, SGD+momentum; zip and legacy).

mod common;
use ckpt_surgery::formats::{self, OpenOptions, Tensors};
use common::*;
use serde_json::Value;
use std::path::Path;

fn sanitize(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_job("sanitize-checkpoint", input, out, extra)
}

fn open(p: &Path) -> Tensors {
    let mut o = OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    formats::open_tensors(p, &o).unwrap()
}

/// The canonical form of a subtree (for comparing non-tensor state).
fn subtree(c: &Tensors, key: &str) -> Value {
    let t = &c.torch[0];
    let id = t.pickle.get(t.pickle.root, key).unwrap();
    canonical(&t.pickle, id, key)
}

/// Checks a repaired checkpoint: vocabulary weights and their moments at `rows` rows with the old
/// rows kept (new ones zero for moments), every other tensor and all non-tensor state identical.
fn check_repaired(input: &Path, out: &Path, rows: u64, r: &Value) {
    let (a, b) = (open(input), open(out));
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("sanitize/expected.json")).unwrap())
            .unwrap();
    let params = &expected[input.file_name().unwrap().to_str().unwrap()]["params"];
    // The optimizer indices were matched to the right tensors.
    for pair in r["optimizers"][0]["vocabulary_params"].as_array().unwrap() {
        assert_eq!(
            params[pair[0].as_u64().unwrap().to_string()],
            pair[1],
            "{pair}"
        );
    }
    let vocab_params: Vec<u64> = r["optimizers"][0]["vocabulary_params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_u64().unwrap())
        .collect();
    assert_eq!(vocab_params, [0, 3, 4]);
    let old_rows = a.tensor("model.text_emb.weight").unwrap().shape[0];
    let keep_rows = old_rows.min(rows);
    for t in a.tensors() {
        let new = b.tensor(t.name).unwrap();
        let old = t.try_bytes().unwrap();
        let is_vocab = t.name.starts_with("model.text_")
            || ["0", "3", "4"].iter().any(|i| {
                t.name.starts_with(&format!("optimizer.state.{i}.exp"))
                    || t.name.starts_with(&format!("optimizer.state.{i}.momentum"))
            });
        if !is_vocab {
            assert_eq!(
                sha256_hex(&old),
                sha256_hex(&new.try_bytes().unwrap()),
                "{} untouched",
                t.name
            );
            continue;
        }
        assert_eq!(new.shape[0], rows, "{}", t.name);
        let row_bytes = old.len() / old_rows as usize;
        let kept = row_bytes * keep_rows as usize;
        let nb = new.try_bytes().unwrap();
        assert_eq!(&nb[..kept], &old[..kept], "{}: old rows kept", t.name);
        if t.name.starts_with("optimizer.") {
            assert!(
                nb[kept..].iter().all(|&x| x == 0),
                "{}: new moment rows are zero",
                t.name
            );
        }
    }
    for key in ["scheduler", "step"] {
        assert_eq!(subtree(&a, key), subtree(&b, key), "{key}");
    }
    let (ga, gb) = (open(input), open(out));
    let pa = &ga.torch[0].pickle;
    let pb = &gb.torch[0].pickle;
    let groups = |p: &ckpt_surgery::formats::torch::value::Pickle| {
        let o = p.get(p.root, "optimizer").unwrap();
        canonical(p, p.get(o, "param_groups").unwrap(), "")
    };
    assert_eq!(
        groups(pa),
        groups(pb),
        "param_groups byte-for-byte the same values"
    );
}

#[test]
fn seed_001_24001_rows_to_a_24000_token_tokenizer_repairs_weights_and_moments() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/adamw_24001.pt");
    let out = tmp.path().join("s.pt");
    // Weights of 24001 rows too: their row 24000 is cut, asked for with --allow-shrink.
    let (code, r, err) = sanitize(
        &input,
        &out,
        &[
            "--vocab-rows",
            "24000",
            "--allow-global",
            "argparse.Namespace",
            "--allow-shrink",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["optimizers"][0]["matched_by"], "position");
    assert_eq!(r["freeze_until_index"], 24000);
    assert_eq!(
        r["inconsistent_before"].as_array().unwrap().len(),
        9,
        "3 weights + 6 moments had 24001 rows"
    );
    check_repaired(&input, &out, 24000, &r);
    assert_eq!(subtree(&open(&input), "args"), subtree(&open(&out), "args"));
}

#[test]
fn seed_000_direction_2454_to_2535_with_sgd_momentum_zip_and_legacy() {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["sgd_2454.pt", "sgd_2454_legacy.pt"] {
        let input = testdata(&format!("sanitize/{f}"));
        let out = tmp.path().join(f);
        let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "2535"]);
        assert_eq!(code, Some(0), "{f}: {err}");
        let repaired: Vec<&str> = r["optimizers"][0]["repaired"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["tensor"].as_str().unwrap())
            .collect();
        assert_eq!(
            repaired,
            [
                "optimizer.state.0.momentum_buffer",
                "optimizer.state.3.momentum_buffer",
                "optimizer.state.4.momentum_buffer"
            ]
        );
        check_repaired(&input, &out, 2535, &r);
        assert_eq!(open(&out).format, formats::Format::TorchZip);
    }
}

#[test]
fn drop_removes_optimizer_and_scheduler_and_keep_refuses_what_does_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/sgd_2454.pt");
    let out = tmp.path().join("d.pt");
    let (code, _, err) = sanitize(
        &input,
        &out,
        &["--vocab-rows", "2535", "--optimizer", "drop"],
    );
    assert_eq!(code, Some(0), "{err}");
    let c = open(&out);
    let p = &c.torch[0].pickle;
    assert!(p.get(p.root, "optimizer").is_none() && p.get(p.root, "scheduler").is_none());
    assert!(p.get(p.root, "step").is_some());
    assert_eq!(c.tensor("model.text_emb.weight").unwrap().shape, [2535, 8]);

    let (code, _, err) = sanitize(
        &input,
        &tmp.path().join("k.pt"),
        &["--vocab-rows", "2535", "--optimizer", "keep"],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--optimizer keep") && err.contains("[2454, 8]"),
        "{err}"
    );
    // Already consistent: keep is fine and changes nothing.
    let (code, r, err) = sanitize(
        &input,
        &tmp.path().join("k2.pt"),
        &["--vocab-rows", "2454", "--optimizer", "keep"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(r["inconsistent_before"].as_array().unwrap().is_empty());
}

#[test]
fn nan_in_a_moment_is_reported_and_fails_with_fail_on_nonfinite() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/nan_moment.pt");
    let out = tmp.path().join("n.pt");
    let (code, r, _) = sanitize(
        &input,
        &out,
        &["--vocab-rows", "100", "--fail-on-nonfinite"],
    );
    assert_eq!(code, Some(1));
    assert_eq!(r["nonfinite"][0]["tensor"], "optimizer.state.1.exp_avg");
    assert_eq!(r["nonfinite"][0]["nan"], 1);
    assert!(!out.exists());
    let (code, r, _) = sanitize(&input, &out, &["--vocab-rows", "100"]);
    assert_eq!(code, Some(0));
    assert_eq!(r["nonfinite"].as_array().unwrap().len(), 1);
    assert!(out.exists());
}

#[test]
fn an_ambiguous_optimizer_is_refused_with_the_candidates_listed() {
    // An embedding and a position table of one shape, AdamW over parameters(), and a buffer
    // that breaks positional matching: growing one and not the other are different edits, and
    // nothing in the file says which index is which.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a.pt");
    let (code, _, err) = sanitize(
        &testdata("sanitize/differ.pt"),
        &out,
        &["--vocab-rows", "120"],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("refusing to guess") && err.contains("param 0 [100, 4], param 1 [100, 4]"),
        "{err}"
    );
    assert!(
        err.contains("model.text_emb.weight [100, 4]") && err.contains("model.pos_emb.weight"),
        "{err}"
    );
    assert!(
        err.contains("--optimizer-param model.text_emb.weight=INDEX"),
        "{err}"
    );
    assert!(!out.exists());
    // Dropping the optimizer needs no matching.
    let (code, _, err) = sanitize(
        &testdata("sanitize/differ.pt"),
        &out,
        &["--vocab-rows", "120", "--optimizer", "drop"],
    );
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn bad_inputs_and_dry_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.pt");
    let (code, _, err) = sanitize(
        &testdata("gpt2/model.safetensors"),
        &out,
        &["--vocab-rows", "10"],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("torch training checkpoint"), "{err}");
    let (code, _, err) = sanitize(
        &testdata("torch/state_dict.pt"),
        &out,
        &["--vocab-rows", "10"],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("not a training checkpoint"), "{err}");
    let (code, r, _) = sanitize(
        &testdata("sanitize/sgd_2454.pt"),
        &out,
        &["--vocab-rows", "2535", "--dry-run"],
    );
    assert_eq!(code, Some(0));
    assert_eq!(r["dry_run"], true);
    assert!(!out.exists());
}

#[test]
fn report_lines_say_what_was_done_to_each_optimizer() {
    let tmp = tempfile::tempdir().unwrap();
    let text = |input: &str, out: &str, extra: &[&str]| -> String {
        let mut args: Vec<&std::ffi::OsStr> = vec![];
        let input = testdata(input);
        let out = tmp.path().join(out);
        args.push(input.as_os_str());
        args.push(std::ffi::OsStr::new("--output"));
        args.push(out.as_os_str());
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let o = run("sanitize-checkpoint", &args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    // Dropped: not matched, and no word of matching.
    let t = text(
        "sanitize/sgd_2454.pt",
        "a.pt",
        &["--vocab-rows", "2535", "--optimizer", "drop"],
    );
    assert!(
        t.contains("optimizer 'optimizer': 1 groups, 5 params\n"),
        "{t}"
    );
    assert!(!t.contains("matched by"), "{t}");
    // AdamW's moments: new rows at 0, no word of Adagrad.
    let t = text("resume/opt_adamw.pt", "b.pt", &["--vocab-rows", "40"]);
    assert!(t.contains("(new rows at 0)"), "{t}");
    assert!(
        !t.contains("Adagrad") && !t.contains("initial_accumulator"),
        "{t}"
    );
    // Adagrad's sum: its group's initial_accumulator_value.
    let t = text("resume/opt_adagrad.pt", "c.pt", &["--vocab-rows", "40"]);
    assert!(
        t.contains("(new rows at 0.1, its group's initial_accumulator_value)"),
        "{t}"
    );
    // Seed 001's moments cut to the weights' rows.
    let t = text("sanitize/seed001.pt", "d.pt", &["--vocab-rows", "24000"]);
    assert!(
        t.contains("[24001, 1] → [24000, 1] (rows past the target cut)"),
        "{t}"
    );
    assert!(!t.contains("consistent with the target"), "{t}");
}

/// sanitize-checkpoint's dry run of testdata `input` (which writes nothing), then the run; both
/// reports.
fn dry_run_then_run(input: &str, out: &Path, extra: &[&str]) -> (Value, Value) {
    let dry: Vec<&str> = extra.iter().copied().chain(["--dry-run"]).collect();
    let (code, plan, err) = sanitize(&testdata(input), out, &dry);
    assert_eq!(code, Some(0), "{input}: {err}");
    assert!(!out.exists(), "{input}: a dry run wrote");
    let (code, done, err) = sanitize(&testdata(input), out, extra);
    assert_eq!(code, Some(0), "{input}: {err}");
    (plan, done)
}

#[test]
fn the_dry_run_plan_lists_every_tensor_the_run_then_writes_with_its_shape() {
    // Grown with the optimizer repaired, cut back (seed 001's 24001 → 24000), dropped.
    let cases: [(&str, &[&str]); 3] = [
        ("resume/opt_adamw.pt", &["--vocab-rows", "1064"]),
        ("sanitize/seed001.pt", &["--vocab-rows", "24000"]),
        (
            "resume/tied_gpt2_adamw.pt",
            &["--vocab-rows", "1064", "--optimizer", "drop"],
        ),
    ];
    for (input, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out.pt");
        let (plan, done) = dry_run_then_run(input, &out, extra);
        let written: Vec<Value> = done["manifest"][0]["tensors"].as_array().unwrap().clone();
        let planned = tensor_triples(plan["tensors"].as_array().unwrap());
        assert!(!planned.is_empty(), "{input}: the plan lists tensors");
        assert_eq!(planned, tensor_triples(&written), "{input}: {extra:?}");
        // seed001's model already has 24000 rows: only its moments are cut (24001 → 24000).
        let changed = plan["model_changed"].as_array().unwrap();
        let before = tensor_triples(
            &run_json("inspect-checkpoint", &[testdata(input).as_os_str()]).1["checkpoints"][0]
                ["tensors"]
                .as_array()
                .unwrap()
                .clone(),
        );
        assert_ne!(planned, before, "{input}: the plan changes shapes");
        for c in changed {
            let name = c["tensor"].as_str().unwrap();
            let shape: Vec<u64> = c["new_shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert!(
                planned.iter().any(|(n, _, s)| n == name && *s == shape),
                "{input}: {name}"
            );
        }
    }
}

#[test]
fn a_trainer_folders_dry_run_lists_every_tensor_the_run_then_writes_with_its_shape() {
    // Grown with optimizer.pt repaired, cut, dropped (no optimizer.pt written), and a tied model.
    let cases: [(&str, &[&str]); 4] = [
        ("trainer_untied/checkpoint-2", &["--vocab-rows", "1064"]),
        (
            "trainer_untied/checkpoint-2",
            &["--vocab-rows", "900", "--allow-shrink"],
        ),
        (
            "trainer_untied/checkpoint-2",
            &["--vocab-rows", "1064", "--optimizer", "drop"],
        ),
        ("trainer/checkpoint-2", &["--vocab-rows", "1010"]),
    ];
    for (input, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("checkpoint-2-out");
        let (plan, done) = dry_run_then_run(input, &out, extra);
        // Every file written (the weights, optimizer.pt unless dropped), every tensor in them.
        let written: Vec<Value> = done["manifest"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["tensors"].as_array().unwrap().clone())
            .collect();
        let planned = tensor_triples(plan["tensors"].as_array().unwrap());
        assert_eq!(planned, tensor_triples(&written), "{input}: {extra:?}");
        let from_optimizer = planned.iter().filter(|t| t.0.starts_with("state.")).count();
        if extra.contains(&"drop") {
            assert_eq!(
                from_optimizer, 0,
                "{input}: a dropped optimizer is not planned"
            );
            assert!(!out.join("optimizer.pt").exists());
        } else {
            assert!(
                from_optimizer > 0,
                "{input}: optimizer.pt's moments are planned"
            );
        }
        // The plan changes shapes: each changed weight and repaired moment at its new shape.
        let target: u64 = extra[1].parse().unwrap();
        let changed = plan["model_changed"].as_array().unwrap();
        assert!(!changed.is_empty(), "{input}");
        let repaired = plan["optimizers"][0]["repaired"].as_array().unwrap();
        for c in changed.iter().chain(repaired) {
            let name = c["tensor"].as_str().unwrap();
            assert!(
                planned
                    .iter()
                    .any(|(n, _, s)| n == name && s.first() == Some(&target)),
                "{input}: {name} at {target} rows"
            );
        }
    }
}

#[test]
fn refusals_of_a_flag_name_the_flag_and_their_json_errors_carry_a_kind() {
    use ckpt_surgery::error::Error;
    use ckpt_surgery::jobs::sanitize_checkpoint::{
        OptimizerAction, Options, RowsFrom, SchedulerAction,
    };
    let opts = |target: u64, optimizer: OptimizerAction| Options {
        target: RowsFrom::Rows(target),
        optimizer,
        scheduler: SchedulerAction::Keep,
        method: ckpt_surgery::rows::Method::Mean,
        seed: 0,
        fail_on_nonfinite: false,
        dry_run: true,
        open: OpenOptions::default(),
        keep: Vec::new(),
        overwrite: false,
        tensors: Vec::new(),
        segments: 1,
        optimizer_params: Vec::new(),
        allow_shrink: false,
    };
    let adamw = testdata("resume/opt_adamw.pt");
    let trainer = testdata("trainer_untied/checkpoint-2");
    let mut named = opts(40, OptimizerAction::Repair);
    named.tensors = vec!["optimizer.state.0.exp_avg".into()]; // not the model's
    let mut pinned = opts(40, OptimizerAction::Repair);
    pinned.optimizer_params = vec![("nope".into(), 0)];
    let cases = [
        (&adamw, opts(0, OptimizerAction::Repair), "--vocab-rows"),
        (&adamw, opts(40, OptimizerAction::Keep), "--optimizer"),
        (&trainer, opts(1064, OptimizerAction::Keep), "--optimizer"),
        (&adamw, named, "--tensor"),
        (&adamw, pinned, "--optimizer-param"),
    ];
    for (input, o, want) in cases {
        let opened = formats::open(input, &o.open).unwrap();
        let e = ckpt_surgery::jobs::sanitize_checkpoint::run(&opened, Path::new("unused"), &o)
            .unwrap_err();
        assert!(
            matches!(&e, Error::Arg { flag, .. } if *flag == want),
            "{}: {want}: {e:?}",
            input.display()
        );
        assert_eq!((e.kind(), e.exit_code()), ("usage", 2), "{e}");
    }
    // The DCP and ZeRO paths of the command line: flag refusals are usage errors too, exit 2.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let cases: [(&str, &[&str]); 3] = [
        ("dcp/single", &[]),
        ("dcp/single", &["--vocab-rows", "70", "--optimizer", "drop"]),
        ("zero/zero1", &["--vocab-rows", "70", "--segments", "2"]),
    ];
    for (input, extra) in cases {
        let (code, r, err) = sanitize(&testdata(input), &out, extra);
        assert_eq!(code, Some(2), "{input} {extra:?}: {err}");
        assert_eq!(r["kind"], "usage", "{input} {extra:?}: {r}");
        assert!(!out.exists());
    }
}
