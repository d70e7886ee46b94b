//! Megatron-Core `torch_dist` saves whose distributed-optimizer state is in Megatron's
//! `fully_reshardable` layout (testdata/megatron/tp2_fully_reshardable: megatron-core 0.16.1's
//! own save of the run in testdata/megatron/tp2 in bf16, by `testdata/megatron_save.py ROOT
//! fully_reshardable bf16`): each parameter's main copy (fp32) and Adam moments are tensors of
//! the parameter's shape and TP split (`optimizer.state.{param,exp_avg,exp_avg_sq}.NAME`).
//! sanitize-checkpoint resizes the vocabulary matrices' states with them: old rows bit for bit,
//! new rows' main copies the new weights, moments zero.

mod common;

use common::{copy_tree, one_line_refusal, run_job, run_json, testdata};
use std::path::{Path, PathBuf};

const FIXTURE: &str = "megatron/tp2_fully_reshardable";
const VOCAB: [&str; 2] = ["embedding.word_embeddings.weight", "output_layer.weight"];
const STATES: [&str; 3] = ["param", "exp_avg", "exp_avg_sq"];

fn sanitize(root: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    run_job("sanitize-checkpoint", root, out, extra)
}

fn megatron(root: &Path) -> ckpt_surgery::formats::megatron::Megatron {
    match ckpt_surgery::formats::open(root, &Default::default()).unwrap() {
        ckpt_surgery::formats::Checkpoint::Megatron(m) => *m,
        _ => panic!("{} is not read as Megatron", root.display()),
    }
}

/// Every tensor item's whole bytes, read by the library's Megatron reader.
fn tensors(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let m = megatron(root);
    m.dcp
        .items
        .iter()
        .filter(|i| matches!(i.kind, ckpt_surgery::formats::dcp::ItemKind::Tensor { .. }))
        .map(|i| (i.fqn.clone(), m.dcp.tensor_bytes(i).unwrap()))
        .collect()
}

fn state(s: &str, weight: &str) -> String {
    format!("optimizer.state.{s}.{weight}")
}

#[test]
fn sanitize_checkpoint_resizes_fully_reshardable_state_with_its_matrices() {
    // 84 -> 150 tokens: 128 -> 256 rows. Each matrix's three states: rows 0..128 the input's
    // bit for bit; rows 128..256 the new weight rows (param, the fp32 main copy) or zero (the
    // moments). Every other tensor (other parameters' states included) is the input's.
    let tmp = tempfile::tempdir().unwrap();
    let (root, out) = (testdata(FIXTURE), tmp.path().join("out"));
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["padded_rows"], 256, "{doc}");
    assert_eq!(
        doc["optimizer_states"].as_array().unwrap().len(),
        6,
        "{doc}"
    );
    assert!(doc["buckets"].is_null() && doc["dropped"] == serde_json::json!([]));
    let (before, after) = (tensors(&root), tensors(&out));
    // The run is bf16: 128 x 4 bf16 weights, fp32 states.
    let old = 128 * 4 * 4;
    for w in VOCAB {
        let weight = &after[w];
        assert_eq!(weight.len(), old);
        // bf16 -> f32 is exact: the 16 bits on top.
        let new_weights: Vec<u8> = weight[old / 2..]
            .chunks(2)
            .flat_map(|b| [0, 0, b[0], b[1]])
            .collect();
        assert!(new_weights.iter().any(|&x| x != 0), "{w}: mean rows");
        for s in STATES {
            let (a, b) = (&before[&state(s, w)], &after[&state(s, w)]);
            assert_eq!(a.len(), old, "{s} {w}");
            assert_eq!(b.len(), 2 * old, "{s} {w}");
            assert_eq!(&b[..old], &a[..], "{s} {w}: old rows");
            if s == "param" {
                assert_eq!(&b[old..], &new_weights[..], "{w}: new main copies");
            } else {
                assert!(b[old..].iter().all(|&x| x == 0), "{s} {w}: new moments");
            }
        }
    }
    let resized = |k: &String| VOCAB.iter().any(|w| k.ends_with(w));
    for (k, v) in before.iter().filter(|(k, _)| !resized(k)) {
        assert_eq!(after.get(k), Some(v), "{k}");
    }
    assert_eq!(after.len(), before.len());
    let out_m = megatron(&out);
    assert_eq!(out_m.optimizer.form.as_deref(), Some("fully_reshardable"));
    let (code, check, err) = run_json("check-vocab", &[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {check}");
}

#[test]
fn sanitize_checkpoint_cuts_fully_reshardable_state_back_to_the_original_bytes() {
    // Grown to 256 rows, then cut back to 128 (--allow-shrink): every tensor is the input's.
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata(FIXTURE);
    let (grown, back) = (tmp.path().join("grown"), tmp.path().join("back"));
    let (code, _, err) = sanitize(&root, &grown, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, doc, err) = sanitize(&grown, &back, &["--vocab-rows", "84"]);
    assert_eq!(code, Some(2), "a cut without --allow-shrink: {err}");
    assert!(
        doc["error"]
            .as_str()
            .unwrap_or(&err)
            .contains("--allow-shrink"),
        "{doc}"
    );
    let (code, _, err) = sanitize(&grown, &back, &["--vocab-rows", "84", "--allow-shrink"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(tensors(&back) == tensors(&root));
}

/// A copy of the fixture with every `from` in its `.metadata` replaced by `to` (as long), the
/// item names included; the swaps one after another.
fn patched_metadata(tmp: &Path, swaps: &[(&str, &str)]) -> PathBuf {
    let root = tmp.join("run");
    copy_tree(&testdata(FIXTURE), &root);
    let path = root.join("iter_0000010/.metadata");
    let mut bytes = std::fs::read(&path).unwrap();
    for (from, to) in swaps {
        assert_eq!(from.len(), to.len());
        let (f, t) = (from.as_bytes(), to.as_bytes());
        let mut i = 0;
        let mut n = 0;
        while i + f.len() <= bytes.len() {
            if &bytes[i..i + f.len()] == f {
                bytes[i..i + f.len()].copy_from_slice(t);
                n += 1;
                i += f.len();
            } else {
                i += 1;
            }
        }
        assert!(n > 0, "no {from} in .metadata");
    }
    std::fs::write(&path, bytes).unwrap();
    root
}

/// sanitize's one-line refusal of `root` (exit 2, nothing written, `--optimizer drop` named),
/// and its run with `--optimizer drop` (exit 0, no optimizer state left).
fn refused_unless_dropped(tmp: &Path, root: &Path) -> String {
    let out = tmp.join("out");
    let (code, doc, err) = sanitize(root, &out, &["--vocab-rows", "150"]);
    let msg = one_line_refusal((code, &doc, &err), &["--optimizer drop"]);
    assert!(!out.exists());
    let (code, _, err) = sanitize(root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(megatron(&out).optimizer.form.is_none());
    msg
}

#[test]
fn fully_reshardable_states_that_do_not_follow_their_weights_are_refused_and_flagged() {
    // fc1's and fc2's exp_avg items swapped by name ([1, 32, 4] against [1, 4, 32]): Megatron
    // would ask for each at its weight's shape. check-vocab flags both (exit 1); sanitize
    // refuses, naming one, and writes with --optimizer drop.
    let tmp = tempfile::tempdir().unwrap();
    let (fc1, fc2) = (
        "state.exp_avg.decoder.layers.mlp.linear_fc1",
        "state.exp_avg.decoder.layers.mlp.linear_fc2",
    );
    let fcx = "state.exp_avg.decoder.layers.mlp.linear_fcX";
    let root = patched_metadata(tmp.path(), &[(fc1, fcx), (fc2, fc1), (fcx, fc2)]);
    let (code, doc, err) = run_json("check-vocab", &[root.as_os_str()]);
    assert_eq!(code, Some(1), "{err} {doc}");
    let flagged: Vec<&serde_json::Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "optimizer-vs-weights")
        .collect();
    assert_eq!(flagged.len(), 2, "{doc}");
    let msg = refused_unless_dropped(tmp.path(), &root);
    assert!(
        msg.contains("linear_fc") && msg.contains("[1, 4, 32]"),
        "{msg}"
    );
}

#[test]
fn a_fully_reshardable_state_that_is_not_adams_is_refused_by_name() {
    // Every exp_avg_sq item renamed max_avg_sq: what a new row of it should hold is unknown.
    let tmp = tempfile::tempdir().unwrap();
    let root = patched_metadata(
        tmp.path(),
        &[("optimizer.state.exp_avg_sq.", "optimizer.state.max_avg_sq.")],
    );
    let msg = refused_unless_dropped(tmp.path(), &root);
    assert!(
        msg.contains("'max_avg_sq'") && msg.contains("Adam"),
        "{msg}"
    );
}
