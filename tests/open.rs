//! `formats::open`: the one place that decides what a path is. Every layout in testdata opens
//! as its own `Checkpoint` arm, and the tools that do not handle a layout say which tool does.

mod common;

use ckpt_surgery::formats::{self, Checkpoint, Format};
use common::{run_job, testdata};

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
        Checkpoint::Zero(_) => "zero",
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
    assert_eq!(t.optim.format, Format::TorchZip);
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
