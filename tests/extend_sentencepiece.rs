//! extend-embeddings on SentencePiece-only models (issue 43): Llama-2, Mistral v1, IndexTTS and
//! seed 001 ship a `.model` and no tokenizer.json. `--init subword-mean` splits each new piece
//! with the base's own model (BPE joins or unigram Viterbi over its pieces, byte fallback); the
//! reference splits come from the real sentencepiece library (testdata/sp_only/expected.json,
//! written by testdata/generate.py `sp_only_files`).

mod common;
use ckpt_surgery::dtype::decode_row_f64;
use ckpt_surgery::formats;
use common::*;
use serde_json::Value;
use std::path::Path;

fn extend(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_job("extend-embeddings", input, out, extra)
}

fn matrix(path: &Path, name: &str) -> (usize, Vec<f64>) {
    let c = formats::open_tensors(path, &Default::default()).unwrap();
    let t = c.tensor(name).unwrap();
    let mut v = vec![0f64; t.elements() as usize];
    decode_row_f64(t.dtype, &t.try_bytes().unwrap(), &mut v).unwrap();
    (t.shape[1] as usize, v)
}

/// Rows `old..` of `after` are, in order, the means of `before`'s rows of each split; rows before
/// `old` are unchanged.
fn assert_subword_means(
    before: &[f64],
    after: &[f64],
    d: usize,
    old: usize,
    splits: &[(String, Vec<usize>)],
) {
    assert_eq!(&after[..old * d], before, "old rows kept");
    assert_eq!(after.len(), (old + splits.len()) * d);
    for (j, (piece, ids)) in splits.iter().enumerate() {
        for c in 0..d {
            let want = ids.iter().map(|&i| before[i * d + c]).sum::<f64>() / ids.len() as f64;
            let got = after[(old + j) * d + c];
            assert!(
                (got - want).abs() <= 1e-6 * want.abs() + 1e-9,
                "{piece} col {c}: {got} vs mean of {ids:?} = {want}"
            );
        }
    }
}

#[test]
fn subword_mean_on_a_sentencepiece_only_llama_folder_splits_with_the_bases_bpe() {
    let tmp = tempfile::tempdir().unwrap();
    let base_dir = testdata("sp_only/llama");
    assert!(!base_dir.join("tokenizer.json").exists());
    let splits = sp_expected_splits("bpe");
    assert!(
        splits
            .iter()
            .any(|(_, ids)| ids.iter().any(|&i| (3..259).contains(&i))),
        "the reference uses byte-fallback pieces"
    );
    let pieces: Vec<&str> = splits.iter().map(|s| s.0.as_str()).collect();
    let merged = tmp.path().join("merged.model");
    sp_merged(&base_dir.join("tokenizer.model"), &pieces, &merged);
    let out = tmp.path().join("out");
    let args = [
        "--tokenizer",
        merged.to_str().unwrap(),
        "--init",
        "subword-mean",
    ];
    let (code, rep, err) = extend(&base_dir, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rep["fallbacks"].as_array().map_or(0, Vec::len), 0, "{rep}");
    assert!(
        rep.to_string()
            .contains("tokenizer.model (the folder's own"),
        "{rep}"
    );
    let n = 500 + splits.len();
    for name in ["model.embed_tokens.weight", "lm_head.weight"] {
        let (d, before) = matrix(&base_dir, name);
        let (_, after) = matrix(&out, name);
        assert_subword_means(&before, &after, d, 500, &splits);
    }
    assert_eq!(
        std::fs::read(out.join("tokenizer.model")).unwrap(),
        std::fs::read(&merged).unwrap()
    );
    assert!(!out.join("tokenizer.json").exists());
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"], n);

    // IndexTTS names its model bpe.model: the folder's one .model is its tokenizer all the same.
    let renamed = tmp.path().join("indextts");
    std::fs::create_dir(&renamed).unwrap();
    for e in std::fs::read_dir(&base_dir).unwrap() {
        let p = e.unwrap().path();
        let name = p
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .replace("tokenizer", "bpe");
        std::fs::copy(&p, renamed.join(name)).unwrap();
    }
    let out2 = tmp.path().join("out2");
    let (code, _, err) = extend(&renamed, &out2, &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(out2.join("model.safetensors")).unwrap(),
        std::fs::read(out.join("model.safetensors")).unwrap()
    );
}

#[test]
fn subword_mean_with_a_unigram_model_splits_by_its_viterbi_and_byte_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let base = testdata("tokenizers/sp_english.model");
    let splits = sp_expected_splits("unigram");
    let pieces: Vec<&str> = splits.iter().map(|s| s.0.as_str()).collect();
    let merged = tmp.path().join("merged.model");
    sp_merged(&base, &pieces, &merged);
    // A weight file of the base's 400 rows, width 8.
    let d = 8;
    let rows: Vec<f32> = (0..400 * d)
        .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 1000.0)
        .collect();
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let input = tmp.path().join("emb.safetensors");
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![400, d], &bytes);
    safetensors::serialize_to_file([("embed.weight", view.unwrap())], None, &input).unwrap();
    let out = tmp.path().join("out.safetensors");
    let args = [
        "--tokenizer",
        merged.to_str().unwrap(),
        "--base-tokenizer",
        base.to_str().unwrap(),
        "--init",
        "subword-mean",
    ];
    let (code, rep, err) = extend(&input, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rep["fallbacks"].as_array().map_or(0, Vec::len), 0, "{rep}");
    let (_, before) = matrix(&input, "embed.weight");
    let (_, after) = matrix(&out, "embed.weight");
    assert_subword_means(&before, &after, d, 400, &splits);
}

#[test]
fn subword_mean_with_a_converted_tokenizer_json_base_splits_model_pieces_alike() {
    // Llama-2's repositories ship transformers' converted tokenizer.json beside tokenizer.model:
    // the folder's own tokenizer is then the tokenizer.json, while merge-tokenizers on the
    // tokenizer.model gives a merged .model. Its pieces split as the .model splits them.
    let tmp = tempfile::tempdir().unwrap();
    let base_dir = tmp.path().join("llama2");
    std::fs::create_dir(&base_dir).unwrap();
    for e in std::fs::read_dir(testdata("sp_only/llama")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, base_dir.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        testdata("sp_only/converted_tokenizer.json"),
        base_dir.join("tokenizer.json"),
    )
    .unwrap();
    let splits = sp_expected_splits("bpe");
    let pieces: Vec<&str> = splits.iter().map(|s| s.0.as_str()).collect();
    let merged = tmp.path().join("merged.model");
    sp_merged(&base_dir.join("tokenizer.model"), &pieces, &merged);
    let out = tmp.path().join("out");
    let args = [
        "--tokenizer",
        merged.to_str().unwrap(),
        "--init",
        "subword-mean",
    ];
    let (code, rep, err) = extend(&base_dir, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        rep.to_string().contains("tokenizer.json (the folder's own"),
        "{rep}"
    );
    assert_eq!(rep["fallbacks"].as_array().map_or(0, Vec::len), 0, "{rep}");
    let (d, before) = matrix(&base_dir, "model.embed_tokens.weight");
    let (_, after) = matrix(&out, "model.embed_tokens.weight");
    assert_subword_means(&before, &after, d, 500, &splits);
}
