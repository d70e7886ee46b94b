//! Megatron-Core `torch_dist` checkpoints (issue 49): inspect-checkpoint reads the save root and
//! the iteration folder that megatron-core 0.16.1 wrote (testdata/megatron/tp2, by
//! testdata/megatron_save.py: TP = 2, an 84-token vocabulary padded to 128 rows, untied output
//! layer, the distributed optimizer's dp_reshardable state); bad input is one line, exit 2.

mod common;

use common::{
    copy_tree, one_line_refusal, patch_megatron_common, patch_zip_record, run, run_fix, run_job,
    run_json, stderr, stdout, testdata,
};
use std::path::Path;

/// The fixture's save root copied into `tmp`, its args saying pipeline_model_parallel_size 2.
fn copied_pipelined(tmp: &Path) -> std::path::PathBuf {
    let root = copied(tmp);
    patch_megatron_common(
        &root,
        b"pipeline_model_parallel_sizeq\x14K\x01",
        b"pipeline_model_parallel_sizeq\x14K\x02",
    );
    root
}

/// The bucket rule of `m`'s run, from its common.pt.
fn rule(
    m: &ckpt_surgery::formats::megatron::Megatron,
) -> ckpt_surgery::formats::megatron::buckets::Rule {
    use ckpt_surgery::formats::megatron::relay;
    relay::rule(m, relay::run_args(m, &Default::default()).unwrap())
}

/// The fixture's save root copied into `tmp` (to be spoiled).
fn copied(tmp: &Path) -> std::path::PathBuf {
    let root = tmp.join("run");
    copy_tree(&testdata("megatron/tp2"), &root);
    root
}

/// inspect-checkpoint --json on `path`: the one checkpoint's report.
fn inspect(path: &Path) -> serde_json::Value {
    let (code, doc, err) = run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    doc["checkpoints"][0].clone()
}

/// The summary megatron-core's save holds, whichever folder is given.
fn assert_summary(r: &serde_json::Value) {
    assert_eq!(r["format"], "megatron-core");
    assert_eq!(r["iteration"], 10);
    assert_eq!(r["parallel"]["tensor_parallel"], 2, "{r}");
    assert_eq!(r["parallel"]["pipeline_parallel"], 1);
    assert_eq!(r["parallel"]["args_tensor_parallel"], 2);
    assert_eq!(r["parallel"]["args_pipeline_parallel"], 1);
    assert_eq!(r["parallel"]["args_data_parallel"], 1);
    let v = &r["vocabulary"];
    assert_eq!(v["padded_vocab_size"], 128);
    assert_eq!(v["args_padded_vocab_size"], 128);
    assert_eq!(v["make_vocab_size_divisible_by"], 64);
    assert_eq!(v["padding_rule_holds"], true);
    // Megatron-LM records no true size for a Hugging Face tokenizer.
    assert!(v["true_vocab_size"].is_null());
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["embedding.word_embeddings.weight", "output_layer.weight"]
    );
    for t in v["tensors"].as_array().unwrap() {
        assert_eq!(t["shape"], serde_json::json!([128, 4]));
        let rows: Vec<&serde_json::Value> = t["tp_chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["rows"])
            .collect();
        assert_eq!(
            rows,
            [&serde_json::json!([0, 64]), &serde_json::json!([64, 128])]
        );
    }
    let o = &r["optimizer"];
    assert_eq!(o["form"], "dp_reshardable");
    assert_eq!(o["source"], "common.pt");
    assert_eq!(
        o["states"],
        serde_json::json!(["exp_avg", "exp_avg_sq", "param"])
    );
    assert_eq!(o["groups"], 2);
    assert_eq!(o["tensors"].as_array().unwrap().len(), 6);
    assert_eq!(r["args"]["untie_embeddings_and_output_weights"], true);
    // The DCP folder underneath: every item, the vocabulary with its two chunks.
    let tensors = r["tensors"]["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 15);
}

#[test]
fn inspect_checkpoint_reads_a_megatron_save_root_iteration_tp_vocabulary_and_optimizer() {
    let root = testdata("megatron/tp2");
    let r = inspect(&root);
    assert_summary(&r);
    assert!(r["iteration_dir"]
        .as_str()
        .unwrap()
        .ends_with("iter_0000010"));
    let o = run("inspect-checkpoint", &[root.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "Megatron-Core distributed checkpoint (torch_dist), iteration 10",
        "parallel: tensor 2 (vocabulary row chunks; args 2), pipeline 1",
        "vocabulary: padded 128 rows (args padded_vocab_size 128)",
        "embedding.word_embeddings.weight (embedding) float32 [128, 4]: tp 0: rows 0..64 (__0_0.distcp), tp 1: rows 64..128 (__1_0.distcp)",
        "optimizer: distributed, dp_reshardable (from common.pt), state per parameter: exp_avg, exp_avg_sq, param",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

#[test]
fn inspect_checkpoint_reads_a_megatron_iteration_folder_as_its_save_root() {
    let r = inspect(&testdata("megatron/tp2/iter_0000010"));
    assert_summary(&r);
}

/// One line, exit 2, naming `want`.
fn refused(path: &Path, want: &str) {
    let (code, doc, err) = run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["errors"][0]["error"].as_str().unwrap_or_default();
    assert!(msg.contains(want) && !msg.contains('\n'), "{msg}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_megatron_save_missing_a_rank_file_is_refused_in_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    std::fs::remove_file(root.join("iter_0000010/__1_0.distcp")).unwrap();
    refused(&root, "__1_0.distcp: missing");
}

#[test]
fn megatron_vocabulary_chunks_that_do_not_tile_are_refused_in_one_line() {
    // The second TP rank's rows of both vocabulary matrices moved from row 64 to row 32 in
    // .metadata (the chunk's metadata, its storage key and its rank's save plan): the chunks
    // still hold 128 rows' elements and lie inside the tensor, but rows 32..64 are stored twice
    // and rows 96..128 not at all.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let md = root.join("iter_0000010/.metadata");
    let bytes = std::fs::read(&md).unwrap();
    // torch.Size((64, 0)): BININT1 64, BININT1 0, TUPLE2.
    let (from, to) = (b"K@K\x00\x86", b"K K\x00\x86");
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut n = 0;
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
    assert_eq!(n, 6, "two tensors x (metadata, storage key, save plan)");
    std::fs::write(&md, out).unwrap();
    refused(&root, "do not tile");
}

#[test]
fn a_megatron_save_root_naming_a_missing_iteration_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    std::fs::write(root.join("latest_checkpointed_iteration.txt"), "20").unwrap();
    refused(&root, "iter_0000020/ is not in the save root");
}

#[test]
fn a_megatron_common_pt_global_outside_megatrons_own_is_refused_by_name() {
    // The args' enum made a class of a module Megatron does not have: refused by name, never
    // called, and allowed when the user says it is plain data.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    patch_megatron_common(
        &root,
        b"megatron.core.transformer.enums",
        b"megatron.core.transformer.enumz",
    );
    refused(
        &root,
        "refused global megatron.core.transformer.enumz.AttnBackend",
    );
    let (code, doc, err) = run_json(
        "inspect-checkpoint",
        &[
            root.as_os_str(),
            std::ffi::OsStr::new("--allow-global"),
            std::ffi::OsStr::new("megatron.core.transformer.enumz.AttnBackend"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        doc["checkpoints"][0]["vocabulary"]["args_padded_vocab_size"],
        128
    );
}

/// check-vocab --json on the save root (with `extra` flags): exit code and the report.
fn check_vocab(root: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec![root.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let (code, doc, err) = run_json("check-vocab", &args);
    assert!(doc.is_object(), "{err}");
    (code, doc)
}

fn checks(doc: &serde_json::Value) -> Vec<(String, String)> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["severity"].as_str().unwrap().to_string(),
                f["check"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn check_vocab_on_a_megatron_save_calls_the_rows_past_the_tokenizer_padding_not_an_error() {
    let tok = testdata("tokenizers/amharic_addition.json");
    let (code, doc) = check_vocab(
        &testdata("megatron/tp2"),
        &["--tokenizer", tok.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(checks(&doc), [("info".into(), "padding".into())]);
    let f = &doc["findings"][0];
    assert_eq!(f["numbers"]["tokenizer_rows"], 84);
    assert_eq!(f["numbers"]["padded_rows"], 128);
    assert!(f.get("fix").is_none());
    assert_eq!(doc["rows"], 128);
}

#[test]
fn check_vocab_flags_a_tokenizer_larger_than_the_padded_megatron_table() {
    let tok = testdata("tokenizers/amharic_wordpiece.json");
    let (code, doc) = check_vocab(
        &testdata("megatron/tp2"),
        &["--tokenizer", tok.to_str().unwrap()],
    );
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(
        checks(&doc),
        [("error".into(), "tokenizer-vs-embedding".into())]
    );
    assert_eq!(doc["findings"][0]["numbers"]["tokenizer_rows"], 200);
    // The fix resizes to the tokenizer keeping the optimizer state (its buckets re-laid), and
    // its output passes the same check.
    let fix = doc["findings"][0]["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("sanitize-checkpoint ") && !fix.contains("--optimizer drop"),
        "{fix}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fix, &out);
    assert_eq!(code, Some(0), "{fix}: {err}");
    let (code, after) = check_vocab(&out, &["--tokenizer", tok.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{after}");
    assert!(megatron(&out).optimizer.form.as_deref() == Some("dp_reshardable"));
    // --fix carries out the same fix: the same files, byte for byte, and a clean check after.
    let again = tmp.path().join("again");
    let t = tok.to_str().unwrap();
    let (code, doc) = check_vocab(
        &testdata("megatron/tp2"),
        &[
            "--tokenizer",
            t,
            "--fix",
            "--output",
            again.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["errors"], 0, "{doc}");
    let tree = |d: &Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let files = common::snapshot(d).into_iter();
        files
            .map(|(p, b)| (p.strip_prefix(d).unwrap().to_path_buf(), b))
            .collect()
    };
    assert_eq!(tree(&again), tree(&out));
}

#[test]
fn check_vocab_fixes_a_megatron_save_it_cannot_resize_with_its_optimizer_by_dropping_it() {
    // The args say PP 2 but the buckets are one stage's: sanitize refuses them, so the fix
    // leaves the optimizer state out (the smallest fix that runs), and that fix works.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied_pipelined(tmp.path());
    let tok = testdata("tokenizers/amharic_wordpiece.json");
    let (code, doc) = check_vocab(&root, &["--tokenizer", tok.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{doc}");
    let fix = doc["findings"][0]["fix"].as_str().unwrap();
    assert!(fix.ends_with("--optimizer drop"), "{fix}");
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fix, &out);
    assert_eq!(code, Some(0), "{fix}: {err}");
    let (code, after) = check_vocab(&out, &["--tokenizer", tok.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{after}");
}

#[test]
fn check_vocab_flags_megatron_args_that_disagree_with_the_tensors_and_its_padding_rule() {
    // common.pt's args edited: padded_vocab_size 128 -> 192, make_vocab_size_divisible_by
    // 64 -> 48 (128 rows is no multiple of 48 x TP 2; Megatron pads this tokenizer to 96).
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    patch_megatron_common(
        &root,
        b"padded_vocab_sizeq\x11K\x80",
        b"padded_vocab_sizeq\x11K\xc0",
    );
    patch_megatron_common(
        &root,
        b"make_vocab_size_divisible_byq\x12K@",
        b"make_vocab_size_divisible_byq\x12K0",
    );
    let tok = testdata("tokenizers/amharic_addition.json");
    let (code, doc) = check_vocab(&root, &["--tokenizer", tok.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{doc}");
    let want: Vec<(String, String)> = [
        ("error", "args-vs-tensors"),
        ("error", "padding-rule"),
        ("error", "tokenizer-vs-padding"),
    ]
    .iter()
    .map(|(s, c)| (s.to_string(), c.to_string()))
    .collect();
    assert_eq!(checks(&doc), want, "{doc}");
    assert_eq!(doc["findings"][0]["numbers"]["args_padded_vocab_size"], 192);
    assert_eq!(doc["findings"][2]["numbers"]["megatron_pads_to"], 96);
}

#[test]
fn a_megatron_legacy_save_with_an_empty_rank_file_is_refused_in_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    std::fs::create_dir_all(root.join("iter_0000010/mp_rank_00")).unwrap();
    std::fs::write(root.join("iter_0000010/mp_rank_00/model_optim_rng.pt"), b"").unwrap();
    std::fs::write(root.join("latest_checkpointed_iteration.txt"), "10").unwrap();
    refused(&root, "mp_rank_00/model_optim_rng.pt");
}

/// sanitize-checkpoint on a Megatron save root (`extra` flags): exit code, report, stderr.
fn sanitize(root: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    run_job("sanitize-checkpoint", root, out, extra)
}

/// A tensor's whole bytes, read by the library's Megatron reader.
fn tensor(root: &Path, name: &str) -> Vec<u8> {
    let c = ckpt_surgery::formats::open(root, &Default::default()).unwrap();
    let ckpt_surgery::formats::Checkpoint::Megatron(m) = c else {
        panic!("{} is not read as Megatron", root.display());
    };
    m.dcp.tensor_bytes(m.dcp.item(name).unwrap()).unwrap()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The vocabulary's rows and TP chunks, args and optimizer form inspect-checkpoint shows.
fn assert_resized(out: &Path, rows: u64) {
    let r = inspect(out);
    let v = &r["vocabulary"];
    assert_eq!(v["padded_vocab_size"], rows, "{r}");
    assert_eq!(v["args_padded_vocab_size"], rows);
    assert_eq!(v["padding_rule_holds"], true);
    assert_eq!(r["parallel"]["tensor_parallel"], 2);
    for t in v["tensors"].as_array().unwrap() {
        assert_eq!(t["shape"], serde_json::json!([rows, 4]));
        let chunks: Vec<&serde_json::Value> = t["tp_chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["rows"])
            .collect();
        let half = rows / 2;
        assert_eq!(
            chunks,
            [
                &serde_json::json!([0, half]),
                &serde_json::json!([half, rows])
            ]
        );
    }
    assert!(r["optimizer"]["form"].is_null(), "{r}");
}

#[test]
fn a_megatron_vocab_rows_whose_padded_size_overflows_is_refused_not_wrapped_to_zero() {
    // u64::MAX rounded up to a multiple of 64 x 2 does not fit: refused by name, exit 2, even
    // with --allow-shrink (a wrapped product of 0 rows would cut every trained row).
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let max = u64::MAX.to_string();
    let args = ["--vocab-rows", max.as_str(), "--allow-shrink"];
    let (code, _, err) = sanitize(&testdata("megatron/tp2"), &out, &args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--vocab-rows") && err.contains("overflows"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

#[test]
fn sanitize_checkpoint_grows_a_megatron_vocabulary_to_the_runs_padded_size_recut_by_tp() {
    // 150 tokens: Megatron pads to a multiple of 64 x TP 2, 256 rows, split 128 + 128; the
    // old 128 rows bit for bit, rows 128..256 the mean of the old rows (--init mean), every
    // other model tensor's bytes unchanged, the optimizer state left out (--optimizer drop).
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata("megatron/tp2");
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["padded_rows"], 256, "{doc}");
    assert_eq!(doc["dropped"].as_array().unwrap().len(), 12);
    assert!(out.join("latest_checkpointed_iteration.txt").is_file());
    assert!(out.join("iter_0000010/metadata.json").is_file());
    assert_resized(&out, 256);
    for name in ["embedding.word_embeddings.weight", "output_layer.weight"] {
        let (old, new) = (tensor(&root, name), tensor(&out, name));
        assert_eq!(new.len(), 256 * 4 * 4);
        assert_eq!(&new[..old.len()], &old[..], "{name}: old rows");
        let vals = f32s(&old);
        let mean: Vec<f32> = (0..4)
            .map(|c| {
                (vals
                    .iter()
                    .skip(c)
                    .step_by(4)
                    .map(|&x| f64::from(x))
                    .sum::<f64>()
                    / 128.0) as f32
            })
            .collect();
        for row in f32s(&new[old.len()..]).chunks(4) {
            assert_eq!(row, &mean[..], "{name}: a new row");
        }
    }
    for name in [
        "decoder.layers.self_attention.linear_qkv.weight",
        "decoder.final_layernorm.weight",
    ] {
        assert_eq!(tensor(&root, name), tensor(&out, name), "{name}");
    }
}

/// The fixture's bucket items (`dp_group_idx_G`, state), as named in `.metadata`.
fn bucket(g: u64, state: &str) -> String {
    format!("optimizer.distributed.dp_group_idx_{g}.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0.{state}")
}

fn megatron(root: &Path) -> ckpt_surgery::formats::megatron::Megatron {
    match ckpt_surgery::formats::open(root, &Default::default()).unwrap() {
        ckpt_surgery::formats::Checkpoint::Megatron(m) => *m,
        _ => panic!("{} is not read as Megatron", root.display()),
    }
}

#[test]
fn sanitize_checkpoint_relays_megatron_optimizer_buckets_keeping_old_moments_bit_for_bit() {
    // 84 -> 150 tokens, 128 -> 256 rows: each TP rank's vocabulary shards grow 64 -> 128 rows
    // (256 -> 512 elements), so every offset after output_layer moves by 256 and after the
    // embedding the bucket ends 512 later: 1088 -> 1600 (padded to 128: 1664). Old rows keep
    // their state (rows 64..128 move from rank 1's bucket to rank 0's), new rows' moments are
    // zero and their main params the new weights' rows.
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata("megatron/tp2");
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        doc["buckets"]["numel_unpadded"],
        serde_json::json!([1088, 1600]),
        "{doc}"
    );
    assert_eq!(doc["buckets"]["numel"], 1664);
    let m = megatron(&out);
    let it = m.dcp.item(&bucket(1, "exp_avg")).unwrap();
    let ckpt_surgery::formats::dcp::ItemKind::Tensor { chunks, shape, .. } = &it.kind else {
        panic!()
    };
    assert_eq!(shape, &vec![1600]);
    let mut at: Vec<u64> = chunks.iter().map(|c| c.offsets[0]).collect();
    at.sort_unstable();
    assert_eq!(
        at,
        [0, 512, 516, 576, 640, 704, 708, 768, 960, 1024, 1028, 1088]
    );
    let pb = |key: &str| {
        let saved = ckpt_surgery::formats::megatron::buckets::per_buffer_numel(&m.dcp, key);
        saved
            .unwrap()
            .into_iter()
            .map(|b| b.sizes)
            .collect::<Vec<_>>()
    };
    for g in 0..2 {
        let key = format!("optimizer.distributed.dp_group_idx_{g}.per_bucket_numel");
        assert_eq!(pb(&key), [[1664]]);
        assert_eq!(pb(&format!("{key}_unpadded")), [[1600]]);
    }
    let weight = |name| tensor(&out, name);
    for state in ["param", "exp_avg", "exp_avg_sq"] {
        let old = [
            tensor(&root, &bucket(0, state)),
            tensor(&root, &bucket(1, state)),
        ];
        let new = [
            tensor(&out, &bucket(0, state)),
            tensor(&out, &bucket(1, state)),
        ];
        let e = |a: usize, b: usize| a * 4..b * 4;
        for g in 0..2 {
            assert_eq!(new[g].len(), 1600 * 4);
            // Every parameter (and gap) between the two vocabulary shards: bit for bit.
            assert_eq!(
                new[g][e(512, 1088)],
                old[g][e(256, 832)],
                "{state} group {g}"
            );
        }
        // (old start, new start, name) of each vocabulary shard in the bucket.
        for (o, n, name) in [
            (0, 0, "output_layer.weight"),
            (832, 1088, "embedding.word_embeddings.weight"),
        ] {
            // Rank 0 now holds global rows 0..128: rows 0..64 from rank 0, 64..128 from rank 1.
            assert_eq!(
                new[0][e(n, n + 256)],
                old[0][e(o, o + 256)],
                "{state} {name}"
            );
            assert_eq!(
                new[0][e(n + 256, n + 512)],
                old[1][e(o, o + 256)],
                "{state} {name}"
            );
            // Rank 1 holds rows 128..256, all new.
            let fresh = &new[1][e(n, n + 512)];
            if state == "param" {
                assert_eq!(
                    fresh,
                    &weight(name)[128 * 16..],
                    "{name}: main params = new weights"
                );
            } else {
                assert!(
                    fresh.iter().all(|&b| b == 0),
                    "{state} {name}: new moments zero"
                );
            }
        }
    }
}

#[test]
fn sanitize_checkpoint_relays_megatron_buckets_back_on_shrink_to_the_original_bytes() {
    // Grown to 256 rows, then cut back to 128 (--allow-shrink): every bucket of every state
    // is the original's, byte for byte (gaps included).
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata("megatron/tp2");
    let (grown, back) = (tmp.path().join("grown"), tmp.path().join("back"));
    let (code, _, err) = sanitize(&root, &grown, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, doc, err) = sanitize(&grown, &back, &["--vocab-rows", "84", "--allow-shrink"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        doc["buckets"]["numel_unpadded"],
        serde_json::json!([1600, 1088]),
        "{doc}"
    );
    for g in 0..2 {
        for state in ["param", "exp_avg", "exp_avg_sq"] {
            assert!(
                tensor(&back, &bucket(g, state)) == tensor(&root, &bucket(g, state)),
                "{g} {state}"
            );
        }
    }
}

#[test]
fn megatron_bucket_layout_refuses_a_chunk_the_parameter_order_does_not_give_naming_it() {
    // The fixture's layout is proven; a copy whose final-norm chunk (256..260) is said to be
    // 256..262 (the gap after it 262..320) is refused, naming the bucket and that chunk.
    let mut m = megatron(&testdata("megatron/tp2"));
    let b = ckpt_surgery::formats::megatron::buckets::buckets(&m.dcp, rule(&m)).unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].unpadded, 1088);
    let name = bucket(1, "exp_avg_sq");
    let it = m.dcp.items.iter_mut().find(|i| i.fqn == name).unwrap();
    let ckpt_surgery::formats::dcp::ItemKind::Tensor { chunks, .. } = &mut it.kind else {
        panic!()
    };
    for c in chunks.iter_mut() {
        match c.offsets[0] {
            256 => c.sizes[0] = 6,
            260 => (c.offsets[0], c.sizes[0]) = (262, 58),
            _ => {}
        }
    }
    let err = ckpt_surgery::formats::megatron::buckets::buckets(&m.dcp, rule(&m))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&name)
            && err.contains("the chunk at 256 of 6 elements")
            && err.contains("'decoder.final_layernorm.weight' at 256 of 4"),
        "{err}"
    );
}

/// A copy of tp2 with one pickled int of a data file's record patched (`record`: its offset and
/// length in the file, from `.metadata`'s storage_data), and sanitize's one-line refusal of it
/// (`--vocab-rows 150`: exit 2, the optimizer named in the fix, nothing written).
fn refused_with_patched_record(
    tmp: &Path,
    file: &str,
    record: (usize, usize),
    (from, to): (&[u8], &[u8]),
) -> (std::path::PathBuf, String) {
    let root = copied(tmp);
    let path = root.join("iter_0000010").join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    let (at, len) = record;
    let patched = patch_zip_record(&bytes[at..at + len], "archive/data.pkl", from, to);
    bytes[at..at + len].copy_from_slice(&patched);
    std::fs::write(&path, bytes).unwrap();
    let out = tmp.join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err).to_string();
    assert!(
        msg.contains("--optimizer drop") && !msg.trim().contains('\n'),
        "{msg}"
    );
    assert!(!out.exists());
    (root, msg)
}

#[test]
fn sanitize_checkpoint_refuses_megatron_buckets_whose_saved_size_is_not_the_derived_one() {
    // dp_group_idx_0's per_bucket_numel_unpadded 1088 -> 1089 in a copy: refused, naming it.
    let tmp = tempfile::tempdir().unwrap();
    let patch: (&[u8], &[u8]) = (b"M\x40\x04", b"M\x41\x04");
    let (_, msg) = refused_with_patched_record(tmp.path(), "__0_0.distcp", (4295, 1261), patch);
    assert!(
        msg.contains("per_bucket_numel_unpadded' holds [1089]"),
        "{msg}"
    );
}

#[test]
fn sanitize_checkpoint_refuses_megatron_buckets_whose_end_padding_is_not_megatrons() {
    // One group's saved per_bucket_numel 1152 (1088 rounded up to lcm(DP 1, 128)) -> 1153 in a
    // copy: no padding rule gives it, so where the re-laid bucket ends is not known: refused.
    let tmp = tempfile::tempdir().unwrap();
    let patch: (&[u8], &[u8]) = (b"M\x80\x04", b"M\x81\x04");
    let (root, msg) = refused_with_patched_record(tmp.path(), "__0_1.distcp", (2522, 1261), patch);
    assert!(
        msg.contains("1153") && msg.contains("end padding is not known"),
        "{msg}"
    );
    // --optimizer drop needs no bucket layout: the same copy resizes.
    let out = tmp.path().join("out");
    let drop = ["--vocab-rows", "150", "--optimizer", "drop"];
    let (code, _, err) = sanitize(&root, &out, &drop);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn sanitize_checkpoint_refuses_a_megatron_save_whose_args_name_another_tp_size() {
    // common.pt's tensor_model_parallel_size 2 -> 1: the chunks say 2; refused naming both.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    patch_megatron_common(
        &root,
        b"tensor_model_parallel_sizeq\x13K\x02",
        b"tensor_model_parallel_sizeq\x13K\x01",
    );
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err).to_string();
    assert!(
        msg.contains("tensor_model_parallel_size 1") && msg.contains("another TP size"),
        "{msg}"
    );
    assert!(!out.exists());
}

#[test]
fn sanitize_checkpoint_cuts_a_megatron_vocabulary_only_with_allow_shrink() {
    // make_vocab_size_divisible_by 64 -> 32: 60 tokens pad to 64 rows (32 x TP 2), below the
    // table's 128: the cut needs --allow-shrink; then rows 0..64 bit for bit, 32 + 32 per rank.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    patch_megatron_common(
        &root,
        b"make_vocab_size_divisible_byq\x12K@",
        b"make_vocab_size_divisible_byq\x12K ",
    );
    let out = tmp.path().join("out");
    let cut = ["--vocab-rows", "60", "--optimizer", "drop"];
    let (code, doc, err) = sanitize(&root, &out, &cut);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err).to_string();
    assert!(msg.contains("--allow-shrink"), "{msg}");
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &[&cut[..], &["--allow-shrink"]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_resized(&out, 64);
    let name = "output_layer.weight";
    assert_eq!(tensor(&out, name), tensor(&root, name)[..64 * 16].to_vec());
}

#[test]
fn sanitize_checkpoint_writes_a_megatron_iteration_folder_for_one_with_zero_rows_by_init_zeros() {
    // The iteration folder given: an iteration folder comes out (no save root around it);
    // --init zeros: rows 128..256 zero.
    let tmp = tempfile::tempdir().unwrap();
    let iter = testdata("megatron/tp2/iter_0000010");
    let out = tmp.path().join("iter_0000010");
    let flags = [
        "--vocab-rows",
        "200",
        "--optimizer",
        "drop",
        "--init",
        "zeros",
    ];
    let (code, _, err) = sanitize(&iter, &out, &flags);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("metadata.json").is_file() && out.join("common.pt").is_file());
    assert!(!out.join("latest_checkpointed_iteration.txt").exists());
    assert_resized(&out, 256);
    let name = "embedding.word_embeddings.weight";
    let (old, new) = (tensor(&iter, name), tensor(&out, name));
    assert_eq!(&new[..old.len()], &old[..]);
    assert!(new[old.len()..].iter().all(|&b| b == 0));
}

#[test]
fn an_output_iteration_folder_named_otherwise_shows_the_iteration_common_pt_holds() {
    // A bare iteration folder written under another name: its number is common.pt's (what
    // Megatron-LM resumes from); a `release` folder resumes from 0 and shows none.
    let tmp = tempfile::tempdir().unwrap();
    let iter = testdata("megatron/tp2/iter_0000010");
    for (name, want) in [
        ("grown", serde_json::json!(10)),
        ("release", serde_json::Value::Null),
    ] {
        let out = tmp.path().join(name);
        let flags = ["--vocab-rows", "200", "--optimizer", "drop"];
        let (code, _, err) = sanitize(&iter, &out, &flags);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(inspect(&out)["iteration"], want, "{name}");
    }
}

#[test]
fn sanitize_checkpoint_refuses_megatron_buckets_of_fewer_stages_than_the_args_say() {
    // The args say pipeline_model_parallel_size 2, but there are buckets for 2 groups (TP 2 x
    // PP 1): which stage's parameters a bucket holds is not known. Refused naming both and
    // the way out.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied_pipelined(tmp.path());
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    let needles = [
        "pipeline_model_parallel_size 2",
        "TP 2 x PP 1",
        "--optimizer drop",
    ];
    one_line_refusal((code, &doc, &err), &needles);
    assert!(!out.exists());
}

#[test]
fn a_bucket_the_parameters_do_not_give_is_refused_naming_it_and_the_way_out() {
    // Group 1's bucket renamed bucket_idx_1 in .metadata, its bucket 0 gone: the run's args
    // (no overlap_grad_reduce) give one bucket per group. Refused in one line naming the group
    // and its buckets and --optimizer drop, which works.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let md = root.join("iter_0000010/.metadata");
    let (from, to) = (
        b"dp_group_idx_1.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0",
        b"dp_group_idx_1.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_1",
    );
    let mut bytes = std::fs::read(&md).unwrap();
    let hits: Vec<usize> = (0..bytes.len() - from.len())
        .filter(|&i| bytes[i..].starts_with(from))
        .collect();
    assert!(!hits.is_empty());
    for i in hits {
        bytes[i..i + to.len()].copy_from_slice(to);
    }
    std::fs::write(&md, bytes).unwrap();
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    let needles = [
        "group 1's optimizer state has buckets [1]",
        "1 bucket(s) (no bucket_size",
        "--optimizer drop",
    ];
    one_line_refusal((code, &doc, &err), &needles);
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn tied_embeddings_over_stages_the_buckets_do_not_have_are_refused_by_name() {
    // tp2's args patched to PP 2 and tied embeddings: the shared embedding would have a
    // bucket of its own on the first and last stages, but the buckets are one stage's (untied).
    // Refused naming both in one line with --optimizer drop, which works. (Saves megatron-core
    // wrote with tied embeddings over 2 and 3 stages are re-laid: checked by its own loader,
    // scripts/megatron_resize_check.py --tied; the layout rule: buckets/rule.rs's unit tests.)
    let tmp = tempfile::tempdir().unwrap();
    let root = copied_pipelined(tmp.path());
    patch_megatron_common(
        &root,
        b"untie_embeddings_and_output_weightsq\x16\x88",
        b"untie_embeddings_and_output_weightsq\x16\x89",
    );
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    let needles = [
        "tied embeddings over pipeline stages",
        "buckets for 2 groups, TP 2 x 1 stage",
        "--optimizer drop",
    ];
    one_line_refusal((code, &doc, &err), &needles);
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_nan_in_a_megatron_vocabulary_matrix_is_reported_and_fail_on_nonfinite_writes_nothing() {
    // One NaN put into the embedding's TP-rank-0 chunk of a tp2 copy (its record's CRC redone).
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let m = megatron(&root);
    let item = m.dcp.item("embedding.word_embeddings.weight").unwrap();
    let ckpt_surgery::formats::dcp::ItemKind::Tensor { chunks, .. } = &item.kind else {
        panic!("not a tensor")
    };
    let c = chunks.iter().find(|c| c.offsets == [0, 0]).unwrap();
    let path = root.join("iter_0000010").join(&c.stored.file);
    let mut bytes = std::fs::read(&path).unwrap();
    let (at, len) = (c.stored.offset as usize, c.stored.length as usize);
    let first = c.data_start as usize;
    let from = bytes[first..first + 8].to_vec();
    let mut to = from.clone();
    to[4..].copy_from_slice(&f32::NAN.to_le_bytes());
    let patched = patch_zip_record(&bytes[at..at + len], "archive/data/0", &from, &to);
    bytes[at..at + len].copy_from_slice(&patched);
    std::fs::write(&path, bytes).unwrap();
    drop(m);
    let nan = |doc: &serde_json::Value| {
        let n = &doc["nonfinite"][0];
        (n["tensor"].clone(), n["nan"].as_u64().unwrap_or(0))
    };
    // Without the optimizer (its main params hold no NaN there: the repair's proof refuses).
    let out = tmp.path().join("out");
    let drop = ["--vocab-rows", "150", "--optimizer", "drop"];
    let (code, doc, err) = sanitize(&root, &out, &drop);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(nan(&doc), ("embedding.word_embeddings.weight".into(), 1));
    assert!(out.exists());
    let out2 = tmp.path().join("out2");
    let failing = [
        "--vocab-rows",
        "150",
        "--optimizer",
        "drop",
        "--fail-on-nonfinite",
    ];
    let (code, doc, err) = sanitize(&root, &out2, &failing);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(doc["failed"], true);
    assert_eq!(nan(&doc).1, 1);
    assert!(!out2.exists());
    // The repair's refusal says why the proof fails.
    let (code, doc, err) = sanitize(&root, &tmp.path().join("out3"), &["--vocab-rows", "150"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err);
    assert!(
        msg.contains("holds 1 NaN or Inf values where its fp32 main params hold 0"),
        "{msg}"
    );
}

#[test]
fn a_megatron_metadata_json_naming_another_backend_or_not_json_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let meta = root.join("iter_0000010/metadata.json");
    for (text, want) in [
        (
            r#"{"sharded_backend": "zarr", "sharded_backend_version": 1}"#,
            "names sharded_backend \"zarr\"",
        ),
        (
            r#"{"sharded_backend": "torch_dist", "sharded_backend_version": 99}"#,
            "names torch_dist version 99",
        ),
        (
            "{not json",
            "metadata.json: not JSON naming a sharded_backend",
        ),
    ] {
        std::fs::write(&meta, text).unwrap();
        refused(&root, want);
    }
}

#[test]
fn a_megatron_save_root_without_its_tracker_file_is_refused_naming_the_iteration_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    std::fs::remove_file(root.join("latest_checkpointed_iteration.txt")).unwrap();
    refused(
        &root,
        "holds the Megatron iteration folder iter_0000010/ but no latest_checkpointed_iteration.txt",
    );
    // The iteration folder itself opens.
    let (code, _, err) = run_json(
        "inspect-checkpoint",
        &[root.join("iter_0000010").as_os_str()],
    );
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn megatron_buckets_whose_args_say_no_distributed_optimizer_are_refused_unless_dropped() {
    // tp2's args use_distributed_optimizer True -> False: its flat buckets would not load.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    patch_megatron_common(
        &root,
        b"use_distributed_optimizerq$\x88",
        b"use_distributed_optimizerq$\x89",
    );
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err);
    assert!(
        msg.contains("use_distributed_optimizer false") && msg.contains("--optimizer drop"),
        "{msg}"
    );
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
}
