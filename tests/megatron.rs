//! Megatron-Core `torch_dist` checkpoints (issue 49): inspect-checkpoint reads the save root and
//! the iteration folder that megatron-core 0.16.1 wrote (testdata/megatron/tp2, by
//! testdata/megatron_save.py: TP = 2, an 84-token vocabulary padded to 128 rows, untied output
//! layer, the distributed optimizer's dp_reshardable state); bad input is one line, exit 2.

mod common;

use common::{run, run_json, stderr, stdout, testdata};
use std::path::Path;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
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
