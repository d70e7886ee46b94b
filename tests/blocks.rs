//! vocab-blocks: split a vocabulary matrix into frozen / trainable blocks and join them back,
//! byte for byte, on files written by the real torch and safetensors (testdata/audio).

mod common;
use ckpt_surgery::formats;
use common::*;
use std::path::Path;

fn blocks(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    run_job("vocab-blocks", input, out, extra)
}

fn ok(input: &Path, out: &Path, extra: &[&str]) {
    let (code, _, err) = blocks(input, out, extra);
    assert_eq!(code, Some(0), "{err}");
}

/// A new folder `n` under `tmp`.
fn dir(tmp: &tempfile::TempDir, n: &str) -> std::path::PathBuf {
    let d = tmp.path().join(n);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const CODEBOOKS: &str = "audio_codebook_embeddings.weight";

#[test]
fn a_split_then_a_join_gives_back_the_file_and_the_reverse() {
    let tmp = tempfile::tempdir().unwrap();
    let name = CODEBOOKS;

    // safetensors written by the reference writer: join(split(X)) is X.
    let x = testdata("audio/codebooks.safetensors");
    let s = dir(&tmp, "s1").join("codebooks.safetensors");
    let (code, r, err) = blocks(&x, &s, &["--split", name, "--at", "5000"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["to"][0]["name"], format!("{name}_frozen"));
    assert_eq!(r["to"][0]["shape"], serde_json::json!([5000, 16]));
    assert_eq!(r["to"][1]["shape"], serde_json::json!([3208, 16]));
    let j = dir(&tmp, "s2").join("codebooks.safetensors");
    ok(&s, &j, &["--join", name]);
    assert_eq!(std::fs::read(&j).unwrap(), std::fs::read(&x).unwrap());
    // The blocks are the matrix's rows, every other tensor untouched.
    let (a, b) = (
        formats::open_tensors(&x, &Default::default()).unwrap(),
        formats::open_tensors(&s, &Default::default()).unwrap(),
    );
    let whole = a.tensor(name).unwrap().try_bytes().unwrap().into_owned();
    let mut cat = b
        .tensor(&format!("{name}_frozen"))
        .unwrap()
        .try_bytes()
        .unwrap()
        .into_owned();
    cat.extend_from_slice(
        &b.tensor(&format!("{name}_unfrozen"))
            .unwrap()
            .try_bytes()
            .unwrap(),
    );
    assert_eq!(cat, whole);

    // A split model written by torch (weight_frozen + weight_unfrozen): split(join(S)) is S.
    let sm = testdata("audio/split_model.safetensors");
    let joined = dir(&tmp, "m1").join("split_model.safetensors");
    ok(
        &sm,
        &joined,
        &[
            "--join",
            "text_emb.weight",
            "--names",
            "text_emb.weight_frozen,text_emb.weight_unfrozen",
        ],
    );
    let width = formats::open_tensors(&sm, &Default::default())
        .unwrap()
        .tensor("text_emb.weight_frozen")
        .unwrap()
        .shape[1];
    assert_eq!(
        formats::open_tensors(&joined, &Default::default())
            .unwrap()
            .tensor("text_emb.weight")
            .unwrap()
            .shape,
        [2535, width]
    );
    let again = dir(&tmp, "m2").join("split_model.safetensors");
    ok(
        &joined,
        &again,
        &["--split", "text_emb.weight", "--at", "2454"],
    );
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&sm).unwrap());
}

/// Every tensor of `path`, in order: name, shape (when asked) and bytes.
fn tensors_of(path: &Path, with_shape: bool) -> Vec<(String, Vec<u64>, Vec<u8>)> {
    formats::open_tensors(path, &Default::default())
        .unwrap()
        .tensors()
        .map(|t| {
            let shape = if with_shape {
                t.shape.to_vec()
            } else {
                Vec::new()
            };
            (
                t.name.to_string(),
                shape,
                t.try_bytes().unwrap().into_owned(),
            )
        })
        .collect()
}

#[test]
fn torch_files_round_trip_byte_for_byte_with_torch_saves_tensors() {
    // torch: the same values as torch.save's; our own files round-trip byte for byte.
    let tmp = tempfile::tempdir().unwrap();
    for (file, tensor, at, names) in [
        ("audio/codebooks.pt", CODEBOOKS, "5000", None),
        (
            "audio/split_model.pt",
            "text_emb.weight",
            "2454",
            Some("text_emb.weight_frozen,text_emb.weight_unfrozen"),
        ),
    ] {
        let input = testdata(file);
        let leaf = input.file_name().unwrap();
        let mut args: Vec<&str> = Vec::new();
        if let Some(n) = names {
            args.extend(["--names", n]);
        }
        let (t1, t2, t3) = (
            dir(&tmp, "t1").join(leaf),
            dir(&tmp, "t2").join(leaf),
            dir(&tmp, "t3").join(leaf),
        );
        let split = [&["--split", tensor, "--at", at][..], &args].concat();
        let join = [&["--join", tensor][..], &args].concat();
        if names.is_none() {
            ok(&input, &t1, &split);
            ok(&t1, &t2, &join);
            ok(&t2, &t3, &split);
            assert_eq!(
                std::fs::read(&t1).unwrap(),
                std::fs::read(&t3).unwrap(),
                "{file}: split(join(split))"
            );
            assert_eq!(
                tensors_of(&input, true),
                tensors_of(&t2, true),
                "{file}: join(split) has torch.save's tensors, in order"
            );
        } else {
            ok(&input, &t1, &join);
            ok(&t1, &t2, &split);
            ok(&t2, &t3, &join);
            assert_eq!(
                std::fs::read(&t1).unwrap(),
                std::fs::read(&t3).unwrap(),
                "{file}: join(split(join))"
            );
            assert_eq!(
                tensors_of(&input, false),
                tensors_of(&t2, false),
                "{file}: split(join) has torch.save's tensors, in order"
            );
        }
    }
}

#[test]
fn optimizer_state_a_split_outside_the_rows_and_blocks_of_two_matrices_are_refused() {
    // Refusals: an optimizer in the file (resuming across a split is out of scope), a split
    // point outside the rows, blocks that are not of one matrix.
    let tmp = tempfile::tempdir().unwrap();
    let (name, x) = (CODEBOOKS, testdata("audio/codebooks.safetensors"));
    let (code, _, err) = blocks(
        &testdata("resume/opt_adamw.pt"),
        &dir(&tmp, "r").join("x.pt"),
        &["--split", "model.text_emb.weight", "--at", "10"],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("optimizer state"), "{err}");
    let (code, _, err) = blocks(
        &x,
        &dir(&tmp, "r").join("y.safetensors"),
        &["--split", name, "--at", "8208"],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("two non-empty blocks"), "{err}");
    let (code, _, err) = blocks(
        &x,
        &dir(&tmp, "r").join("z.safetensors"),
        &[
            "--join",
            "j",
            "--names",
            &format!("{name},audio_decoder_proj.norm.weight"),
        ],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("not blocks of one matrix"), "{err}");
}

#[test]
fn the_dry_run_plan_names_the_blocks_and_shapes_the_run_then_writes() {
    let name = "audio_codebook_embeddings.weight";
    let x = testdata("audio/codebooks.safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("split.safetensors");
    let split = ["--split", name, "--at", "5000"];
    let dry: Vec<&str> = split.iter().copied().chain(["--dry-run"]).collect();
    let (code, plan, err) = blocks(&x, &out, &dry);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.exists(), "a dry run wrote");
    let (code, done, err) = blocks(&x, &out, &split);
    assert_eq!(code, Some(0), "{err}");
    let written = done["manifest"][0]["tensors"].as_array().unwrap();
    let shape_of = |n: &str| {
        written
            .iter()
            .find(|t| t["name"] == n)
            .map(|t| t["shape"].clone())
    };
    for b in plan["to"].as_array().unwrap() {
        assert_eq!(
            shape_of(b["name"].as_str().unwrap()),
            Some(b["shape"].clone())
        );
    }
    for b in plan["from"].as_array().unwrap() {
        assert_eq!(
            shape_of(b["name"].as_str().unwrap()),
            None,
            "{b} is replaced"
        );
    }
    let planned =
        plan["untouched_tensors"].as_u64().unwrap() as usize + plan["to"].as_array().unwrap().len();
    assert_eq!(written.len(), planned);
    assert_eq!(plan["to"], done["to"]);
}
