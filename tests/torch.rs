//! Torch checkpoints: every tensor reads as torch reported it, the non-tensor tree equals what
//! Python loaded, writing and reading back changes nothing, and hostile files are refused.

mod common;
use ckpt_surgery::formats::torch::write::write_torch;
use ckpt_surgery::formats::torch::writer::TorchLayout;
use ckpt_surgery::formats::{self, OpenOptions, Tensors};
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
fn assert_matches_python(ckpt: &Tensors, want: &Value, what: &str) {
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
            sha256_hex(&t.try_bytes().unwrap()),
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
        let ckpt = formats::open_tensors(&testdata(rel), &trusting()).unwrap();
        assert_matches_python(&ckpt, &expected(exp), rel);
    }
}

#[test]
fn read_write_read_keeps_every_tensor_and_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    for (rel, exp) in BENIGN {
        let input = testdata(rel);
        let before = std::fs::read(&input).unwrap();
        let ckpt = formats::open_tensors(&input, &trusting()).unwrap();
        let t = &ckpt.torch[0];
        let dest = tmp.path().join(Path::new(rel).file_name().unwrap());
        // The whole file's hash is reported when asked (as for safetensors).
        let mut plan = TorchLayout::try_identity(t).unwrap();
        plan.file_sha256 = true;
        let manifest = write_torch(&plan, &dest, &[], &trusting().globals).unwrap();
        let back = formats::open_tensors(&dest, &trusting()).unwrap();
        assert_eq!(
            back.format,
            formats::Format::TorchZip,
            "{rel} is written as zip"
        );
        assert_matches_python(&back, &expected(exp), &format!("{rel} rewritten"));
        // Storages are written once: views that shared one still do.
        assert_eq!(back.torch[0].storages.len(), t.storages.len());
        assert_eq!(
            manifest.digest,
            Some(blake3_hex(&std::fs::read(&dest).unwrap()))
        );
        assert_eq!(std::fs::read(&input).unwrap(), before, "input modified");
        // Writing what we read back is a fixed point: the same bytes again (same file name, so
        // the same archive folder).
        let again_dir = tmp.path().join("again");
        std::fs::create_dir_all(&again_dir).unwrap();
        let again = again_dir.join(dest.file_name().unwrap());
        let t2 = &back.torch[0];
        let m2 = write_torch(
            &TorchLayout::try_identity(t2).unwrap(),
            &again,
            &[],
            &trusting().globals,
        )
        .unwrap();
        assert_eq!(m2.digest, None, "not asked");
        assert_eq!(
            std::fs::read(&again).unwrap(),
            std::fs::read(&dest).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn views_of_one_storage_stay_views_and_the_storage_is_written_once() {
    let ckpt =
        formats::open_tensors(&testdata("torch/state_dict.pt"), &Default::default()).unwrap();
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
    let err =
        formats::open_tensors(&testdata("torch_hostile/reduce_os_system.pt"), &o).unwrap_err();
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
        &[
            path.as_os_str(),
            OsStr::new("--hash"),
            OsStr::new("--sha256"),
            OsStr::new("--json"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    // With --sha256 the digests are the ones torch's side computed (generate.py, hashlib).
    let want = expected("torch/state_dict.expected.json");
    assert_eq!(doc["checkpoints"][0]["hash"], "sha256");
    for t in doc["checkpoints"][0]["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["digest"], want["tensors"][name]["sha256"], "{name}");
    }
    // A storage whose bytes no longer match its CRC is caught when the data is read.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad_storage.pt");
    let mut raw = std::fs::read(&path).unwrap();
    let ckpt = formats::open_tensors(&path, &Default::default()).unwrap();
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
    let bin = formats::open_tensors(&testdata("gpt2_bin_sharded"), &Default::default()).unwrap();
    let st = formats::open_tensors(&testdata("gpt2_sharded"), &Default::default()).unwrap();
    assert_eq!(bin.format, formats::Format::ShardedTorch);
    assert_eq!(bin.torch.len(), 2);
    let mut a: Vec<_> = bin
        .tensors()
        .map(|t| {
            (
                t.name.to_string(),
                t.dtype,
                t.shape.to_vec(),
                sha256_hex(&t.try_bytes().unwrap()),
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
                sha256_hex(&t.try_bytes().unwrap()),
            )
        })
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a.len(), 28);
    assert_eq!(a, b);
}

/// Files of other eras and every dtype torch writes today, with what torch.load(weights_only=True)
/// said of them (testdata/generate.py, torch_eras).
const ERAS: [(&str, &str); 6] = [
    (
        "torch_eras/py2_ordereddict.pth",
        "torch_eras/py2_ordereddict.expected.json",
    ),
    // Backward hooks None, as the weights shipped in the lpips package have them.
    (
        "torch_eras/py2_hooks_none.pth",
        "torch_eras/py2_hooks_none.expected.json",
    ),
    (
        "torch_eras/py2_rebuild_tensor_v1.pth",
        "torch_eras/py2_rebuild_tensor_v1.expected.json",
    ),
    ("torch_eras/dtypes.pt", "torch_eras/dtypes.expected.json"),
    (
        "torch_eras/dtypes_legacy.pt",
        "torch_eras/dtypes.expected.json",
    ),
    (
        "torch_eras/containers_p3.pt",
        "torch_eras/containers_p3.expected.json",
    ),
];

#[test]
fn python2_era_ordered_dicts_and_every_dtype_read_as_torch_reported_them() {
    for (rel, exp) in ERAS {
        let ckpt = formats::open_tensors(&testdata(rel), &trusting())
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_matches_python(&ckpt, &expected(exp), rel);
    }
    // The Python 2 form keeps its entries in the constructor's argument: none may be lost.
    let ckpt = formats::open_tensors(
        &testdata("torch_eras/py2_ordereddict.pth"),
        &Default::default(),
    )
    .unwrap();
    let names: Vec<&str> = ckpt.tensors().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "conv.weight",
            "conv.bias",
            "bn.num_batches_tracked",
            "emb.weight"
        ]
    );
    assert_eq!(ckpt.torch[0].storages.len(), 4);
}

/// Read a committed file and write it back unchanged into `dir` (same file name).
fn rewrite(rel: &str, dir: &Path) -> (Tensors, std::path::PathBuf) {
    let ckpt = formats::open_tensors(&testdata(rel), &trusting()).unwrap();
    let dest = dir.join(Path::new(rel).file_name().unwrap());
    write_torch(
        &TorchLayout::try_identity(&ckpt.torch[0]).unwrap(),
        &dest,
        &[],
        &trusting().globals,
    )
    .unwrap_or_else(|e| panic!("{rel}: {e}"));
    (ckpt, dest)
}

#[test]
fn every_era_and_dtype_round_trips_through_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    for (rel, exp) in ERAS {
        let (_, dest) = rewrite(rel, tmp.path());
        let back = formats::open_tensors(&dest, &trusting()).unwrap();
        assert_eq!(back.format, formats::Format::TorchZip, "{rel}");
        assert_matches_python(&back, &expected(exp), &format!("{rel} rewritten"));
        // v3 tensors are written back as v3 with their untyped storage.
        for t in back.torch[0].tensors.iter() {
            let node = back.torch[0].pickle.tensor_of(t.node).unwrap();
            let v3 = matches!(
                node.storage.dtype.torch_name(),
                "uint16" | "uint32" | "uint64" | "complex32"
            ) || node.storage.dtype.torch_name().starts_with("float8");
            assert_eq!(node.storage.is_untyped(), v3, "{rel}: {}", t.path);
        }
    }
}

/// `pickle` (as the writer emits it, no memo) with a None put before the TUPLE that closes each
/// persistent id: after 'storage', the storage class (GLOBAL), the key and location (BINUNICODE)
/// and the element count (BININT1, BININT2 or BININT).
fn legacy_pids(pickle: &[u8]) -> Vec<u8> {
    let storage = b"X\x07\x00\x00\x00storage";
    let mut out = Vec::with_capacity(pickle.len());
    let mut at = 0;
    while let Some(found) = pickle[at..]
        .windows(storage.len())
        .position(|w| w == storage)
    {
        let mut i = at + found + storage.len();
        assert_eq!(pickle[i], b'c', "the storage class");
        for _ in 0..2 {
            i += 1 + pickle[i + 1..].iter().position(|&b| b == b'\n').unwrap();
        }
        i += 1;
        for _ in 0..2 {
            assert_eq!(pickle[i], b'X', "key and location");
            let n = u32::from_le_bytes(pickle[i + 1..i + 5].try_into().unwrap()) as usize;
            i += 5 + n;
        }
        i += match pickle[i] {
            b'K' => 2,
            b'M' => 3,
            b'J' => 5,
            other => panic!("element count opcode {other}"),
        };
        assert_eq!(pickle[i], b't', "a persistent id ends in TUPLE");
        out.extend_from_slice(&pickle[at..i]);
        out.push(b'N');
        at = i;
    }
    out.extend_from_slice(&pickle[at..]);
    out
}

#[test]
fn a_file_storing_a_storage_no_tensor_reaches_is_refused() {
    let path = testdata("torch_eras/dropped_storage.pt");
    let o = run("inspect-checkpoint", &[path.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("dropped_storage.pt") && err.contains("('1') are used by no tensor"),
        "{err}"
    );
    // The same for a legacy file: the storage-key list names a storage the tree never uses.
    let legacy = std::fs::read(testdata("torch_eras/py2_ordereddict.pth")).unwrap();
    let ckpt = formats::open_tensors(
        &testdata("torch_eras/py2_ordereddict.pth"),
        &Default::default(),
    )
    .unwrap();
    let t = &ckpt.torch[0];
    // Cut the last entry ([key, tensor] pair) out of the pickle by dropping it from the tree:
    // simplest hostile form is the object pickle of a 3-entry dict with 4 stored storages.
    let mut p = t.pickle.clone();
    let root = p.root;
    if let ckpt_surgery::formats::torch::value::Node::Object { dict_items, .. } = p.node_mut(root) {
        dict_items.pop();
    }
    let emitted = ckpt_surgery::formats::torch::writer::emit_pickle(&p).unwrap();
    // Keep the emitted keys pointing at the file's own storages.
    let mut body = emitted.bytes.clone();
    for (i, key) in emitted.storage_order.iter().enumerate() {
        let from = format!("X{}\0\0\0{i}", char::from(i.to_string().len() as u8));
        let to = format!("X{}\0\0\0{key}", char::from(key.len() as u8));
        let pos = body
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        body.splice(pos..pos + from.len(), to.bytes());
    }
    // The writer emits zip persistent ids ('storage', type, key, location, numel); a legacy
    // file's have view metadata too: a None before each TUPLE that closes one.
    let body = legacy_pids(&body);
    let start = t.pickle_start as usize;
    let end = start + t.pickle_len as usize;
    let hostile = [&legacy[..start], &body[..], &legacy[end..]].concat();
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("legacy_dropped.pth");
    std::fs::write(&f, hostile).unwrap();
    let o = run("inspect-checkpoint", &[f.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("are used by no tensor"), "{err}");
}

#[test]
fn quantized_and_sparse_tensors_are_refused_by_name_even_when_allowed() {
    for (file, what, global) in [
        (
            "quantized.pt",
            "a quantized tensor",
            "torch._utils._rebuild_qtensor",
        ),
        (
            "sparse.pt",
            "a sparse tensor",
            "torch._utils._rebuild_sparse_tensor",
        ),
    ] {
        let path = testdata("torch_eras").join(file);
        let o = run("inspect-checkpoint", &[path.as_os_str()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{file}: {err}");
        assert!(err.contains(what) && err.contains(global), "{file}: {err}");
        let o = run(
            "inspect-checkpoint",
            &[
                path.as_os_str(),
                OsStr::new("--allow-global"),
                OsStr::new(global),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{file}");
        assert!(stderr(&o).contains("is not read"), "{}", stderr(&o));
    }
}

/// One zip record as it sits in the file.
#[derive(Debug)]
struct RawRecord {
    name: String,
    header: u64,
    data: u64,
    len: u64,
    flags: u16,
    crc: u32,
}

/// Records in file order, read from the central directory (test-local parser).
fn raw_records(bytes: &[u8]) -> Vec<RawRecord> {
    let le16 = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let le32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let eocd = bytes.windows(4).rposition(|w| w == b"PK\x05\x06").unwrap();
    let n = le16(eocd + 10) as usize;
    let mut at = le32(eocd + 16) as usize;
    let mut out = Vec::new();
    for _ in 0..n {
        assert_eq!(le32(at), 0x0201_4b50);
        let (nl, xl, cl) = (
            le16(at + 28) as usize,
            le16(at + 30) as usize,
            le16(at + 32) as usize,
        );
        let header = le32(at + 42) as u64;
        let name = String::from_utf8(bytes[at + 46..at + 46 + nl].to_vec()).unwrap();
        let h = header as usize;
        let data = (h + 30 + le16(h + 26) as usize + le16(h + 28) as usize) as u64;
        out.push(RawRecord {
            name: name.split_once('/').unwrap().1.to_string(),
            header,
            data,
            len: le32(at + 24) as u64,
            flags: le16(at + 8),
            crc: le32(at + 16),
        });
        at += 46 + nl + xl + cl;
    }
    out.sort_by_key(|r| r.header);
    out
}

/// Where torch's offset-calculating loader expects a record's data (torch/serialization.py
/// `_get_offset` and `getPadding` in caffe2/serialize/inline_container.cc), for files < 4 GiB.
fn torch_expected_data_offset(header: u64, full_name_len: u64) -> u64 {
    let start = header + 30 + full_name_len + 4;
    start.div_ceil(64) * 64
}

#[test]
fn rewritten_files_lay_out_records_as_torch_save_does() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in [
        "torch_eras/dtypes.pt",
        "torch_eras/containers_p3.pt",
        "torch_eras/dtypes_legacy.pt",
        "torch_eras/py2_ordereddict.pth",
        "torch/train_ckpt.pt",
        "torch/tied_state_dict.pt",
    ] {
        let input = testdata(rel);
        let (ckpt, dest) = rewrite(rel, tmp.path());
        let prefix = dest.file_stem().unwrap().to_str().unwrap().len() as u64 + 1;
        let ours = raw_records(&std::fs::read(&dest).unwrap());
        // The rule torch's loader relies on, checked first on torch's own file (so the rule as
        // written here is right), then on ours.
        let check = |recs: &[RawRecord], prefix: u64, what: &str| {
            let mut storages = Vec::new();
            for (i, r) in recs.iter().enumerate() {
                assert_eq!(
                    r.data,
                    torch_expected_data_offset(r.header, prefix + r.name.len() as u64),
                    "{what}: {}",
                    r.name
                );
                if let Some(next) = recs.get(i + 1) {
                    let descriptor = if r.len > 0 { 16 } else { 0 };
                    assert_eq!(
                        next.header,
                        r.data + r.len + descriptor,
                        "{what}: {}",
                        r.name
                    );
                }
                assert_eq!(
                    r.flags,
                    if r.len > 0 { 0x0808 } else { 0x0800 },
                    "{what}: {}",
                    r.name
                );
                if let Some(k) = r.name.strip_prefix("data/") {
                    storages.push(k.to_string());
                }
            }
            let want: Vec<String> = (0..storages.len()).map(|i| i.to_string()).collect();
            assert_eq!(storages, want, "{what}: keys 0, 1, … in file order");
        };
        check(&ours, prefix, &format!("{rel} rewritten"));
        let names: Vec<&str> = ours.iter().map(|r| r.name.as_str()).collect();
        let n = ckpt.torch[0].storages.len();
        let mut want = vec![
            "data.pkl",
            ".format_version",
            ".storage_alignment",
            "byteorder",
        ];
        let data: Vec<String> = (0..n).map(|i| format!("data/{i}")).collect();
        want.extend(data.iter().map(String::as_str));
        want.extend(["version", ".data/serialization_id"]);
        assert_eq!(names, want, "{rel}");
        if rel.starts_with("torch_eras/") && rel.ends_with(".pt") && !rel.contains("legacy") {
            // Written by today's torch: the same records in the same order, storages byte-equal.
            let theirs = raw_records(&std::fs::read(&input).unwrap());
            let stem = input.file_stem().unwrap().to_str().unwrap().len() as u64 + 1;
            check(&theirs, stem, rel);
            let their_names: Vec<&str> = theirs.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, their_names, "{rel}");
            for (a, b) in ours.iter().zip(&theirs) {
                if a.name.starts_with("data/") || a.name == "version" {
                    assert_eq!((a.len, a.crc), (b.len, b.crc), "{rel}: {}", a.name);
                }
            }
        }
    }
}

#[test]
fn backward_hooks_that_are_not_empty_are_refused_by_name() {
    // torch never saves real hooks; a file that holds some is not one of its state dicts.
    let path = testdata("torch_eras/py2_hooks_nonempty.pth");
    let o = run("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("py2_hooks_nonempty.pth") && err.contains("backward hooks"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn pickle_refusals_are_typed_errors_naming_the_file_record_offset_and_global() {
    use ckpt_surgery::formats::torch::pickle::{unpickle, GlobalPolicy, Limits, Origin};
    use ckpt_surgery::Error;
    let open = |f: &str| formats::open(&testdata(f), &OpenOptions::default()).unwrap_err();
    // A global the user may allow: the variant names it, and --allow-global is the way on.
    let e = open("torch_hostile/unknown_global.pt");
    assert!(
        matches!(&e, Error::UnknownGlobal { path, record, offset: 2, global, allowable: true }
            if path == &testdata("torch_hostile/unknown_global.pt")
                && record == "data.pkl"
                && global == "mylib.config.Config"),
        "{e:?}"
    );
    assert_eq!(
        (e.flag(), e.kind(), e.exit_code()),
        (Some("--allow-global"), "bad-input", 2)
    );
    // A code-running global: named, and no flag lets it through.
    let e = open("torch_hostile/reduce_os_system.pt");
    assert!(
        matches!(&e, Error::UnknownGlobal { global, allowable: false, .. } if global == "posix.system"),
        "{e:?}"
    );
    assert_eq!(e.flag(), None);
    assert!(!e.to_string().contains("--allow-global"), "{e}");
    // A tensor this tool does not read: what it is, its global and how to save it instead.
    let e = open("torch_eras/sparse.pt");
    assert!(
        matches!(&e, Error::PickledTensor { what: "a sparse tensor", global, .. }
            if global == "torch._utils._rebuild_sparse_tensor"),
        "{e:?}"
    );
    // A malformed pickle: the reader's own refusal is an Error naming the file and the offset.
    let at = Origin {
        path: Path::new("x.pkl"),
        record: "data.pkl",
    };
    let e = unpickle(
        b"\x80\x02h\x05.",
        at,
        &GlobalPolicy::default(),
        Limits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Pickle { offset: 2, problem, .. }
            if problem == "memo key 5 read before it was written"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "x.pkl: memo key 5 read before it was written at byte 2 of data.pkl"
    );
    assert_eq!((e.kind(), e.exit_code()), ("bad-input", 2));
    // A global that can never be allowed is refused as a usage error of --allow-global.
    let e = GlobalPolicy::with_allowed(&["os.system".into()]).unwrap_err();
    assert!(
        matches!(&e, Error::Arg { flag: "--allow-global", problem }
            if problem == "--allow-global os.system: never allowed (loading it would run code)"),
        "{e:?}"
    );
}
