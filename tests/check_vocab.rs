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

/// Run a finding's fix command with its --output moved to `out`.
fn apply_fix(fix: &str, out: &Path) {
    let mut words: Vec<String> = fix.split_whitespace().map(str::to_string).collect();
    let at = words
        .iter()
        .position(|w| w == "--output")
        .expect("fix has --output")
        + 1;
    words[at] = out.display().to_string();
    let bin = words.remove(0);
    let args: Vec<&OsStr> = words.iter().map(OsStr::new).collect();
    let o = run(&bin, &args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "fix `{fix}` failed: {}",
        stderr(&o)
    );
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
fn seed_000_config_887_tokenizer_2535_weights_3000_is_fixed_by_the_command_it_prints() {
    let d = folder("seed000");
    let (code, r, _) = check(&[OsStr::new("--checkpoint"), d.as_os_str()]);
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
    let info = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["severity"] == "info")
        .unwrap();
    assert_eq!(info["numbers"]["padding_rows"], 465);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed/model.safetensors");
    apply_fix(e[0]["fix"].as_str().unwrap(), &out);
    let (code, r, err) = check(&[
        OsStr::new("--checkpoint"),
        out.parent().unwrap().as_os_str(),
        OsStr::new("--tokenizer"),
        d.join("tokenizer.json").as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err} {r}");
    assert_eq!(r["rows"], 2535);
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
        fix.ends_with("--allow-global argparse.Namespace"),
        "the fix opens the file as the check did: {fix}"
    );
    apply_fix(fix, &out);
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
    let out = tmp.path().join("fixed/model.safetensors");
    apply_fix(e[0]["fix"].as_str().unwrap(), &out);
    let (code, r, err) = check(&[
        OsStr::new("--checkpoint"),
        out.parent().unwrap().as_os_str(),
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
    let out = tmp.path().join("m.safetensors");
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
