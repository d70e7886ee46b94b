//! check-vocab on one folder per seed scenario: exit 1 with the right numbers and a fix command;
//! running the fix and checking again gives exit 0.

mod common;
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn check(args: &[&OsStr]) -> (Option<i32>, Value, String) {
    run_json("check-vocab", args)
}

fn folder(name: &str) -> PathBuf {
    testdata(&format!("check_vocab/{name}"))
}

fn errors(r: &Value) -> Vec<&Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect()
}

/// `check-vocab` with string arguments (the checkpoint positional, as every tool takes it).
fn check_s(args: &[&str]) -> (Option<i32>, Value, String) {
    let a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    check(&a)
}

/// A copy of a testdata folder's files in `dst`: fixes edit JSON files in place, and testdata
/// stays as committed.
fn copy_folder(name: &str, dst: &Path) -> PathBuf {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(folder(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst.to_path_buf()
}

/// A `.npy` of u16 ids.
fn write_npy(path: &Path, ids: &[u16]) {
    let mut h = format!(
        "{{'descr': '<u2', 'fortran_order': False, 'shape': ({},), }}",
        ids.len()
    );
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    for i in ids {
        b.extend_from_slice(&i.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// Flags a fix may use only where nothing else fixes the finding.
const DESTRUCTIVE: [&str; 2] = ["--optimizer drop", "--allow-shrink"];

/// Follow a finding's fix as a user would: its JSON edits in place (the files the report names),
/// or its command with --output moved to `out`. A fix that drops the optimizer or shrinks the
/// table is refused unless `destructive_ok` (the cases that have no other way).
fn apply(f: &Value, out: &Path, destructive_ok: bool) {
    let fix = f["fix"].as_str().unwrap_or_else(|| panic!("no fix: {f}"));
    if !destructive_ok {
        for d in DESTRUCTIVE {
            assert!(!fix.contains(d), "a fix that discards state: {fix}");
        }
    }
    if let Some(edits) = f["edits"].as_array() {
        for e in edits {
            let file = Path::new(e["file"].as_str().unwrap());
            let mut v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
            let key = e["key"].as_str().unwrap();
            let mut at = &mut v;
            let parts: Vec<&str> = key.split('.').collect();
            for p in &parts[..parts.len() - 1] {
                at = &mut at[*p];
            }
            at[parts[parts.len() - 1]] = e["value"].clone();
            std::fs::write(file, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        }
        return;
    }
    apply_fix(fix, out);
}

/// Run a fix command with its --output moved to `out`.
fn apply_fix(fix: &str, out: &Path) {
    let (code, err) = run_fix(fix, out);
    assert_eq!(code, Some(0), "fix `{fix}` failed: {err}");
}

#[test]
fn the_consistent_folder_passes_clean() {
    let d = folder("consistent");
    let (code, r, err) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--token-ids"),
        d.join("token_ids.npy").as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["findings"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["rows"], 1000);
    // It looked at every file beside the checkpoint.
    assert_eq!(r["files"]["special_tokens"].as_array().unwrap().len(), 3);
}

#[test]
fn seed_000_config_887_tokenizer_2535_weights_3000_is_a_config_edit_not_a_shrink() {
    // Weights 3000 rows (465 padding rows past the tokenizer's 2535 ids): only config.json is
    // wrong, so the fix sets n_vocab and keeps every row.
    let tmp = tempfile::tempdir().unwrap();
    let d = copy_folder("seed000", &tmp.path().join("seed000"));
    let (code, r, _) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{r}");
    assert_eq!(e[0]["check"], "config-vs-embedding");
    assert_eq!(
        (
            e[0]["numbers"]["config_value"].as_u64(),
            e[0]["numbers"]["embedding_rows"].as_u64()
        ),
        (Some(887), Some(3000))
    );
    assert_eq!(
        e[0]["edits"],
        serde_json::json!([{"file": d.join("config.json"), "key": "n_vocab", "value": 3000}])
    );
    assert!(
        e[0]["message"]
            .as_str()
            .unwrap()
            .contains("n_vocab is what is wrong"),
        "{}",
        e[0]
    );
    let info = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["severity"] == "info")
        .unwrap();
    assert_eq!(info["numbers"]["padding_rows"], 465);
    apply(e[0], &tmp.path().join("unused"), false);
    let (code, r, err) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["errors"], 0);
    assert_eq!(r["rows"], 3000, "no row was dropped");
}

#[test]
fn seed_001_checkpoint_and_optimizer_24001_for_a_24000_model_is_fixed_by_sanitize() {
    let d = folder("seed001");
    let ckpt = testdata("sanitize/adamw_24001.pt");
    let base: Vec<std::ffi::OsString> = vec![
        "--config".into(),
        d.join("config.json").into_os_string(),
        "--tokenizer".into(),
        d.join("tokenizer.json").into_os_string(),
        "--allow-global".into(),
        "argparse.Namespace".into(),
    ];
    let mut args: Vec<&OsStr> = vec![OsStr::new("--checkpoint"), ckpt.as_os_str()];
    args.extend(base.iter().map(|s| s.as_os_str()));
    let (code, r, _) = check(&args);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    let checks: Vec<&str> = e.iter().map(|f| f["check"].as_str().unwrap()).collect();
    assert_eq!(
        checks,
        ["config-vs-embedding", "optimizer-vs-weights"],
        "{r}"
    );
    assert_eq!(e[1]["numbers"]["target_rows"], 24000);
    assert_eq!(e[1]["numbers"]["moments"].as_array().unwrap().len(), 6);
    assert!(e[1]["fix"]
        .as_str()
        .unwrap()
        .starts_with("sanitize-checkpoint "));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ckpt.pt");
    let fix = e[1]["fix"].as_str().unwrap();
    assert!(
        fix.contains("--allow-global argparse.Namespace"),
        "the fix opens the file as the check did: {fix}"
    );
    assert_eq!(
        e[0]["fix"], e[1]["fix"],
        "config and tokenizer agree: the weights change"
    );
    // The weights' row 24000 was trained: cutting it says --allow-shrink (the only fix).
    assert!(fix.ends_with(" --allow-shrink"), "{fix}");
    apply(e[1], &out, true);
    let mut args: Vec<&OsStr> = vec![OsStr::new("--checkpoint"), out.as_os_str()];
    args.extend(base.iter().map(|s| s.as_os_str()));
    let (code, r, err) = check(&args);
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn seed_002_eos_at_the_last_missing_row_is_fixed_by_extending_to_the_tokenizer() {
    let d = folder("seed002");
    let (code, r, _) = check(&[OsStr::new("--checkpoint"), d.as_os_str()]);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    assert_eq!(e[0]["check"], "tokenizer-vs-embedding");
    assert_eq!(
        (
            e[0]["numbers"]["tokenizer_ids"].as_u64(),
            e[0]["numbers"]["embedding_rows"].as_u64(),
            e[0]["numbers"]["highest_id"].as_u64()
        ),
        (Some(300), Some(299), Some(299))
    );
    assert!(e[0]["message"].as_str().unwrap().contains("'<eos>'=299"));
    let special: Vec<&&Value> = e
        .iter()
        .filter(|f| f["check"] == "special-token-ids")
        .collect();
    assert_eq!(
        special.len(),
        2,
        "config.json and generation_config.json both name eos 299"
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    for f in &e {
        assert_eq!(f["fix"], e[0]["fix"], "one command fixes all: {f}");
    }
    apply(e[0], &out, false);
    let (code, r, err) = check(&[
        OsStr::new("--checkpoint"),
        out.as_os_str(),
        OsStr::new("--tokenizer"),
        d.join("tokenizer.json").as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["rows"], 300);
}

#[test]
fn seed_003_padding_rows_pass_with_an_info_line() {
    let (code, r, _) = check(&[OsStr::new("--checkpoint"), folder("seed003").as_os_str()]);
    assert_eq!(code, Some(0));
    let f = r["findings"].as_array().unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(
        (
            f[0]["severity"].as_str(),
            f[0]["numbers"]["padding_rows"].as_u64()
        ),
        (Some("info"), Some(64))
    );
}

#[test]
fn freeze_index_too_large_and_above_the_base_vocabulary() {
    let d = folder("consistent");
    let (code, r, _) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--freeze-until"),
        OsStr::new("1500"),
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(errors(&r)[0]["numbers"]["freeze_until_index"], 1500);
    let (code, _, _) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--freeze-until"),
        OsStr::new("1000"),
    ]);
    assert_eq!(code, Some(0), "1000 of 1000 rows is fine");
    // With the base tokenizer known, freezing new rows is an error, leaving old rows open a warning.
    let merged = folder("seed000");
    let base = testdata("tokenizers/chatterbox_base.json");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m");
    let o = run(
        "extend-embeddings",
        &[
            merged.as_os_str(),
            OsStr::new("--output"),
            out.as_os_str(),
            OsStr::new("--new-rows"),
            OsStr::new("2535"),
            OsStr::new("--allow-shrink"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (n, want, sev) in [
        ("2535", Some(1), "error"),
        ("2000", Some(0), "warning"),
        ("2454", Some(0), ""),
    ] {
        let (code, r, _) = check(&[
            OsStr::new("--checkpoint"),
            out.as_os_str(),
            OsStr::new("--freeze-until"),
            OsStr::new(n),
            OsStr::new("--base-tokenizer"),
            base.as_os_str(),
        ]);
        assert_eq!(code, want, "{n}: {r}");
        let f: Vec<&Value> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "freeze-until-index")
            .collect();
        if sev.is_empty() {
            assert!(f.is_empty(), "{n}: {r}");
        } else if sev == "error" {
            // The fix names the value; the next case checks that it passes.
            assert!(
                f[0]["fix"].as_str().unwrap().contains("to 2454"),
                "{}",
                f[0]
            );
        } else {
            assert_eq!(f[0]["severity"], sev, "{n}");
            assert_eq!(f[0]["numbers"]["base_vocabulary"], 2454);
        }
    }
}

#[test]
fn two_tokenizers_disagreeing_on_shared_tokens_and_out_of_range_data_are_errors() {
    let d = folder("consistent");
    let (code, r, _) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--tokenizer"),
        d.join("tokenizer.json").as_os_str(),
        OsStr::new("--tokenizer"),
        folder("seed002").join("tokenizer.json").as_os_str(),
    ]);
    assert_eq!(code, Some(1));
    let pair = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "tokenizers-agree")
        .expect("pair finding");
    assert!(pair["numbers"]["conflicts"].as_u64().unwrap() > 0);
    assert!(
        pair["message"]
            .as_str()
            .unwrap()
            .contains("'<eos>' 3 vs 299"),
        "{pair}"
    );
    assert!(
        pair["fix"].is_null(),
        "no command makes two tokenizers agree: {pair}"
    );
    // Raw i64 ids are all below 1000; with a 299-row model the id 999 is past the end.
    let (code, _, _) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--token-ids"),
        d.join("token_ids_i64.bin").as_os_str(),
        OsStr::new("--token-ids-dtype"),
        OsStr::new("i64"),
    ]);
    assert_eq!(code, Some(0));
    let (code, r, _) = check(&[
        OsStr::new("--checkpoint"),
        folder("seed002").as_os_str(),
        OsStr::new("--token-ids"),
        d.join("token_ids.npy").as_os_str(),
    ]);
    assert_eq!(code, Some(1));
    let data = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "data-vs-embedding")
        .unwrap();
    assert_eq!(data["numbers"]["max_id"], 999);
    // Bad input is 2, not 1.
    let (code, _, err) = check(&[
        OsStr::new("--checkpoint"),
        testdata("broken/truncated.safetensors").as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = check(&[
        OsStr::new("--checkpoint"),
        d.as_os_str(),
        OsStr::new("--token-ids"),
        d.join("token_ids_i64.bin").as_os_str(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--token-ids-dtype"), "{err}");
}

#[test]
fn every_consistent_fixture_passes_tied_or_not_file_or_folder_any_training_layout() {
    let mut cases: Vec<PathBuf> = [
        "check_vocab/consistent",
        "check_vocab/seed003",
        "gpt2",
        "gpt2_sharded",
        "gpt2_bin_sharded",
        "bert_mlm",
        "bert_mlm_bin",
        "llama_tied_same_bytes",
        "chatterbox_t3/t3_bf16.safetensors",
        "torch/state_dict.pt",
        "torch/tied_state_dict.pt",
        "torch/train_ckpt.pt",
        "torch/train_ckpt_legacy.pt",
        "torch_eras/py2_ordereddict.pth",
        "sanitize/sgd_2454.pt",
        "sanitize/sgd_2454_legacy.pt",
        "sanitize/adamw_24001.pt",
    ]
    .iter()
    .map(|p| testdata(p))
    .collect();
    // Every training layout sanitize-checkpoint reads: each optimizer, ties (zip and legacy),
    // an EMA, Lightning with one and with two optimizers, a teacher's table.
    for e in std::fs::read_dir(testdata("resume")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "pt" || x == "ckpt") {
            cases.push(p);
        }
    }
    assert!(cases.len() > 30);
    for c in &cases {
        let (code, r, err) = check(&[
            c.as_os_str(),
            OsStr::new("--allow-global"),
            OsStr::new("argparse.Namespace"),
        ]);
        assert_eq!(code, Some(0), "{}: {err} {r}", c.display());
        assert_eq!(r["errors"], 0, "{}: {r}", c.display());
        assert_eq!(r["warnings"], 0, "{}: {r}", c.display());
    }
}

#[test]
fn special_ids_past_the_tokenizer_are_a_config_edit_not_50k_new_rows() {
    // A GPT-2 config left at bos/eos 50256 on a 1000-token model whose <|endoftext|> is 999.
    let tmp = tempfile::tempdir().unwrap();
    let d = copy_folder("config_ids", &tmp.path().join("m"));
    let (code, r, _) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    assert_eq!(e.len(), 4, "{r}");
    for f in &e {
        assert_eq!(f["check"], "special-token-ids");
        assert_eq!(f["edits"][0]["value"], 999, "{f}");
        assert!(
            f["message"]
                .as_str()
                .unwrap()
                .contains("this id is what is wrong"),
            "{f}"
        );
        assert!(!f["fix"].as_str().unwrap().contains("extend-embeddings"));
        apply(f, &tmp.path().join("unused"), false);
    }
    let (code, r, err) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["rows"], 1000, "the table did not grow");
}

#[test]
fn data_past_the_tokenizer_is_most_likely_another_tokenizers() {
    let tmp = tempfile::tempdir().unwrap();
    let d = folder("seed003"); // 256 ids, 320 rows
    let data = tmp.path().join("ids.npy");
    write_npy(&data, &[5, 700, 3]);
    let (code, r, _) = check_s(&[d.to_str().unwrap(), "--token-ids", data.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let f = errors(&r)[0];
    assert_eq!(f["check"], "data-vs-embedding");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("tokenised with another tokenizer"), "{msg}");
    assert!(
        f["fix"].is_null(),
        "re-tokenising is the fix, and no tool here does it: {f}"
    );
    let alt = f["alternatives"].as_array().unwrap();
    assert!(alt[0]
        .as_str()
        .unwrap()
        .starts_with("if the data's tokenizer is another one"));
    assert!(
        alt[1].as_str().unwrap().contains("--new-rows 701"),
        "{alt:?}"
    );

    // Ids the tokenizer has but the table lacks: the table is too small, and growing it is the
    // fix (seed 002: 300 ids, 299 rows; id 299).
    let tmp2 = tempfile::tempdir().unwrap();
    let data = tmp2.path().join("ids.npy");
    write_npy(&data, &[299, 4]);
    let d = folder("seed002");
    let (code, r, _) = check_s(&[d.to_str().unwrap(), "--token-ids", data.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let f = errors(&r)
        .into_iter()
        .find(|f| f["check"] == "data-vs-embedding")
        .unwrap();
    let out = tmp2.path().join("fixed");
    apply(f, &out, false);
    let (code, r, err) = check_s(&[
        out.to_str().unwrap(),
        "--tokenizer",
        d.join("tokenizer.json").to_str().unwrap(),
        "--token-ids",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn rows_past_the_tokenizer_that_are_not_padding_warn_and_the_fix_repairs_the_moments() {
    // Seed 001 as the user had it: no config.json, a 24000-id tokenizer, checkpoint and
    // optimizer at 24001 (not a multiple of 8: not padding).
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = testdata("sanitize/adamw_24001.pt");
    let tok = folder("seed001").join("tokenizer.json");
    let args = |c: &Path| -> Vec<String> {
        vec![
            c.display().to_string(),
            "--tokenizer".into(),
            tok.display().to_string(),
            "--allow-global".into(),
            "argparse.Namespace".into(),
        ]
    };
    let a = args(&ckpt);
    let (code, r, _) = check_s(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(0), "a warning, not an error: {r}");
    let w: Vec<&Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "warning")
        .collect();
    assert_eq!(w.len(), 2, "{r}");
    assert_eq!(w[0]["numbers"]["extra_rows"], 1);
    assert_eq!(w[1]["check"], "optimizer-vs-weights");
    assert_eq!(w[0]["fix"], w[1]["fix"], "one fix for both");
    let fix = w[0]["fix"].as_str().unwrap();
    assert!(fix.starts_with("sanitize-checkpoint ") && fix.contains("--vocab-rows 24000"));
    // The weights have 24001 rows too: the cut of a trained row says so (the only fix).
    assert!(fix.ends_with(" --allow-shrink"), "{fix}");
    let out = tmp.path().join("fixed.pt");
    apply(w[0], &out, true);
    let a = args(&out);
    let (code, r, err) = check_s(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["findings"], serde_json::json!([]), "{r}");
}

#[test]
fn an_optimizer_that_cannot_be_matched_is_the_only_case_for_dropping_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = testdata("sanitize/differ.pt");
    let (code, r, _) = check_s(&[ckpt.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let f = errors(&r)[0];
    assert_eq!(f["check"], "optimizer-vs-weights");
    assert!(f["message"].as_str().unwrap().contains("refusing to guess"));
    assert!(f["fix"].as_str().unwrap().contains("--optimizer drop"));
    let out = tmp.path().join("fresh.pt");
    apply(f, &out, true);
    let (code, r, err) = check_s(&[out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn unreadable_input_is_exit_2_never_a_finding_with_a_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = std::fs::read(testdata("resume/tied_gpt2_adamw.pt")).unwrap();
    let cut = tmp.path().join("train.pt");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let consistent = folder("consistent");
    let (code, r, err) = check_s(&[
        consistent.to_str().unwrap(),
        "--training-checkpoint",
        cut.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{r}");
    assert!(err.contains("train.pt"), "{err}");
    assert!(!err.contains("sanitize-checkpoint"), "{err}");

    // A file that is no tokenizer says "tokenizer", not "base tokenizer": no merge here.
    let bad = tmp.path().join("tokenizer.json");
    std::fs::write(&bad, b"\x00\x01 not json").unwrap();
    let (code, _, err) = check_s(&[
        consistent.to_str().unwrap(),
        "--tokenizer",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not a usable tokenizer"), "{err}");

    // The checkpoint is positional, or --checkpoint; not both, not neither.
    let (code, _, err) = check_s(&[
        consistent.to_str().unwrap(),
        "--checkpoint",
        consistent.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = check_s(&[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("check-vocab CHECKPOINT"), "{err}");
}

#[test]
fn files_that_disagree_on_a_special_id_are_set_to_the_tokenizers() {
    // tokenizer_config.json names "<eos>" (id 3 in the tokenizer), config.json says 3,
    // generation_config.json says 5: the generation config is the one to edit.
    let tmp = tempfile::tempdir().unwrap();
    let d = copy_folder("consistent", &tmp.path().join("m"));
    let gen = d.join("generation_config.json");
    let mut g: Value = serde_json::from_slice(&std::fs::read(&gen).unwrap()).unwrap();
    g["eos_token_id"] = serde_json::json!(5);
    std::fs::write(&gen, g.to_string()).unwrap();
    let (code, r, _) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    assert!(!e.is_empty(), "{r}");
    for f in &e {
        assert_eq!(f["check"], "special-token-ids", "{f}");
        assert_eq!(
            f["edits"],
            serde_json::json!([{"file": gen, "key": "eos_token_id", "value": 3}]),
            "{f}"
        );
    }
    apply(e[0], &tmp.path().join("unused"), false);
    let (code, r, err) = check_s(&[d.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn tokenizer_and_config_may_be_given_as_model_folders() {
    // A training checkpoint checked against the model folder it is meant for.
    let d = folder("consistent");
    let (code, r, err) = check_s(&[
        d.join("model.safetensors").to_str().unwrap(),
        "--tokenizer",
        d.to_str().unwrap(),
        "--config",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(
        r["files"]["tokenizers"][0],
        d.join("tokenizer.json").to_str().unwrap()
    );
    assert_eq!(
        r["files"]["config"][0],
        d.join("config.json").to_str().unwrap()
    );
    let (code, _, err) = check_s(&[
        d.to_str().unwrap(),
        "--tokenizer",
        testdata("torch").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("no tokenizer.json or tokenizer.model"),
        "{err}"
    );
}

#[test]
fn seed_004_a_delay_pattern_applied_to_the_labels_is_named_and_codebooks_are_checked() {
    // audio_out_ids [8, 33] beside label_audio_ids [8, 40]: 33 + 8 − 1 columns, a delay pattern
    // over 8 codebooks applied to the labels only (testdata/audio, written by torch).
    let batch = testdata("audio/batch_seed004.pt");
    let (code, r, err) = check_s(&[
        "--token-ids",
        batch.to_str().unwrap(),
        "--codebook-size",
        "1026",
    ]);
    assert_eq!(code, Some(1), "{err} {r}");
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{r}");
    assert_eq!(e[0]["check"], "delay-pattern");
    assert_eq!(e[0]["numbers"]["wide"], "label_audio_ids");
    assert_eq!(e[0]["numbers"]["widths"], serde_json::json!([33, 40]));
    let msg = e[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("delay pattern over 8 codebooks")
            && msg.contains("applied to label_audio_ids"),
        "{msg}"
    );

    // The same batch without the delay pattern (labels masked with -100) is fine.
    let ok = testdata("audio/batch_ok.pt");
    let (code, r, err) = check_s(&[
        "--token-ids",
        ok.to_str().unwrap(),
        "--codebook-size",
        "1026",
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
    // Ids past a codebook's size are found per codebook.
    let (code, r, _) = check_s(&[
        "--token-ids",
        ok.to_str().unwrap(),
        "--codebook-size",
        "1000",
    ]);
    assert_eq!(code, Some(1));
    let e = errors(&r);
    assert!(e.iter().all(|f| f["check"] == "codebook-ids"), "{r}");
    assert!(e[0]["numbers"]["id"].as_u64().unwrap() >= 1000);
    // Without --codebook-size a batch alone is not enough: the checkpoint is asked for.
    let (code, _, err) = check_s(&["--token-ids", ok.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("check-vocab CHECKPOINT"), "{err}");
}

#[test]
fn a_collated_batch_b_c_t_is_checked_as_each_of_its_c_t_entries() {
    // Seed 004's batch as a DataLoader hands it over: [3, 8, 33] beside [3, 8, 40].
    let check_batch = |name: &str| {
        let b = testdata(&format!("audio/{name}"));
        check_s(&[
            "--token-ids",
            b.to_str().unwrap(),
            "--codebook-size",
            "1026",
        ])
    };
    let (code, r, err) = check_batch("batch_seed004_batched.pt");
    assert_eq!(code, Some(1), "{err} {r}");
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{r}");
    assert_eq!(e[0]["check"], "delay-pattern");
    assert_eq!(e[0]["numbers"]["widths"], serde_json::json!([33, 40]));
    assert_eq!(e[0]["numbers"]["codebooks"], 8);
    // Ids past a codebook's size in one batch entry only are found, per codebook.
    let (code, r, err) = check_batch("batch_past_batched.pt");
    assert_eq!(code, Some(1), "{err} {r}");
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{r}");
    assert_eq!(e[0]["check"], "codebook-ids");
    assert_eq!(e[0]["numbers"]["codebook"], 5);
    assert_eq!(e[0]["numbers"]["id"], 1030);
    // A consistent collated batch passes.
    let (code, r, err) = check_batch("batch_ok_batched.pt");
    assert_eq!(code, Some(0), "{err} {r}");
}

#[test]
fn one_command_that_fixes_several_findings_is_printed_once() {
    // Seed 002: the table lacks <eos>; the tokenizer, config.json and generation_config.json
    // findings are all fixed by growing it. Each JSON finding keeps its fix; the text shows the
    // command once.
    let d = folder("seed002");
    let (code, r, _) = check(&[d.as_os_str()]);
    assert_eq!(code, Some(1));
    let fixes: Vec<&str> = errors(&r)
        .iter()
        .filter_map(|f| f["fix"].as_str())
        .collect();
    assert_eq!(fixes.len(), 3, "{r}");
    assert!(fixes.iter().all(|f| *f == fixes[0]), "{r}");
    let o = run("check-vocab", &[d.as_os_str()]);
    let text = stdout(&o);
    assert_eq!(text.matches(fixes[0]).count(), 1, "{text}");
    assert_eq!(
        text.matches("fix: the same command as fix 1 above").count(),
        2,
        "{text}"
    );
}
