//! torch Distributed Checkpoint folders: the reader against torch's own listing, bad input,
//! and the DCP paths of sanitize-checkpoint and check-vocab.

mod common;

use ckpt_surgery::formats::dcp::ItemKind;
use ckpt_surgery::formats::{self, Format};
use common::{run, run_json, sha256_hex, stderr, testdata};
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

const FIXTURES: [&str; 3] = ["single", "fsdp2", "mismatch"];

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(testdata(&format!("dcp/{name}.expected.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every key torch's reader lists, with its kind, dtype, global shape, chunks and the sha256
/// of the whole tensor as torch assembles it, compared with ours.
fn assert_same_as_torch(dir: &Path, want: &Value) {
    let ckpt = formats::open(dir).unwrap();
    assert_eq!(ckpt.format, Format::TorchDcp);
    let d = ckpt.dcp.as_ref().unwrap();
    let want_items = want["items"].as_object().unwrap();
    let names: Vec<&str> = d.items.iter().map(|i| i.fqn.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    let mut want_names: Vec<&str> = want_items.keys().map(String::as_str).collect();
    want_names.sort();
    assert_eq!(sorted, want_names);
    for it in &d.items {
        let w = &want_items[&it.fqn];
        match &it.kind {
            ItemKind::Bytes { .. } => assert_eq!(w["kind"], "bytes", "{}", it.fqn),
            ItemKind::Tensor {
                dtype,
                shape,
                chunks,
            } => {
                assert_eq!(w["kind"], "tensor", "{}", it.fqn);
                assert_eq!(w["dtype"], dtype.torch_name(), "{}", it.fqn);
                assert_eq!(w["shape"], serde_json::json!(shape), "{}", it.fqn);
                let got: Vec<Value> = chunks
                    .iter()
                    .map(|c| serde_json::json!({"offsets": c.offsets, "sizes": c.sizes}))
                    .collect();
                assert_eq!(w["chunks"], Value::Array(got), "{}", it.fqn);
                let bytes = d.tensor_bytes(it).unwrap();
                assert_eq!(w["sha256"], sha256_hex(&bytes), "{}", it.fqn);
            }
        }
    }
}

#[test]
fn reader_lists_the_same_tensors_chunks_and_bytes_as_torch() {
    for name in FIXTURES {
        assert_same_as_torch(&testdata(&format!("dcp/{name}")), &expected(name));
    }
}

#[test]
fn fsdp2_rows_are_split_unevenly_across_two_rank_files() {
    let ckpt = formats::open(&testdata("dcp/fsdp2")).unwrap();
    let d = ckpt.dcp.unwrap();
    let emb = d.item("model.tok_embeddings.weight").unwrap();
    let ItemKind::Tensor { chunks, .. } = &emb.kind else {
        panic!("not a tensor")
    };
    let placed: Vec<(u64, u64, &str)> = chunks
        .iter()
        .map(|c| (c.offsets[0], c.sizes[0], c.stored.file.as_str()))
        .collect();
    assert_eq!(
        placed,
        vec![(0, 500, "__0_0.distcp"), (500, 499, "__1_0.distcp")]
    );
}

#[test]
fn inspect_json_lists_flattened_keys_with_global_shapes_and_chunks() {
    let dir = testdata("dcp/fsdp2");
    let (code, doc, err) = run_json("inspect-checkpoint", &[dir.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let r = &doc["checkpoints"][0];
    assert_eq!(r["format"], "torch-dcp");
    let tensors = r["tensors"].as_array().unwrap();
    let find = |n: &str| tensors.iter().find(|t| t["name"] == n).unwrap().clone();
    let m = find("optim.state.tok_embeddings.weight.exp_avg");
    assert_eq!(m["shape"], serde_json::json!([999, 7]));
    assert_eq!(m["chunks"].as_array().unwrap().len(), 2);
    assert_eq!(m["chunks"][1]["file"], "__1_0.distcp");
    let step = find("optim.state.tok_embeddings.weight.step");
    assert_eq!(step["shape"], serde_json::json!([]));
    assert_eq!(r["vocabulary"]["vocabulary"]["rows"], 999);
    let groups = r["bytes_items"].as_array().unwrap();
    assert!(groups
        .iter()
        .any(|g| g == "optim.param_groups.tok_embeddings.weight.lr"));
    assert_eq!(tensors.len(), 13);
}

/// A copy of a fixture folder to break.
fn copy_fixture(name: &str, into: &Path) -> std::path::PathBuf {
    let dst = into.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(testdata(&format!("dcp/{name}"))).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
    }
    dst
}

fn inspect_fails_naming(dir: &Path, file: &str) {
    let o = run("inspect-checkpoint", &[dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(file), "{err}");
}

#[test]
fn a_missing_rank_file_is_one_line_naming_it_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    std::fs::remove_file(dir.join("__1_0.distcp")).unwrap();
    inspect_fails_naming(&dir, "__1_0.distcp");
}

#[test]
fn a_truncated_chunk_is_one_line_naming_the_file_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    let f = dir.join("__1_0.distcp");
    let len = std::fs::metadata(&f).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len(len - 100).unwrap();
    inspect_fails_naming(&dir, "__1_0.distcp");
}

#[test]
fn metadata_globals_are_not_allowed_in_ordinary_torch_files() {
    let policy = ckpt_surgery::formats::torch::pickle::GlobalPolicy::default();
    for g in ckpt_surgery::formats::dcp::METADATA_GLOBALS {
        assert!(!policy.allows(g), "{g}");
    }
    let _ = OsStr::new("");
}
