//! Resuming the training runs most users have (issue 31), on files written by the real
//! libraries (testdata/generate.py `resume_real_files`): an untied Llama trained by the Hugging
//! Face Trainer, the same model saved with a plain AdamW's optimizer.pt, parameters of one shape that need different
//! edits, and seed 001's moments of 24001 rows beside weights of 24000.

mod common;
use ckpt_surgery::formats::{self, Tensors};
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn open(p: &Path) -> Tensors {
    formats::open_tensors(p, &Default::default()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn sanitize(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_job("sanitize-checkpoint", input, out, extra)
}

fn check_vocab(args: &[&OsStr]) -> (Option<i32>, Value, String) {
    run_json("check-vocab", args)
}

/// `b` against `a`, tensor by tensor: those named in `changed` have `rows` rows, their old rows
/// bit-identical (the first min(old, rows)) and, for optimizer state, new rows zero; every
/// other tensor is byte-identical. Returns how many changed.
fn check_rows(a: &Tensors, b: &Tensors, changed: &[String], rows: u64) -> usize {
    let mut n = 0;
    for x in a.tensors() {
        let y = b
            .tensor(x.name)
            .unwrap_or_else(|| panic!("{} missing", x.name));
        if !changed.iter().any(|c| c == x.name) {
            assert_eq!(x.shape, y.shape, "{}", x.name);
            assert_eq!(
                x.try_bytes().unwrap(),
                y.try_bytes().unwrap(),
                "{} changed",
                x.name
            );
            continue;
        }
        n += 1;
        assert_eq!(y.shape[0], rows, "{}", x.name);
        assert_eq!(x.shape[1..], y.shape[1..], "{}", x.name);
        let (xb, yb) = (x.try_bytes().unwrap(), y.try_bytes().unwrap());
        let kept = xb.len().min(yb.len());
        assert_eq!(&yb[..kept], &xb[..kept], "old rows of {}", x.name);
        if x.name.contains("state.") {
            assert!(yb[kept..].iter().all(|&v| v == 0), "new rows of {}", x.name);
        }
    }
    n
}

/// The optimizer tensors the report says were repaired, and the model tensors it changed.
fn repaired(r: &Value) -> (Vec<String>, Vec<String>) {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["tensor"].as_str().unwrap().to_string())
            .collect()
    };
    (
        names(&r["optimizers"][0]["repaired"]),
        names(&r["model_changed"]),
    )
}

#[test]
fn an_untied_llama_trained_by_the_trainer_grows_both_matrices_and_their_moments() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_untied/checkpoint-2");
    let out = tmp.path().join("checkpoint-2");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "1064"]);
    assert_eq!(code, Some(0), "{err}");
    let how = r["optimizers"][0]["matched_by"].as_str().unwrap();
    assert!(how.contains("925 of 1000 rows"), "{how}");
    let (opt, model) = repaired(&r);
    // Both matrices (Trainer's indices 0 and 8: the decay group, in model order) and their
    // two moments each.
    assert_eq!(
        opt,
        [
            "state.0.exp_avg",
            "state.0.exp_avg_sq",
            "state.8.exp_avg",
            "state.8.exp_avg_sq"
        ]
    );
    assert_eq!(model, ["lm_head.weight", "model.embed_tokens.weight"]);
    let (a, b) = (
        open(&input.join("optimizer.pt")),
        open(&out.join("optimizer.pt")),
    );
    assert_eq!(check_rows(&a, &b, &opt, 1064), 4);
    let (a, b) = (
        open(&input.join("model.safetensors")),
        open(&out.join("model.safetensors")),
    );
    assert_eq!(check_rows(&a, &b, &model, 1064), 2);
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["vocab_size"], 1064);
    for f in [
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "training_args.bin",
    ] {
        assert_eq!(
            std::fs::read(input.join(f)).unwrap(),
            std::fs::read(out.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn an_untied_llama_folder_with_plain_adamw_grows_both_matrices_and_their_moments() {
    // save_pretrained (names sorted) + optimizer.pt of AdamW(model.parameters()): one group in
    // model order, which the sorted names do not show.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("untied_llama_adamw");
    let out = tmp.path().join("grown");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "1064"]);
    assert_eq!(code, Some(0), "{err}");
    // Model order: the embedding first, the head last; the embedding's moments say so (986 of
    // its 1000 rows never an input).
    assert_eq!(
        r["optimizers"][0]["vocabulary_params"],
        serde_json::json!([[0, "model.embed_tokens.weight"], [11, "lm_head.weight"]])
    );
    let (opt, model) = repaired(&r);
    assert_eq!(
        opt,
        [
            "state.0.exp_avg",
            "state.0.exp_avg_sq",
            "state.11.exp_avg",
            "state.11.exp_avg_sq"
        ]
    );
    let (a, b) = (
        open(&input.join("optimizer.pt")),
        open(&out.join("optimizer.pt")),
    );
    assert_eq!(check_rows(&a, &b, &opt, 1064), 4);
    let (a, b) = (
        open(&input.join("model.safetensors")),
        open(&out.join("model.safetensors")),
    );
    assert_eq!(check_rows(&a, &b, &model, 1064), 2);
}

#[test]
fn parameters_of_one_shape_needing_different_edits_are_refused_naming_the_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    // A tied GPT-2 whose position table wpe has the vocabulary's shape, trained by Trainer.
    let input = testdata("trainer_positions/checkpoint-2");
    let out = tmp.path().join("checkpoint-2");
    let (code, _, err) = sanitize(&input, &out, &["--vocab-rows", "1064"]);
    assert_eq!(code, Some(2), "{err}");
    for want in [
        "transformer.wte.weight [1000, 8]",
        "param 0 [1000, 8], param 1 [1000, 8]",
        "transformer.wpe.weight",
        "--optimizer-param transformer.wte.weight=INDEX",
        "--optimizer drop",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(!out.exists());
    // The user says which: wte is index 0 (Trainer's decay group in model order).
    let (code, r, err) = sanitize(
        &input,
        &out,
        &[
            "--vocab-rows",
            "1064",
            "--optimizer-param",
            "transformer.wte.weight=0",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (opt, _) = repaired(&r);
    assert_eq!(opt, ["state.0.exp_avg", "state.0.exp_avg_sq"]);
    let (a, b) = (
        open(&input.join("optimizer.pt")),
        open(&out.join("optimizer.pt")),
    );
    assert_eq!(check_rows(&a, &b, &opt, 1064), 2);
    // An index whose state is not the matrix's shape is refused.
    let bad = tmp.path().join("bad");
    let (code, _, err) = sanitize(
        &input,
        &bad,
        &[
            "--vocab-rows",
            "1064",
            "--optimizer-param",
            "transformer.wte.weight=2",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("param 2 is [8, 24]"), "{err}");
    assert!(!bad.exists());
}

#[test]
fn param_names_stored_by_torch_say_which_index_is_which() {
    let tmp = tempfile::tempdir().unwrap();
    // The same model as differ.pt, its AdamW built from named_parameters().
    let input = testdata("sanitize/differ_named.pt");
    let out = tmp.path().join("grown.pt");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "164"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        r["optimizers"][0]["vocabulary_params"],
        serde_json::json!([[0, "model.text_emb.weight"]])
    );
    assert!(r["optimizers"][0]["matched_by"]
        .as_str()
        .unwrap()
        .starts_with("param_names"));
    let (opt, model) = repaired(&r);
    let changed: Vec<String> = opt.iter().chain(&model).cloned().collect();
    // The position table and its moments keep their 100 rows.
    assert_eq!(check_rows(&open(&input), &open(&out), &changed, 164), 3);
    assert!(!changed
        .iter()
        .any(|c| c.contains("pos_emb") || c.contains("state.1.")));
}

#[test]
fn one_shape_one_edit_is_matched_whichever_index_holds_which() {
    // ambiguous.pt: embedding and head of one shape, a buffer that breaks positional matching.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/ambiguous.pt");
    let out = tmp.path().join("grown.pt");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "120"]);
    assert_eq!(code, Some(0), "{err}");
    let (opt, model) = repaired(&r);
    assert_eq!(opt.len(), 6, "{r}");
    let changed: Vec<String> = opt.iter().chain(&model).cloned().collect();
    let mut o = formats::OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    let (a, b) = (
        formats::open_tensors(&input, &o).unwrap(),
        formats::open_tensors(&out, &o).unwrap(),
    );
    assert_eq!(check_rows(&a, &b, &changed, 120), 9);
}

#[test]
fn seed_001_moments_of_24001_rows_beside_weights_of_24000_are_found_and_made_to_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/seed001.pt");
    let tok = testdata("check_vocab/seed001/tokenizer.json");
    // check-vocab: an error naming both sizes, exit 1.
    let (code, r, err) = check_vocab(&[
        input.as_os_str(),
        OsStr::new("--tokenizer"),
        tok.as_os_str(),
    ]);
    assert_eq!(code, Some(1), "{err} {r}");
    let f = &r["findings"][0];
    assert_eq!(f["check"], "optimizer-vs-weights", "{r}");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("[24001, 1]") && msg.contains("24000 rows"),
        "{msg}"
    );
    // sanitize: never "consistent"; the moments are cut to the weights' rows.
    let out = tmp.path().join("fixed.pt");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "24000"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["inconsistent_before"].as_array().unwrap().len(), 2, "{r}");
    let (opt, model) = repaired(&r);
    assert_eq!(
        opt,
        ["optimizer.state.0.exp_avg", "optimizer.state.0.exp_avg_sq"]
    );
    assert!(model.is_empty(), "{r}");
    assert_eq!(check_rows(&open(&input), &open(&out), &opt, 24000), 2);
    // The fix check-vocab printed, run as printed (output moved), passes check-vocab.
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("sanitize-checkpoint") && !fix.contains("drop"),
        "{fix}"
    );
    let (code, r, err) =
        check_vocab(&[out.as_os_str(), OsStr::new("--tokenizer"), tok.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {r}");
}

/// check-vocab on `folder` with the GPT-2 fixture's tokenizer grown by the real merge-tokenizers
/// (written into `dir`).
fn check_with_merged_tokenizer(folder: &Path, dir: &Path) -> (Option<i32>, Value, String) {
    let merged = merged_gpt2_tokenizer(dir);
    check_vocab(&[
        folder.as_os_str(),
        OsStr::new("--tokenizer"),
        merged.as_os_str(),
    ])
}

/// A Trainer folder whose optimizer.pt is another folder's (weights grown, moments not).
fn mixed_folder(dir: &Path, weights_from: &Path, optimizer_from: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(weights_from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    std::fs::copy(
        optimizer_from.join("optimizer.pt"),
        dir.join("optimizer.pt"),
    )
    .unwrap();
    dir.to_path_buf()
}

#[test]
fn check_vocab_reads_a_trainer_folders_optimizer_and_its_fix_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_untied/checkpoint-2");
    // The tokenizer grew: the fix grows the folder with its optimizer (sanitize, not extend).
    let (code, r, err) = check_with_merged_tokenizer(&input, tmp.path());
    assert_eq!(code, Some(1), "{err} {r}");
    let fixes: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["fix"].as_str())
        .collect();
    assert!(!fixes.is_empty(), "{r}");
    for fix in &fixes {
        assert!(
            fix.starts_with("sanitize-checkpoint")
                && fix.contains("--tokenizer")
                && !fix.contains("drop"),
            "{fix}"
        );
    }
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fixes[0], &out);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("optimizer.pt").is_file());
    let (code, r, err) = check_vocab(&[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {r}");

    // Weights grown, optimizer.pt left at the old rows: found without --training-checkpoint.
    let mixed = mixed_folder(&tmp.path().join("mixed"), &out, &input);
    let (code, r, err) = check_vocab(&[mixed.as_os_str()]);
    assert_eq!(code, Some(1), "{err} {r}");
    let f = &r["findings"][0];
    assert_eq!(f["check"], "optimizer-vs-weights", "{r}");
    assert!(f["message"].as_str().unwrap().contains("[1000, 8]"), "{r}");
}

#[test]
fn moments_of_another_parameter_left_at_other_rows_are_refused_and_found() {
    // The position table grew after training, its moments did not; param_names say which index
    // it is. Only vocabulary matrices are resized here, so sanitize refuses; check-vocab reports
    // it with the one fix that gets past it.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("sanitize/positions_resized.pt");
    let out = tmp.path().join("out.pt");
    let (code, _, err) = sanitize(&input, &out, &["--vocab-rows", "164"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("optimizer.state.1.exp_avg")
            && err.contains("[100, 4]")
            && err.contains("[120, 4]"),
        "{err}"
    );
    assert!(!out.exists());
    let (code, r, err) = check_vocab(&[input.as_os_str()]);
    assert_eq!(code, Some(1), "{err} {r}");
    let f = &r["findings"][0];
    assert_eq!(f["check"], "optimizer-vs-weights", "{r}");
    assert!(f["message"].as_str().unwrap().contains("[120, 4]"), "{r}");
    assert!(
        f["fix"].as_str().unwrap().contains("--optimizer drop"),
        "{r}"
    );
}

#[test]
fn when_only_a_fresh_optimizer_gets_past_sanitize_every_fix_works_when_run() {
    // trainer_positions: sanitize cannot tell wte's index from wpe's. The tokenizer-vs-embedding
    // fix must drop the optimizer too (or it would fail when run); naming the index is offered.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_positions/checkpoint-2");
    let (code, r, err) = check_with_merged_tokenizer(&input, tmp.path());
    assert_eq!(code, Some(1), "{err} {r}");
    let findings = r["findings"].as_array().unwrap();
    assert!(findings.len() >= 2, "{r}");
    for (n, f) in findings.iter().enumerate() {
        let fix = f["fix"].as_str().unwrap_or_else(|| panic!("no fix: {f}"));
        assert!(fix.contains("--optimizer drop"), "{fix}");
        let out = tmp.path().join(format!("fixed-{n}"));
        let (code, err) = run_fix(fix, &out);
        assert_eq!(code, Some(0), "`{fix}`: {err}");
        let (code, r, err) = check_vocab(&[out.as_os_str()]);
        assert_eq!(code, Some(0), "{err} {r}");
        // The smaller fix, with the index the user knows (Trainer's index 0 is wte), keeps it.
        let alt = f["alternatives"][0].as_str().unwrap();
        let cmd = &alt[alt.find("sanitize-checkpoint").unwrap()..];
        assert!(
            cmd.ends_with("--optimizer-param transformer.wte.weight=INDEX"),
            "{cmd}"
        );
        let cmd = cmd.replace("=INDEX", "=0");
        let kept = tmp.path().join(format!("kept-{n}"));
        let (code, err) = run_fix(&cmd, &kept);
        assert_eq!(code, Some(0), "`{cmd}`: {err}");
        assert!(kept.join("optimizer.pt").is_file());
        let (code, r, err) = check_vocab(&[kept.as_os_str()]);
        assert_eq!(code, Some(0), "{err} {r}");
    }
}

/// Of `name` (a [rows, cols] f32 tensor): how many of its first `old` rows and of the rest are
/// exactly zero.
fn zero_rows(c: &Tensors, name: &str, old: usize) -> (usize, usize) {
    let t = c.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
    let bytes = t.try_bytes().unwrap();
    let row = t.shape[1..].iter().product::<u64>() as usize * 4;
    let zero: Vec<bool> = bytes
        .chunks_exact(row)
        .map(|r| {
            r.chunks_exact(4)
                .all(|e| f32::from_le_bytes([e[0], e[1], e[2], e[3]]) == 0.0)
        })
        .collect();
    let count = |z: &[bool]| z.iter().filter(|&&z| z).count();
    (count(&zero[..old]), count(&zero[old..]))
}

/// sanitize-checkpoint's human report (stdout) and exit code.
fn sanitize_text(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![input.as_os_str(), OsStr::new("--output"), out.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    let o = run("sanitize-checkpoint", &args);
    (o.status.code(), stdout(&o) + &stderr(&o))
}

#[test]
fn a_trainer_folders_embedding_is_the_index_whose_moments_stay_zero_for_ids_never_input() {
    // Issue 43.5: Trainer's indices are model.embed_tokens 0 and lm_head 8 (the decay group in
    // module order); model.safetensors sorts lm_head first. 925 of the 1000 ids were never an
    // input, so the embedding's moments are exactly zero there; a softmax head's never are.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_untied/checkpoint-2");
    let out = tmp.path().join("json");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "1064"]);
    assert_eq!(code, Some(0), "{err}");
    let o = &r["optimizers"][0];
    assert_eq!(
        o["vocabulary_params"],
        serde_json::json!([[0, "model.embed_tokens.weight"], [8, "lm_head.weight"]]),
        "{o}"
    );
    assert!(o.get("same_shape").is_none(), "{o}");
    assert!(
        o["matched_by"]
            .as_str()
            .unwrap()
            .contains("param 0's exp_avg and exp_avg_sq are exactly zero in 925 of 1000 rows"),
        "{o}"
    );
    let (code, text) = sanitize_text(&input, &tmp.path().join("text"), &["--vocab-rows", "1064"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("param 0 = model.embed_tokens.weight, param 8 = lm_head.weight"),
        "{text}"
    );
    assert!(!text.contains("param 0 = lm_head"), "{text}");
    // The edit landed as reported: state 0 keeps the embedding's zero rows, new rows zero too.
    let b = open(&out.join("optimizer.pt"));
    for m in ["exp_avg", "exp_avg_sq"] {
        assert_eq!(
            zero_rows(&b, &format!("state.0.{m}"), 1000),
            (925, 64),
            "{m}"
        );
        assert_eq!(zero_rows(&b, &format!("state.8.{m}"), 1000), (0, 64), "{m}");
    }
    // check-vocab names each moment's owner the same way (weights grown, optimizer.pt not).
    let mixed = mixed_folder(&tmp.path().join("mixed"), &out, &input);
    let (code, r, err) = check_vocab(&[mixed.as_os_str()]);
    assert_eq!(code, Some(1), "{err} {r}");
    let o = run("check-vocab", &[mixed.as_os_str()]);
    for msg in [r["findings"][0]["message"].as_str().unwrap(), &stdout(&o)] {
        assert!(
            msg.contains("state.0.exp_avg (of model.embed_tokens.weight) [1000, 8]")
                && msg.contains("state.8.exp_avg (of lm_head.weight) [1000, 8]"),
            "{msg}"
        );
    }
}

#[test]
fn an_optimizer_param_the_moments_contradict_is_refused_and_one_they_agree_with_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_untied/checkpoint-2");
    for pin in ["lm_head.weight=0", "model.embed_tokens.weight=8"] {
        let out = tmp.path().join("refused");
        let (code, _, err) = sanitize(
            &input,
            &out,
            &["--vocab-rows", "1064", "--optimizer-param", pin],
        );
        assert_eq!(code, Some(2), "{pin}: {err}");
        assert!(
            err.contains("the moments say otherwise")
                && err.contains("model.embed_tokens.weight is param 0 and lm_head.weight param 8"),
            "{pin}: {err}"
        );
        assert!(!out.exists());
    }
    let out = tmp.path().join("pinned");
    let pin = "model.embed_tokens.weight=0";
    let (code, r, err) = sanitize(
        &input,
        &out,
        &["--vocab-rows", "1064", "--optimizer-param", pin],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        r["optimizers"][0]["vocabulary_params"],
        serde_json::json!([[0, "model.embed_tokens.weight"], [8, "lm_head.weight"]])
    );
}

#[test]
fn an_embedding_and_head_their_moments_cannot_tell_apart_are_reported_as_a_set_not_a_mapping() {
    // trainer_untied_seen: every id was an input, so no moment row of either is zero: nothing
    // says which of 0 and 8 is which. Both get the same edit; the report says no more than that.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("trainer_untied_seen/checkpoint-2");
    let out = tmp.path().join("json");
    let (code, r, err) = sanitize(&input, &out, &["--vocab-rows", "100"]);
    assert_eq!(code, Some(0), "{err}");
    let o = &r["optimizers"][0];
    assert_eq!(o["vocabulary_params"], serde_json::json!([]), "{o}");
    assert_eq!(
        o["same_shape"][0]["params"],
        serde_json::json!([0, 8]),
        "{o}"
    );
    assert_eq!(
        o["same_shape"][0]["names"],
        serde_json::json!(["lm_head.weight", "model.embed_tokens.weight"]),
        "{o}"
    );
    assert!(
        o["matched_by"]
            .as_str()
            .unwrap()
            .contains("by shape alone either order gives the same edit"),
        "{o}"
    );
    let (opt, model) = repaired(&r);
    assert_eq!(opt.len(), 4, "{r}");
    let (a, b) = (
        open(&input.join("optimizer.pt")),
        open(&out.join("optimizer.pt")),
    );
    assert_eq!(check_rows(&a, &b, &opt, 100), 4);
    assert_eq!(model.len(), 2);
    let (code, text) = sanitize_text(&input, &tmp.path().join("text"), &["--vocab-rows", "100"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("params 0 and 8 hold lm_head.weight and model.embed_tokens.weight, in an order nothing in the checkpoint shows"),
        "{text}"
    );
    assert!(
        !text.contains("param 0 =") && !text.contains("param 8 ="),
        "{text}"
    );
    // The user's word is taken where nothing contradicts it, and reported as theirs.
    let (code, r, err) = sanitize(
        &input,
        &tmp.path().join("pinned"),
        &[
            "--vocab-rows",
            "100",
            "--optimizer-param",
            "lm_head.weight=8",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let o = &r["optimizers"][0];
    assert_eq!(
        o["vocabulary_params"],
        serde_json::json!([[8, "lm_head.weight"], [0, "model.embed_tokens.weight"]]),
        "{o}"
    );
    assert!(
        o["matched_by"]
            .as_str()
            .unwrap()
            .starts_with("--optimizer-param"),
        "{o}"
    );
}
