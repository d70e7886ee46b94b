//! Every writing tool × every layout: `--dry-run --json` prints one `Plan` (tool, input, output,
//! layout, the report's keys, `edits`, `side_files`), writes nothing, and the run then does what
//! it says: each edited tensor is in the output at its `to` shape, every other tensor keeps the
//! input's bytes, each side file's edit happened, and the run's report agrees with the plan's.

mod common;

use ckpt_surgery::formats;
use ckpt_surgery::formats::dcp::{Dcp, ItemKind};
use common::{run_job, run_json, testdata};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

/// name → (shape, bytes) of every tensor a layout holds.
type Tensors = BTreeMap<String, (Vec<u64>, Vec<u8>)>;

fn checkpoint_tensors(path: &Path, into: &mut Tensors) {
    for t in formats::open_tensors(path, &Default::default())
        .unwrap()
        .tensors()
    {
        let bytes = common::bytes(&t).into_owned();
        into.insert(t.name().to_string(), (t.shape.to_vec(), bytes));
    }
}

/// A DCP folder's tensors by their flattened keys.
fn dcp_tensors(dir: &Path) -> Tensors {
    let d = Dcp::open(dir).unwrap();
    let mut out = Tensors::new();
    for it in &d.items {
        if let ItemKind::Tensor { shape, .. } = &it.kind {
            out.insert(it.fqn.clone(), (shape.clone(), d.tensor_bytes(it).unwrap()));
        }
    }
    out
}

/// A ZeRO save root's parameters: the module's weight (stages 1 and 2) by its name, the fp32
/// master copy as `NAME@master-copy`, each moment as `NAME@moment.KEY` (all ranks' partitions
/// joined, at the parameter's shape).
fn zero_tensors(dir: &Path) -> Tensors {
    let formats::Checkpoint::Zero { zero, .. } = formats::open(dir, &Default::default()).unwrap()
    else {
        panic!("{dir:?} is not a ZeRO checkpoint")
    };
    let z = zero.get().unwrap();
    let mut out = Tensors::new();
    for p in &z.params {
        if let Some(t) = z.module_tensor(&p.name) {
            let bytes = common::bytes(&t).into_owned();
            out.insert(p.name.clone(), (t.shape.to_vec(), bytes));
        }
        let master = z.master(p).unwrap();
        out.insert(format!("{}@master-copy", p.name), (p.shape.clone(), master));
        for k in z.moment_keys() {
            let m = z.moment(p, k).unwrap();
            out.insert(format!("{}@moment.{k}", p.name), (p.shape.clone(), m));
        }
    }
    out
}

/// A GGUF file's tensors: rows-first shape, the bytes in their own ggml type.
fn gguf_tensors(path: &Path) -> Tensors {
    let g = formats::gguf::Gguf::open(path).unwrap();
    g.tensors
        .iter()
        .map(|t| (t.name.clone(), (t.shape(), g.data(t).unwrap().to_vec())))
        .collect()
}

/// Every tensor of the layout at `path`.
fn tensors(path: &Path, layout: &str) -> Tensors {
    match layout {
        "torch distributed checkpoint (DCP)" => dcp_tensors(path),
        "DeepSpeed ZeRO checkpoint" => zero_tensors(path),
        "GGUF" => gguf_tensors(path),
        _ => {
            let mut out = Tensors::new();
            checkpoint_tensors(path, &mut out);
            if layout == "Hugging Face Trainer checkpoint folder"
                && path.join("optimizer.pt").is_file()
            {
                checkpoint_tensors(&path.join("optimizer.pt"), &mut out);
            }
            out
        }
    }
}

/// The names an edit stands for among [`tensors`]' keys.
fn keys_of(edit: &Value, layout: &str, all: &Tensors) -> Vec<String> {
    let name = edit["tensor"].as_str().unwrap().to_string();
    match (layout, edit["role"].as_str().unwrap()) {
        ("DeepSpeed ZeRO checkpoint", "master-copy") => vec![format!("{name}@master-copy")],
        ("DeepSpeed ZeRO checkpoint", "moment") => all
            .keys()
            .filter(|k| k.starts_with(&format!("{name}@moment.")))
            .cloned()
            .collect(),
        // Stage 3 keeps no whole module: the model's rows are its master copy.
        ("DeepSpeed ZeRO checkpoint", _) if !all.contains_key(&name) => {
            vec![format!("{name}@master-copy")]
        }
        _ => vec![name],
    }
}

fn shape(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect()
}

/// The value at a dotted key (`text_config.vocab_size`).
fn at<'a>(doc: &'a Value, key: &str) -> &'a Value {
    key.split('.').fold(doc, |v, k| &v[k])
}

/// The plan's keys that describe the run, not the report.
const PLAN_KEYS: [&str; 6] = ["tool", "input", "output", "layout", "edits", "side_files"];
/// Report keys only a run fills in (what was written, how, its hashes).
const RUN_ONLY: [&str; 6] = [
    "dry_run",
    "manifest",
    "written",
    "carried",
    "left_out",
    "output_sha256",
];

fn check_tensors(plan: &Value, input: &Path, out: &Path, what: &str) {
    let layout = plan["layout"].as_str().unwrap();
    let (before, after) = (tensors(input, layout), tensors(out, layout));
    let mut edited = Vec::new();
    for e in plan["edits"].as_array().unwrap() {
        let keys = keys_of(e, layout, &after);
        assert!(!keys.is_empty(), "{what}: {e}");
        for k in keys {
            if e["rows"]["kind"] == "removed" {
                assert!(!after.contains_key(&k), "{what}: {k} is removed");
                assert_eq!(before[&k].0, shape(&e["from"]), "{what}: {k}'s from");
            } else {
                let (s, _) = after.get(&k).unwrap_or_else(|| panic!("{what}: no {k}"));
                assert_eq!(*s, shape(&e["to"]), "{what}: {k}'s shape");
            }
            edited.push(k);
        }
    }
    assert!(!edited.is_empty(), "{what}: the plan edits tensors");
    for (name, t) in &before {
        if !edited.contains(name) {
            assert!(
                after.get(name) == Some(t),
                "{what}: {name} is not the input's"
            );
        }
    }
    let new: Vec<&String> = after
        .keys()
        .filter(|k| !before.contains_key(*k) && !edited.contains(k))
        .collect();
    assert!(new.is_empty(), "{what}: tensors no edit names: {new:?}");
}

fn check_side_files(plan: &Value, out: &Path, what: &str) {
    for f in plan["side_files"].as_array().unwrap() {
        let file = out.join(f["file"].as_str().unwrap());
        if f["kind"] == "left-out" {
            assert!(!file.exists(), "{what}: {} left out", file.display());
            continue;
        }
        assert!(file.is_file(), "{what}: {} written", file.display());
        if f["kind"] == "keys" {
            let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            for c in f["changes"].as_array().unwrap() {
                let key = c["key"].as_str().unwrap();
                assert_eq!(at(&doc, key), &c["new"], "{what}: {key}");
            }
        }
    }
}

fn check_report(plan: &Value, done: &Value, input: &Path, out: &Path, what: &str) {
    assert_eq!(plan["input"], input.to_str().unwrap(), "{what}");
    assert_eq!(plan["output"], out.to_str().unwrap(), "{what}");
    assert!(plan["tool"].is_string() && plan["layout"].is_string());
    let mut compared = 0;
    for (k, v) in plan.as_object().unwrap() {
        if PLAN_KEYS.contains(&k.as_str()) || RUN_ONLY.contains(&k.as_str()) {
            continue;
        }
        assert_eq!(Some(v), done.get(k), "{what}: the run's {k} is the plan's");
        compared += 1;
    }
    assert!(compared > 2, "{what}: the plan carries the report");
}

/// `tool INPUT --output OUT EXTRA… --dry-run --json`, then the run; checks the run against the
/// plan and returns the plan.
fn dry_run_then_run(tool: &str, input: &Path, out: &Path, extra: &[&str]) -> Value {
    let what = format!("{tool} {} {extra:?}", input.display());
    let dry: Vec<&str> = extra.iter().copied().chain(["--dry-run"]).collect();
    let (code, plan, err) = run_job(tool, input, out, &dry);
    assert_eq!(code, Some(0), "{what}: {err}");
    assert!(!out.exists(), "{what}: a dry run wrote");
    assert_eq!(plan["tool"], tool, "{what}");
    let (code, done, err) = run_job(tool, input, out, extra);
    assert_eq!(code, Some(0), "{what}: {err}");
    check_tensors(&plan, input, out, &what);
    check_side_files(&plan, out, &what);
    check_report(&plan, &done, input, out, &what);
    plan
}

#[test]
fn extend_embeddings_plans_every_layout_as_the_run_writes_it() {
    let cases: [(&str, &str, &str); 5] = [
        ("gpt2/model.safetensors", "out.safetensors", "safetensors"),
        ("gpt2", "out", "model folder (safetensors)"),
        ("gpt2_sharded", "out", "model folder (sharded safetensors)"),
        ("gpt2_bin_sharded", "out", "model folder (sharded torch)"),
        (
            "torch/tied_state_dict.pt",
            "out.pt",
            "torch zip (torch.save)",
        ),
    ];
    for (input, out, layout) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(out);
        let plan = dry_run_then_run(
            "extend-embeddings",
            &testdata(input),
            &out,
            &["--new-rows", "1030"],
        );
        assert_eq!(plan["layout"], layout);
        assert!(plan["edits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["to"][0] == 1030));
        let folder = testdata(input).is_dir();
        let configs = plan["side_files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["file"] == "config.json")
            .count();
        assert_eq!(configs, usize::from(folder), "{input}: config.json's edit");
    }
}

#[test]
fn gguf_files_are_planned_as_extend_and_trim_write_them() {
    let tok = testdata("gpt2/tokenizer.json");
    let text = std::fs::read_to_string(testdata("tokenizers/english.txt")).unwrap();
    for input in [
        "gguf/llama_gpt2_tied.gguf",
        "gguf/llama_gpt2_untied_q8.gguf",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out.gguf");
        // A GGUF table grows with tokens (rows past them would make a file llama.cpp refuses).
        let merged = common::merged_gpt2_tokenizer(tmp.path());
        let plan = dry_run_then_run(
            "extend-embeddings",
            &testdata(input),
            &out,
            &["--tokenizer", merged.to_str().unwrap()],
        );
        assert_eq!(plan["layout"], "GGUF");
        let edits = plan["edits"].as_array().unwrap();
        let tied = input.contains("tied.");
        assert_eq!(edits.len(), if tied { 1 } else { 2 }, "{input}: {edits:?}");
        let rows = edits[0]["to"][0].as_u64().unwrap();
        assert!(rows > 1000, "{edits:?}");
        assert!(edits
            .iter()
            .all(|e| e["to"][0] == rows && e["rows"]["kind"] == "grown"));

        let corpus = tmp.path().join("corpus.txt");
        std::fs::write(
            &corpus,
            text.lines().take(40).collect::<Vec<_>>().join("\n"),
        )
        .unwrap();
        let out = tmp.path().join("trimmed.gguf");
        let trim = [
            "--tokenizer",
            tok.to_str().unwrap(),
            "--keep-corpus",
            corpus.to_str().unwrap(),
            "--allow-shrink",
        ];
        let plan = dry_run_then_run("trim-vocab", &testdata(input), &out, &trim);
        let edits = plan["edits"].as_array().unwrap();
        assert!(!edits.is_empty() && edits.iter().all(|e| e["rows"]["kind"] == "mapped"));
        let kept = plan["kept_tokens"].as_u64().unwrap();
        assert!(edits.iter().all(|e| e["to"][0] == kept), "{edits:?}");
    }
}

#[test]
fn transplant_tokenizer_plans_every_layout_as_the_run_writes_it() {
    let new = testdata("tokenizers/bytelevel_bpe.json");
    let base = testdata("gpt2/tokenizer.json");
    let cases: [(&str, &str, &str, bool); 5] = [
        (
            "gpt2/model.safetensors",
            "out.safetensors",
            "safetensors",
            true,
        ),
        ("gpt2", "out", "model folder (safetensors)", false),
        (
            "gpt2_sharded",
            "out",
            "model folder (sharded safetensors)",
            true,
        ),
        (
            "gpt2_bin_sharded",
            "out",
            "model folder (sharded torch)",
            true,
        ),
        (
            "torch/tied_state_dict.pt",
            "out.pt",
            "torch zip (torch.save)",
            true,
        ),
    ];
    for (input, out, layout, needs_base) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(out);
        let mut extra = vec!["--tokenizer", new.to_str().unwrap(), "--allow-shrink"];
        if needs_base {
            extra.extend(["--base-tokenizer", base.to_str().unwrap()]);
        }
        let plan = dry_run_then_run("transplant-tokenizer", &testdata(input), &out, &extra);
        assert_eq!(plan["layout"], layout);
        let edits = plan["edits"].as_array().unwrap();
        assert!(
            edits.iter().all(|e| e["to"][0] == 600),
            "{input}: {edits:?}"
        );
        assert!(
            edits.iter().any(|e| e["rows"]["kind"] == "mapped"),
            "{input}: the rows come by the map"
        );
        let sides: Vec<&str> = plan["side_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["file"].as_str().unwrap())
            .collect();
        if testdata(input).is_dir() {
            assert!(sides.contains(&"config.json"), "{input}: {sides:?}");
        }
        if input == "gpt2" {
            assert!(sides.contains(&"tokenizer.json") && sides.contains(&"generation_config.json"));
        }
    }
}

#[test]
fn trim_vocab_plans_every_layout_as_the_run_writes_it() {
    let text = std::fs::read_to_string(testdata("tokenizers/english.txt")).unwrap();
    let tmp0 = tempfile::tempdir().unwrap();
    let corpus = tmp0.path().join("corpus.txt");
    std::fs::write(
        &corpus,
        text.lines().take(20).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let tk = testdata("gpt2/tokenizer.json");
    let cases: [(&str, &str, &str, bool); 5] = [
        (
            "trainer_untied/checkpoint-2",
            "out",
            "Hugging Face Trainer checkpoint folder",
            false,
        ),
        ("gpt2", "out", "model folder (safetensors)", false),
        (
            "gpt2/model.safetensors",
            "out.safetensors",
            "safetensors",
            true,
        ),
        (
            "gpt2_sharded",
            "out",
            "model folder (sharded safetensors)",
            true,
        ),
        (
            "gpt2_bin_sharded",
            "out",
            "model folder (sharded torch)",
            true,
        ),
    ];
    for (input, out, layout, needs_tok) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(out);
        let mut extra = vec!["--keep-corpus", corpus.to_str().unwrap(), "--allow-shrink"];
        if needs_tok {
            extra.extend(["--tokenizer", tk.to_str().unwrap()]);
        }
        let plan = dry_run_then_run("trim-vocab", &testdata(input), &out, &extra);
        assert_eq!(plan["layout"], layout);
        let edits = plan["edits"].as_array().unwrap();
        assert!(
            edits.iter().any(|e| e["rows"]["kind"] == "mapped"),
            "{input}"
        );
        assert!(
            edits.iter().all(|e| e["to"][0] == plan["new_rows"]),
            "{input}: {edits:?}"
        );
    }
}

#[test]
fn sanitize_checkpoint_plans_every_layout_as_the_run_writes_it() {
    let grow: &[&str] = &["--vocab-rows", "1064"];
    let cut: &[&str] = &["--vocab-rows", "900", "--allow-shrink"];
    let drop: &[&str] = &["--vocab-rows", "1064", "--optimizer", "drop"];
    let cases: [(&str, &str, &[&str]); 9] = [
        ("resume/opt_adamw.pt", "torch zip (torch.save)", grow),
        ("resume/opt_adamw.pt", "torch zip (torch.save)", drop),
        (
            "trainer_untied/checkpoint-2",
            "Hugging Face Trainer checkpoint folder",
            drop,
        ),
        (
            "trainer_untied/checkpoint-2",
            "Hugging Face Trainer checkpoint folder",
            grow,
        ),
        (
            "trainer_untied/checkpoint-2",
            "Hugging Face Trainer checkpoint folder",
            cut,
        ),
        ("dcp/single", "torch distributed checkpoint (DCP)", grow),
        ("dcp/single", "torch distributed checkpoint (DCP)", cut),
        ("zero/zero1", "DeepSpeed ZeRO checkpoint", grow),
        ("zero/zero3", "DeepSpeed ZeRO checkpoint", cut),
    ];
    for (input, layout, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let out = if input.ends_with(".pt") {
            out.with_extension("pt")
        } else {
            out
        };
        let plan = dry_run_then_run("sanitize-checkpoint", &testdata(input), &out, extra);
        assert_eq!(plan["layout"], layout);
        let edits = plan["edits"].as_array().unwrap();
        assert!(
            edits.iter().any(|e| e["role"] == "moment"),
            "{input}: moments are planned"
        );
        let shrink = extra.contains(&"--allow-shrink");
        let dropped = extra.contains(&"drop");
        for e in edits {
            let want = match (shrink, e["role"].as_str().unwrap()) {
                (_, "moment" | "other") if dropped => serde_json::json!({"kind": "removed"}),
                (true, _) => serde_json::json!({"kind": "cut"}),
                (false, "moment") => serde_json::json!({"kind": "filled", "value": 0.0}),
                (false, _) => serde_json::json!({"kind": "grown", "init": "mean"}),
            };
            assert_eq!(e["rows"], want, "{input} {extra:?}: {e}");
        }
    }
}

#[test]
fn vocab_blocks_plans_the_blocks_a_split_and_a_join_write() {
    let join: &[&str] = &[
        "--join",
        "text_emb.weight",
        "--names",
        "text_emb.weight_frozen,text_emb.weight_unfrozen",
    ];
    let split: &[&str] = &[
        "--split",
        "transformer.wte.weight",
        "--at",
        "900",
        "--names",
        "wte.frozen,wte.trainable",
    ];
    let cases = [
        ("audio/split_model.safetensors", join),
        ("gpt2/model.safetensors", split),
    ];
    for (input, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out.safetensors");
        let plan = dry_run_then_run("vocab-blocks", &testdata(input), &out, extra);
        let removed = plan["edits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["rows"]["kind"] == "removed")
            .count();
        assert_eq!(removed, if extra[0] == "--join" { 2 } else { 1 });
    }
}

#[test]
fn merge_tokenizers_plans_no_tensor_and_the_tokenizer_file_it_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged.json");
    let base = testdata("tokenizers/chatterbox_base.json");
    let add = testdata("tokenizers/amharic_vocab.json");
    let args = |dry: bool| -> Vec<&OsStr> {
        let mut a = vec![
            OsStr::new("--base"),
            base.as_os_str(),
            OsStr::new("--add"),
            add.as_os_str(),
            OsStr::new("--output"),
            out.as_os_str(),
        ];
        if dry {
            a.push(OsStr::new("--dry-run"));
        }
        a
    };
    let (code, plan, err) = run_json("merge-tokenizers", &args(true));
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.exists(), "a dry run wrote");
    assert_eq!(plan["tool"], "merge-tokenizers");
    assert_eq!(plan["edits"], serde_json::json!([]));
    let (code, done, err) = run_json("merge-tokenizers", &args(false));
    assert_eq!(code, Some(0), "{err}");
    check_side_files(&plan, Path::new(""), "merge-tokenizers");
    assert_eq!(plan["side_files"][0]["file"], out.to_str().unwrap());
    check_report(&plan, &done, &base, &out, "merge-tokenizers");
    // The dry run's hash of the merged tokenizer is the file's.
    assert_eq!(
        plan["output_sha256"].as_str().unwrap(),
        common::sha256_hex(&std::fs::read(&out).unwrap())
    );
}

#[test]
fn a_dcp_findings_fix_is_a_request_and_its_command_is_rendered_from_it() {
    // check-vocab on a DCP folder: each fix is a sanitize-checkpoint request (a value `--fix`
    // and the Python side can read), and the command printed is that request rendered.
    let dir = testdata("dcp/mismatch");
    let (code, doc, err) = run_json("check-vocab", &[dir.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let findings = doc["findings"].as_array().unwrap();
    assert!(!findings.is_empty());
    for f in findings {
        let a = &f["action"];
        assert_eq!(a["tool"], "sanitize-checkpoint", "{f}");
        assert_eq!(a["input"], dir.to_str().unwrap(), "{f}");
        let how = match a["tokenizer"].as_str() {
            Some(t) => format!("--tokenizer {t}"),
            None => format!("--vocab-rows {}", a["vocab_rows"]),
        };
        let command = format!(
            "sanitize-checkpoint {} --output {} {how}",
            dir.display(),
            a["output"].as_str().unwrap()
        );
        assert_eq!(f["fix"], command.as_str(), "{f}");
        assert_eq!(a["output"], format!("{}-fixed", dir.display()).as_str());
    }
}

/// Every layout answers the row-surgery interface (`Checkpoint::entries`), and the edits each
/// writing tool plans for it are made of those entries: each edit's tensor and role is an entry
/// at the edit's `from` shape, and every entry not already at the target rows has its edit.
#[test]
fn every_layout_answers_the_interface_and_the_planned_edits_are_its_entries() {
    let cases: [(&str, &str, &str); 8] = [
        ("extend-embeddings", "gpt2/model.safetensors", "1100"),
        ("extend-embeddings", "gpt2_sharded", "1100"),
        ("sanitize-checkpoint", "dcp/single", "1064"),
        ("sanitize-checkpoint", "zero/zero1", "1064"),
        ("sanitize-checkpoint", "zero/zero3", "1064"),
        ("sanitize-checkpoint", "megatron/tp2", "150"),
        ("sanitize-checkpoint", "megatron/legacy_tp2", "200"),
        (
            "sanitize-checkpoint",
            "megatron/tp2_fully_reshardable",
            "150",
        ),
    ];
    for (tool, input, rows) in cases {
        let entries = formats::open(&testdata(input), &Default::default())
            .unwrap()
            .entries(&[])
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        assert!(!entries.is_empty(), "{input}: no vocabulary");
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(if input.ends_with(".safetensors") {
            "out.safetensors"
        } else {
            "out"
        });
        let flag = if tool == "extend-embeddings" {
            "--new-rows"
        } else {
            "--vocab-rows"
        };
        let (code, plan, err) = run_job(tool, &testdata(input), &out, &[flag, rows, "--dry-run"]);
        assert_eq!(code, Some(0), "{input}: {err}");
        let target: u64 = rows.parse().unwrap();
        let edits: Vec<(String, String, u64)> = plan["edits"]
            .as_array()
            .unwrap()
            .iter()
            // Ties follow their entry; a re-laid flat bucket (Megatron's distributed
            // optimizer) holds many entries' rows and is no entry itself.
            .filter(|e| e["rows"]["kind"] != "tied" && e["rows"]["kind"] != "mapped")
            .map(|e| {
                let tensor = e["tensor"].as_str().unwrap().to_string();
                let role = e["role"].as_str().unwrap().to_string();
                (tensor, role, e["from"][0].as_u64().unwrap())
            })
            .collect();
        let mut from_entries: Vec<(String, String, u64)> = entries
            .iter()
            .filter(|e| e.rows() != target)
            .map(|e| (e.tensor.clone(), e.role.to_string(), e.rows()))
            .collect();
        let mut edits_sorted = edits.clone();
        edits_sorted.sort();
        from_entries.sort();
        assert_eq!(edits_sorted, from_entries, "{tool} {input}");
    }
}

/// A word-level tokenizer of `n` tokens (`tok000`…) in the `tokenizers` JSON form.
fn word_level(path: &Path, n: usize) {
    let vocab: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("tok{i:03}"), Value::from(i)))
        .collect();
    let doc = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "tok000"},
    });
    std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

#[test]
fn row_map_jobs_plan_a_torch_training_file_as_the_run_writes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (tok, list) = (tmp.path().join("tok.json"), tmp.path().join("keep.txt"));
    word_level(&tok, 30);
    std::fs::write(&list, "tok003\ntok004\ntok017\ntok029").unwrap();
    let (tok, list) = (tok.to_str().unwrap(), list.to_str().unwrap());
    let input = testdata("resume/opt_adamw.pt");
    let out = tmp.path().join("trimmed.pt");
    let trim = [
        "--tokenizer",
        tok,
        "--keep-list",
        list,
        "--allow-shrink",
        "--pad-to-multiple-of",
        "8",
    ];
    let plan = dry_run_then_run("trim-vocab", &input, &out, &trim);
    assert_eq!(plan["layout"], "torch zip (torch.save)");
    let moments = |plan: &Value| {
        let edits = plan["edits"].as_array().unwrap();
        assert!(
            edits.iter().all(|e| e["rows"]["kind"] == "mapped"),
            "{edits:?}"
        );
        edits.iter().filter(|e| e["role"] == "moment").count()
    };
    assert_eq!(moments(&plan), 6);
    let new = tmp.path().join("new.json");
    word_level(&new, 12);
    let out = tmp.path().join("transplanted.pt");
    let moved = [
        "--base-tokenizer",
        tok,
        "--tokenizer",
        new.to_str().unwrap(),
        "--allow-shrink",
    ];
    let plan = dry_run_then_run("transplant-tokenizer", &input, &out, &moved);
    assert_eq!(moments(&plan), 6);
}

#[test]
fn row_map_jobs_plan_a_zero_checkpoint_as_the_run_writes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (tok, list) = (tmp.path().join("tok.json"), tmp.path().join("keep.txt"));
    word_level(&tok, 999);
    std::fs::write(
        &list,
        "tok003
tok004
tok017
tok998",
    )
    .unwrap();
    let (tok, list) = (tok.to_str().unwrap(), list.to_str().unwrap());
    let roles = |plan: &Value| {
        let edits = plan["edits"].as_array().unwrap();
        assert!(
            edits.iter().all(|e| e["rows"]["kind"] == "mapped"),
            "{edits:?}"
        );
        let mut r: Vec<String> = edits
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["tensor"].as_str().unwrap(),
                    e["role"].as_str().unwrap()
                )
            })
            .collect();
        r.sort();
        r
    };
    let want = [
        "embed.weight embedding",
        "embed.weight master-copy",
        "embed.weight moment",
        "head.weight head",
        "head.weight master-copy",
        "head.weight moment",
    ];
    for input in ["zero/zero1", "zero/zero2_bf16", "zero/zero3"] {
        let out = tmp.path().join(input.replace('/', "_"));
        let trim = [
            "--tokenizer",
            tok,
            "--keep-list",
            list,
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let plan = dry_run_then_run("trim-vocab", &testdata(input), &out, &trim);
        assert_eq!(plan["layout"], "DeepSpeed ZeRO checkpoint");
        assert_eq!(roles(&plan), want, "{input}");
    }
    let new = tmp.path().join("new.json");
    word_level(&new, 12);
    let moved = [
        "--base-tokenizer",
        tok,
        "--tokenizer",
        new.to_str().unwrap(),
        "--allow-shrink",
    ];
    for input in ["zero/zero1", "zero/zero3"] {
        let out = tmp
            .path()
            .join(format!("transplanted_{}", input.replace('/', "_")));
        let plan = dry_run_then_run("transplant-tokenizer", &testdata(input), &out, &moved);
        assert_eq!(roles(&plan), want, "{input}");
    }
}

#[test]
fn row_map_jobs_plan_a_dcp_folder_as_the_run_writes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (tok, list) = (tmp.path().join("tok.json"), tmp.path().join("keep.txt"));
    word_level(&tok, 999);
    std::fs::write(&list, "tok003\ntok004\ntok017\ntok998").unwrap();
    let (tok, list) = (tok.to_str().unwrap(), list.to_str().unwrap());
    let moments = |plan: &Value| {
        let edits = plan["edits"].as_array().unwrap();
        let kinds = |e: &&Value| e["rows"]["kind"] == "mapped" || e["rows"]["kind"] == "tied";
        assert!(edits.iter().all(|e| kinds(&e)), "{edits:?}");
        edits.iter().filter(|e| e["role"] == "moment").count()
    };
    // single: untied (both matrices' moments); fsdp2: tied (the embedding's).
    for (input, want) in [("dcp/single", 4), ("dcp/fsdp2", 2)] {
        let out = tmp.path().join(input.replace('/', "_"));
        let trim = [
            "--tokenizer",
            tok,
            "--keep-list",
            list,
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let plan = dry_run_then_run("trim-vocab", &testdata(input), &out, &trim);
        assert_eq!(plan["layout"], "torch distributed checkpoint (DCP)");
        assert_eq!(moments(&plan), want, "{input}");
    }
    let new = tmp.path().join("new.json");
    word_level(&new, 12);
    let out = tmp.path().join("transplanted");
    let moved = [
        "--base-tokenizer",
        tok,
        "--tokenizer",
        new.to_str().unwrap(),
        "--allow-shrink",
    ];
    let plan = dry_run_then_run("transplant-tokenizer", &testdata("dcp/fsdp2"), &out, &moved);
    assert_eq!(moments(&plan), 2);
}

#[test]
fn sanitize_checkpoint_plans_both_megatron_layouts_as_the_run_writes_them() {
    let (grow, drop): (&[&str], &[&str]) = (
        &["--vocab-rows", "150"],
        &["--vocab-rows", "150", "--optimizer", "drop"],
    );
    for (input, args) in [
        ("megatron/tp2", grow),
        ("megatron/legacy_tp2", grow),
        ("megatron/tp2", drop),
        ("megatron/legacy_tp2", drop),
        ("megatron/tp2_fully_reshardable", grow),
        ("megatron/tp2_fully_reshardable", drop),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let input = testdata(input);
        let dry: Vec<&str> = args.iter().copied().chain(["--dry-run"]).collect();
        let (code, plan, err) = run_job("sanitize-checkpoint", &input, &out, &dry);
        assert_eq!(code, Some(0), "{err}");
        assert!(!out.exists(), "a dry run wrote");
        assert_eq!(plan["tool"], "sanitize-checkpoint");
        let (code, done, err) = run_job("sanitize-checkpoint", &input, &out, args);
        assert_eq!(code, Some(0), "{err}");
        check_report(&plan, &done, &input, &out, "megatron");
        check_side_files(&plan, &out, "megatron");
        // Every planned edit is a tensor the output holds at its `to` shape, and every tensor
        // whose shape the run changed is planned: torch_dist's DCP items (the vocabulary
        // matrices and the re-laid optimizer buckets or fully_reshardable states), legacy's entries (the matrices, their
        // moments and master copies, global shapes) and, for a drop, every rank file's
        // optimizer tensors as `RANK_FOLDER/PATH` (its weights are the global matrices').
        let dropping = args.contains(&"drop");
        let shapes = |path: &Path| -> (Vec<(String, Vec<u64>)>, u64) {
            match formats::open(path, &Default::default()).unwrap() {
                formats::Checkpoint::Megatron(m) => {
                    let items = m.dcp.items.iter().filter_map(|i| {
                        let s = formats::dcp::keys::shape(i)?;
                        Some((i.fqn.clone(), s.to_vec()))
                    });
                    (items.collect(), m.tp)
                }
                formats::Checkpoint::MegatronLegacy(l) if dropping => {
                    let mut all: Vec<(String, Vec<u64>)> = l
                        .weight_entries()
                        .into_iter()
                        .map(|e| (e.tensor, e.shape))
                        .collect();
                    for rank in &l.ranks {
                        let folder = rank.path.parent().unwrap().file_name().unwrap();
                        let p = &rank.file.pickle;
                        let paths = formats::torch::tensor_paths(p).unwrap();
                        for t in paths.iter().filter(|t| t.path.starts_with("optimizer.")) {
                            let shape = p.tensor_of(t.node).unwrap().shape.clone();
                            all.push((format!("{}/{}", folder.to_str().unwrap(), t.path), shape));
                        }
                    }
                    (all, l.tp)
                }
                formats::Checkpoint::MegatronLegacy(l) => {
                    let e = l.entries().unwrap().into_iter();
                    (e.map(|e| (e.tensor, e.shape)).collect(), l.tp)
                }
                _ => panic!("{}: not a Megatron checkpoint", path.display()),
            }
        };
        let ((before, _), (after, tp)) = (shapes(&input), shapes(&out));
        assert_eq!(tp, 2);
        let edits = plan["edits"].as_array().unwrap();
        let mut planned: Vec<&str> = Vec::new();
        for e in edits {
            let name = e["tensor"].as_str().unwrap();
            let held = after.iter().find(|(n, _)| n == name).map(|h| &h.1);
            if e["rows"]["kind"] == "removed" {
                assert_eq!(held, None, "{name} is left out");
                let was = before.iter().find(|(n, _)| n == name).map(|h| &h.1);
                assert_eq!(was, Some(&shape(&e["from"])), "{name}");
            } else {
                assert_eq!(held, Some(&shape(&e["to"])), "{name}");
            }
            planned.push(name);
        }
        // Every tensor the run changed or left out is planned.
        let changed: Vec<&str> = before
            .iter()
            .filter(|(n, bs)| after.iter().all(|(a, s)| a != n || s != bs))
            .map(|(n, _)| n.as_str())
            .collect();
        assert!(changed.len() >= 6, "{changed:?}");
        for n in &changed {
            assert!(
                planned.contains(n),
                "{n} changed but is not planned: {planned:?}"
            );
        }
    }
}

/// `--optimizer drop` on a Trainer folder: the row-map jobs' plans list optimizer.pt as a
/// `left-out` side file beside the tokenizer files they write (a Trainer folder is a folder
/// output, whatever its layout's name says), and the run leaves it out and writes those.
#[test]
fn row_map_jobs_plan_a_dropped_optimizer_as_a_left_out_file() {
    let input = testdata("trainer_untied/checkpoint-2");
    let (corpus, new) = (
        testdata("tokenizers/english.txt"),
        testdata("tokenizers/bytelevel_bpe.json"),
    );
    let cases: [(&str, [&str; 2], &[&str]); 2] = [
        (
            "trim-vocab",
            ["--keep-corpus", corpus.to_str().unwrap()],
            &["tokenizer.json", "token_map.json"],
        ),
        (
            "transplant-tokenizer",
            ["--tokenizer", new.to_str().unwrap()],
            &["tokenizer.json", "config.json"],
        ),
    ];
    for (tool, [flag, value], written) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let args = [flag, value, "--allow-shrink", "--optimizer", "drop"];
        let dry: Vec<&str> = args.iter().copied().chain(["--dry-run"]).collect();
        let (code, plan, err) = run_job(tool, &input, &out, &dry);
        assert_eq!(code, Some(0), "{tool}: {err}");
        let side = plan["side_files"].as_array().unwrap();
        let kind = |file: &str| {
            side.iter()
                .find(|s| s["file"] == file)
                .map(|s| s["kind"].clone())
        };
        assert_eq!(
            kind("optimizer.pt"),
            Some(Value::from("left-out")),
            "{tool}"
        );
        for f in written {
            assert!(kind(f).is_some(), "{tool}: {f} is planned: {side:?}");
        }
        let (code, _, err) = run_job(tool, &input, &out, &args);
        assert_eq!(code, Some(0), "{tool}: {err}");
        check_side_files(&plan, &out, tool);
        assert!(!out.join("optimizer.pt").exists(), "{tool}");
    }
}
