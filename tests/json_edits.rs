//! Every JSON file a tool edits keeps what the tool does not change exactly as written (issue 43
//! point 4): transformers' `model_max_length` 1000000000000000019884624838656, `1e-05`, nested
//! objects, key order, indentation. The expected text is the input with the changed values
//! spliced in by hand; the report (text and `--json`) lists each file edited and each change.

mod common;
use common::*;
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The GPT-2 fixture's weights and tokenizer with the JSON files transformers writes
/// (testdata/json_edits: config.json, tokenizer_config.json), copied into `dir/model`.
fn model_folder(dir: &Path) -> PathBuf {
    let input = dir.join("model");
    std::fs::create_dir(&input).unwrap();
    for name in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(testdata("gpt2").join(name), input.join(name)).unwrap();
    }
    for name in ["config.json", "tokenizer_config.json"] {
        std::fs::copy(testdata("json_edits").join(name), input.join(name)).unwrap();
    }
    input
}

/// The GPT-2 tokenizer merged with new words and one new special token, `<|am|>`.
fn merged_with_special(dir: &Path) -> PathBuf {
    let merged = dir.join("merged.json");
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            testdata("gpt2/tokenizer.json").as_os_str(),
            OsStr::new("--add"),
            testdata("tokenizers/gpt2_addition.txt").as_os_str(),
            OsStr::new("--special"),
            OsStr::new("<|am|>"),
            OsStr::new("--output"),
            merged.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    merged
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// `text` with `from` (found exactly once) replaced by `to`.
fn splice(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from} in {text}");
    text.replace(from, to)
}

/// tokenizer_config.json as transformers wrote it, with `<|am|>` listed as an extra special
/// token (a new key, at the end of the object, in the file's indentation).
fn with_am_listed(tc: &str) -> String {
    splice(
        tc,
        "\"unk_token\": \"<|endoftext|>\"\n}",
        "\"unk_token\": \"<|endoftext|>\",\n  \"extra_special_tokens\": [\n    \"<|am|>\"\n  ]\n}",
    )
}

/// One change as the report gives it: (key, old, new).
type Change = (String, Value, Value);

/// The report's `edited` list as (file name, its changes).
fn edited(r: &Value) -> Vec<(String, Vec<Change>)> {
    r["edited"]
        .as_array()
        .unwrap_or_else(|| panic!("no edited list: {r}"))
        .iter()
        .map(|f| {
            let name = Path::new(f["file"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let changes = f["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    let key = c["key"].as_str().unwrap().to_string();
                    (key, c["old"].clone(), c["new"].clone())
                })
                .collect();
            (name, changes)
        })
        .collect()
}

fn change(key: &str, old: Value, new: Value) -> Change {
    (key.to_string(), old, new)
}

#[test]
fn extend_embeddings_keeps_every_json_byte_it_does_not_change_and_reports_each_edit() {
    let tmp = tempfile::tempdir().unwrap();
    let input = model_folder(tmp.path());
    let merged = merged_with_special(tmp.path());
    let out = tmp.path().join("out");
    let args = ["--tokenizer", merged.to_str().unwrap()];
    let (code, r, err) = run_job("extend-embeddings", &input, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let rows = r["new_rows"].as_u64().unwrap();
    assert!(rows > 1000, "{r}");
    let cfg = text(&input.join("config.json"));
    let want = splice(
        &cfg,
        "\"vocab_size\": 1000\n",
        &format!("\"vocab_size\": {rows}\n"),
    );
    assert_eq!(text(&out.join("config.json")), want);
    let tc = text(&input.join("tokenizer_config.json"));
    assert!(tc.contains("\"model_max_length\": 1000000000000000019884624838656,"));
    assert_eq!(
        text(&out.join("tokenizer_config.json")),
        with_am_listed(&tc)
    );
    assert_eq!(
        edited(&r),
        [
            (
                "config.json".to_string(),
                vec![change("vocab_size", json!("1000"), json!(rows.to_string()))]
            ),
            (
                "tokenizer_config.json".to_string(),
                vec![change(
                    "extra_special_tokens",
                    Value::Null,
                    json!("[\"<|am|>\"]")
                )]
            ),
        ]
    );
    // The text report says the same.
    let again = tmp.path().join("again");
    let o = run(
        "extend-embeddings",
        &[
            input.as_os_str(),
            OsStr::new("--output"),
            again.as_os_str(),
            OsStr::new("--tokenizer"),
            merged.as_os_str(),
        ],
    );
    let printed = stdout(&o);
    for line in [
        format!(
            "edited {}: vocab_size: 1000 → {rows}",
            again.join("config.json").display()
        ),
        format!(
            "edited {}: extra_special_tokens: (none) → [\"<|am|>\"]",
            again.join("tokenizer_config.json").display()
        ),
    ] {
        assert!(printed.contains(&line), "{line} in\n{printed}");
    }
}

#[test]
fn sanitize_checkpoint_on_a_trainer_folder_keeps_every_json_byte_it_does_not_change() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer/checkpoint-2");
    let merged = merged_with_special(tmp.path());
    let out = tmp.path().join("out");
    let args = ["--tokenizer", merged.to_str().unwrap()];
    let (code, r, err) = run_job("sanitize-checkpoint", &input, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let rows = r["target_rows"].as_u64().unwrap();
    let cfg = text(&input.join("config.json"));
    assert!(cfg.contains("\"layer_norm_epsilon\": 1e-05,"));
    let want = splice(
        &cfg,
        "\"vocab_size\": 1000\n",
        &format!("\"vocab_size\": {rows}\n"),
    );
    assert_eq!(text(&out.join("config.json")), want);
    let tc = text(&input.join("tokenizer_config.json"));
    assert_eq!(
        text(&out.join("tokenizer_config.json")),
        with_am_listed(&tc)
    );
    let files: Vec<String> = edited(&r).into_iter().map(|(f, _)| f).collect();
    assert_eq!(files, ["config.json", "tokenizer_config.json"], "{r}");
    assert_eq!(
        edited(&r)[0].1,
        [change("vocab_size", json!("1000"), json!(rows.to_string()))]
    );
}

#[test]
fn check_vocab_fix_edits_keep_every_json_byte_they_do_not_change_and_are_reported() {
    // config.json left at GPT-2's bos/eos 50256 on a 1000-id tokenizer: the fixes set them to
    // the tokenizer's <|endoftext|>, 999.
    let tmp = tempfile::tempdir().unwrap();
    let input = model_folder(tmp.path());
    let out = tmp.path().join("out");
    let (code, r, err) = run_json(
        "check-vocab",
        &[
            input.as_os_str(),
            OsStr::new("--fix"),
            OsStr::new("--output"),
            out.as_os_str(),
        ],
    );
    assert_eq!(code, Some(0), "{err} {r}");
    let cfg = text(&input.join("config.json"));
    let want = splice(
        &splice(&cfg, "\"bos_token_id\": 50256,", "\"bos_token_id\": 999,"),
        "\"eos_token_id\": 50256,",
        "\"eos_token_id\": 999,",
    );
    assert_eq!(text(&out.join("config.json")), want);
    let tc = text(&input.join("tokenizer_config.json"));
    assert_eq!(text(&out.join("tokenizer_config.json")), tc);
    let mut changes = Vec::new();
    for e in r["executed"].as_array().unwrap() {
        assert_eq!(e["action"]["tool"], "edit-json", "{r}");
        for (file, c) in edited(e) {
            assert_eq!(file, "config.json");
            changes.extend(c);
        }
    }
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        changes,
        [
            change("bos_token_id", json!("50256"), json!("999")),
            change("eos_token_id", json!("50256"), json!("999")),
        ]
    );
}

#[test]
fn merge_tokenizers_keeps_every_unigram_score_of_the_base_as_written() {
    // A Unigram tokenizer.json's scores are written by the tokenizers library with every digit
    // an f64 needs (-3.7117018769183803); read with less care they come back one unit in the
    // last place off (-3.71170187691838: another number), changing the base's model.
    let tmp = tempfile::tempdir().unwrap();
    let base = testdata("tokenizers/unigram_english.json");
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "ሰላም\nአማርኛ\n").unwrap();
    let out = tmp.path().join("merged.json");
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            base.as_os_str(),
            OsStr::new("--add"),
            add.as_os_str(),
            OsStr::new("--output"),
            out.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (before, after) = (text(&base), text(&out));
    assert!(before.contains("-3.7117018769183803"));
    // The base's lines, in order, among the output's (a line before an insertion gains a ',').
    let mut lines = after.lines().map(|l| l.trim_end_matches(','));
    for want in before.lines().map(|l| l.trim_end_matches(',')) {
        assert!(
            lines.any(|l| l == want),
            "{want:?}: not in the merged tokenizer as written"
        );
    }
}
