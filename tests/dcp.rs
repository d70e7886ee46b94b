//! torch Distributed Checkpoint folders: the reader against torch's own listing, bad input,
//! and the DCP paths of sanitize-checkpoint and check-vocab.

mod common;

use ckpt_surgery::formats::dcp::{Dcp, ItemKind};
use ckpt_surgery::formats::{self, Checkpoint, Format};
use common::{run, run_json, sha256_hex, stderr, testdata};
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

const FIXTURES: [&str; 3] = ["single", "fsdp2", "mismatch"];

/// The DCP folder at `dir`, as `formats::open` finds it.
fn open_dcp(dir: &Path) -> Dcp {
    match formats::open(dir, &Default::default()).unwrap() {
        Checkpoint::Dcp(d) => *d,
        other => panic!("{}: opened as {}", dir.display(), other.layout()),
    }
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(testdata(&format!("dcp/{name}.expected.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every key torch's reader lists, with its kind, dtype, global shape, chunks and the sha256
/// of the whole tensor as torch assembles it, compared with ours.
fn assert_same_as_torch(dir: &Path, want: &Value) {
    let ckpt = formats::open(dir, &Default::default()).unwrap();
    assert_eq!(ckpt.layout(), Format::TorchDcp.name());
    let d = &open_dcp(dir);
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
    let d = open_dcp(&testdata("dcp/fsdp2"));
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
fn overlapping_chunks_that_hold_the_right_element_count_are_refused_in_one_line() {
    // The second rank's rows of the four 999-row tensors moved from row 500 to row 499 in
    // .metadata (each chunk's metadata, storage key and save plan): the chunks still lie inside
    // and hold 999 rows' elements, but row 499 is stored twice and row 998 not at all — read as
    // it was, row 998 would come back as zeros.
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    let md = dir.join(".metadata");
    let bytes = std::fs::read(&md).unwrap();
    // torch.Size((500, 0)): BININT2 500, BININT1 0, TUPLE2.
    let (from, to) = (b"M\xf4\x01K\x00\x86", b"M\xf3\x01K\x00\x86");
    let mut out = Vec::with_capacity(bytes.len());
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
            n += 1;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    assert!(n >= 8, "four tensors x (metadata, storage key): {n}");
    std::fs::write(&md, out).unwrap();
    inspect_fails_naming(&dir, "overlap");
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
fn a_corrupt_chunk_archive_is_one_line_naming_the_file_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    let f = dir.join("__0_0.distcp");
    let mut bytes = std::fs::read(&f).unwrap();
    // The first chunk's torch.save archive loses its central directory's first signature.
    let at = bytes.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    bytes[at] = b'X';
    std::fs::write(&f, bytes).unwrap();
    inspect_fails_naming(&dir, "__0_0.distcp");
    let err = stderr(&run("inspect-checkpoint", &[dir.as_os_str()]));
    assert_eq!(err.matches("__0_0.distcp").count(), 1, "{err}");
    assert!(
        err.contains("chunk at [0, 0]") && err.contains("not a readable zip archive"),
        "{err}"
    );
}

#[test]
fn metadata_globals_are_not_allowed_in_ordinary_torch_files() {
    let policy = ckpt_surgery::formats::torch::pickle::GlobalPolicy::default();
    for g in ckpt_surgery::formats::dcp::METADATA_GLOBALS {
        assert!(!policy.allows(g), "{g}");
    }
}

fn sanitize(input: &Path, out: &Path, rows: u64) -> (Option<i32>, Value, String) {
    common::run_job(
        "sanitize-checkpoint",
        input,
        out,
        &["--vocab-rows", &rows.to_string()],
    )
}

fn tensor(dir: &Path, name: &str) -> (Vec<u64>, Vec<u8>) {
    let d = open_dcp(dir);
    let it = d.item(name).unwrap();
    let ItemKind::Tensor { shape, .. } = &it.kind else {
        panic!("{name} is not a tensor")
    };
    (shape.clone(), d.tensor_bytes(it).unwrap())
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn growing_keeps_old_rows_bit_identical_zero_moment_rows_and_mean_weight_rows() {
    for name in ["single", "fsdp2"] {
        let tmp = tempfile::tempdir().unwrap();
        let input = testdata(&format!("dcp/{name}"));
        let out = tmp.path().join("grown");
        let (code, _, err) = sanitize(&input, &out, 1063);
        assert_eq!(code, Some(0), "{err}");
        let row = 7 * 4;
        for w in ["model.tok_embeddings.weight", "model.output.weight"] {
            let (_, old) = tensor(&input, w);
            let (shape, new) = tensor(&out, w);
            assert_eq!(shape, vec![1063, 7]);
            assert_eq!(&new[..old.len()], &old[..], "{w}");
            // New rows: the column mean of the old rows, in f64, rounded to f32.
            let o = f32s(&old);
            let mean: Vec<f32> = (0..7)
                .map(|c| {
                    (o.iter().skip(c).step_by(7).map(|&x| x as f64).sum::<f64>() / 999.0) as f32
                })
                .collect();
            for r in 999..1063 {
                assert_eq!(f32s(&new[r * row..(r + 1) * row]), mean, "{w} row {r}");
            }
        }
        for m in ["exp_avg", "exp_avg_sq"] {
            let key = format!("optim.state.tok_embeddings.weight.{m}");
            let (_, old) = tensor(&input, &key);
            let (shape, new) = tensor(&out, &key);
            assert_eq!(shape, vec![1063, 7]);
            assert_eq!(&new[..old.len()], &old[..]);
            assert!(new[old.len()..].iter().all(|&b| b == 0), "{key}");
        }
        // Every input data file is carried over byte for byte; untouched items read the same.
        for e in std::fs::read_dir(&input).unwrap() {
            let p = e.unwrap().path();
            let n = p.file_name().unwrap();
            if n != ".metadata" {
                assert_eq!(
                    std::fs::read(&p).unwrap(),
                    std::fs::read(out.join(n)).unwrap()
                );
            }
        }
        assert_eq!(
            tensor(&input, "model.layer.weight"),
            tensor(&out, "model.layer.weight")
        );
    }
}

#[test]
fn growing_then_shrinking_back_reads_as_torch_listed_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    let grown = tmp.path().join("grown");
    let back = tmp.path().join("back");
    let (code, _, err) = sanitize(&testdata("dcp/fsdp2"), &grown, 1063);
    assert_eq!(code, Some(0), "{err}");
    // Cutting rows 999..1063 drops weights: asked for with --allow-shrink (refused without).
    let (code, _, err) = sanitize(&grown, &back, 999);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--allow-shrink") && !back.exists(), "{err}");
    let (code, _, err) = common::run_job(
        "sanitize-checkpoint",
        &grown,
        &back,
        &["--vocab-rows", "999", "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_same_as_torch(&back, &expected("fsdp2"));
    assert!(
        !back.join("__0_1.distcp").exists(),
        "a file no chunk uses is left out"
    );
}

#[test]
fn shrinking_cuts_the_chunk_that_straddles_the_new_end() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("small");
    let (code, _, err) = common::run_job(
        "sanitize-checkpoint",
        &testdata("dcp/fsdp2"),
        &out,
        &["--vocab-rows", "950", "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    let d = open_dcp(&out);
    let ItemKind::Tensor { chunks, shape, .. } = &d
        .item("optim.state.tok_embeddings.weight.exp_avg")
        .unwrap()
        .kind
    else {
        panic!()
    };
    assert_eq!(shape, &vec![950, 7]);
    let rows: Vec<(u64, u64)> = chunks.iter().map(|c| (c.offsets[0], c.sizes[0])).collect();
    assert_eq!(rows, vec![(0, 500), (500, 450)]);
    let (_, old) = tensor(
        &testdata("dcp/fsdp2"),
        "optim.state.tok_embeddings.weight.exp_avg",
    );
    let (_, new) = tensor(&out, "optim.state.tok_embeddings.weight.exp_avg");
    assert_eq!(new, old[..950 * 28]);
}

#[test]
fn a_bad_input_writes_nothing_and_leaves_no_temp_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    std::fs::remove_file(dir.join("__1_0.distcp")).unwrap();
    let out = tmp.path().join("out");
    let (code, _, err) = sanitize(&dir, &out, 1063);
    assert_eq!(code, Some(2));
    assert!(err.contains("__1_0.distcp"), "{err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("fsdp2")]);
}

#[test]
fn check_vocab_names_moments_sized_for_the_old_vocabulary_and_its_fix_works() {
    let dir = testdata("dcp/mismatch");
    let (code, doc, err) = run_json("check-vocab", &[dir.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let findings = doc["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 4);
    let f = &findings[0];
    assert_eq!(f["check"], "optimizer-vs-weights");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("999") && msg.contains("1063"), "{msg}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, err) = common::run_fix(f["fix"].as_str().unwrap(), &out);
    assert_eq!(code, Some(0), "{err}");
    let (code, doc, err) = run_json("check-vocab", &[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {doc}");
    // The weights were already right: their bytes are untouched.
    assert_eq!(
        tensor(&dir, "model.output.weight"),
        tensor(&out, "model.output.weight")
    );
    // check-vocab --fix carries out the same fix: the same files, byte for byte.
    let again = tmp.path().join("again");
    let (code, doc, err) = run_json(
        "check-vocab",
        &[
            dir.as_os_str(),
            "--fix".as_ref(),
            "--output".as_ref(),
            again.as_os_str(),
        ],
    );
    assert_eq!(
        (code, &doc["errors"]),
        (Some(0), &serde_json::json!(0)),
        "{err}"
    );
    assert_eq!(common::files_of(&again), common::files_of(&out));
}

#[test]
fn check_vocab_passes_a_consistent_fsdp2_folder() {
    let (code, doc, err) = run_json("check-vocab", &[testdata("dcp/fsdp2").as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["rows"], 999);
}

#[test]
fn extend_embeddings_refuses_a_dcp_folder_naming_sanitize() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = run(
        "extend-embeddings",
        &[
            testdata("dcp/fsdp2").as_os_str(),
            OsStr::new("--output"),
            out.as_os_str(),
            OsStr::new("--new-rows"),
            OsStr::new("64"),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("sanitize-checkpoint"), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn check_vocab_with_a_larger_tokenizer_prints_a_sanitize_fix_that_passes() {
    let dir = testdata("dcp/fsdp2");
    let tok = testdata("check_vocab/seed000/tokenizer.json");
    let args = [dir.as_os_str(), OsStr::new("--tokenizer"), tok.as_os_str()];
    let (code, doc, err) = run_json("check-vocab", &args);
    assert_eq!(code, Some(1), "{err}");
    let f = &doc["findings"][0];
    assert_eq!(f["check"], "tokenizer-vs-embedding");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, err) = common::run_fix(f["fix"].as_str().unwrap(), &out);
    assert_eq!(code, Some(0), "{err}");
    let args = [out.as_os_str(), OsStr::new("--tokenizer"), tok.as_os_str()];
    let (code, doc, err) = run_json("check-vocab", &args);
    assert_eq!(code, Some(0), "{err} {doc}");
    assert_eq!(doc["rows"], 2535);
}

#[test]
fn a_metadata_pickle_naming_an_unknown_global_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("evil");
    std::fs::create_dir(&dir).unwrap();
    // protocol 2: GLOBAL os.system, EMPTY_TUPLE, REDUCE, STOP
    std::fs::write(dir.join(".metadata"), b"\x80\x02cos\nsystem\n)R.").unwrap();
    let o = run("inspect-checkpoint", &[dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(".metadata") && err.contains("refused global os.system"),
        "{err}"
    );
    // A torch metadata class is allowed in .metadata only, not in a torch file's pickle.
    let policy = ckpt_surgery::formats::dcp::metadata_policy();
    assert!(policy.allows("torch.distributed.checkpoint.metadata.Metadata"));
    assert!(!policy.allows("argparse.Namespace"));
}

#[test]
fn sanitize_to_the_rows_it_already_has_writes_nothing_exit_0() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("same");
    let (code, doc, err) = sanitize(&testdata("dcp/fsdp2"), &out, 999);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["nothing_to_do"], true);
    assert!(!out.exists());
}

#[test]
fn inspect_hash_checks_chunk_crcs_and_names_the_corrupt_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("fsdp2", tmp.path());
    let d = open_dcp(&dir);
    let ItemKind::Tensor { chunks, .. } = &d
        .item("optim.state.tok_embeddings.weight.exp_avg")
        .unwrap()
        .kind
    else {
        panic!()
    };
    let (file, at) = (dir.join(&chunks[1].stored.file), chunks[1].data_start + 100);
    drop(d);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[at as usize] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let o = run("inspect-checkpoint", &[dir.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "without --hash only the structure is read"
    );
    let o = run(
        "inspect-checkpoint",
        &[dir.as_os_str(), OsStr::new("--hash")],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("__1_0.distcp")
            && err.contains("optim.state.tok_embeddings.weight.exp_avg")
            && err.contains("CRC"),
        "{err}"
    );
}

#[test]
fn moved_and_gathered_chunks_read_back_as_the_elements_they_name() {
    use ckpt_surgery::formats::dcp::write::{write_dcp, ChunkOut, Span, TensorEdit};
    // fsdp2's embedding (999 x 7 f32: rows 0..500 and 500..999) re-listed: rows 0..500 as two
    // chunks gathered from its first chunk (one of them from two spans), rows 500..999 its
    // second chunk moved (its record, unread). Its first moment (same shape) takes the
    // embedding's first chunk, moved across items; its second chunk is kept. Read back: the
    // embedding as it was, the moment's first 500 rows the embedding's, the rest its own;
    // only the two gathered chunks are new records.
    let d = open_dcp(&testdata("dcp/fsdp2"));
    let chunks = |name: &str| match &d.item(name).unwrap().kind {
        ItemKind::Tensor { chunks, .. } => chunks.clone(),
        _ => panic!("{name} is not a tensor"),
    };
    let (emb, out) = (
        "model.tok_embeddings.weight",
        "optim.state.tok_embeddings.weight.exp_avg",
    );
    let (e, o) = (chunks(emb), chunks(out));
    let span = |start: u64, rows: u64| Span {
        chunk: e[0].clone(),
        start: start * 7,
        len: rows * 7,
    };
    let edits = vec![
        TensorEdit {
            fqn: emb.into(),
            shape: vec![999, 7],
            chunks: vec![
                ChunkOut::Gathered {
                    offsets: vec![0, 0],
                    sizes: vec![300, 7],
                    from: vec![span(0, 100), span(100, 200)],
                },
                ChunkOut::Gathered {
                    offsets: vec![300, 0],
                    sizes: vec![200, 7],
                    from: vec![span(300, 200)],
                },
                ChunkOut::Moved {
                    offsets: vec![500, 0],
                    from: e[1].clone(),
                },
            ],
        },
        TensorEdit {
            fqn: out.into(),
            shape: vec![999, 7],
            chunks: vec![
                ChunkOut::Moved {
                    offsets: vec![0, 0],
                    from: e[0].clone(),
                },
                ChunkOut::Keep(1),
            ],
        },
    ];
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("out");
    let w = write_dcp(&d, &edits, &dest, false).unwrap();
    assert_eq!(w.new_chunks, 2);
    let (_, emb_in) = tensor(&testdata("dcp/fsdp2"), emb);
    let (_, out_in) = tensor(&testdata("dcp/fsdp2"), out);
    let (shape, emb_back) = tensor(&dest, emb);
    assert_eq!((shape, emb_back == emb_in), (vec![999, 7], true));
    let (_, out_back) = tensor(&dest, out);
    let cut = 500 * 7 * 4;
    assert_eq!(out_back[..cut], emb_in[..cut]);
    assert_eq!(out_back[cut..], out_in[cut..]);
    assert_ne!(out_back, out_in);
    // The moved chunks are the input records where they were: not copied into the new file.
    let back = open_dcp(&dest);
    let placed = |name: &str| match &back.item(name).unwrap().kind {
        ItemKind::Tensor { chunks, .. } => chunks
            .iter()
            .map(|c| (c.stored.file.clone(), c.stored.offset))
            .collect::<Vec<_>>(),
        _ => panic!(),
    };
    let new = w.new_file.unwrap();
    assert_eq!(placed(emb)[..2].iter().filter(|p| p.0 == new).count(), 2);
    assert_eq!(
        placed(emb)[2],
        (e[1].stored.file.clone(), e[1].stored.offset)
    );
    assert_eq!(
        placed(out)[0],
        (e[0].stored.file.clone(), e[0].stored.offset)
    );
    assert_eq!(
        placed(out)[1],
        (o[1].stored.file.clone(), o[1].stored.offset)
    );
}
