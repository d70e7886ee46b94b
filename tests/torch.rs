//! Torch checkpoints: every tensor reads as torch reported it, the non-tensor tree equals what
//! Python loaded, writing and reading back changes nothing, and hostile files are refused.

mod common;
use ckpt_surgery::formats::torch::writer::TorchPlan;
use ckpt_surgery::formats::{self, Checkpoint, OpenOptions};
use ckpt_surgery::output::torch::write_torch;
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

const BENIGN: [(&str, &str); 3] = [
    ("torch/state_dict.pt", "torch/state_dict.expected.json"),
    ("torch/train_ckpt.pt", "torch/train_ckpt.expected.json"),
    (
        "torch/train_ckpt_legacy.pt",
        "torch/train_ckpt.expected.json",
    ),
];

fn trusting() -> OpenOptions {
    let mut o = OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    o
}

fn expected(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(testdata(rel)).unwrap()).unwrap()
}

/// Tensors (dtype, shape, sha256 of contiguous bytes) and tree of `ckpt` against what torch said.
fn assert_matches_python(ckpt: &Checkpoint, want: &Value, what: &str) {
    let tensors = want["tensors"].as_object().unwrap();
    let got: Vec<_> = ckpt.tensors().collect();
    assert_eq!(got.len(), tensors.len(), "{what}: tensor count");
    for t in &got {
        let w = &tensors[t.name];
        assert_eq!(w["dtype"], t.dtype.torch_name(), "{what}: {}", t.name);
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, t.shape, "{what}: {}", t.name);
        assert_eq!(
            w["sha256"],
            sha256_hex(&t.bytes()),
            "{what}: bytes of {}",
            t.name
        );
    }
    let torch = &ckpt.torch[0];
    let tree = canonical(&torch.pickle, torch.pickle.root, "");
    assert_eq!(tree, normalise_python(&want["tree"]), "{what}: tree");
}

#[test]
fn every_tensor_and_the_tree_read_as_torch_reported_them() {
    for (rel, exp) in BENIGN {
        let ckpt = formats::open_with(&testdata(rel), &trusting()).unwrap();
        assert_matches_python(&ckpt, &expected(exp), rel);
    }
}

#[test]
fn read_write_read_keeps_every_tensor_and_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    for (rel, exp) in BENIGN {
        let input = testdata(rel);
        let before = std::fs::read(&input).unwrap();
        let ckpt = formats::open_with(&input, &trusting()).unwrap();
        let t = &ckpt.torch[0];
        let dest = tmp.path().join(Path::new(rel).file_name().unwrap());
        let manifest =
            write_torch(&TorchPlan::identity(t), &dest, &[], &trusting().globals).unwrap();
        let back = formats::open_with(&dest, &trusting()).unwrap();
        assert_eq!(
            back.format,
            formats::Format::TorchZip,
            "{rel} is written as zip"
        );
        assert_matches_python(&back, &expected(exp), &format!("{rel} rewritten"));
        // Storages are written once: views that shared one still do.
        assert_eq!(back.torch[0].storages.len(), t.storages.len());
        assert_eq!(
            manifest.sha256,
            Some(sha256_hex(&std::fs::read(&dest).unwrap()))
        );
        assert_eq!(std::fs::read(&input).unwrap(), before, "input modified");
        // Writing what we read back is a fixed point: the same bytes again (same file name, so
        // the same archive folder).
        let again_dir = tmp.path().join("again");
        std::fs::create_dir_all(&again_dir).unwrap();
        let again = again_dir.join(dest.file_name().unwrap());
        let t2 = &back.torch[0];
        write_torch(&TorchPlan::identity(t2), &again, &[], &trusting().globals).unwrap();
        assert_eq!(
            std::fs::read(&again).unwrap(),
            std::fs::read(&dest).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn views_of_one_storage_stay_views_and_the_storage_is_written_once() {
    let ckpt = formats::open(&testdata("torch/state_dict.pt")).unwrap();
    let t = &ckpt.torch[0];
    let key = |p: &str| t.tensor_node(p).unwrap().storage.key.clone();
    assert_eq!(key("extra.rows"), key("extra.column"));
    assert_eq!(key("extra.rows"), key("extra.transposed"));
    let transposed = t.tensor_node("extra.transposed").unwrap();
    assert_eq!(
        (transposed.shape.clone(), transposed.stride.clone()),
        (vec![6, 4], vec![1, 6])
    );
}

#[test]
fn every_hostile_file_is_refused_with_exit_2_naming_the_global_or_problem() {
    let cases = [
        ("reduce_os_system.pt", "refused global posix.system at byte"),
        ("stack_global_from_memo.pt", "refused global os.system at byte 22 of data.pkl"),
        ("nested_pickle_loads.pt", "refused global pickle.loads at byte 2 of data.pkl"),
        ("memo_bomb.pt", "expansion bomb"),
        ("view_past_storage.pt", "reaches past the end of storage '0' (4 elements)"),
        ("compressed_storage.pt", "is compressed (DEFLATE)"),
        ("big_endian.pt", "big-endian"),
        ("torchscript.pt", "a TorchScript archive"),
        ("truncated.pt", "truncated or corrupt"),
        ("name_mismatch.pt", "local header names 'state_dict/data/X' where the central directory names 'state_dict/data/0'"),
        ("bad_crc.pt", "record 'data.pkl' fails its CRC-32 check"),
        ("encrypted_flag.pt", "flagged as encrypted"),
        ("unknown_global.pt", "refused global mylib.config.Config at byte 2 of data.pkl: if you trust this file"),
    ];
    let listed = std::fs::read_dir(testdata("torch_hostile"))
        .unwrap()
        .count();
    assert_eq!(listed, cases.len(), "every hostile fixture has a case");
    for (file, problem) in cases {
        let path = testdata("torch_hostile").join(file);
        let o = run("inspect-checkpoint", &[path.as_os_str()]);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(101), "{file} panicked: {err}");
        assert_eq!(o.status.code(), Some(2), "{file}: {err}");
        assert_eq!(err.lines().count(), 1, "{file}: {err}");
        assert!(
            err.contains(file) && err.contains(problem),
            "{file}: expected '{problem}' in {err}"
        );
    }
}

#[test]
fn code_running_globals_are_refused_even_when_the_user_allows_them() {
    for g in [
        "os.system",
        "builtins.eval",
        "subprocess.Popen",
        "pickle.loads",
        "torch.load",
        "runpy.run_path",
    ] {
        let o = run(
            "inspect-checkpoint",
            &[
                testdata("torch/state_dict.pt").as_os_str(),
                OsStr::new("--allow-global"),
                OsStr::new(g),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{g}");
        assert!(stderr(&o).contains("never allowed"), "{g}: {}", stderr(&o));
    }
    // And the VM refuses them inside a file even if a caller's policy lists them.
    let mut o = OpenOptions::default();
    o.globals.extra.insert("posix.system".into());
    let err = formats::open_with(&testdata("torch_hostile/reduce_os_system.pt"), &o).unwrap_err();
    assert!(
        err.to_string().contains("refused global posix.system"),
        "{err}"
    );
}

#[test]
fn a_training_checkpoint_needs_its_namespace_allowed_and_then_summarises_its_tree() {
    let path = testdata("torch/train_ckpt.pt");
    let o = run("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("pass --allow-global argparse.Namespace"),
        "{}",
        stderr(&o)
    );

    let o = run(
        "inspect-checkpoint",
        &[
            path.as_os_str(),
            OsStr::new("--allow-global"),
            OsStr::new("argparse.Namespace"),
            OsStr::new("--json"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &doc["checkpoints"][0];
    assert_eq!(r["format"], "torch-zip");
    let tree = &r["tree"];
    let step = tree["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "step")
        .unwrap();
    assert_eq!(step["value"], "3");
    let opt = &tree["optimizers"][0];
    assert_eq!(
        (
            opt["path"].as_str(),
            opt["param_groups"].as_u64(),
            opt["params"].as_u64()
        ),
        (Some("optimizer"), Some(1), Some(5))
    );
    let moments: Vec<&str> = opt["moments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(moments, ["step", "exp_avg", "exp_avg_sq"]);
    assert_eq!(tree["schedulers"][0]["last_epoch"], "3");
    let names: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"model.text_emb.weight") && names.contains(&"optimizer.state.0.exp_avg"),
        "{names:?}"
    );
    assert_eq!(r["vocabulary"]["vocabulary"]["rows"], 100);
}

#[test]
fn hash_of_a_torch_file_checks_crcs_and_hashes_contiguous_bytes() {
    let path = testdata("torch/state_dict.pt");
    let o = run(
        "inspect-checkpoint",
        &[path.as_os_str(), OsStr::new("--hash"), OsStr::new("--json")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want = expected("torch/state_dict.expected.json");
    for t in doc["checkpoints"][0]["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["sha256"], want["tensors"][name]["sha256"], "{name}");
    }
    // A storage whose bytes no longer match its CRC is caught when the data is read.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad_storage.pt");
    let mut raw = std::fs::read(&path).unwrap();
    let ckpt = formats::open(&path).unwrap();
    let s = ckpt.torch[0].storages.values().next().unwrap();
    raw[s.start as usize] ^= 0x01;
    std::fs::write(&bad, &raw).unwrap();
    let o = run(
        "inspect-checkpoint",
        &[bad.as_os_str(), OsStr::new("--hash")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("fails its CRC-32 check"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_sharded_torch_set_reads_the_same_tensors_as_its_safetensors_twin() {
    let bin = formats::open(&testdata("gpt2_bin_sharded")).unwrap();
    let st = formats::open(&testdata("gpt2_sharded")).unwrap();
    assert_eq!(bin.format, formats::Format::ShardedTorch);
    assert_eq!(bin.torch.len(), 2);
    let mut a: Vec<_> = bin
        .tensors()
        .map(|t| {
            (
                t.name.to_string(),
                t.dtype,
                t.shape.to_vec(),
                sha256_hex(&t.bytes()),
            )
        })
        .collect();
    let mut b: Vec<_> = st
        .tensors()
        .map(|t| {
            (
                t.name.to_string(),
                t.dtype,
                t.shape.to_vec(),
                sha256_hex(&t.bytes()),
            )
        })
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a.len(), 28);
    assert_eq!(a, b);
}
