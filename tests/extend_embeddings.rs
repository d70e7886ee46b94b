//! extend-embeddings on the shipped checkpoints: old rows bit-identical, new rows as the init
//! method says (against an f64 reference), every other tensor byte-identical, in every format.

mod common;
use ckpt_surgery::dtype::{decode_row_f64, encode_row_f64, DType};
use ckpt_surgery::formats::{self, Tensors};
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn extend(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_job("extend-embeddings", input, out, extra)
}

/// The merged Chatterbox + Amharic tokenizer (2535 ids), made by the real binary.
fn merged_tokenizer(dir: &Path) -> PathBuf {
    let out = dir.join("merged.json");
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            testdata("tokenizers/chatterbox_base.json").as_os_str(),
            OsStr::new("--add"),
            testdata("tokenizers/amharic_vocab.json").as_os_str(),
            OsStr::new("--output"),
            out.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

fn rows_f64(ckpt: &Tensors, name: &str) -> (DType, Vec<u64>, Vec<f64>) {
    let t = ckpt.tensor(name).unwrap();
    let mut v = vec![0f64; t.elements() as usize];
    decode_row_f64(t.dtype, &bytes(&t), &mut v).unwrap();
    (t.dtype, t.shape.to_vec(), v)
}

/// Column mean in f64, rounded once to `dtype`, as bytes.
fn mean_row_bytes(dtype: DType, v: &[f64], rows: usize, cols: usize) -> Vec<u8> {
    let mut mean = vec![0f64; cols];
    for r in 0..rows {
        for c in 0..cols {
            mean[c] += v[r * cols + c];
        }
    }
    let mean: Vec<f64> = mean.iter().map(|s| s / rows as f64).collect();
    let mut out = vec![0u8; cols * (dtype.bits() / 8) as usize];
    encode_row_f64(dtype, &mean, &mut out).unwrap();
    out
}

#[test]
fn t3_grows_2454_to_2535_from_the_merged_tokenizer_keeping_every_old_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = merged_tokenizer(tmp.path());
    for fixture in [
        "chatterbox_t3/t3_f32.safetensors",
        "chatterbox_t3/t3_bf16.safetensors",
    ] {
        let input = testdata(fixture);
        let out = tmp.path().join(fixture.replace('/', "_"));
        // The whole-file hash is asked for on one of the two.
        let whole = fixture.contains("bf16");
        let mut args = vec!["--tokenizer", merged.to_str().unwrap()];
        if whole {
            args.push("--file-sha256");
        }
        let (code, r, err) = extend(&input, &out, &args);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            (
                r["old_rows"].as_u64(),
                r["new_rows"].as_u64(),
                r["freeze_until_index"].as_u64()
            ),
            (Some(2454), Some(2535), Some(2454))
        );
        let before = formats::open_tensors(&input, &Default::default()).unwrap();
        let after = formats::open_tensors(&out, &Default::default()).unwrap();
        for name in ["text_emb.weight", "text_head.weight"] {
            let (a, b) = (before.tensor(name).unwrap(), after.tensor(name).unwrap());
            assert_eq!(b.shape, [2535, 64]);
            let old = bytes(&a);
            let new = bytes(&b);
            assert_eq!(
                &new[..old.len()],
                &old[..],
                "{fixture} {name}: old rows bit-identical"
            );
            let (dtype, _, v) = rows_f64(&before, name);
            let want = mean_row_bytes(dtype, &v, 2454, 64);
            for row in new[old.len()..].chunks(want.len()) {
                assert_eq!(
                    row,
                    &want[..],
                    "{fixture} {name}: new rows = f64 column mean rounded once"
                );
            }
        }
        for t in before
            .tensors()
            .filter(|t| !t.name.starts_with("text_emb") && !t.name.starts_with("text_head"))
        {
            assert_eq!(
                sha256_hex(&bytes(&t)),
                sha256_hex(&bytes(&after.tensor(t.name).unwrap())),
                "{fixture} {}",
                t.name
            );
        }
        assert_eq!(
            after.files[0].header.metadata,
            before.files[0].header.metadata
        );
        // The manifest describes the file written: every tensor, and the whole file when asked.
        assert_eq!(r["manifest"][0]["hash"], "blake3");
        let want = serde_json::Value::from(blake3_hex(&std::fs::read(&out).unwrap()));
        let got = &r["manifest"][0]["digest"];
        assert_eq!(
            got,
            if whole {
                &want
            } else {
                &serde_json::Value::Null
            }
        );
        let listed = r["manifest"][0]["tensors"].as_array().unwrap();
        assert_eq!(listed.len(), after.tensors().count());
        for m in listed {
            let t = after.tensor(m["name"].as_str().unwrap()).unwrap();
            assert_eq!(m["digest"], blake3_hex(&bytes(&t)), "{fixture}");
        }
    }
}

#[test]
fn tied_gpt2_pads_to_a_multiple_of_64_updates_config_and_sharded_gives_the_same_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = merged_tokenizer(tmp.path());
    let single = tmp.path().join("single");
    let (code, r, err) = extend(
        &testdata("gpt2"),
        &single,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--pad-to-multiple-of",
            "64",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["new_rows"], 2560);
    assert_eq!(r["changed"].as_array().unwrap().len(), 1, "tied: only wte");
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("single/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["vocab_size"], 2560);
    assert_eq!(cfg["n_embd"], 64, "the rest of config.json kept");

    let sharded = tmp.path().join("sharded");
    let (code, r, err) = extend(
        &testdata("gpt2_sharded"),
        &sharded,
        &["--new-rows", "2535", "--pad-to-multiple-of", "64", "--link"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["manifest"].as_array().unwrap().len(), 2);
    let a = formats::open_tensors(&single, &Default::default()).unwrap();
    let b = formats::open_tensors(&sharded, &Default::default()).unwrap();
    let mut ta: Vec<_> = a
        .tensors()
        .map(|t| (t.name.to_string(), t.shape.to_vec(), sha256_hex(&bytes(&t))))
        .collect();
    let mut tb: Vec<_> = b
        .tensors()
        .map(|t| (t.name.to_string(), t.shape.to_vec(), sha256_hex(&bytes(&t))))
        .collect();
    ta.sort();
    tb.sort();
    assert_eq!(ta, tb);
    // The untouched shard is a hard link of the input; total_size follows the new tensors.
    use std::os::unix::fs::MetadataExt;
    let ino = |p: PathBuf| std::fs::metadata(p).unwrap().ino();
    let untouched = "model-00002-of-00002.safetensors";
    assert!(!b
        .tensors()
        .any(|t| t.name == "transformer.wte.weight" && t.map.path.ends_with(untouched)));
    assert_eq!(
        ino(sharded.join(untouched)),
        ino(testdata("gpt2_sharded").join(untouched))
    );
    let total: u64 = b.tensors().map(|t| t.nbytes()).sum();
    let meta = b.index.as_ref().unwrap().metadata.as_ref().unwrap();
    assert_eq!(meta["total_size"], total);
    // transformers' total_parameters (the input's equals its elements) moves with the rows.
    let elements: u64 = b.tensors().map(|t| t.elements()).sum();
    assert_eq!(meta["total_parameters"], elements);
}

#[test]
fn a_sharded_index_keeps_its_other_top_level_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    copy_tree(&testdata("gpt2_sharded"), &input);
    let index = input.join("model.safetensors.index.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    doc["quantization"] = serde_json::json!({"bits": 8, "names": ["a", "b"]});
    std::fs::write(&index, doc.to_string()).unwrap();
    let out = tmp.path().join("out");
    let (code, _, err) = extend(&input, &out, &["--new-rows", "2535"]);
    assert_eq!(code, Some(0), "{err}");
    let written = out.join("model.safetensors.index.json");
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(written).unwrap()).unwrap();
    assert_eq!(back["quantization"], doc["quantization"]);
    assert_ne!(back["metadata"], doc["metadata"]);
}

#[test]
fn the_direct_writer_for_large_outputs_writes_the_same_files_as_the_buffered_one() {
    // Outputs of 256 MiB and more are written with O_DIRECT; the hidden hook makes every output
    // take that path, so the shipped fixtures can be compared byte for byte with the default.
    let tmp = tempfile::tempdir().unwrap();
    for (fixture, rows) in [
        ("chatterbox_t3/t3_f32.safetensors", "2535"),
        ("chatterbox_t3/t3_bf16.safetensors", "2600"),
        ("gpt2_sharded", "2560"),
    ] {
        let mut files = Vec::new();
        for (run, direct) in [("buffered", None), ("direct", Some("0"))] {
            let out = tmp.path().join(run).join(fixture.replace('/', "-"));
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_extend-embeddings"));
            cmd.arg(testdata(fixture)).arg("--output").arg(&out).args([
                "--new-rows",
                rows,
                "--json",
            ]);
            if let Some(from) = direct {
                cmd.env("CKPT_SURGERY_TEST_DIRECT_FROM", from);
            }
            let o = cmd.output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{fixture} {run}: {}", stderr(&o));
            let r: Value = serde_json::from_slice(&o.stdout).unwrap();
            let listed: Vec<Value> = r["manifest"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["tensors"].clone())
                .collect();
            let bytes: Vec<(PathBuf, Vec<u8>)> = if out.is_dir() {
                snapshot(&out)
                    .into_iter()
                    .map(|(p, b)| (p.strip_prefix(&out).unwrap().to_path_buf(), b))
                    .collect()
            } else {
                vec![(PathBuf::new(), std::fs::read(&out).unwrap())]
            };
            files.push((listed, bytes));
        }
        assert!(files[0] == files[1], "{fixture}: same bytes and manifest");
    }
}

#[test]
fn hewitt_is_reproducible_from_its_seed_and_keeps_old_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let run_seed = |seed: &str, name: &str| {
        let out = tmp.path().join(name);
        let (code, _, err) = extend(
            &input,
            &out,
            &[
                "--new-rows",
                "2535",
                "--init",
                "hewitt",
                "--seed",
                seed,
                "--scale",
                "1e-2",
            ],
        );
        assert_eq!(code, Some(0), "{err}");
        std::fs::read(out).unwrap()
    };
    let (a, b, c) = (run_seed("7", "a"), run_seed("7", "b"), run_seed("8", "c"));
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c);
    let before = formats::open_tensors(&input, &Default::default()).unwrap();
    let after = formats::open_tensors(&tmp.path().join("a"), &Default::default()).unwrap();
    let (old, new) = (
        bytes(&before.tensor("text_emb.weight").unwrap()),
        bytes(&after.tensor("text_emb.weight").unwrap()),
    );
    assert_eq!(&new[..old.len()], &old[..]);
}

#[test]
fn torch_files_keep_their_format_a_tied_head_stays_one_storage_and_bias_gets_the_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tied.pt");
    let (code, r, err) = extend(
        &testdata("torch/tied_state_dict.pt"),
        &out,
        &["--new-rows", "110"],
    );
    assert_eq!(code, Some(0), "{err}");
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let t = &after.torch[0];
    let (e, h) = (
        t.tensor_node("text_emb.weight").unwrap(),
        t.tensor_node("text_head.weight").unwrap(),
    );
    assert_eq!(
        e.storage.key, h.storage.key,
        "tied head still shares the embedding's storage"
    );
    assert_eq!(e.shape, [110, 16]);
    assert_eq!(r["changed"][0]["tied"][0], "text_head.weight");
    let before =
        formats::open_tensors(&testdata("torch/tied_state_dict.pt"), &Default::default()).unwrap();
    let (_, _, bias) = rows_f64(&before, "text_head.bias");
    let (_, shape, new_bias) = rows_f64(&after, "text_head.bias");
    assert_eq!(shape, [110]);
    let mean = bias.iter().sum::<f64>() / bias.len() as f64;
    assert_eq!(&new_bias[..100], &bias[..]);
    assert!(new_bias[100..].iter().all(|&v| v == (mean as f32) as f64));

    // A training checkpoint: model rows grow, the optimizer warning is raised, everything else kept.
    let out = tmp.path().join("train.pt");
    let (code, r, err) = extend(
        &testdata("torch/train_ckpt.pt"),
        &out,
        &["--new-rows", "128", "--allow-global", "argparse.Namespace"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(r["warnings"][0]
        .as_str()
        .unwrap()
        .contains("sanitize-checkpoint"));
    let mut o = formats::OpenOptions::default();
    o.globals.extra.insert("argparse.Namespace".into());
    let before = formats::open_tensors(&testdata("torch/train_ckpt.pt"), &o).unwrap();
    let after = formats::open_tensors(&out, &o).unwrap();
    for t in before
        .tensors()
        .filter(|t| !t.name.starts_with("model.text_"))
    {
        assert_eq!(
            sha256_hex(&bytes(&t)),
            sha256_hex(&bytes(&after.tensor(t.name).unwrap())),
            "{}",
            t.name
        );
    }
    assert_eq!(
        after.tensor("model.text_emb.weight").unwrap().shape,
        [128, 16]
    );
}

#[test]
fn copy_and_subword_mean_use_the_rows_the_tokenizers_name() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let out = tmp.path().join("copy.safetensors");
    let (code, _, err) = extend(
        &input,
        &out,
        &[
            "--new-rows",
            "2460",
            "--init",
            "copy:[UNK]",
            "--base-tokenizer",
            testdata("tokenizers/chatterbox_base.json")
                .to_str()
                .unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let b = bytes(&after.tensor("text_emb.weight").unwrap());
    let row = |i: usize| b[i * 256..(i + 1) * 256].to_vec();
    assert!(
        (2454..2460).all(|i| row(i) == row(1)),
        "copies of [UNK] = row 1"
    );

    // subword-mean: English words new to the base are the mean of the base pieces they split into.
    let words = tmp.path().join("words.txt");
    std::fs::write(&words, "checkpointing\nsurgery\nሀለ\n").unwrap();
    let merged = tmp.path().join("merged_words.json");
    let base = testdata("tokenizers/chatterbox_base.json");
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            base.as_os_str(),
            OsStr::new("--add"),
            words.as_os_str(),
            OsStr::new("--output"),
            merged.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = tmp.path().join("sub.safetensors");
    let (code, r, err) = extend(
        &input,
        &out,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--init",
            "subword-mean",
            "--base-tokenizer",
            base.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        r["fallbacks"],
        serde_json::json!(["ሀለ"]),
        "Amharic has no base pieces"
    );
    let tok = tokenizers::Tokenizer::from_file(&base).unwrap();
    let before = formats::open_tensors(&input, &Default::default()).unwrap();
    let (_, _, v) = rows_f64(&before, "text_emb.weight");
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let (_, _, nv) = rows_f64(&after, "text_emb.weight");
    for (k, word) in ["checkpointing", "surgery"].iter().enumerate() {
        let ids = tok.encode(*word, false).unwrap().get_ids().to_vec();
        assert!(ids.len() > 1, "{word} splits into pieces");
        for c in 0..64 {
            let want = ids.iter().map(|&i| v[i as usize * 64 + c]).sum::<f64>() / ids.len() as f64;
            assert_eq!(
                nv[(2454 + k) * 64 + c],
                (want as f32) as f64,
                "{word} col {c}"
            );
        }
    }
}

#[test]
fn subword_mean_splits_byte_level_tokens_with_the_base_model() {
    // The merged GPT-2 tokenizer's new words are byte-level vocabulary tokens ("Ġcheckpoint"):
    // their pieces are what BASE's model makes of those symbols, not an encoding of "Ġ" as text.
    use tokenizers::Model;
    let tmp = tempfile::tempdir().unwrap();
    let merged = merged_gpt2_tokenizer(tmp.path());
    let input = testdata("gpt2");
    let base = testdata("gpt2/tokenizer.json");
    let out = tmp.path().join("grown");
    let (code, _, err) = extend(
        &input,
        &out,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--init",
            "subword-mean",
            "--base-tokenizer",
            base.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (b, m) = (
        tokenizers::Tokenizer::from_file(&base).unwrap(),
        tokenizers::Tokenizer::from_file(&merged).unwrap(),
    );
    let (_, _, v) = rows_f64(
        &formats::open_tensors(&input, &Default::default()).unwrap(),
        "transformer.wte.weight",
    );
    let (_, _, nv) = rows_f64(
        &formats::open_tensors(&out, &Default::default()).unwrap(),
        "transformer.wte.weight",
    );
    for word in ["Ġcheckpoint", "surgery"] {
        let id = m.token_to_id(word).unwrap() as usize;
        let ids: Vec<u32> = b
            .get_model()
            .tokenize(word)
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect();
        assert!(ids.len() > 1 && ids.iter().all(|&i| i < 1000), "{ids:?}");
        for c in 0..64 {
            let want = ids.iter().map(|&i| v[i as usize * 64 + c]).sum::<f64>() / ids.len() as f64;
            assert_eq!(nv[id * 64 + c], (want as f32) as f64, "{word} col {c}");
        }
    }
}

#[test]
fn refusals_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let out = tmp.path().join("x.safetensors");
    let (code, _, err) = extend(&input, &out, &["--new-rows", "2000"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("has 2454 rows; a target of 2000 rows would drop its trained rows 2000..2454")
            && err.contains("--allow-shrink"),
        "{err}"
    );
    let (code, _, err) = extend(
        &input,
        &out,
        &["--new-rows", "3000", "--tensor", "nope.weight"],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("no tensor named 'nope.weight'"), "{err}");
    let (code, _, err) = extend(&input, &input, &["--new-rows", "3000"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("refusing to write over an input"), "{err}");
    // (--device cuda without a GPU: its own test below, for builds with and without the feature.)
    // A target whose new rows cannot be held (a typo in --new-rows) is refused before any
    // allocation, not aborted on, with or without --dry-run; past 2^64 bytes too.
    // (10^11 − 2454) new rows × 64 columns × (8 bytes of f64 + 4 of F32).
    let huge = format!("{} bytes", (100_000_000_000u64 - 2454) * 64 * 12);
    for (rows, need) in [
        ("100000000000", huge.as_str()),
        ("18446744073709551615", "more than 2^64 bytes"),
    ] {
        for dry in [&[][..], &["--dry-run"][..]] {
            let args = [&["--new-rows", rows][..], dry].concat();
            let (code, _, err) = extend(&input, &out, &args);
            assert_eq!(code, Some(2), "{err}");
            assert!(
                err.contains("text_emb.weight")
                    && err.contains(&format!("need {need} of memory"))
                    && err.contains("check the rows asked for (--new-rows"),
                "{err}"
            );
        }
    }
    assert!(!out.exists());
    // Named tensors that disagree on rows are refused, naming each.
    let (code, _, err) = extend(
        &testdata("gpt2/model.safetensors"),
        &out,
        &[
            "--new-rows",
            "3000",
            "--tensor",
            "transformer.wpe.weight",
            "--tensor",
            "transformer.wte.weight",
        ],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("disagree on rows") && err.contains("transformer.wpe.weight: 128"),
        "{err}"
    );
    // Ambiguous vocabulary (embedding and head disagree): stop and list the candidates.
    use ckpt_surgery::formats::safetensors::write::{
        write_safetensors, Payload, PlannedTensor, SafetensorsLayout,
    };
    let amb = tmp.path().join("ambiguous.safetensors");
    let t = |name: &str, rows: u64| PlannedTensor {
        name: name.into(),
        dtype: DType::F32,
        shape: vec![rows, 8],
        payload: Payload::Bytes(vec![0; rows as usize * 32]),
    };
    write_safetensors(
        &SafetensorsLayout {
            file_sha256: false,
            metadata: None,
            tensors: vec![
                t("model.embed_tokens.weight", 100),
                t("lm_head.weight", 164),
            ],
        },
        &amb,
        &[],
    )
    .unwrap();
    let (code, _, err) = extend(&amb, &out, &["--new-rows", "3000"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("ambiguous")
            && err.contains("model.embed_tokens.weight [100, 8]")
            && err.contains("lm_head.weight [164, 8]")
            && err.contains("--tensor"),
        "{err}"
    );
    // --allow-shrink truncates (seed 001: 24001 → 24000).
    let (code, r, err) = extend(&input, &out, &["--new-rows", "2453", "--allow-shrink"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["freeze_until_index"], 2453);
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let before = formats::open_tensors(&input, &Default::default()).unwrap();
    let (a, b) = (
        bytes(&before.tensor("text_emb.weight").unwrap()),
        bytes(&after.tensor("text_emb.weight").unwrap()),
    );
    assert_eq!(&a[..b.len()], &b[..]);
}

#[test]
fn dry_run_reports_the_plan_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("d/model.safetensors");
    let (code, r, _) = extend(
        &testdata("gpt2"),
        &out,
        &["--new-rows", "1024", "--dry-run"],
    );
    assert_eq!(code, Some(0));
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["config_changes"][0]["key"], "vocab_size");
    assert!(!out.exists() && !tmp.path().join("d/config.json").exists());
}

/// The mean of `v` in f64, rounded once to f32, as f64 (the head bias's new value).
fn f32_mean(v: &[f64]) -> f64 {
    ((v.iter().sum::<f64>() / v.len() as f64) as f32) as f64
}

#[test]
fn a_tied_heads_own_bias_grows_with_the_tie_in_a_bert_mlm_folder_and_its_torch_state_dict() {
    let tmp = tempfile::tempdir().unwrap();
    let before = formats::open_tensors(&testdata("bert_mlm"), &Default::default()).unwrap();
    let (_, _, bias) = rows_f64(&before, "cls.predictions.bias");
    assert!(
        bias.iter().any(|&b| b != 0.0),
        "the fixture's bias is trained"
    );

    // save_pretrained's folder: the decoder is not stored, its bias is.
    let out = tmp.path().join("st");
    let (code, r, err) = extend(&testdata("bert_mlm"), &out, &["--new-rows", "130"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["warnings"], serde_json::json!([]), "{r}");
    assert_eq!(r["ties"][0]["how"], "config");
    assert_eq!(
        r["ties"][0]["names"],
        serde_json::json!(["bert.embeddings.word_embeddings.weight"])
    );
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let (_, shape, new_bias) = rows_f64(&after, "cls.predictions.bias");
    assert_eq!(shape, [130]);
    assert_eq!(&new_bias[..120], &bias[..], "old bias values kept");
    assert!(new_bias[120..].iter().all(|&v| v == f32_mean(&bias)));
    assert_eq!(
        after
            .tensor("bert.embeddings.word_embeddings.weight")
            .unwrap()
            .shape,
        [130, 32]
    );
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("st/config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"], 130);

    // torch.save of the same model: decoder.weight / decoder.bias share the storages of the
    // embedding / cls.predictions.bias, and follow them.
    let out = tmp.path().join("bin");
    let (code, r, err) = extend(&testdata("bert_mlm_bin"), &out, &["--new-rows", "130"]);
    assert_eq!(code, Some(0), "{err}");
    let changed: Vec<(&str, &Value)> = r["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), &c["tied"]))
        .collect();
    assert_eq!(
        changed,
        [
            (
                "bert.embeddings.word_embeddings.weight",
                &serde_json::json!(["cls.predictions.decoder.weight"])
            ),
            (
                "cls.predictions.bias",
                &serde_json::json!(["cls.predictions.decoder.bias"])
            )
        ],
        "each tie computed once"
    );
    let b = formats::open_tensors(&out, &Default::default()).unwrap();
    let t = &b.torch[0];
    for (a, c) in [
        (
            "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.weight",
        ),
        ("cls.predictions.bias", "cls.predictions.decoder.bias"),
    ] {
        let (x, y) = (t.tensor_node(a).unwrap(), t.tensor_node(c).unwrap());
        assert!(x.same_view(y), "{c} still views {a}'s storage");
        assert_eq!(x.shape[0], 130);
    }
    let (_, _, torch_bias) = rows_f64(&b, "cls.predictions.bias");
    assert_eq!(torch_bias, new_bias, "same rows as the safetensors folder");
}

#[test]
fn a_tie_stored_apart_with_the_same_bytes_is_computed_once_and_stays_equal() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("llama");
    let input = testdata("llama_tied_same_bytes");
    let (code, r, err) = extend(&input, &out, &["--new-rows", "110", "--init", "hewitt"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["ties"][0]["how"], "same-bytes");
    assert_eq!(r["changed"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        r["changed"][0]["tied"],
        serde_json::json!(["lm_head.weight"])
    );
    let after = formats::open_tensors(&out, &Default::default()).unwrap();
    let (e, h) = (
        after.tensor("model.embed_tokens.weight").unwrap(),
        after.tensor("lm_head.weight").unwrap(),
    );
    assert_eq!(e.shape, [110, 16]);
    assert_eq!(
        bytes(&e),
        bytes(&h),
        "the head has the embedding's new rows"
    );
    let before = formats::open_tensors(&input, &Default::default()).unwrap();
    let old = bytes(&before.tensor("model.embed_tokens.weight").unwrap());
    assert_eq!(&bytes(&e)[..old.len()], &old[..]);
}

#[test]
fn a_model_folder_and_a_merged_tokenizer_give_a_complete_folder_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gpt2");
    let merged = merged_gpt2_tokenizer(tmp.path());
    // Run where an unrelated config.json lies: it must stay as it is.
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("config.json"), b"{\"unrelated\": true}").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_extend-embeddings"))
        .current_dir(&work)
        .arg(&input)
        .args(["--output", "grown", "--tokenizer"])
        .arg(&merged)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        std::fs::read(work.join("config.json")).unwrap(),
        b"{\"unrelated\": true}"
    );
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&work),
        ["config.json", "grown"],
        "nothing beside the output"
    );

    let out = work.join("grown");
    let (before, after) = (files_of(&input), files_of(&out));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "every file of the input folder, and no other"
    );
    for (name, bytes) in &before {
        match name.as_str() {
            "model.safetensors" | "config.json" => {}
            "tokenizer.json" => assert_eq!(after[name], std::fs::read(&merged).unwrap()),
            _ => assert_eq!(&after[name], bytes, "{name} carried byte for byte"),
        }
    }
    let rows = 1047;
    assert_eq!(r["new_rows"], rows);
    let cfg_in: Value = serde_json::from_slice(&before["config.json"]).unwrap();
    let mut cfg_out: Value = serde_json::from_slice(&after["config.json"]).unwrap();
    assert_eq!(cfg_out["vocab_size"], rows);
    cfg_out["vocab_size"] = cfg_in["vocab_size"].clone();
    assert_eq!(cfg_out, cfg_in, "only vocab_size changed");
    let grown = formats::open_tensors(&out, &Default::default()).unwrap();
    assert_eq!(
        grown.tensor("transformer.wte.weight").unwrap().shape,
        [rows, 64]
    );

    // An existing folder that is not empty is refused and left as it was; --overwrite replaces
    // it once the new one is complete.
    let snapshot = files_of(&out);
    let (code, _, err) = extend(&input, &out, &["--new-rows", "1010"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not empty") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(files_of(&out), snapshot);
    let (code, r, err) = extend(&input, &out, &["--new-rows", "1010", "--overwrite"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["new_rows"], 1010);
    assert_eq!(
        formats::open_tensors(&out, &Default::default())
            .unwrap()
            .tensor("transformer.wte.weight")
            .unwrap()
            .shape,
        [1010, 64]
    );
    assert_eq!(
        names(&work),
        ["config.json", "grown"],
        "no temp or old folder left"
    );

    // A file name for a folder's output is refused; so is an index path for a sharded set.
    for (inp, name) in [
        ("gpt2", "model.safetensors"),
        ("gpt2_sharded", "model.safetensors.index.json"),
    ] {
        let dest = tmp.path().join("x").join(name);
        let (code, _, err) = extend(&testdata(inp), &dest, &["--new-rows", "1010"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("give --output DIR"), "{err}");
        assert!(!dest.exists());
    }
}

#[test]
fn added_tokens_listed_in_tokenizer_config_are_kept_consistent_with_the_merged_tokenizer() {
    // transformers takes added tokens from tokenizer_config.json's added_tokens_decoder when it
    // has one; the merged tokenizer's new added tokens must be listed there too.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("model");
    std::fs::create_dir(&input).unwrap();
    for (name, bytes) in files_of(&testdata("gpt2")) {
        std::fs::write(input.join(name), bytes).unwrap();
    }
    let tc = input.join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&tc).unwrap()).unwrap();
    cfg["added_tokens_decoder"] = serde_json::json!({"999": {"content": "<|endoftext|>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}});
    std::fs::write(&tc, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let merged = merged_gpt2_tokenizer(tmp.path());
    let out = tmp.path().join("out");
    let (code, _, err) = extend(&input, &out, &["--tokenizer", merged.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let got: Value =
        serde_json::from_slice(&std::fs::read(out.join("tokenizer_config.json")).unwrap()).unwrap();
    let m: Value = serde_json::from_slice(&std::fs::read(&merged).unwrap()).unwrap();
    for t in m["added_tokens"].as_array().unwrap() {
        let id = t["id"].as_u64().unwrap().to_string();
        assert_eq!(
            got["added_tokens_decoder"][&id]["content"], t["content"],
            "{id}"
        );
    }
    // The merged words are ordinary vocabulary tokens of the byte-level BPE, not added tokens.
    assert!(got["added_tokens_decoder"].get("1000").is_none());
    assert_eq!(m["model"]["vocab"]["checkpoint"], 1000);
    assert_eq!(got["eos_token"], cfg["eos_token"], "the rest kept");
}

#[test]
fn new_special_tokens_are_listed_in_tokenizer_config_and_special_tokens_map() {
    // transformers treats a token as special (kept whole, skipped by
    // decode(skip_special_tokens=True)) when the folder's configs list it.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("model");
    std::fs::create_dir(&input).unwrap();
    for (name, bytes) in files_of(&testdata("gpt2")) {
        std::fs::write(input.join(name), bytes).unwrap();
    }
    let map = serde_json::json!({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"});
    std::fs::write(
        input.join("special_tokens_map.json"),
        serde_json::to_vec_pretty(&map).unwrap(),
    )
    .unwrap();
    let merged = tmp.path().join("merged.json");
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            testdata("gpt2/tokenizer.json").as_os_str(),
            OsStr::new("--add"),
            testdata("tokenizers/amharic_words.txt").as_os_str(),
            OsStr::new("--special"),
            OsStr::new("<|am|>"),
            OsStr::new("--output"),
            merged.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = tmp.path().join("out");
    let (code, _, err) = extend(&input, &out, &["--tokenizer", merged.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let read = |n: &str| -> Value {
        serde_json::from_slice(&std::fs::read(out.join(n)).unwrap()).unwrap()
    };
    let cfg = read("tokenizer_config.json");
    assert_eq!(cfg["extra_special_tokens"], serde_json::json!(["<|am|>"]));
    assert_eq!(cfg["eos_token"], "<|endoftext|>", "the rest kept");
    assert_eq!(cfg["tokenizer_class"], "GPT2Tokenizer");
    let map = read("special_tokens_map.json");
    assert_eq!(map["extra_special_tokens"], serde_json::json!(["<|am|>"]));
    assert_eq!(map["bos_token"], "<|endoftext|>");
}

#[test]
fn device_cuda_without_a_gpu_is_one_line_exit_2_and_auto_falls_back_saying_so() {
    // Built with or without the `cuda` feature, on a machine without a CUDA driver (CI): no
    // panic, a one-line refusal for cuda, the CPU and one info line for auto.
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("chatterbox_t3/t3_f32.safetensors");
    let out = tmp.path().join("cuda.safetensors");
    let (code, r, err) = extend(&input, &out, &["--new-rows", "2500", "--device", "cuda"]);
    if code == Some(0) {
        eprintln!("skipped: this machine has a GPU ({})", r["device"]);
        return;
    }
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--device cuda:")
            && (err.contains("--features cuda") || err.contains("libcuda")),
        "{err}"
    );
    assert!(!out.exists());
    let out = tmp.path().join("auto.safetensors");
    let (code, r, err) = extend(&input, &out, &["--new-rows", "2500", "--device", "auto"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["device"], "cpu");
    assert!(
        r["device_note"].as_str().is_some_and(|n| !n.is_empty()),
        "{r}"
    );
    let o = run(
        "extend-embeddings",
        &[
            input.as_os_str(),
            OsStr::new("--output"),
            tmp.path().join("auto2.safetensors").as_os_str(),
            OsStr::new("--new-rows"),
            OsStr::new("2500"),
        ],
    );
    let info: Vec<String> = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("info: device cpu"))
        .map(str::to_string)
        .collect();
    assert_eq!(info.len(), 1, "{}", stdout(&o));
    // The CPU path's bytes, whichever way the CPU was chosen.
    let (code, _, err) = extend(
        &input,
        &tmp.path().join("cpu.safetensors"),
        &["--new-rows", "2500", "--device", "cpu"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(tmp.path().join("cpu.safetensors")).unwrap(),
        std::fs::read(&out).unwrap()
    );
}

#[test]
fn segments_grow_each_codebook_at_its_end_with_its_own_mean() {
    // 8 codebooks × 1026 rows × 16 (codebook k offset by ±k), embedding and head, grown to
    // 8 × 1028: old id c·1026 + j must be at c·1028 + j, new rows the codebook's own mean.
    let tmp = tempfile::tempdir().unwrap();
    let (c, s, s2, d) = (8usize, 1026usize, 1028usize, 16usize);
    let names = [
        "audio_codebook_embeddings.weight",
        "audio_decoder_proj.audio_lm_head.weight",
    ];
    let mut outs = Vec::new();
    for input in ["audio/codebooks.safetensors", "audio/codebooks.pt"] {
        let out = tmp.path().join(input.replace('/', "_"));
        let (code, r, err) = extend(
            &testdata(input),
            &out,
            &[
                "--new-rows",
                &(c * s2).to_string(),
                "--segments",
                "8",
                "--tensor",
                names[0],
                "--tensor",
                names[1],
            ],
        );
        assert_eq!(code, Some(0), "{err}");
        let seg = r["segments"].as_array().unwrap();
        assert_eq!(seg.len(), c);
        assert_eq!(seg[3]["old"], serde_json::json!([3 * s, 4 * s]));
        assert_eq!(seg[3]["now"], serde_json::json!([3 * s2, 3 * s2 + s]));
        assert_eq!(seg[3]["new_rows"], serde_json::json!([3 * s2 + s, 4 * s2]));
        let before = formats::open_tensors(&testdata(input), &Default::default()).unwrap();
        let after = formats::open_tensors(&out, &Default::default()).unwrap();
        for name in names {
            let (dt, _, old) = rows_f64(&before, name);
            assert_eq!(
                after.tensor(name).unwrap().shape,
                [(c * s2) as u64, d as u64]
            );
            let (ob, nb) = (
                bytes(&before.tensor(name).unwrap()).into_owned(),
                bytes(&after.tensor(name).unwrap()).into_owned(),
            );
            let row = d * 4;
            for k in 0..c {
                // Old rows bit-identical at their mapped place.
                assert_eq!(
                    &nb[(k * s2) * row..(k * s2 + s) * row],
                    &ob[(k * s) * row..(k * s + s) * row],
                    "{name} codebook {k}"
                );
                // New rows: the codebook's own column mean, in f64, rounded once.
                let want = mean_row_bytes(dt, &old[k * s * d..(k + 1) * s * d], s, d);
                for j in s..s2 {
                    assert_eq!(
                        &nb[(k * s2 + j) * row..(k * s2 + j + 1) * row],
                        &want[..],
                        "{name} codebook {k} new row {j}"
                    );
                }
            }
        }
        // Everything else untouched.
        assert_eq!(
            bytes(&before.tensor("audio_decoder_proj.norm.weight").unwrap()),
            bytes(&after.tensor("audio_decoder_proj.norm.weight").unwrap())
        );
        outs.push(after);
    }
    for name in names {
        assert_eq!(
            outs[0].tensor(name).unwrap().try_bytes().unwrap(),
            outs[1].tensor(name).unwrap().try_bytes().unwrap(),
            "safetensors and torch give the same rows"
        );
    }
    // A total that is not segments × a size is refused.
    let (code, _, err) = extend(
        &testdata("audio/codebooks.safetensors"),
        &tmp.path().join("bad.safetensors"),
        &[
            "--new-rows",
            "8225",
            "--segments",
            "8",
            "--tensor",
            names[0],
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("multiples of 8"), "{err}");
}

#[test]
fn the_manifest_names_its_hash_blake3_by_default_and_sha256_on_request_over_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    for (alg, extra, hash) in [
        (
            "blake3",
            vec!["--file-hash"],
            blake3_hex as fn(&[u8]) -> String,
        ),
        ("sha256", vec!["--file-sha256", "--sha256"], sha256_hex),
    ] {
        for input in ["chatterbox_t3/t3_bf16.safetensors", "torch/state_dict.pt"] {
            let ext = if input.ends_with(".pt") {
                "pt"
            } else {
                "safetensors"
            };
            // One file name for both (a torch archive's folder is named after its file).
            std::fs::create_dir_all(tmp.path().join(alg)).unwrap();
            let out = tmp.path().join(alg).join(format!("out.{ext}"));
            let mut args = vec!["--new-rows", "2600"];
            if ext == "pt" {
                args = vec!["--new-rows", "140"];
            }
            args.extend(&extra);
            let (code, r, err) = extend(&testdata(input), &out, &args);
            assert_eq!(code, Some(0), "{input} {alg}: {err}");
            let m = &r["manifest"][0];
            assert_eq!(m["hash"], alg, "{r}");
            let bytes = std::fs::read(&out).unwrap();
            assert_eq!(m["digest"], hash(&bytes), "{input} {alg}");
            let back = formats::open_tensors(&out, &Default::default()).unwrap();
            for t in m["tensors"].as_array().unwrap() {
                let x = back.tensor(t["name"].as_str().unwrap()).unwrap();
                assert_eq!(t["digest"], hash(&common::bytes(&x)), "{input} {alg}");
            }
            written.push((input, sha256_hex(&bytes)));
        }
    }
    // The algorithm changes the report, never the file.
    assert_eq!(written[0], written[2]);
    assert_eq!(written[1], written[3]);
}

#[test]
fn a_folder_is_its_own_base_tokenizer_and_growing_to_the_rows_it_has_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = merged_gpt2_tokenizer(tmp.path());
    // subword-mean on a folder: its own tokenizer.json is the base's, and the report says so.
    let out = tmp.path().join("grown");
    let (code, r, err) = extend(
        &testdata("gpt2"),
        &out,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--init",
            "subword-mean",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let note = r["notes"][0].as_str().unwrap();
    assert!(
        note.contains("gpt2/tokenizer.json") && note.contains("--base-tokenizer"),
        "{r}"
    );
    // The same rows as naming it.
    let named = tmp.path().join("named");
    let base = testdata("gpt2/tokenizer.json");
    let (code, _, err) = extend(
        &testdata("gpt2"),
        &named,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--init",
            "subword-mean",
            "--base-tokenizer",
            base.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        std::fs::read(named.join("model.safetensors")).unwrap()
    );
    // Already 1000 rows: nothing to do, nothing written, exit 0.
    let same = tmp.path().join("same");
    let o = run(
        "extend-embeddings",
        &[
            testdata("gpt2").as_os_str(),
            OsStr::new("--new-rows"),
            OsStr::new("1000"),
            OsStr::new("--output"),
            same.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("nothing to do: the checkpoint already has 1000 rows; nothing written"),
        "{}",
        stdout(&o)
    );
    assert!(!same.exists());
    // Rows already there, but the folder changes: the merged tokenizer's new ids fit the
    // padding rows of a model grown before (1047 ids, 1088 rows), so the folder is written.
    let padded = tmp.path().join("padded");
    let (code, _, err) = extend(&testdata("gpt2"), &padded, &["--new-rows", "1088"]);
    assert_eq!(code, Some(0), "{err}");
    let with_tok = tmp.path().join("with_tokenizer");
    let (code, r, err) = extend(
        &padded,
        &with_tok,
        &[
            "--tokenizer",
            merged.to_str().unwrap(),
            "--pad-to-multiple-of",
            "64",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["nothing_to_do"], false, "{r}");
    assert_eq!(
        std::fs::read(with_tok.join("tokenizer.json")).unwrap(),
        std::fs::read(&merged).unwrap()
    );
}

#[test]
fn the_dry_run_plan_lists_every_tensor_the_run_then_writes_with_its_shape() {
    // A safetensors folder, a sharded set (the tie spans shards) and a torch file with a tie.
    let cases: [(&str, &str, &[&str]); 3] = [
        ("gpt2", "out_gpt2", &["--new-rows", "1030"]),
        (
            "gpt2_sharded",
            "out_sharded",
            &["--new-rows", "1030", "--init", "hewitt"],
        ),
        (
            "torch/tied_state_dict.pt",
            "out_tied.pt",
            &["--new-rows", "1100"],
        ),
    ];
    for (input, out, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(out);
        let dry: Vec<&str> = extra.iter().copied().chain(["--dry-run"]).collect();
        let (code, plan, err) = extend(&testdata(input), &out, &dry);
        assert_eq!(code, Some(0), "{input}: {err}");
        assert!(!out.exists(), "{input}: a dry run wrote");
        let (code, done, err) = extend(&testdata(input), &out, extra);
        assert_eq!(code, Some(0), "{input}: {err}");
        let written: Vec<serde_json::Value> = done["manifest"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["tensors"].as_array().unwrap().clone())
            .collect();
        let planned = tensor_triples(plan["tensors"].as_array().unwrap());
        assert_eq!(planned, tensor_triples(&written), "{input}");
        assert!(
            plan["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["action"] == "grow"),
            "{input}: the plan grows a tensor"
        );
        assert_eq!(
            plan["tensors"], done["tensors"],
            "{input}: the run follows the plan"
        );
    }
}

/// A torch zip whose storage or other record no longer matches its CRC-32 (a flipped byte, or a
/// local header whose extra length moves the data) is refused naming the record; the writers
/// do not copy the bytes out under a fresh CRC-32, and nothing is written.
#[test]
fn a_torch_record_failing_its_crc_is_refused_not_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = std::fs::read(testdata("torch/state_dict.pt")).unwrap();
    let path = testdata("torch/state_dict.pt");
    let zip = ckpt_surgery::formats::torch::container::parse_zip(&path, &clean).unwrap();
    let data: Vec<_> = zip
        .records
        .iter()
        .filter(|r| r.name.starts_with("data/"))
        .collect();
    let version = zip.records.iter().find(|r| r.name == "version").unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for r in [data[0], data[data.len() - 1], version] {
        let mut d = clean.clone();
        d[(r.start + r.len / 2) as usize] ^= 0x40;
        cases.push((r.name.clone(), d));
    }
    for (name, bytes) in cases {
        let input = tmp.path().join("corrupt.pt");
        std::fs::write(&input, bytes).unwrap();
        let out = tmp.path().join("out.pt");
        for extra in [
            &["--new-rows", "200"][..],
            &["--new-rows", "200", "--init", "zeros"],
        ] {
            let (code, r, err) = run_job("extend-embeddings", &input, &out, extra);
            assert_eq!(code, Some(2), "{name}: {err}");
            let e = r["error"].as_str().unwrap();
            assert!(
                e.contains(&format!("record '{name}' fails its CRC-32 check")),
                "{e}"
            );
            assert!(!out.exists());
        }
    }
}

#[test]
fn old_rows_holding_nan_are_refused_where_the_init_would_carry_it_into_the_new_rows() {
    // gpt2's wte (f32, 1000 x 64) with one NaN at row 3, column 5: mean and hewitt would make
    // every new row NaN; zeros and normal do not read the old rows.
    let tmp = tempfile::tempdir().unwrap();
    let src = testdata("gpt2/model.safetensors");
    let mut b = std::fs::read(&src).unwrap();
    let st = safetensors::SafeTensors::deserialize(&b).unwrap();
    let wte = st.tensor("transformer.wte.weight").unwrap();
    assert_eq!(wte.shape()[1], 64);
    let at = wte.data().as_ptr() as usize - b.as_ptr() as usize + (3 * 64 + 5) * 4;
    drop(st);
    b[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let input = tmp.path().join("nan.safetensors");
    std::fs::write(&input, &b).unwrap();
    for init in ["mean", "hewitt"] {
        let out = tmp.path().join(format!("{init}.safetensors"));
        let (code, r, err) = extend(&input, &out, &["--new-rows", "1010", "--init", init]);
        assert_eq!(code, Some(2), "{err}");
        let e = r["error"].as_str().unwrap();
        assert!(
            e.contains("old row 3") && e.contains("column 5") && e.contains("--init zeros"),
            "{e}"
        );
        assert!(!out.exists());
    }
    let out = tmp.path().join("zeros.safetensors");
    let (code, _, err) = extend(&input, &out, &["--new-rows", "1010", "--init", "zeros"]);
    assert_eq!(code, Some(0), "{err}");
}
