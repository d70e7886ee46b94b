//! `check-vocab --fix --output OUT`: the fixes the report prints, carried out by the same tools,
//! into a new output (the input untouched), which then passes check-vocab; the output holds what
//! running the printed command (or edit) by hand gives.

mod common;
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn folder(name: &str) -> PathBuf {
    testdata(&format!("check_vocab/{name}"))
}

/// `check-vocab ARGS… --json`.
fn check(args: &[&OsStr]) -> (Option<i32>, Value, String) {
    run_json("check-vocab", args)
}

/// `check-vocab INPUT EXTRA… --fix --output OUT --json`.
fn fix(input: &Path, extra: &[&OsStr], out: &Path) -> (Option<i32>, Value, String) {
    let mut a: Vec<&OsStr> = vec![input.as_os_str()];
    a.extend_from_slice(extra);
    a.extend([OsStr::new("--fix"), OsStr::new("--output"), out.as_os_str()]);
    check(&a)
}

/// The seed 001 flags: the new model's config and tokenizer, and the global the file pickles.
fn seed001_flags() -> Vec<std::ffi::OsString> {
    let d = folder("seed001");
    vec![
        "--config".into(),
        d.join("config.json").into_os_string(),
        "--tokenizer".into(),
        d.join("tokenizer.json").into_os_string(),
        "--allow-global".into(),
        "argparse.Namespace".into(),
    ]
}

fn os(v: &[std::ffi::OsString]) -> Vec<&OsStr> {
    v.iter().map(|s| s.as_os_str()).collect()
}

/// A JSON file's value.
fn json_of(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn seed_000_fix_sets_n_vocab_in_a_complete_copy_and_keeps_every_row() {
    let input = folder("seed000");
    let before = snapshot(&input);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, r, err) = fix(&input, &[], &out);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(snapshot(&input), before, "the input is never written");
    let e = r["executed"].as_array().unwrap();
    assert_eq!(e.len(), 1, "{r}");
    assert_eq!(
        (e[0]["fix"].as_u64(), e[0]["action"]["tool"].as_str()),
        (Some(1), Some("edit-json"))
    );
    assert_eq!(r["after"]["errors"], 0, "{r}");
    let written = format!("in {}", out.join("config.json").display());
    assert!(
        e[0]["carried_out"].as_str().unwrap().ends_with(&written),
        "{r}"
    );
    // The edit as a user applies it by hand: only n_vocab changes, every other file is carried.
    let mut want = json_of(&input.join("config.json"));
    want["n_vocab"] = 3000.into();
    assert_eq!(json_of(&out.join("config.json")), want);
    let (a, b) = (files_of(&input), files_of(&out));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for name in ["model.safetensors", "tokenizer.json"] {
        assert!(a[name] == b[name], "{name} carried byte for byte");
    }
    let (code, r, err) = check(&[out.as_os_str()]);
    assert_eq!(
        (code, r["errors"].as_u64()),
        (Some(0), Some(0)),
        "{err} {r}"
    );
    assert_eq!(r["rows"], 3000, "no row dropped");
}

#[test]
fn seed_001_fix_sanitizes_the_training_checkpoint_keeping_its_optimizer_as_the_command_does() {
    let ckpt = testdata("sanitize/adamw_24001.pt");
    let flags = seed001_flags();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed.pt");
    // The weights' row 24000 was trained: --fix leaves that cut until it is named.
    let (_, r, err) = fix(&ckpt, &os(&flags), &out);
    assert_eq!(r["executed"], serde_json::json!([]), "{err} {r}");
    assert!(
        r["skipped"].to_string().contains("cuts trained rows"),
        "{r}"
    );
    assert!(!out.exists());
    let mut named = os(&flags);
    named.extend([OsStr::new("--fix-only"), OsStr::new("1")]);
    let (code, r, err) = fix(&ckpt, &named, &out);
    assert_eq!(code, Some(0), "{err} {r}");
    let e = &r["executed"].as_array().unwrap()[0];
    assert_eq!(e["action"]["tool"], "sanitize-checkpoint", "{r}");
    assert_eq!(e["action"]["vocab_rows"], 24000);
    assert_eq!(
        e["action"]["drop_optimizer"], false,
        "the optimizer is kept"
    );
    let opt = &e["report"]["optimizers"][0];
    assert_eq!(opt["action"], "repair", "{e}");
    assert!(!opt["repaired"].as_array().unwrap().is_empty(), "{e}");
    // The same bytes as the printed command run by hand (the same file name: a torch archive
    // names its folder after it).
    std::fs::create_dir(tmp.path().join("by_hand")).unwrap();
    let by_hand = tmp.path().join("by_hand/fixed.pt");
    let (c, err) = run_fix(e["text"].as_str().unwrap(), &by_hand);
    assert_eq!(c, Some(0), "{err}");
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&by_hand).unwrap(),
        "--fix writes what sanitize-checkpoint writes"
    );
    let mut a = vec![out.as_os_str()];
    a.extend(os(&flags));
    let (code, r, err) = check(&a);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["rows"], 24000);
}

#[test]
fn seed_003_gemma_off_by_one_is_extended_to_the_tokenizer_as_extend_embeddings_does() {
    // seed002's folder is seed 003's user case: the tokenizer has one id more than the table.
    let input = folder("seed002");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, r, err) = fix(&input, &[], &out);
    assert_eq!(code, Some(0), "{err} {r}");
    let e = r["executed"].as_array().unwrap();
    assert_eq!(e.len(), 1, "one command fixes the three errors: {r}");
    assert_eq!(e[0]["action"]["tool"], "extend-embeddings");
    assert_eq!(e[0]["action"]["rows"], 300);
    // The report says what ran: the printed command, writing to OUT instead of beside the input.
    let text = e[0]["text"].as_str().unwrap();
    let beside = format!("--output {}-fixed ", input.display());
    assert!(text.contains(&beside), "{text}");
    let ran = text.replace(&beside, &format!("--output {} ", out.display()));
    assert_eq!(e[0]["carried_out"], ran.as_str());
    let by_hand = tmp.path().join("by_hand");
    let (c, err) = run_fix(e[0]["text"].as_str().unwrap(), &by_hand);
    assert_eq!(c, Some(0), "{err}");
    assert_eq!(
        files_of(&out),
        files_of(&by_hand),
        "every file as the command writes it"
    );
    let (code, r, err) = check(&[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["rows"], 300);
}

#[test]
fn padding_rows_are_nothing_to_fix_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, r, err) = fix(&folder("seed003"), &[], &out);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["executed"], serde_json::json!([]));
    assert!(r["after"].is_null(), "{r}");
    assert!(!out.exists(), "nothing to fix: no output");
    let o = run(
        "check-vocab",
        &[
            folder("seed003").as_os_str(),
            OsStr::new("--fix"),
            OsStr::new("--output"),
            out.as_os_str(),
        ],
    );
    assert!(stdout(&o).contains("nothing to fix"), "{}", stdout(&o));
}

#[test]
fn fix_only_carries_out_the_named_fix_and_the_rest_stay_findings() {
    // Four edits (bos and eos in config.json and generation_config.json), numbered 1 to 4.
    let input = folder("config_ids");
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    let (code, r, err) = fix(&input, &[OsStr::new("--fix-only"), OsStr::new("2")], &one);
    assert_eq!(code, Some(1), "three errors left: {err} {r}");
    let e = r["executed"].as_array().unwrap();
    assert_eq!((e.len(), e[0]["fix"].as_u64()), (1, Some(2)), "{r}");
    assert_eq!(json_of(&one.join("config.json"))["eos_token_id"], 999);
    assert_eq!(json_of(&one.join("config.json"))["bos_token_id"], 50256);
    // The three not named are still there (and config.json and generation_config.json now
    // disagree on eos: a finding of its own).
    let left: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        left.iter()
            .filter(|m| m.contains("bos_token_id 50256"))
            .count(),
        2,
        "{r}"
    );
    assert_eq!(
        left.iter()
            .filter(|m| m.contains("eos_token_id 50256"))
            .count(),
        1,
        "{r}"
    );
    assert_eq!(r["errors"].as_u64(), Some(left.len() as u64));
    // Without --fix-only every fix that agrees: all four edits.
    let all = tmp.path().join("all");
    let (code, r, err) = fix(&input, &[], &all);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["executed"].as_array().unwrap().len(), 4);
    assert_eq!(
        json_of(&all.join("generation_config.json"))["bos_token_id"],
        999
    );
    // A number the report does not have.
    let (code, r, err) = fix(
        &input,
        &[OsStr::new("--fix-only"), OsStr::new("9")],
        &tmp.path().join("x"),
    );
    assert_eq!(
        (code, r["kind"].as_str()),
        (Some(2), Some("usage")),
        "{err}"
    );
    assert!(err.contains("--fix-only 9"), "{err}");
}

#[test]
fn dry_run_prints_the_plan_the_run_then_writes_and_writes_nothing() {
    let input = folder("seed002");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let mut a = vec![
        input.as_os_str(),
        OsStr::new("--fix"),
        OsStr::new("--dry-run"),
    ];
    a.extend([OsStr::new("--output"), out.as_os_str()]);
    let (code, plan, err) = check(&a);
    assert_eq!(code, Some(0), "{err} {plan}");
    assert!(!out.exists(), "a dry run writes nothing");
    let planned = &plan["executed"][0]["report"];
    assert_eq!(planned["dry_run"], true);
    let (code, r, err) = fix(&input, &[], &out);
    assert_eq!(code, Some(0), "{err}");
    let written = &r["executed"][0]["report"];
    let manifest: Vec<Value> = written["manifest"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["tensors"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        tensor_triples(planned["tensors"].as_array().unwrap()),
        tensor_triples(&manifest)
    );
    // The dry run's report is the tool's Plan: each edit's tensor written at its `to` shape.
    assert_eq!(planned["tool"], plan["executed"][0]["action"]["tool"]);
    let edits = planned["edits"].as_array().unwrap();
    assert!(!edits.is_empty(), "{planned}");
    for e in edits {
        let t = manifest.iter().find(|t| t["name"] == e["tensor"]);
        assert_eq!(t.map(|t| &t["shape"]), Some(&e["to"]), "{e}");
    }
}

#[test]
fn fix_refuses_to_write_over_its_input_and_needs_an_output() {
    let input = folder("seed002");
    let before = snapshot(&input);
    for out in [input.clone(), input.join("inside")] {
        let (code, r, err) = fix(&input, &[], &out);
        assert_eq!(
            (code, r["kind"].as_str()),
            (Some(2), Some("usage")),
            "{err}"
        );
        assert!(err.contains("never writes over its input"), "{err}");
    }
    assert_eq!(snapshot(&input), before);
    let o = run("check-vocab", &[input.as_os_str(), OsStr::new("--fix")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--output"), "{}", stderr(&o));
}

/// Every file under `dir` by its path inside it, with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    snapshot(dir)
        .into_iter()
        .map(|(p, b)| (p.strip_prefix(dir).unwrap().to_path_buf(), b))
        .collect()
}

#[test]
fn weights_and_an_edit_in_one_folder_come_out_together_as_the_command_then_the_edit_give() {
    // seed002 (one id past the table) with a config bos_token_id past the tokenizer too: fix 1
    // grows the weights, fix 2 sets bos_token_id; both land in one complete output folder.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for (name, bytes) in files_of(&folder("seed002")) {
        std::fs::write(input.join(name), bytes).unwrap();
    }
    let mut cfg = json_of(&input.join("config.json"));
    cfg["bos_token_id"] = 50256.into();
    std::fs::write(input.join("config.json"), cfg.to_string()).unwrap();
    let out = tmp.path().join("out");
    let (code, r, err) = fix(&input, &[], &out);
    assert_eq!(code, Some(0), "{err} {r}");
    let e = r["executed"].as_array().unwrap();
    let tools: Vec<&str> = e
        .iter()
        .map(|x| x["action"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["extend-embeddings", "edit-json"], "{r}");
    // The report says what ran: the printed command, writing to OUT instead of beside the input.
    let text = e[0]["text"].as_str().unwrap();
    let beside = format!("--output {}-fixed ", input.display());
    assert!(text.contains(&beside), "{text}");
    let ran = text.replace(&beside, &format!("--output {} ", out.display()));
    assert_eq!(e[0]["carried_out"], ran.as_str());
    let by_hand = tmp.path().join("by_hand");
    let (c, err) = run_fix(e[0]["text"].as_str().unwrap(), &by_hand);
    assert_eq!(c, Some(0), "{err}");
    let (mut want, got) = (files_of(&by_hand), files_of(&out));
    let mut want_cfg: Value = serde_json::from_slice(&want.remove("config.json").unwrap()).unwrap();
    want_cfg["bos_token_id"] = e[1]["action"]["edits"][0]["value"].clone();
    assert_eq!(json_of(&out.join("config.json")), want_cfg);
    assert_eq!(
        want_cfg["vocab_size"], 300,
        "extend's config change is kept"
    );
    for (name, bytes) in &want {
        assert!(got[name] == *bytes, "{name} as extend-embeddings writes it");
    }
    assert_eq!(
        got.len(),
        want.len() + 1,
        "nothing else in the folder: {:?}",
        got.keys()
    );
    let (code, r, err) = check(&[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {r}");
}

/// `check-vocab INPUT --tokenizer chatterbox_base.json --fix` into a folder: the same tree as the
/// executed fix's printed command writes; the report.
fn fixed_as_the_command_does(input: &Path, tmp: &Path) -> (PathBuf, PathBuf, Value) {
    let tok = testdata("tokenizers/chatterbox_base.json");
    let out = tmp.join("fixed");
    let (code, r, err) = fix(input, &[OsStr::new("--tokenizer"), tok.as_os_str()], &out);
    assert_eq!(code, Some(0), "{err} {r}");
    let e = &r["executed"][0];
    std::fs::create_dir(tmp.join("by_hand")).unwrap();
    let by_hand = tmp.join("by_hand/fixed");
    let (c, err) = run_fix(e["text"].as_str().unwrap(), &by_hand);
    assert_eq!(c, Some(0), "{err}");
    assert!(
        tree(&out) == tree(&by_hand),
        "the folder sanitize-checkpoint writes"
    );
    (out, tok, r)
}

#[test]
fn a_trainer_folder_is_sanitized_whole_with_the_tokenizer_as_the_command_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, tok, r) = fixed_as_the_command_does(&testdata("trainer/checkpoint-2"), tmp.path());
    assert_eq!(
        r["executed"][0]["action"]["tool"], "sanitize-checkpoint",
        "{r}"
    );
    let (code, r, err) = check(&[out.as_os_str(), OsStr::new("--tokenizer"), tok.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn a_zero_checkpoint_is_resized_to_the_tokenizer_as_the_command_does() {
    let tmp = tempfile::tempdir().unwrap();
    fixed_as_the_command_does(&testdata("zero/zero3"), tmp.path());
}

#[test]
fn a_warnings_fix_is_carried_out_only_when_named() {
    // Seed 001 as the user had it (no config.json): 24001 rows for a 24000-id tokenizer is a
    // warning (a model sized on purpose is possible) and its fix cuts a trained row, so --fix
    // leaves it; --fix-only 1 runs it.
    let ckpt = testdata("sanitize/adamw_24001.pt");
    let tok = folder("seed001").join("tokenizer.json");
    let flags: Vec<&OsStr> = vec![
        OsStr::new("--tokenizer"),
        tok.as_os_str(),
        OsStr::new("--allow-global"),
        OsStr::new("argparse.Namespace"),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed.pt");
    let (code, r, err) = fix(&ckpt, &flags, &out);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["executed"], serde_json::json!([]));
    assert!(
        r["skipped"][0]["why"]
            .as_str()
            .unwrap()
            .contains("--fix-only"),
        "{r}"
    );
    assert!(!out.exists());
    let mut named = flags.clone();
    named.extend([OsStr::new("--fix-only"), OsStr::new("1")]);
    let (code, r, err) = fix(&ckpt, &named, &out);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["executed"][0]["action"]["vocab_rows"], 24000, "{r}");
    assert_eq!(r["after"]["findings"], serde_json::json!([]), "{r}");
}

#[test]
fn the_python_package_reaches_fix_through_the_command_line_spec() {
    // ckpt_surgery.check_vocab(ckpt, fix=True, output=..., fix_only=2, dry_run=True) builds its
    // flags from this list: (name, takes a value, repeatable, positional).
    let spec = ckpt_surgery::cli::options("check-vocab").unwrap();
    for (name, takes) in [
        ("fix", false),
        ("output", true),
        ("fix-only", true),
        ("dry-run", false),
    ] {
        assert!(
            spec.iter()
                .any(|(n, t, r, p)| n == name && *t == takes && !r && !p),
            "{name}: {spec:?}"
        );
    }
}
