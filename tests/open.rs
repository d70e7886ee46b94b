//! `formats::open`: the one place that decides what a path is. Every layout in testdata opens
//! as its own `Checkpoint` arm, and the tools that do not handle a layout say which tool does.

mod common;

use ckpt_surgery::formats::{self, Checkpoint, Format};
use common::{run_job, testdata};
use std::path::Path;

fn arm(rel: &str) -> (Checkpoint, &'static str) {
    // The training checkpoints carry argparse.Namespace, as users' do.
    let mut o = formats::OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    let c = formats::open(&testdata(rel), &o).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let name = match &c {
        Checkpoint::File(_) => "file",
        Checkpoint::ModelFolder { .. } => "model folder",
        Checkpoint::Trainer(_) => "trainer",
        Checkpoint::Dcp(_) => "dcp",
        Checkpoint::Zero { .. } => "zero",
        Checkpoint::Gguf(_) => "gguf",
        Checkpoint::Megatron(_) => "megatron",
        Checkpoint::MegatronLegacy(_) => "megatron legacy",
    };
    (c, name)
}

#[test]
fn open_tells_every_layout_in_testdata_apart_by_content() {
    for (rel, want, format) in [
        ("gpt2/model.safetensors", "file", Some(Format::Safetensors)),
        (
            "gpt2_sharded/model.safetensors.index.json",
            "file",
            Some(Format::ShardedSafetensors),
        ),
        ("torch/train_ckpt.pt", "file", Some(Format::TorchZip)),
        (
            "torch/train_ckpt_legacy.pt",
            "file",
            Some(Format::TorchLegacy),
        ),
        ("gpt2", "model folder", Some(Format::Safetensors)),
        (
            "gpt2_sharded",
            "model folder",
            Some(Format::ShardedSafetensors),
        ),
        ("trainer/checkpoint-2", "trainer", Some(Format::Safetensors)),
        ("dcp/fsdp2", "dcp", None),
        ("zero/zero1", "zero", None),
        ("gguf/llama_gpt2_tied.gguf", "gguf", None),
        ("megatron/tp2", "megatron", None),
        ("megatron/tp2/iter_0000010", "megatron", None),
        ("megatron/legacy_tp2", "megatron legacy", None),
        ("megatron/legacy_tp2/iter_0000010", "megatron legacy", None),
    ] {
        let (c, got) = arm(rel);
        assert_eq!(got, want, "{rel}");
        assert_eq!(c.path(), testdata(rel), "{rel}");
        assert_eq!(c.tensors().map(|t| t.format), format, "{rel}");
        assert!(!c.input_paths().is_empty(), "{rel}");
    }
}

#[test]
fn a_trainer_folder_opens_its_model_and_its_optimizer() {
    let (c, _) = arm("trainer/checkpoint-2");
    let Checkpoint::Trainer(t) = &c else {
        panic!("not a Trainer folder")
    };
    assert_eq!(
        t.model.path,
        testdata("trainer/checkpoint-2/model.safetensors")
    );
    assert_eq!(t.optim().unwrap().format, Format::TorchZip);
    let inputs = c.input_paths();
    assert!(inputs.contains(&t.model.path.as_path()));
    assert!(inputs.contains(&t.optimizer_path().as_path()));
}

#[test]
fn extend_embeddings_on_a_zero_checkpoint_names_the_tool_that_grows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let input = testdata("zero/zero1");
    let (code, doc, err) = run_job("extend-embeddings", &input, &out, &["--new-rows", "4"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("a DeepSpeed ZeRO checkpoint: extend-embeddings does not write these; use sanitize-checkpoint"),
        "{msg}"
    );
    assert!(!out.exists());
}

#[test]
fn tools_that_do_not_handle_gguf_yet_refuse_it_with_one_line_naming_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/llama_gpt2_untied_q8.gguf");
    for (tool, args, want) in [
        (
            "sanitize-checkpoint",
            &["--vocab-rows", "1000"][..],
            "a GGUF file: sanitize-checkpoint does not handle GGUF yet",
        ),
        ("vocab-blocks", &["--split", "x", "--at", "2"][..], "GGUF"),
        (
            "transplant-tokenizer",
            &["--tokenizer", "testdata/gpt2/tokenizer.json"][..],
            "a GGUF file: transplant-tokenizer does not handle GGUF yet",
        ),
    ] {
        let out = tmp.path().join(format!("{tool}.gguf"));
        let (code, doc, err) = run_job(tool, &input, &out, args);
        assert_eq!(code, Some(2), "{tool}: {err}");
        let msg = doc["error"].as_str().unwrap_or_default();
        assert!(msg.contains(want) && !msg.contains('\n'), "{tool}: {msg}");
        assert!(!out.exists(), "{tool}");
    }
}

#[test]
fn vocab_blocks_on_a_zero_checkpoint_names_the_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.safetensors");
    let input = testdata("zero/zero1");
    let (code, doc, err) = run_job("vocab-blocks", &input, &out, &["--split", "x", "--at", "2"]);
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains(
            "vocab-blocks reads one safetensors or torch file, not DeepSpeed ZeRO checkpoint"
        ),
        "{msg}"
    );
}

/// The Megatron-Core save megatron-core itself wrote (testdata/megatron/tp2): inspect-checkpoint
/// and check-vocab read it (tests/megatron.rs says what they show); every tool that writes
/// but sanitize-checkpoint (which resizes it: tests/megatron.rs) refuses it by name, writing
/// nothing — none may take it for the DCP folder underneath.
#[test]
fn a_real_megatron_save_is_read_by_inspect_and_check_vocab_and_refused_by_name_by_the_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata("megatron/tp2");
    let iter = root.join("iter_0000010");
    for (input, want) in [
        (&root, "Megatron save root"),
        (&iter, "Megatron-Core distributed checkpoint"),
    ] {
        let (code, _, err) = common::run_json("inspect-checkpoint", &[input.as_os_str()]);
        assert_eq!(
            code,
            Some(0),
            "inspect-checkpoint {}: {err}",
            input.display()
        );
        let (code, _, err) = common::run_json(
            "check-vocab",
            &[
                input.as_os_str(),
                std::ffi::OsStr::new("--tokenizer"),
                testdata("tokenizers/amharic_addition.json").as_os_str(),
            ],
        );
        assert_eq!(code, Some(0), "check-vocab: {err}");
        refused_by_the_weight_tools(tmp.path(), input, &[want]);
    }
}

/// Each tool that writes weights (but not this layout) exits 2 on `input` with one line holding
/// every one of `wants`, and writes nothing.
fn refused_by_the_weight_tools(tmp: &Path, input: &Path, wants: &[&str]) {
    let tok = testdata("tokenizers/amharic_addition.json");
    let tok = tok.to_str().unwrap();
    for (tool, args) in [
        ("extend-embeddings", &["--new-rows", "256"][..]),
        (
            "trim-vocab",
            &["--keep-list", "README.md", "--allow-shrink"][..],
        ),
        ("transplant-tokenizer", &["--tokenizer", tok][..]),
        ("vocab-blocks", &["--split", "x", "--at", "2"][..]),
    ] {
        let out = tmp.join(format!("out-{tool}"));
        let (code, doc, err) = run_job(tool, input, &out, args);
        assert_eq!(code, Some(2), "{tool} {}: {err}", input.display());
        let msg = doc["error"].as_str().unwrap_or(&err).to_string();
        assert!(
            wants.iter().all(|w| msg.contains(w)) && !msg.trim().contains('\n'),
            "{tool}: {msg}"
        );
        assert!(!out.exists(), "{tool}");
    }
}

#[test]
fn a_zero_save_root_with_the_model_beside_keeps_that_model_for_the_weight_tools() {
    // A Hugging Face Trainer run with DeepSpeed saves model.safetensors beside global_step*/.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("checkpoint-1");
    common::copy_tree(&testdata("zero/zero1"), &root);
    std::fs::copy(
        testdata("gpt2/model.safetensors"),
        root.join("model.safetensors"),
    )
    .unwrap();
    let c = formats::open(&root, &Default::default()).unwrap();
    let Checkpoint::Zero { zero, model } = &c else {
        panic!("opened as {}", c.layout())
    };
    assert_eq!(zero.path(), root);
    let model = model.as_deref().expect("the model beside is opened");
    assert_eq!(model.path, root.join("model.safetensors"));
    assert!(c.input_paths().contains(&model.path.as_path()));
    // extend-embeddings grows that model, as it did before ZeRO folders were told apart.
    let out = tmp.path().join("out");
    let (code, doc, err) = run_job(
        "extend-embeddings",
        &root,
        &out,
        &["--new-rows", "50300", "--dry-run"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["new_rows"], 50300, "{doc}");
}

/// A Trainer folder's optimizer.pt is opened only by the tools that read it: with a broken one,
/// the weight tools still grow and inspect the model, and sanitize-checkpoint refuses naming it.
#[test]
fn a_trainer_folders_optimizer_is_opened_only_by_the_tools_that_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("checkpoint-2");
    common::copy_tree(&testdata("trainer/checkpoint-2"), &dir);
    std::fs::write(dir.join("optimizer.pt"), b"not a torch file").unwrap();
    let c = formats::open(&dir, &Default::default()).unwrap();
    let Checkpoint::Trainer(t) = &c else {
        panic!("not a Trainer folder: {}", c.layout())
    };
    assert!(
        t.optim().is_err(),
        "the broken optimizer.pt is refused when asked for"
    );
    let out = tmp.path().join("grown");
    let (code, _, err) = run_job("extend-embeddings", &dir, &out, &["--new-rows", "1100"]);
    assert_eq!(code, Some(0), "extend reads the model only: {err}");
    let out = tmp.path().join("sanitized");
    let (code, _, err) = run_job("sanitize-checkpoint", &dir, &out, &["--vocab-rows", "1100"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("optimizer.pt"), "names the file: {err}");
    assert!(!out.exists());
}

/// A ZeRO checkpoint's rank files are opened only by the tools that read them: with a broken one,
/// extend-embeddings still grows the model a DeepSpeed run saved beside `global_step*/`, and
/// sanitize-checkpoint refuses naming the file.
#[test]
fn zero_rank_files_are_opened_only_by_the_tools_that_read_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("checkpoint-1");
    common::copy_tree(&testdata("zero/zero1"), &root);
    std::fs::copy(
        testdata("gpt2/model.safetensors"),
        root.join("model.safetensors"),
    )
    .unwrap();
    let rank = root.join("global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    std::fs::write(&rank, b"not a torch file").unwrap();
    let c = formats::open(&root, &Default::default()).unwrap();
    let Checkpoint::Zero { zero, .. } = &c else {
        panic!("opened as {}", c.layout())
    };
    assert!(
        zero.get().is_err(),
        "the broken rank file is refused when asked for"
    );
    let out = tmp.path().join("grown");
    let (code, doc, err) = run_job("extend-embeddings", &root, &out, &["--new-rows", "50300"]);
    assert_eq!(code, Some(0), "extend reads the model beside only: {err}");
    // The ZeRO state it does not grow is left out, and with it DeepSpeed's `latest`, which
    // would point at a tag folder that is not there.
    assert!(out.join("model.safetensors").is_file());
    assert!(!out.join("global_step1").exists() && !out.join("latest").exists());
    let left = doc["left_out"].to_string();
    assert!(left.contains("sanitize-checkpoint"), "{left}");
    let out = tmp.path().join("sanitized");
    let (code, _, err) = run_job(
        "sanitize-checkpoint",
        &root,
        &out,
        &["--vocab-rows", "1100"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("zero_pp_rank_1"), "names the file: {err}");
    assert!(!out.exists());
}

/// A Megatron checkpoint is recognised and refused by name by every tool, never read as the DCP
/// folder a `torch_dist` iteration folder looks like underneath (a DCP job on it would write
/// what Megatron cannot resume): an iteration folder (metadata.json naming its sharded_backend,
/// as Megatron-Core writes it), a save root (latest_checkpointed_iteration.txt); a legacy
/// per-rank folder (mp_rank_00/) without its rank file is refused naming the file.
#[test]
fn megatron_checkpoints_are_refused_by_name_not_read_as_dcp() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    let iter = root.join("iter_0000010");
    std::fs::create_dir_all(&iter).unwrap();
    // The DCP folder underneath: a real one (testdata/dcp/single), so only the Megatron files
    // tell it apart.
    common::copy_tree(&testdata("dcp/single"), &iter);
    std::fs::write(
        iter.join("metadata.json"),
        r#"{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}"#,
    )
    .unwrap();
    std::fs::write(root.join("latest_checkpointed_iteration.txt"), "10").unwrap();
    // A legacy per-rank folder with no rank file: read as one, so every tool names the file.
    let legacy = tmp.path().join("legacy");
    std::fs::create_dir_all(legacy.join("mp_rank_00")).unwrap();
    let cases = [
        (&iter, "Megatron-Core distributed checkpoint"),
        (&root, "Megatron save root"),
        (&legacy, "model_optim_rng.pt: missing"),
    ];
    for (input, want) in cases {
        for tool in ["inspect-checkpoint", "check-vocab"] {
            let (code, doc, err) = common::run_json(tool, &[input.as_os_str()]);
            assert_eq!(code, Some(2), "{tool} {}: {err}", input.display());
            let msg = doc["error"].as_str().unwrap_or(&err).to_string();
            assert!(
                msg.contains(want) && !msg.trim().contains('\n'),
                "{tool}: {msg}"
            );
        }
        for (tool, args) in [
            ("sanitize-checkpoint", &["--vocab-rows", "2000"][..]),
            ("extend-embeddings", &["--new-rows", "2000"][..]),
            (
                "trim-vocab",
                &["--keep-list", "README.md", "--allow-shrink"][..],
            ),
        ] {
            let out = tmp.path().join(format!("out-{tool}"));
            let (code, doc, err) = run_job(tool, input, &out, args);
            assert_eq!(code, Some(2), "{tool} {}: {err}", input.display());
            let msg = doc["error"].as_str().unwrap_or(&err).to_string();
            assert!(
                msg.contains(want) && !msg.trim().contains('\n'),
                "{tool}: {msg}"
            );
            assert!(!out.exists(), "{tool}");
        }
    }
}

/// The legacy per-rank save Megatron-LM wrote (testdata/megatron/legacy_tp2) opens as its own
/// arm: inspect-checkpoint and check-vocab read it, sanitize-checkpoint resizes it
/// (tests/megatron_legacy.rs), and every other tool that writes refuses it naming the layout,
/// writing nothing — none takes its rank files for torch files.
#[test]
fn a_megatron_legacy_save_is_refused_by_name_by_the_tools_that_do_not_write_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata("megatron/legacy_tp2");
    refused_by_the_weight_tools(tmp.path(), &root, &["legacy", "mp_rank_"]);
}

#[test]
fn a_safetensors_header_after_json_whitespace_is_read_as_the_reference_reads_it() {
    // The reference's check for '{' first is commented out: "  \n{…}" loads there.
    let b = std::fs::read(testdata("gpt2/model.safetensors")).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header = [&b" \t\n"[..], b[8..8 + n].trim_ascii_end()].concat();
    let mut header = header;
    header.resize(header.len().div_ceil(8) * 8, b' ');
    let file = [
        &(header.len() as u64).to_le_bytes()[..],
        &header,
        &b[8 + n..],
    ]
    .concat();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("lead.safetensors");
    std::fs::write(&path, &file).unwrap();
    let reference = safetensors::SafeTensors::deserialize(&file).unwrap();
    let ours = formats::open_tensors(&path, &Default::default()).unwrap();
    let mut want: Vec<(String, Vec<usize>, Vec<u8>)> = reference
        .tensors()
        .into_iter()
        .map(|(k, v)| (k, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let mut got: Vec<(String, Vec<usize>, Vec<u8>)> = ours
        .tensors()
        .map(|t| {
            let shape = t.shape.iter().map(|&d| d as usize).collect();
            (
                t.name.to_string(),
                shape,
                t.try_bytes().unwrap().into_owned(),
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
}
