//! trim-vocab and transplant-tokenizer on the training layouts beside the Trainer folder: the
//! output re-opened by our strict reader and compared with the input through the run's row map
//! (its `row_map` runs). Every kept id's weight rows and optimizer moment rows are the old id's,
//! bit for bit, at its new id; new ids' moments are zero; every other tensor keeps the input's
//! bytes; `--optimizer drop` removes the optimizer state and keeps the weights' gather.

mod common;
use common::{run_job, testdata};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// name → (shape, bytes) of every tensor of a checkpoint.
type Tensors = BTreeMap<String, (Vec<u64>, Vec<u8>)>;

/// The training fixtures pickle an `argparse.Namespace` (plain data) beside the tensors.
const ALLOW: [&str; 2] = ["--allow-global", "argparse.Namespace"];

fn torch_tensors(path: &Path) -> Tensors {
    let globals =
        ckpt_surgery::formats::torch::pickle::GlobalPolicy::with_allowed(&[ALLOW[1].into()])
            .unwrap();
    let opts = ckpt_surgery::formats::OpenOptions { globals };
    let c = ckpt_surgery::formats::open_tensors(path, &opts).unwrap();
    c.tensors()
        .map(|t| {
            let bytes = common::bytes(&t).into_owned();
            (t.name().to_string(), (t.shape.to_vec(), bytes))
        })
        .collect()
}

/// A word-level tokenizer (the `tokenizers` JSON form) of `words`, id = position; `tok00`-style
/// names so no token is a single character (the pruner keeps an alphabet).
fn word_level(dir: &Path, name: &str, words: &[String]) -> PathBuf {
    let vocab: serde_json::Map<String, Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.clone(), Value::from(i)))
        .collect();
    let doc = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": words[0]},
    });
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    tokenizers::Tokenizer::from_file(&p).expect("the tokenizers library reads it");
    p
}

fn words(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tok{i:03}")).collect()
}

/// `tool INPUT --output OUT ARGS… --dry-run --json` (the plan), then the run (its report).
fn plan_and_run(tool: &str, input: &Path, out: &Path, args: &[&str]) -> (Value, Value) {
    let dry: Vec<&str> = args.iter().copied().chain(["--dry-run"]).collect();
    let (code, plan, err) = run_job(tool, input, out, &dry);
    assert_eq!(code, Some(0), "{tool} {input:?} --dry-run: {err}");
    let (code, report, err) = run_job(tool, input, out, args);
    assert_eq!(code, Some(0), "{tool} {input:?}: {err}");
    (plan, report)
}

/// new id → old id (None: a made row), from the plan's row map (its first edit's runs).
fn new_to_old(plan: &Value) -> Vec<Option<u64>> {
    let m = &plan["edits"][0]["rows"]["from"];
    let mut out = vec![None; m["new_rows"].as_u64().unwrap() as usize];
    for r in m["runs"].as_array().unwrap() {
        if r["rows"] == "copy" {
            let (from, to, len) = (
                r["from"].as_u64().unwrap(),
                r["to"].as_u64().unwrap(),
                r["len"].as_u64().unwrap(),
            );
            for k in 0..len {
                out[(to + k) as usize] = Some(from + k);
            }
        }
    }
    out
}

fn rows_of(t: &(Vec<u64>, Vec<u8>)) -> Vec<&[u8]> {
    let row = t.1.len() / t.0[0] as usize;
    t.1.chunks(row).collect()
}

/// Every kept id's rows at its new id; with `zero_made`, made rows all zero bytes (moments).
fn assert_gathered(
    name: &str,
    before: &(Vec<u64>, Vec<u8>),
    after: &(Vec<u64>, Vec<u8>),
    map: &[Option<u64>],
    zero_made: bool,
) {
    let mut want = before.0.clone();
    want[0] = map.len() as u64;
    assert_eq!(after.0, want, "{name}'s shape");
    let (old, new) = (rows_of(before), rows_of(after));
    for (n, o) in map.iter().enumerate() {
        match o {
            Some(o) => assert_eq!(new[n], old[*o as usize], "{name}: new {n} is old {o}"),
            None if zero_made => assert!(new[n].iter().all(|&b| b == 0), "{name}: new {n}"),
            None => {}
        }
    }
}

/// The torch training fixture: its vocabulary weights (text_emb, text_head and its bias) and
/// their Adam moments (optimizer indices 0, 3, 4 in module order).
const TRAIN_WEIGHTS: [&str; 3] = [
    "model.text_emb.weight",
    "model.text_head.weight",
    "model.text_head.bias",
];

fn train_moments() -> Vec<String> {
    [0, 3, 4]
        .iter()
        .flat_map(|i| ["exp_avg", "exp_avg_sq"].map(|m| format!("optimizer.state.{i}.{m}")))
        .collect()
}

/// The output of a torch training file against its input: `weights` and (None: the optimizer
/// dropped) `moments` gathered, made rows' moments zero, every other tensor the input's.
fn check_training_file(
    input: &Path,
    out: &Path,
    (plan, report): (&Value, &Value),
    (weights, moments): (&[&str], Option<&[String]>),
) {
    let map = new_to_old(plan);
    assert!(map.iter().any(Option::is_none) && map.iter().any(Option::is_some));
    let (before, after) = (torch_tensors(input), torch_tensors(out));
    let mut gathered: Vec<String> = weights.iter().map(|s| s.to_string()).collect();
    for w in &gathered {
        assert_gathered(w, &before[w], &after[w], &map, false);
    }
    if let Some(moments) = moments {
        for m in moments {
            assert_gathered(m, &before[m], &after[m], &map, true);
            gathered.push(m.clone());
        }
        let moved = report["optimizer"].as_array().unwrap();
        assert_eq!(moved.len(), moments.len(), "{moved:?}");
    } else {
        assert!(after.keys().all(|k| !k.starts_with("optimizer.")));
    }
    for (name, t) in &before {
        if gathered.contains(name) || (moments.is_none() && name.starts_with("optimizer.")) {
            continue;
        }
        assert_eq!(after.get(name), Some(t), "{name} is the input's");
    }
}

#[test]
fn a_torch_training_files_moments_follow_their_tokens_when_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(100));
    let list = dir.path().join("keep.txt");
    let keep: Vec<String> = [1, 3, 4, 9, 17, 40, 41, 42, 77, 98, 99]
        .iter()
        .map(|i| format!("tok{i:03}"))
        .collect();
    std::fs::write(&list, keep.join("\n")).unwrap();
    for input in ["torch/train_ckpt.pt", "torch/train_ckpt_legacy.pt"] {
        let out = dir
            .path()
            .join(format!("{}.out.pt", input.replace('/', "_")));
        let args = [
            "--tokenizer",
            tok.to_str().unwrap(),
            "--keep-list",
            list.to_str().unwrap(),
            "--allow-shrink",
            "--pad-to-multiple-of",
            "16",
            ALLOW[0],
            ALLOW[1],
        ];
        let (plan, doc) = plan_and_run("trim-vocab", &testdata(input), &out, &args);
        assert_eq!(doc["new_rows"], 16, "{input}");
        check_training_file(
            &testdata(input),
            &out,
            (&plan, &doc),
            (&TRAIN_WEIGHTS, Some(&train_moments())),
        );
    }
}

#[test]
fn a_torch_training_files_moments_follow_their_tokens_when_transplanted() {
    let dir = tempfile::tempdir().unwrap();
    let base = word_level(dir.path(), "base.json", &words(100));
    let old = words(100);
    // Kept tokens in another order, two new ones among them; the rest dropped.
    let mut new: Vec<String> = [0, 50, 7, 99, 3, 64, 12]
        .iter()
        .map(|&i| old[i].clone())
        .collect();
    new.insert(2, "fresh_a".into());
    new.push("fresh_b".into());
    let new_tok = word_level(dir.path(), "new.json", &new);
    let input = testdata("torch/train_ckpt.pt");
    let out = dir.path().join("out.pt");
    let args = [
        "--base-tokenizer",
        base.to_str().unwrap(),
        "--tokenizer",
        new_tok.to_str().unwrap(),
        "--allow-shrink",
        ALLOW[0],
        ALLOW[1],
    ];
    let (plan, doc) = plan_and_run("transplant-tokenizer", &input, &out, &args);
    let map = new_to_old(&plan);
    assert_eq!(map[1], Some(50));
    assert_eq!(map[2], None);
    check_training_file(
        &input,
        &out,
        (&plan, &doc),
        (&TRAIN_WEIGHTS, Some(&train_moments())),
    );
}

#[test]
fn optimizer_drop_removes_a_torch_training_files_optimizer_and_gathers_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(100));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok005\ntok006\ntok050").unwrap();
    let input = testdata("torch/train_ckpt.pt");
    let out = dir.path().join("out.pt");
    let args = [
        "--tokenizer",
        tok.to_str().unwrap(),
        "--keep-list",
        list.to_str().unwrap(),
        "--allow-shrink",
        "--pad-to-multiple-of",
        "8",
        "--optimizer",
        "drop",
        ALLOW[0],
        ALLOW[1],
    ];
    let (plan, doc) = plan_and_run("trim-vocab", &input, &out, &args);
    assert!(doc["optimizer"].as_array().is_none_or(Vec::is_empty));
    let warned = doc["warnings"].as_array().unwrap().iter();
    assert!(warned
        .filter_map(Value::as_str)
        .any(|w| w.contains("--optimizer drop")));
    check_training_file(&input, &out, (&plan, &doc), (&TRAIN_WEIGHTS, None));
}

#[test]
fn a_tied_torch_training_file_stays_tied_and_its_one_parameters_moments_follow_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(50));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok005\ntok006\ntok049").unwrap();
    let weights = ["model.transformer.wte.weight", "model.lm_head.weight"];
    let moments: Vec<String> = ["exp_avg", "exp_avg_sq"]
        .iter()
        .map(|m| format!("optimizer.state.0.{m}"))
        .collect();
    for input in [
        "resume/tied_gpt2_adamw.pt",
        "resume/tied_gpt2_adamw_legacy.pt",
    ] {
        let out = dir.path().join(input.replace('/', "_"));
        let args = [
            "--tokenizer",
            tok.to_str().unwrap(),
            "--keep-list",
            list.to_str().unwrap(),
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let (plan, doc) = plan_and_run("trim-vocab", &testdata(input), &out, &args);
        let what = (&weights[..], Some(&moments[..]));
        check_training_file(&testdata(input), &out, (&plan, &doc), what);
        let back = ckpt_surgery::formats::open_tensors(&out, &Default::default()).unwrap();
        let tied = ckpt_surgery::ties::same_storage(&back);
        assert!(tied.iter().any(|t| t.names == weights), "{input}: {tied:?}");
    }
}

/// A ZeRO save root's parameters as our reader gives them: (shape, module tensor bytes and
/// dtype, fp32 master copy, moments by key), all ranks' partitions joined.
struct ZeroParam {
    shape: Vec<u64>,
    module: (Vec<u8>, ckpt_surgery::dtype::DType),
    master: Vec<u8>,
    moments: BTreeMap<String, Vec<u8>>,
}

fn zero_params(dir: &Path) -> BTreeMap<String, ZeroParam> {
    let ckpt_surgery::formats::Checkpoint::Zero { zero, .. } =
        ckpt_surgery::formats::open(dir, &Default::default()).unwrap()
    else {
        panic!("{dir:?} is not a ZeRO checkpoint")
    };
    let z = zero.get().unwrap();
    z.params
        .iter()
        .map(|p| {
            // Stage 3 keeps no whole module: its model is the master copy in the training dtype.
            let module = z.module_tensor(&p.name).map_or_else(
                || (Vec::new(), z.model_dtype()),
                |t| (common::bytes(&t).into_owned(), t.dtype),
            );
            let moments = z
                .moment_keys()
                .into_iter()
                .map(|k| (k.to_string(), z.moment(p, k).unwrap()))
                .collect();
            let param = ZeroParam {
                shape: p.shape.clone(),
                module,
                master: z.master(p).unwrap(),
                moments,
            };
            (p.name.clone(), param)
        })
        .collect()
}

/// f32 bytes of `bytes` in `dtype` (a made row of the module, as its master copy must hold it).
fn as_f32(bytes: &[u8], dtype: ckpt_surgery::dtype::DType) -> Vec<u8> {
    let n = bytes.len() / (dtype.bits() / 8) as usize;
    let mut v = vec![0f64; n];
    ckpt_surgery::dtype::decode_row_f64(dtype, bytes, &mut v).unwrap();
    v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()
}

/// f32 bytes `bytes` encoded in `dtype`.
fn to(bytes: &[u8], dtype: ckpt_surgery::dtype::DType) -> Vec<u8> {
    let mut v = vec![0f64; bytes.len() / 4];
    ckpt_surgery::dtype::decode_row_f64(ckpt_surgery::dtype::DType::F32, bytes, &mut v).unwrap();
    let mut out = vec![0u8; v.len() * (dtype.bits() / 8) as usize];
    ckpt_surgery::dtype::encode_row_f64(dtype, &v, &mut out).unwrap();
    out
}

/// A ZeRO output against its input: each vocabulary parameter's module rows, master rows and
/// moment rows gathered (master made rows = the module's made rows in f32, moments' zero),
/// `param_shapes` at the new rows; every other parameter's module, master and moments the input's.
fn check_zero(input: &Path, out: &Path, plan: &Value, vocab: &[&str]) {
    let map = new_to_old(plan);
    assert!(map.iter().any(Option::is_none) && map.iter().any(Option::is_some));
    let (before, after) = (zero_params(input), zero_params(out));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (name, b) in &before {
        let a = &after[name];
        if !vocab.contains(&name.as_str()) {
            assert_eq!(a.shape, b.shape, "{name}");
            assert_eq!(
                (&a.module, &a.master, &a.moments),
                (&b.module, &b.master, &b.moments)
            );
            continue;
        }
        let with = |bytes: &Vec<u8>| (b.shape.clone(), bytes.clone());
        let got = |bytes: &Vec<u8>| (a.shape.clone(), bytes.clone());
        assert_eq!(a.shape[0], map.len() as u64, "{name}: param_shapes");
        if !b.module.0.is_empty() {
            assert_gathered(name, &with(&b.module.0), &got(&a.module.0), &map, false);
        }
        assert_gathered(name, &with(&b.master), &got(&a.master), &map, false);
        for (k, m) in &b.moments {
            assert_gathered(
                &format!("{name} {k}"),
                &with(m),
                &got(&a.moments[k]),
                &map,
                true,
            );
        }
        let (module, master) = (got(&a.module.0), got(&a.master));
        let master = rows_of(&master);
        let module = if a.module.0.is_empty() {
            Vec::new()
        } else {
            rows_of(&module)
        };
        for (n, o) in map.iter().enumerate() {
            if o.is_none() && module.is_empty() {
                // ZeRO-3: the made row was encoded once in the training dtype, so its master
                // copy survives the round trip through it unchanged.
                assert_eq!(master[n], as_f32(&to(master[n], a.module.1), a.module.1));
            } else if o.is_none() {
                assert_eq!(
                    master[n],
                    as_f32(module[n], a.module.1),
                    "{name}: made row {n}"
                );
            }
        }
    }
}

#[test]
fn a_zero_checkpoints_master_copies_and_moments_follow_their_tokens_when_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(999));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok002\ntok010\ntok500\ntok501\ntok998").unwrap();
    for input in ["zero/zero1", "zero/zero2_bf16", "zero/zero3"] {
        let out = dir.path().join(input.replace('/', "_"));
        let args = [
            "--tokenizer",
            tok.to_str().unwrap(),
            "--keep-list",
            list.to_str().unwrap(),
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let (plan, doc) = plan_and_run("trim-vocab", &testdata(input), &out, &args);
        assert_eq!(doc["new_rows"], 8, "{input}");
        check_zero(
            &testdata(input),
            &out,
            &plan,
            &["embed.weight", "head.weight"],
        );
    }
}

#[test]
fn a_zero_checkpoints_master_copies_and_moments_follow_their_tokens_when_transplanted() {
    let dir = tempfile::tempdir().unwrap();
    let old = words(999);
    let base = word_level(dir.path(), "base.json", &old);
    let mut new: Vec<String> = [0, 998, 7, 500].iter().map(|&i| old[i].clone()).collect();
    new.insert(1, "fresh_a".into());
    new.push("fresh_b".into());
    let new_tok = word_level(dir.path(), "new.json", &new);
    let args = [
        "--base-tokenizer",
        base.to_str().unwrap(),
        "--tokenizer",
        new_tok.to_str().unwrap(),
        "--allow-shrink",
    ];
    for name in ["zero/zero2_bf16", "zero/zero3"] {
        let (input, out) = (testdata(name), dir.path().join(name.replace('/', "_")));
        let (plan, _) = plan_and_run("transplant-tokenizer", &input, &out, &args);
        let map = new_to_old(&plan);
        assert_eq!(&map[..3], &[Some(0), None, Some(998)], "{name}");
        check_zero(&input, &out, &plan, &["embed.weight", "head.weight"]);
    }
    // --optimizer drop: ZeRO-3's master copies are the weights it trains; refused, nothing written.
    let out = dir.path().join("dropped");
    let drop: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--optimizer", "drop"])
        .collect();
    let (code, _, err) = run_job("transplant-tokenizer", &testdata("zero/zero3"), &out, &drop);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("master weights"), "{err}");
    assert!(!out.exists());
}

/// A Hugging Face Trainer checkpoint of a DeepSpeed run: the ZeRO save root with the
/// consolidated weights, config, tokenizer and Trainer files beside `global_step*/`. The weights
/// are DeepSpeed's own full fp32 view of the fixture's parameters (a bf16 module for
/// zero2_bf16: the made rows cross dtypes).
fn zero_trainer_folder(dir: &Path, fixture: &str, tok: &Path) -> PathBuf {
    let root = dir.join(format!("{}_trainer", fixture.replace('/', "_")));
    common::copy_tree(&testdata(fixture), &root);
    std::fs::copy(
        testdata(&format!("{fixture}.fp32.safetensors")),
        root.join("model.safetensors"),
    )
    .unwrap();
    std::fs::copy(tok, root.join("tokenizer.json")).unwrap();
    let config = serde_json::json!({"vocab_size": 999, "bos_token_id": 2, "eos_token_id": 998});
    std::fs::write(root.join("config.json"), config.to_string()).unwrap();
    std::fs::write(root.join("trainer_state.json"), b"{\"global_step\": 1}").unwrap();
    let script = root.join("zero_to_fp32.py");
    std::fs::write(&script, b"#!/usr/bin/env python\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    root
}

/// The weights beside a ZeRO save root gathered by the plan's map (made rows left to the init).
fn check_beside(input: &Path, out: &Path, map: &[Option<u64>]) {
    let (before, after) = (
        torch_tensors(&input.join("model.safetensors")),
        torch_tensors(&out.join("model.safetensors")),
    );
    for (name, b) in &before {
        if name.ends_with(".weight") && b.0[0] == 999 {
            assert_gathered(name, b, &after[name], map, false);
        } else {
            assert_eq!(&after[name], b, "{name}");
        }
    }
}

#[test]
fn a_deepspeed_trainer_checkpoints_weights_and_zero_state_follow_their_tokens_into_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(999));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok002\ntok010\ntok500\ntok501\ntok998").unwrap();
    for fixture in ["zero/zero1", "zero/zero2_bf16", "zero/zero3"] {
        let input = zero_trainer_folder(dir.path(), fixture, &tok);
        let out = dir
            .path()
            .join(format!("{}_out", fixture.replace('/', "_")));
        let args = [
            "--keep-list",
            list.to_str().unwrap(),
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let (plan, doc) = plan_and_run("trim-vocab", &input, &out, &args);
        assert_eq!(doc["new_rows"], 8, "{fixture}");
        let map = new_to_old(&plan);
        check_zero(&input, &out, &plan, &["embed.weight", "head.weight"]);
        check_beside(&input, &out, &map);
        let config: Value =
            serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(config["vocab_size"], 8, "{fixture}");
        assert_eq!(
            config["eos_token_id"], 5,
            "{fixture}: tok998 is the sixth kept (tok000 is the unknown token)"
        );
        let trimmed = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
        assert_eq!(trimmed.token_to_id("tok998"), Some(5), "{fixture}");
        assert!(out.join("token_map.json").is_file(), "{fixture}");
        for same in ["latest", "trainer_state.json", "zero_to_fp32.py"] {
            assert_eq!(
                std::fs::read(out.join(same)).unwrap(),
                std::fs::read(input.join(same)).unwrap(),
                "{fixture}: {same}"
            );
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("zero_to_fp32.py"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o111,
            0o111,
            "{fixture}: DeepSpeed's script stays executable"
        );
    }
}

/// ZeRO-3 without `stage3_gather_16bit_weights_on_model_save` saves no weights beside
/// `global_step*/`: planned on the ZeRO state with the folder's tokenizer and config, one folder
/// comes out (config and tokenizer trimmed, never carried stale).
#[test]
fn a_deepspeed_trainer_checkpoint_without_weights_comes_out_as_one_consistent_folder() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(999));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok002\ntok010\ntok998").unwrap();
    let input = zero_trainer_folder(dir.path(), "zero/zero3", &tok);
    std::fs::remove_file(input.join("model.safetensors")).unwrap();
    let out = dir.path().join("out");
    let list = list.to_str().unwrap();
    let args = [
        "--keep-list",
        list,
        "--allow-shrink",
        "--pad-to-multiple-of",
        "8",
    ];
    let (plan, doc) = plan_and_run("trim-vocab", &input, &out, &args);
    assert_eq!(doc["new_rows"], 8);
    check_zero(&input, &out, &plan, &["embed.weight", "head.weight"]);
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (&config["vocab_size"], &config["eos_token_id"]),
        (&8.into(), &3.into())
    );
    let trimmed = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    assert_eq!(trimmed.get_vocab_size(true), 4);
    assert!(out.join("token_map.json").is_file());
    assert!(
        !out.join("model.safetensors").exists(),
        "no weights made up"
    );
    for same in ["latest", "trainer_state.json", "zero_to_fp32.py"] {
        assert_eq!(
            std::fs::read(out.join(same)).unwrap(),
            std::fs::read(input.join(same)).unwrap(),
            "{same}"
        );
    }
}

#[test]
fn a_deepspeed_trainer_checkpoints_weights_and_zero_state_follow_their_tokens_when_transplanted() {
    let dir = tempfile::tempdir().unwrap();
    let old = words(999);
    let base = word_level(dir.path(), "base.json", &old);
    let mut new: Vec<String> = [0, 998, 7, 500, 2]
        .iter()
        .map(|&i| old[i].clone())
        .collect();
    new.insert(1, "fresh_a".into());
    let new_tok = word_level(dir.path(), "new.json", &new);
    let input = zero_trainer_folder(dir.path(), "zero/zero2_bf16", &base);
    let out = dir.path().join("out");
    let args = ["--tokenizer", new_tok.to_str().unwrap(), "--allow-shrink"];
    let (plan, _) = plan_and_run("transplant-tokenizer", &input, &out, &args);
    let map = new_to_old(&plan);
    assert_eq!(&map[..3], &[Some(0), None, Some(998)]);
    check_zero(&input, &out, &plan, &["embed.weight", "head.weight"]);
    check_beside(&input, &out, &map);
    // The made row: the weights beside hold it in f32, the module in bf16, the master copy is
    // the module's row in f32.
    let after = zero_params(&out);
    let e = &after["embed.weight"];
    let weights = torch_tensors(&out.join("model.safetensors"));
    let made = &rows_of(&weights["embed.weight"])[1];
    let module = (e.shape.clone(), e.module.0.clone());
    assert_eq!(rows_of(&module)[1].to_vec(), to(made, e.module.1));
}

#[test]
fn zero_and_dcp_are_refused_where_the_optimizer_cannot_follow_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(999));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok002\ntok010").unwrap();
    let out = dir.path().join("out");
    let base = [
        "--tokenizer",
        tok.to_str().unwrap(),
        "--keep-list",
        list.to_str().unwrap(),
        "--allow-shrink",
    ];
    let drop: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--optimizer", "drop"])
        .collect();
    let cases: [(&str, &[&str], &str); 3] = [
        ("zero/zero1", &drop, "master weights"),
        ("zero/zero3", &drop, "master weights"),
        ("dcp/single", &drop, "Distributed Checkpoint"),
    ];
    for (input, args, want) in cases {
        let (code, _, err) = run_job("trim-vocab", &testdata(input), &out, args);
        assert_eq!(code, Some(2), "{input}: {err}");
        assert!(err.contains(want), "{input}: {err}");
        assert!(!out.exists(), "{input}: wrote");
    }
}

/// A DCP folder's tensors by their flattened keys, assembled by our reader.
fn dcp_tensors(dir: &Path) -> Tensors {
    use ckpt_surgery::formats::dcp::{Dcp, ItemKind};
    let d = Dcp::open(dir).unwrap();
    d.items
        .iter()
        .filter_map(|it| match &it.kind {
            ItemKind::Tensor { shape, .. } => {
                Some((it.fqn.clone(), (shape.clone(), d.tensor_bytes(it).unwrap())))
            }
            ItemKind::Bytes { .. } => None,
        })
        .collect()
}

/// A DCP output against its input: the vocabulary matrices and their moments gathered (new ids'
/// moments zero), every other tensor the input's.
fn check_dcp(input: &Path, out: &Path, plan: &Value, gathered: &[&str]) {
    let map = new_to_old(plan);
    assert!(map.iter().any(Option::is_none) && map.iter().any(Option::is_some));
    let (before, after) = (dcp_tensors(input), dcp_tensors(out));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (name, b) in &before {
        if gathered.contains(&name.as_str()) {
            let moment = name.starts_with("optim.");
            assert_gathered(name, b, &after[name], &map, moment);
        } else {
            assert_eq!(&after[name], b, "{name} is the input's");
        }
    }
}

const DCP_VOCAB: [&str; 4] = [
    "model.tok_embeddings.weight",
    "model.output.weight",
    "optim.state.tok_embeddings.weight.exp_avg",
    "optim.state.tok_embeddings.weight.exp_avg_sq",
];
const DCP_HEAD_MOMENTS: [&str; 2] = [
    "optim.state.output.weight.exp_avg",
    "optim.state.output.weight.exp_avg_sq",
];

#[test]
fn a_dcp_folders_moments_follow_their_tokens_when_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let tok = word_level(dir.path(), "tok.json", &words(999));
    let list = dir.path().join("keep.txt");
    std::fs::write(&list, "tok002\ntok010\ntok500\ntok501\ntok998").unwrap();
    // single: an untied model saved by one process; fsdp2: a tied one sharded by rows on two.
    for (input, untied) in [("dcp/single", true), ("dcp/fsdp2", false)] {
        let out = dir.path().join(input.replace('/', "_"));
        let args = [
            "--tokenizer",
            tok.to_str().unwrap(),
            "--keep-list",
            list.to_str().unwrap(),
            "--allow-shrink",
            "--pad-to-multiple-of",
            "8",
        ];
        let (plan, doc) = plan_and_run("trim-vocab", &testdata(input), &out, &args);
        assert_eq!(doc["new_rows"], 8, "{input}");
        let mut gathered = DCP_VOCAB.to_vec();
        if untied {
            gathered.extend(DCP_HEAD_MOMENTS);
        }
        check_dcp(&testdata(input), &out, &plan, &gathered);
    }
}

#[test]
fn a_dcp_folders_moments_follow_their_tokens_when_transplanted() {
    let dir = tempfile::tempdir().unwrap();
    let old = words(999);
    let base = word_level(dir.path(), "base.json", &old);
    let mut new: Vec<String> = [0, 998, 7, 500].iter().map(|&i| old[i].clone()).collect();
    new.insert(1, "fresh_a".into());
    new.push("fresh_b".into());
    let new_tok = word_level(dir.path(), "new.json", &new);
    let input = testdata("dcp/single");
    let out = dir.path().join("out");
    let args = [
        "--base-tokenizer",
        base.to_str().unwrap(),
        "--tokenizer",
        new_tok.to_str().unwrap(),
        "--allow-shrink",
    ];
    let (plan, _) = plan_and_run("transplant-tokenizer", &input, &out, &args);
    let map = new_to_old(&plan);
    assert_eq!(&map[..3], &[Some(0), None, Some(998)]);
    let gathered: Vec<&str> = DCP_VOCAB.iter().chain(&DCP_HEAD_MOMENTS).copied().collect();
    check_dcp(&input, &out, &plan, &gathered);
}
