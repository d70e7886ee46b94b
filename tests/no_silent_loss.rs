//! Issue 43, points 1–3: no writer destroys data with exit 0. Removing trained weight rows needs
//! `--allow-shrink` (every sanitize layout; check-vocab's fixes say so and `--fix` never runs one
//! unasked); an output inside an input folder, or holding an input, is refused (symlinks
//! resolved); a carried file the output's consumer parses and that does not parse is refused.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Copy a folder and its subfolders.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, dest).unwrap();
        }
    }
}

/// inspect-checkpoint (the strict reader) reads `path`, and its vocabulary matrices have `want`
/// rows, none `old`: some tensor's shape starts with `want`, none with `old`.
fn assert_rows(path: &Path, want: u64, old: u64) {
    let (code, r, err) = run_json(
        "inspect-checkpoint",
        &[
            path.as_os_str(),
            "--allow-global".as_ref(),
            "argparse.Namespace".as_ref(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let text = r.to_string();
    assert!(
        text.contains(&format!("[{want},")),
        "{}: no [{want}, …]",
        path.display()
    );
    assert!(
        !text.contains(&format!("[{old},")),
        "{}: still [{old}, …]",
        path.display()
    );
}

#[test]
fn sanitize_refuses_to_cut_trained_weight_rows_in_every_layout_without_allow_shrink() {
    // (input, its rows, a vocabulary tensor the refusal names)
    let cases = [
        ("torch/train_ckpt.pt", 100, "text_emb.weight"),
        ("trainer/checkpoint-2", 1000, "transformer.wte.weight"),
        ("dcp/single", 999, "model.tok_embeddings.weight"),
        ("zero/zero1", 999, "embed.weight"),
    ];
    for (rel, rows, tensor) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let input = testdata(rel);
        let out = tmp.path().join("out");
        let target = (rows - 10).to_string();
        let base = [
            "--vocab-rows",
            &target,
            "--allow-global",
            "argparse.Namespace",
        ];
        let (code, r, err) = run_job("sanitize-checkpoint", &input, &out, &base);
        assert_eq!(code, Some(2), "{rel}: {err}");
        assert_eq!(err.lines().count(), 1, "{rel}: {err}");
        for needle in [
            "--allow-shrink",
            tensor,
            &rows.to_string(),
            &target,
            input.to_str().unwrap(),
        ] {
            assert!(err.contains(needle), "{rel}: no {needle:?} in {err}");
        }
        assert_eq!(r["kind"], "usage", "{rel}: {r}");
        assert!(!out.exists(), "{rel}: something was written");
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "{rel}: a temp file was left"
        );
        // Asked for: written, and the strict reader reads the new row count back.
        let mut asked = base.to_vec();
        asked.push("--allow-shrink");
        let (code, r, err) = run_job("sanitize-checkpoint", &input, &out, &asked);
        assert_eq!(code, Some(0), "{rel}: {err}");
        assert_rows(&out, rows - 10, rows);
        if rel.starts_with("trainer/") {
            // Its config.json's bos/eos 999 now lie past the 990 rows: said, not silently kept.
            let w = r["warnings"].to_string();
            assert!(
                w.contains("config.json: bos_token_id 999 is past the 990 rows"),
                "{w}"
            );
        }
    }
}

#[test]
fn sanitize_dry_run_refuses_a_cut_as_the_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.pt");
    let (code, _, err) = run_job(
        "sanitize-checkpoint",
        &testdata("torch/train_ckpt.pt"),
        &out,
        &[
            "--vocab-rows",
            "90",
            "--dry-run",
            "--allow-global",
            "argparse.Namespace",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--allow-shrink"), "{err}");
}

#[test]
fn check_vocab_offers_a_weight_cut_only_with_allow_shrink_and_fix_never_runs_it_unasked() {
    // A training file of 100 rows checked against an 84-id tokenizer: the rows past the ids
    // are not padding, and the fix that cuts them must say --allow-shrink (it would fail
    // without) and never run under plain --fix.
    let tok = testdata("tokenizers/amharic_addition.json");
    let ck = testdata("torch/train_ckpt.pt");
    let globals = ["--allow-global", "argparse.Namespace"].map(std::ffi::OsStr::new);
    let (_, r, err) = run_json(
        "check-vocab",
        &[
            ck.as_os_str(),
            "--tokenizer".as_ref(),
            tok.as_os_str(),
            globals[0],
            globals[1],
        ],
    );
    let findings = r["findings"].as_array().expect(&err);
    let cut: Vec<&Value> = findings
        .iter()
        .filter(|f| f["action"]["vocab_rows"] == 84 || f["action"]["rows"] == 84)
        .collect();
    assert!(!cut.is_empty(), "no fix to 84 rows: {r}");
    for f in &cut {
        let fix = f["fix"].as_str().unwrap();
        assert!(fix.contains("--allow-shrink"), "{fix}");
        assert_eq!(f["action"]["allow_shrink"], true, "{f}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (_, r, err) = run_json(
        "check-vocab",
        &[
            ck.as_os_str(),
            "--tokenizer".as_ref(),
            tok.as_os_str(),
            "--fix".as_ref(),
            "--output".as_ref(),
            out.as_os_str(),
            globals[0],
            globals[1],
        ],
    );
    assert_eq!(r["executed"], serde_json::json!([]), "{r} {err}");
    let skipped = r["skipped"].to_string();
    assert!(skipped.contains("cuts trained rows"), "{skipped}");
    assert!(!out.exists(), "--fix wrote a cut");
    // Named, it runs (the user asked for the cut), and the fix works as printed.
    let (code, r, err) = run_json(
        "check-vocab",
        &[
            ck.as_os_str(),
            "--tokenizer".as_ref(),
            tok.as_os_str(),
            "--fix".as_ref(),
            "--fix-only".as_ref(),
            "1".as_ref(),
            "--output".as_ref(),
            out.as_os_str(),
            globals[0],
            globals[1],
        ],
    );
    assert_eq!(code, Some(0), "{r} {err}");
    assert_rows(&out, 84, 100);
}

#[test]
fn an_output_inside_an_input_folder_or_holding_one_is_refused_by_every_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("gpt2_base");
    copy_dir(&testdata("gpt2"), &model);
    let trainer = tmp.path().join("checkpoint-2");
    copy_dir(&testdata("trainer/checkpoint-2"), &trainer);
    let dcp = tmp.path().join("dcp");
    copy_dir(&testdata("dcp/fsdp2"), &dcp);
    let zero = tmp.path().join("zero1");
    copy_dir(&testdata("zero/zero1"), &zero);
    std::os::unix::fs::symlink(&model, tmp.path().join("link")).unwrap();
    let before = snapshot(tmp.path());
    let grow = ["--new-rows", "1010"];
    let rows = ["--vocab-rows", "1010"];
    let cases: Vec<(&str, PathBuf, PathBuf, Vec<&str>)> = vec![
        (
            "extend-embeddings",
            model.clone(),
            model.join("sub"),
            grow.to_vec(),
        ),
        (
            "extend-embeddings",
            model.clone(),
            tmp.path().join("link/sub/deeper"),
            grow.to_vec(),
        ),
        // The input inside OUT: --overwrite would have removed the input with the old OUT.
        (
            "extend-embeddings",
            model.clone(),
            tmp.path().to_path_buf(),
            vec!["--new-rows", "1010", "--overwrite"],
        ),
        (
            "sanitize-checkpoint",
            trainer.clone(),
            trainer.join("x"),
            rows.to_vec(),
        ),
        (
            "sanitize-checkpoint",
            trainer.clone(),
            tmp.path().to_path_buf(),
            vec!["--vocab-rows", "1010", "--overwrite"],
        ),
        (
            "sanitize-checkpoint",
            dcp.clone(),
            dcp.join("grown"),
            rows.to_vec(),
        ),
        (
            "sanitize-checkpoint",
            zero.clone(),
            zero.join("global_step1/out"),
            rows.to_vec(),
        ),
        (
            "vocab-blocks",
            model.clone(),
            model.join("blocks"),
            vec!["--split", "transformer.wte.weight", "--at", "500"],
        ),
    ];
    for (tool, input, out, extra) in cases {
        let (code, r, err) = run_job(tool, &input, &out, &extra);
        assert_eq!(code, Some(2), "{tool} {}: {err}", out.display());
        assert!(
            err.contains("--output") || r["flag"] == "--output" || err.contains("input"),
            "{tool}: {err}"
        );
        assert!(err.contains("input"), "{tool}: {err}");
        assert_eq!(
            snapshot(tmp.path()),
            before,
            "{tool} {} wrote",
            out.display()
        );
    }
    // merge-tokenizers: the output is the base (through the link) or a check text's folder.
    let o = run(
        "merge-tokenizers",
        &[
            "--base".as_ref(),
            model.join("tokenizer.json").as_os_str(),
            "--add".as_ref(),
            testdata("tokenizers/gpt2_addition.txt").as_os_str(),
            "--output".as_ref(),
            tmp.path().join("link/tokenizer.json").as_os_str(),
            "--overwrite".as_ref(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn a_carried_tokenizer_json_that_does_not_parse_is_refused_unless_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("in");
    copy_dir(&testdata("gpt2"), &model);
    let tok = model.join("tokenizer.json");
    let text = std::fs::read(&tok).unwrap();
    std::fs::write(&tok, &text[..text.len() / 2]).unwrap();
    let out = tmp.path().join("out");
    let (code, r, err) = run_job("extend-embeddings", &model, &out, &["--new-rows", "1010"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("tokenizer.json") && err.contains("JSON"),
        "{err}"
    );
    assert_eq!(r["kind"], "bad-input", "{r}");
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "temp left"
    );
    // Replaced by the run (--tokenizer): the broken one is not carried, so nothing to refuse.
    let merged = merged_gpt2_tokenizer(tmp.path());
    let (code, _, err) = run_job(
        "extend-embeddings",
        &model,
        &out,
        &["--tokenizer", merged.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(out.join("tokenizer.json")).unwrap(),
        std::fs::read(&merged).unwrap()
    );
    // The same for a Trainer folder's tokenizer_config.json under sanitize-checkpoint.
    let trainer = tmp.path().join("checkpoint-2");
    copy_dir(&testdata("trainer/checkpoint-2"), &trainer);
    std::fs::write(
        trainer.join("tokenizer_config.json"),
        b"{\"model_max_length\": ",
    )
    .unwrap();
    let out = tmp.path().join("t-out");
    let (code, _, err) = run_job(
        "sanitize-checkpoint",
        &trainer,
        &out,
        &["--vocab-rows", "1010"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("tokenizer_config.json"), "{err}");
    assert!(!out.exists());
}

#[test]
fn progress_goes_to_a_log_as_plain_lines_when_stderr_is_not_a_terminal() {
    // Issue 43 point 9: logs (Slurm, CI) saw nothing until the end. With the interval at 0 s
    // (the default is ~10 s) every update prints a line; stderr here is a pipe.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_extend-embeddings"))
        .arg(testdata("chatterbox_t3/t3_f32.safetensors"))
        .args(["--new-rows", "2600", "--output"])
        .arg(&out)
        .env("CKPT_SURGERY_PROGRESS_SECS", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("writing: ")).collect();
    assert!(!lines.is_empty(), "no progress line: {err}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" MB (") && l.ends_with(" s")),
        "{lines:?}"
    );
    assert!(
        !err.contains('\r') && !err.contains("\u{1b}["),
        "a bar was drawn: {err:?}"
    );
}
