//! inspect-checkpoint, driven as a user would: on the shipped fixtures.

mod common;
use common::*;
use serde_json::Value;
use std::ffi::OsStr;

fn json_of(path: &std::path::Path, extra: &[&str]) -> Value {
    let mut args: Vec<&OsStr> = vec![path.as_os_str(), OsStr::new("--json")];
    args.extend(extra.iter().map(OsStr::new));
    let o = run("inspect-checkpoint", &args);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON document")
}

/// (name, dtype, shape) as the reference reader (Python safe_open) reported them.
fn expected_listing(expected_json: &str) -> Vec<(String, String, Vec<u64>)> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata(expected_json)).unwrap()).unwrap();
    let mut out: Vec<_> = v["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, t)| {
            let shape = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            (k.clone(), t["dtype"].as_str().unwrap().to_string(), shape)
        })
        .collect();
    out.sort();
    out
}

fn listing(report: &Value) -> Vec<(String, String, Vec<u64>)> {
    let mut out: Vec<_> = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let shape = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].as_str().unwrap().to_string(),
                shape,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn json_listing_matches_what_python_safe_open_reported() {
    for (path, expected) in [
        ("gpt2", "gpt2/expected.json"),
        ("gpt2/model.safetensors", "gpt2/expected.json"),
        ("gpt2_sharded", "gpt2_sharded/expected.json"),
        ("gpt2_bin_sharded", "gpt2_sharded/expected.json"),
        (
            "chatterbox_t3/t3_f32.safetensors",
            "chatterbox_t3/t3_f32.expected.json",
        ),
        (
            "chatterbox_t3/t3_bf16.safetensors",
            "chatterbox_t3/t3_bf16.expected.json",
        ),
    ] {
        let doc = json_of(&testdata(path), &[]);
        let report = &doc["checkpoints"][0];
        let want = expected_listing(expected);
        assert!(!want.is_empty());
        assert_eq!(listing(report), want, "{path}");
    }
}

#[test]
fn json_keeps_file_metadata_as_python_saw_it() {
    let doc = json_of(&testdata("chatterbox_t3/t3_bf16.safetensors"), &[]);
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(testdata("chatterbox_t3/t3_bf16.expected.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["checkpoints"][0]["metadata"], want["metadata"]);
    assert_eq!(doc["checkpoints"][0]["format"], "safetensors");
}

#[test]
fn sharded_folder_is_read_as_one_checkpoint_with_each_tensor_in_its_shard() {
    let dir = testdata("gpt2_sharded");
    let doc = json_of(&dir, &[]);
    let r = &doc["checkpoints"][0];
    assert_eq!(r["format"], "sharded-safetensors");
    assert_eq!(r["files"].as_array().unwrap().len(), 2);
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    for t in r["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["shard"], index["weight_map"][name], "{name}");
    }
    assert_eq!(r["metadata"]["total_size"], r["totals"]["bytes"]);
}

#[test]
fn vocabulary_is_the_text_pair_never_the_speech_or_backbone_tables() {
    for f in [
        "chatterbox_t3/t3_f32.safetensors",
        "chatterbox_t3/t3_bf16.safetensors",
    ] {
        let doc = json_of(&testdata(f), &[]);
        let v = &doc["checkpoints"][0]["vocabulary"];
        assert_eq!(v["vocabulary"]["rows"], 2454);
        let names: Vec<&str> = v["vocabulary"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["text_emb.weight", "text_head.weight"]);
        let looks: Vec<&str> = v["lookalikes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(looks.contains(&"tfmr.embed_tokens.weight"), "{looks:?}");
        assert!(looks.contains(&"speech_emb.weight"), "{looks:?}");
    }
    let doc = json_of(&testdata("gpt2"), &[]);
    assert_eq!(
        doc["checkpoints"][0]["vocabulary"]["vocabulary"]["rows"],
        1000
    );
}

#[test]
fn hash_gives_each_tensor_payloads_blake3_or_with_sha256_its_sha256() {
    let path = testdata("chatterbox_t3/t3_bf16.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let reference = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    type Hash = fn(&[u8]) -> String;
    let reference_hash: [(&str, &[&str], Hash); 2] = [
        ("blake3", &["--hash"], blake3_hex),
        ("sha256", &["--hash", "--sha256"], sha256_hex),
    ];
    for (alg, args, hash) in reference_hash {
        let doc = json_of(&path, args);
        assert_eq!(doc["checkpoints"][0]["hash"], alg);
        let tensors = doc["checkpoints"][0]["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), reference.len());
        for t in tensors {
            let name = t["name"].as_str().unwrap();
            let data = reference.tensor(name).unwrap().data().to_vec();
            assert_eq!(t["digest"].as_str().unwrap(), hash(&data), "{alg} {name}");
        }
    }
}

#[test]
fn filter_lists_only_matching_tensors_and_totals_them() {
    let doc = json_of(
        &testdata("chatterbox_t3/t3_f32.safetensors"),
        &["--filter", "^text_"],
    );
    let r = &doc["checkpoints"][0];
    let names: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "text_emb.weight",
            "text_head.weight",
            "text_pos_emb.emb.weight"
        ]
    );
    assert_eq!(r["totals"]["tensors"], 3);
    assert_eq!(r["totals"]["bytes"], (2454 * 64 * 2 + 130 * 64) * 4);
}

#[test]
fn human_table_shows_format_tensors_totals_and_vocabulary() {
    let o = run("inspect-checkpoint", &[testdata("gpt2").as_os_str()]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(s.contains("safetensors"), "{s}");
    assert!(s.contains("transformer.wte.weight"), "{s}");
    assert!(s.contains("[1000, 64]"), "{s}");
    assert!(s.contains("total: 28 tensors"), "{s}");
    assert!(
        s.contains("vocabulary: 1000 rows: transformer.wte.weight"),
        "{s}"
    );
}

#[test]
fn help_has_an_example_and_exits_zero() {
    let o = run("inspect-checkpoint", &[OsStr::new("--help")]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(
        s.contains("Examples:") && s.contains("--json") && s.contains("--hash"),
        "{s}"
    );
}

#[test]
fn every_broken_file_exits_2_with_one_line_naming_file_and_problem() {
    let cases = [
        ("truncated.safetensors", "the file is truncated"),
        (
            "header_past_end.safetensors",
            "runs past the end of the file",
        ),
        (
            "header_too_large.safetensors",
            "exceeds the 100000000-byte limit",
        ),
        ("trailing_bytes.safetensors", "16 trailing bytes"),
        ("overlapping_offsets.safetensors", "overlap tensor 'a'"),
        ("gap_between_tensors.safetensors", "a gap of 4 bytes"),
        (
            "size_mismatch.safetensors",
            "needs 80 bytes but data_offsets [0, 64] span 64",
        ),
        ("unknown_dtype.safetensors", "unknown dtype 'F24'"),
        (
            "duplicate_names.safetensors",
            "tensor name 'a' appears twice",
        ),
        ("non_utf8_header.safetensors", "not valid UTF-8"),
        ("empty.safetensors", "file is empty"),
        ("not_a_checkpoint.safetensors", "unknown content"),
        (
            "sharded_missing_tensor",
            "tensor 'z': listed in the index but missing from its shard 's2.safetensors'",
        ),
        (
            "sharded_tensor_in_two_shards",
            "present in two shards, 's1.safetensors' and 's2.safetensors'",
        ),
    ];
    let listed: Vec<String> = std::fs::read_dir(testdata("broken"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed.len(),
        cases.len(),
        "every broken fixture has a case: {listed:?}"
    );
    for (file, problem) in cases {
        let path = testdata("broken").join(file);
        for json in [false, true] {
            let mut args = vec![path.as_os_str()];
            if json {
                args.push(OsStr::new("--json"));
            }
            let o = run("inspect-checkpoint", &args);
            let err = stderr(&o);
            assert_ne!(o.status.code(), Some(101), "{file} panicked: {err}");
            assert_eq!(o.status.code(), Some(2), "{file}: {err}");
            assert_eq!(err.lines().count(), 1, "{file}: one line, got {err}");
            assert!(err.contains(file), "{file}: message names the file: {err}");
            assert!(
                err.contains(problem),
                "{file}: expected '{problem}' in {err}"
            );
            if json {
                let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
                assert!(doc["errors"][0]["error"]
                    .as_str()
                    .unwrap()
                    .contains(problem));
            }
        }
    }
}

#[test]
fn a_bad_path_among_good_ones_still_reports_the_good_ones_and_exits_2() {
    let good = testdata("gpt2");
    let bad = testdata("broken/truncated.safetensors");
    let o = run(
        "inspect-checkpoint",
        &[good.as_os_str(), bad.as_os_str(), OsStr::new("--json")],
    );
    assert_eq!(o.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 1);
}

#[test]
fn a_tied_state_dict_names_its_tie_and_counts_the_shared_storage_once() {
    let path = testdata("torch/tied_state_dict.pt");
    let doc = json_of(&path, &[]);
    let r = &doc["checkpoints"][0];
    assert_eq!(r["ties"][0]["how"], "same-storage", "{}", r["ties"]);
    assert_eq!(
        r["ties"][0]["names"],
        serde_json::json!(["text_emb.weight", "text_head.weight"])
    );
    let tensors = r["tensors"].as_array().unwrap();
    let sum = |skip: &str| -> u64 {
        tensors
            .iter()
            .filter(|t| t["name"] != skip)
            .map(|t| t["bytes"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(r["totals"]["tensors"], tensors.len());
    assert_eq!(r["totals"]["bytes"], sum("text_head.weight"));
    assert!(r["totals"]["bytes"].as_u64().unwrap() < std::fs::metadata(&path).unwrap().len());

    // The same model saved by transformers: the head is not stored, config.json ties it.
    let doc = json_of(&testdata("gpt2"), &[]);
    let r = &doc["checkpoints"][0];
    assert_eq!(r["ties"][0]["how"], "config");
    assert_eq!(
        r["ties"][0]["names"],
        serde_json::json!(["transformer.wte.weight"])
    );
    let o = common::run("inspect-checkpoint", &[testdata("gpt2").as_os_str()]);
    assert!(stdout(&o).contains("tied: transformer.wte.weight: the output head is tied to it"));
}
