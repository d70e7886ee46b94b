//! Megatron-LM's legacy per-rank checkpoints (`--ckpt-format torch`, issue 49):
//! testdata/megatron/legacy_tp2 was written by megatron-core 0.16.1 on CPU
//! (testdata/megatron_legacy_save.py: TP = 2, an 84-token vocabulary padded to 128 rows, untied
//! output layer, bf16 with Megatron's Float16OptimizerWithFloat16Params stepped once).
//! inspect-checkpoint and check-vocab read it; bad input is one line, exit 2.

mod common;

use common::{copy_tree, run_fix, run_json, testdata};
use std::path::{Path, PathBuf};

const ROOT: &str = "megatron/legacy_tp2";

/// The fixture's save root copied into `tmp` (to be spoiled).
fn copied(tmp: &Path) -> PathBuf {
    let root = tmp.join("run");
    copy_tree(&testdata(ROOT), &root);
    root
}

fn inspect(path: &Path) -> serde_json::Value {
    let (code, doc, err) = run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    doc["checkpoints"][0].clone()
}

#[test]
fn inspect_reads_a_legacy_save_root_and_its_iteration_folder_alike() {
    for path in [testdata(ROOT), testdata(ROOT).join("iter_0000010")] {
        let r = inspect(&path);
        assert_eq!(r["format"], "megatron-lm-legacy", "{r}");
        assert_eq!(r["iteration"], 10);
        assert_eq!(r["tensor_parallel"], 2);
        assert_eq!(r["pipeline_parallel"], 1);
        assert_eq!(r["rank_files"].as_array().unwrap().len(), 2);
        assert_eq!(r["padded_vocab_size"], 128);
        assert_eq!(r["padding_rule_holds"], true);
        assert_eq!(r["args"]["padded_vocab_size"], 128);
        assert_eq!(r["args"]["tensor_model_parallel_size"], 2);
        let names: Vec<&str> = r["vocab_tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["embedding.word_embeddings.weight", "output_layer.weight"]
        );
        for t in r["vocab_tensors"].as_array().unwrap() {
            assert_eq!(t["dtype"], "bfloat16");
            assert_eq!(t["shape"], serde_json::json!([128, 4]));
            assert_eq!(t["tp_rows"], serde_json::json!([[0, 64], [64, 128]]));
        }
        let o = &r["optimizer"];
        assert!(o["form"]
            .as_str()
            .unwrap()
            .starts_with("Float16OptimizerWithFloat16Params"));
        assert_eq!(
            o["states"],
            serde_json::json!(["exp_avg", "exp_avg_sq", "step"])
        );
        assert_eq!(o["groups"], serde_json::json!([6, 3]));
        assert!(o["distrib_optim"].is_null());
    }
}

#[test]
fn an_iteration_folder_named_otherwise_shows_the_iteration_its_rank_files_hold() {
    // Megatron-LM resumes from the rank files' iteration; a `release` folder from 0.
    let tmp = tempfile::tempdir().unwrap();
    for (name, want) in [
        ("copy", serde_json::json!(10)),
        ("release", serde_json::Value::Null),
    ] {
        let dir = tmp.path().join(name);
        copy_tree(&testdata(ROOT).join("iter_0000010"), &dir);
        assert_eq!(inspect(&dir)["iteration"], want, "{name}");
    }
}

#[test]
fn inspect_names_a_distributed_optimizer_file_beside_the_rank_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let d = root.join("iter_0000010/mp_rank_00/distrib_optim.pt");
    std::fs::write(&d, b"").unwrap();
    // In one rank folder only: the other's is missing, named.
    let (code, _, err) = run_json("inspect-checkpoint", &[root.as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("mp_rank_01/distrib_optim.pt: missing"),
        "{err}"
    );
    std::fs::write(root.join("iter_0000010/mp_rank_01/distrib_optim.pt"), b"").unwrap();
    let r = inspect(&root);
    assert!(r["optimizer"]["distrib_optim"]
        .as_str()
        .unwrap()
        .ends_with("mp_rank_00/distrib_optim.pt"));
}

#[test]
fn check_vocab_finds_the_tokenizer_within_the_padded_table_and_the_optimizer_mapped() {
    let tok = testdata("tokenizers/amharic_addition.json");
    let root = testdata(ROOT);
    let (code, doc, err) = run_json(
        "check-vocab",
        &[root.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["errors"], 0, "{doc}");
    assert_eq!(doc["rows"], 128);
    assert_eq!(doc["findings"][0]["check"], "padding", "{doc}");
}

#[test]
fn check_vocab_fixes_a_legacy_save_too_small_for_its_tokenizer_keeping_the_optimizer() {
    // 200 tokens need more than the 128 rows: the fix resizes the rank files (moments and master
    // copies with them), and its output passes the same check.
    let tok = testdata("tokenizers/amharic_wordpiece.json");
    let root = testdata(ROOT);
    let args = [root.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()];
    let (code, doc, err) = run_json("check-vocab", &args);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        doc["findings"][0]["check"], "tokenizer-vs-embedding",
        "{doc}"
    );
    let fix = doc["findings"][0]["fix"].as_str().unwrap();
    assert!(!fix.contains("--optimizer drop"), "{fix}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fix, &out);
    assert_eq!(code, Some(0), "{fix}: {err}");
    let args = [out.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()];
    let (code, after, err) = run_json("check-vocab", &args);
    assert_eq!(code, Some(0), "{err} {after}");
    assert_eq!(after["rows"], 256);
}

/// inspect-checkpoint on `path`: exit 2, one line containing `want`.
fn refused(path: &Path, want: &str) {
    let (code, doc, err) = run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["errors"][0]["error"].as_str().unwrap_or_default();
    assert!(msg.contains(want) && !msg.contains('\n'), "{msg}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_legacy_save_missing_a_rank_folder_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    std::fs::remove_dir_all(root.join("iter_0000010/mp_rank_01")).unwrap();
    refused(
        &root,
        "the args say tensor_model_parallel_size 2 but the rank folders show 1",
    );
}

#[test]
fn a_legacy_save_with_a_gap_in_its_rank_folders_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let it = root.join("iter_0000010");
    std::fs::rename(it.join("mp_rank_01"), it.join("mp_rank_02")).unwrap();
    refused(&root, "a rank folder is missing");
}

#[test]
fn a_legacy_save_whose_ranks_come_from_different_saves_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let it = root.join("iter_0000010");
    // Rank 1's file replaced by a file of another kind: a different iteration and args.
    std::fs::copy(
        testdata("megatron/tp2/iter_0000010/common.pt"),
        it.join("mp_rank_01/model_optim_rng.pt"),
    )
    .unwrap();
    refused(&root, "mp_rank_01/model_optim_rng.pt");
}

#[test]
fn a_legacy_rank_file_holding_a_global_not_allowed_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    // A pickle that would call os.system when unpickled: refused by name, nothing run.
    let f = root.join("iter_0000010/mp_rank_01/model_optim_rng.pt");
    std::fs::copy(testdata("torch_hostile/reduce_os_system.pt"), &f).unwrap();
    refused(&root, "refused global posix.system");
}

/// sanitize-checkpoint on a legacy save root (`extra` flags): exit code, report, stderr.
fn sanitize(root: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mut args: Vec<&std::ffi::OsStr> =
        vec![root.as_os_str(), "--output".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    run_json("sanitize-checkpoint", &args)
}

/// The global bytes (TP chunks stacked) of tensor `path` of each rank file under `root`.
fn global(root: &Path, path: &str) -> Vec<u8> {
    use ckpt_surgery::formats::megatron::legacy::Legacy;
    let l = Legacy::open(root, &Default::default()).unwrap();
    let mut all = Vec::new();
    for r in &l.ranks {
        let t = r.file.tensor_refs().find(|t| t.name == path).unwrap();
        all.extend_from_slice(&t.try_bytes().unwrap());
    }
    all
}

#[test]
fn sanitize_grows_a_legacy_save_moving_moments_and_master_copies_with_the_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&testdata(ROOT), &out, &["--vocab-rows", "200"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["padded_rows"], 256, "{doc}");
    let r = inspect(&out);
    assert_eq!(r["padded_vocab_size"], 256, "{r}");
    assert_eq!(r["args"]["padded_vocab_size"], 256);
    for t in r["vocab_tensors"].as_array().unwrap() {
        assert_eq!(t["tp_rows"], serde_json::json!([[0, 128], [128, 256]]));
    }
    let src = testdata(ROOT);
    // Index 0 is the embedding (first of the weight-decay group), 5 the output layer.
    for (w, i, k) in [
        ("model.embedding.word_embeddings.weight", 0, 0),
        ("model.output_layer.weight", 5, 5),
    ] {
        let (old, new) = (global(&src, w), global(&out, w));
        assert_eq!(new.len(), 256 * 4 * 2);
        assert_eq!(old[..], new[..old.len()], "{w}");
        for state in ["exp_avg", "exp_avg_sq"] {
            let p = format!("optimizer.optimizer.state.{i}.{state}");
            let (old, new) = (global(&src, &p), global(&out, &p));
            assert_eq!(old[..], new[..old.len()], "{p}");
            assert!(new[old.len()..].iter().all(|&b| b == 0), "{p}");
        }
        let p = format!("optimizer.fp32_from_fp16_params.0.{k}");
        let (old, master) = (global(&src, &p), global(&out, &p));
        assert_eq!(old[..], master[..old.len()], "{p}");
        // New master rows are the new bf16 weights widened to fp32.
        let widened: Vec<u8> = new[128 * 4 * 2..]
            .chunks(2)
            .flat_map(|b| [0, 0, b[0], b[1]])
            .collect();
        assert_eq!(master[old.len()..], widened[..], "{p}");
    }
    let (code, doc, _) = run_json("check-vocab", &[out.as_os_str()]);
    assert_eq!(
        (code, &doc["errors"]),
        (Some(0), &serde_json::json!(0)),
        "{doc}"
    );
}

#[test]
fn sanitize_refuses_a_legacy_save_with_distrib_optim_unless_the_optimizer_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    for r in ["mp_rank_00", "mp_rank_01"] {
        std::fs::write(
            root.join("iter_0000010").join(r).join("distrib_optim.pt"),
            b"x",
        )
        .unwrap();
    }
    let out = tmp.path().join("out");
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "200"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("distrib_optim.pt") && err.contains("--optimizer drop"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
    let drop = ["--vocab-rows", "200", "--optimizer", "drop"];
    // What is left out is said: in the dry run's plan (as `left-out` side files) and in the
    // run's report, each rank folder's file named as it would be in the output.
    let want = ["mp_rank_00", "mp_rank_01"]
        .map(|r| serde_json::json!(format!("iter_0000010/{r}/distrib_optim.pt")));
    let (code, plan, err) = sanitize(&root, &out, &[&drop[..], &["--dry-run"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let left: Vec<&serde_json::Value> = plan["side_files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "left-out")
        .map(|f| &f["file"])
        .collect();
    assert_eq!(left, want.iter().collect::<Vec<_>>(), "{plan}");
    assert!(!out.exists());
    let (code, doc, err) = sanitize(&root, &out, &drop);
    assert_eq!(code, Some(0), "{err}");
    let names: Vec<&serde_json::Value> = doc["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["name"])
        .collect();
    assert_eq!(names, want.iter().collect::<Vec<_>>(), "{doc}");
    let r = inspect(&out);
    assert!(r["optimizer"]["form"].is_null(), "{r}");
    for name in &want {
        assert!(!out.join(name.as_str().unwrap()).exists());
    }
    assert_eq!(r["padded_vocab_size"], 256);
}

#[test]
fn sanitize_keeps_the_table_when_the_true_size_pads_to_the_same_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (code, _, err) = sanitize(&testdata(ROOT), &out, &["--vocab-rows", "10"]);
    // 10 tokens pad to 128 rows, the same table: nothing is cut.
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(inspect(&out)["padded_vocab_size"], 128);
}

/// The fixture copied into `tmp` with rank 1's first parameter group's `wd_mult` set to `w`
/// (a group Megatron's standard rule does not make), written by the library's torch writer.
fn with_wd_mult(tmp: &Path, w: f64) -> PathBuf {
    use ckpt_surgery::formats::torch::value::Node;
    use ckpt_surgery::formats::torch::{
        pickle::GlobalPolicy, write, writer::TorchLayout, TorchFile,
    };
    let root = copied(tmp);
    let f = root.join("iter_0000010/mp_rank_01/model_optim_rng.pt");
    let policy = GlobalPolicy {
        extra: [
            "argparse.Namespace",
            "megatron.core.transformer.enums.AttnBackend",
        ]
        .map(String::from)
        .into(),
        context: &[],
    };
    let file = TorchFile::open(&f, &policy).unwrap();
    let mut plan = TorchLayout::try_identity(&file).unwrap();
    let p = &mut plan.pickle;
    let o = p.get(p.root, "optimizer").unwrap();
    let inner = p.get(o, "optimizer").unwrap();
    let groups = p.get(inner, "param_groups").unwrap();
    let Node::List(g) = p.node(groups).clone() else {
        panic!()
    };
    let wd = p.get(g[0], "wd_mult").unwrap();
    *p.node_mut(wd) = Node::Float(w);
    let tmp_out = f.with_extension("new");
    write::write_torch(&plan, &tmp_out, &[f.as_path()], &policy).unwrap();
    drop(file);
    std::fs::rename(&tmp_out, &f).unwrap();
    root
}

#[test]
fn an_optimizer_group_outside_megatrons_rule_is_named_and_its_state_never_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let root = with_wd_mult(tmp.path(), 0.5);
    // The row-surgery interface refuses it too, never answering with the weights alone.
    let opened = ckpt_surgery::formats::open(&root, &Default::default()).unwrap();
    let refused = opened.entries(&[]).unwrap_err().to_string();
    assert!(
        refused.contains("mp_rank_01/model_optim_rng.pt"),
        "{refused}"
    );
    let (code, doc, err) = run_json("check-vocab", &[root.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(doc["findings"][0]["check"], "optimizer-vs-weights", "{doc}");
    let out = tmp.path().join("out");
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "200"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("mp_rank_01/model_optim_rng.pt")
            && err.contains("parameter group 0 (wd_mult 0.5,"),
        "{err}"
    );
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "200", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_legacy_rank_file_whose_model_differs_from_its_stages_rank_0_is_refused_naming_it() {
    // Rank 1's data.pkl with one weight renamed (same length): its model lacks that name, so
    // the files are not one save's; even --optimizer drop refuses rather than writing it.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    let rank = root.join("iter_0000010/mp_rank_01/model_optim_rng.pt");
    let bytes = std::fs::read(&rank).unwrap();
    let record = "model_optim_rng/data.pkl";
    let from = b"decoder.final_layernorm.weight";
    let patched = common::patch_zip_record(&bytes, record, from, b"decoder.final_layernorm.weighx");
    std::fs::write(&rank, patched).unwrap();
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err);
    assert!(
        msg.contains("mp_rank_01/model_optim_rng.pt")
            && msg.contains("lacks 'decoder.final_layernorm.weight'"),
        "{msg}"
    );
    assert!(!out.exists());
}

#[test]
fn a_legacy_save_whose_args_and_distrib_optim_disagree_is_refused_unless_dropped() {
    // legacy_tp2 (no distrib_optim.pt) with args use_distributed_optimizer False -> True.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied(tmp.path());
    for rank in ["mp_rank_00", "mp_rank_01"] {
        let p = root
            .join("iter_0000010")
            .join(rank)
            .join("model_optim_rng.pt");
        let bytes = std::fs::read(&p).unwrap();
        let from = b"use_distributed_optimizerq$\x89";
        let to = b"use_distributed_optimizerq$\x88";
        let patched = common::patch_zip_record(&bytes, "model_optim_rng/data.pkl", from, to);
        std::fs::write(&p, patched).unwrap();
    }
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(&err);
    assert!(
        msg.contains("no rank folder holds distrib_optim.pt"),
        "{msg}"
    );
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
}
