//! transplant-tokenizer on real tokenizers of every family (byte-level BPE, SentencePiece,
//! WordPiece) and models written by transformers. The oracle for "same token" is the
//! `tokenizers` library's own vocabulary of each tokenizer (for a SentencePiece model, the
//! tokenizer.json transformers converted it to): a new id's row must be the base's row of the
//! token with the same string, bit for bit; rows of tokens the base lacks the column mean of the
//! base's rows (an f64 reference computed here).

mod common;
use common::{run_job, testdata};
use safetensors::SafeTensors;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn vocab(tokenizer_json: &Path) -> HashMap<String, u32> {
    tokenizers::Tokenizer::from_file(tokenizer_json)
        .expect("tokenizer loads")
        .get_vocab(true)
        .into_iter()
        .collect()
}

fn by_id(v: &HashMap<String, u32>) -> HashMap<u32, String> {
    v.iter().map(|(t, i)| (*i, t.clone())).collect()
}

fn rows_f32(st: &SafeTensors, name: &str) -> (Vec<Vec<f32>>, usize) {
    let t = st.tensor(name).expect("tensor present");
    // A bias ([V]) is rows of one value.
    let cols = t.shape().get(1).copied().unwrap_or(1);
    let vals: Vec<f32> = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (vals.chunks(cols).map(<[f32]>::to_vec).collect(), cols)
}

fn mean_row(rows: &[Vec<f32>]) -> Vec<f32> {
    let cols = rows[0].len();
    (0..cols)
        .map(|c| (rows.iter().map(|r| f64::from(r[c])).sum::<f64>() / rows.len() as f64) as f32)
        .collect()
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json")
}

/// Every new id's row is the base's row of the same string where the base has it, else the
/// mean; returns how many were copied.
fn check_rows(
    base: &[Vec<f32>],
    new: &[Vec<f32>],
    base_vocab: &HashMap<String, u32>,
    new_names: &HashMap<u32, String>,
    same: impl Fn(&str) -> Option<String>,
) -> usize {
    let mean = mean_row(base);
    let mut copied = 0;
    for (id, row) in new.iter().enumerate() {
        let tok = new_names.get(&(id as u32));
        match tok.and_then(|t| same(t)).and_then(|s| base_vocab.get(&s)) {
            Some(&b) => {
                assert_eq!(row, &base[b as usize], "new id {id} {tok:?} ≠ base row {b}");
                copied += 1;
            }
            None => assert_eq!(row, &mean, "new id {id} {tok:?} is not the mean"),
        }
    }
    copied
}

#[test]
fn a_byte_level_model_takes_a_byte_level_vocabulary_rows_by_string_and_config_ids_by_text() {
    let dir = tempfile::tempdir().unwrap();
    let (out, new) = (
        dir.path().join("out"),
        testdata("tokenizers/bytelevel_bpe.json"),
    );
    let new_s = new.to_str().unwrap();
    // Base tokens the new vocabulary lacks: refused without --allow-shrink, nothing written.
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &testdata("gpt2"),
        &out,
        &["--tokenizer", new_s],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--allow-shrink") && err.contains("1000 rows"),
        "{err}"
    );
    assert_eq!(doc["kind"], "usage");
    assert!(!out.exists());
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &testdata("gpt2"),
        &out,
        &["--tokenizer", new_s, "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    let (bv, nv) = (vocab(&testdata("gpt2/tokenizer.json")), vocab(&new));
    let in_bytes = std::fs::read(testdata("gpt2/model.safetensors")).unwrap();
    let out_bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let (base, _) = rows_f32(
        &SafeTensors::deserialize(&in_bytes).unwrap(),
        "transformer.wte.weight",
    );
    let (rows, _) = rows_f32(
        &SafeTensors::deserialize(&out_bytes).unwrap(),
        "transformer.wte.weight",
    );
    assert_eq!(
        rows.len(),
        nv.len(),
        "dropped ids gone: the table is the new vocabulary"
    );
    let copied = check_rows(&base, &rows, &bv, &by_id(&nv), |t| Some(t.to_string()));
    let shared = nv.keys().filter(|t| bv.contains_key(*t)).count();
    assert_eq!(copied, shared);
    assert_eq!(doc["tokens"]["same_token"], shared as u64);
    assert_eq!(doc["tokens"]["dropped_tokens"], (bv.len() - shared) as u64);
    // Special ids point at the same strings; the sizes are the new table's.
    let eos = by_id(&bv)[&999].clone();
    for f in ["config.json", "generation_config.json"] {
        let c = json(&out.join(f));
        for k in ["bos_token_id", "eos_token_id"] {
            let id = c[k].as_u64().unwrap() as u32;
            assert_eq!(by_id(&nv)[&id], eos, "{f} {k}");
        }
    }
    assert_eq!(
        json(&out.join("config.json"))["vocab_size"],
        nv.len() as u64
    );
    assert_eq!(
        std::fs::read(out.join("tokenizer.json")).unwrap(),
        std::fs::read(&new).unwrap()
    );
}

#[test]
fn an_untied_sentencepiece_model_takes_a_sentencepiece_bpe_vocabulary_in_both_matrices() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let new = testdata("tokenizers/sp_bpe_english.model");
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &testdata("sp_only/llama"),
        &out,
        &["--tokenizer", new.to_str().unwrap(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    // transformers' conversions of the two SentencePiece models: the same ids and pieces.
    let bv = vocab(&testdata("sp_only/converted_tokenizer.json"));
    let nv = vocab(&testdata("tokenizers/sp_bpe_english_converted.json"));
    let in_bytes = std::fs::read(testdata("sp_only/llama/model.safetensors")).unwrap();
    let out_bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let (st_in, st_out) = (
        SafeTensors::deserialize(&in_bytes).unwrap(),
        SafeTensors::deserialize(&out_bytes).unwrap(),
    );
    let shared = nv.keys().filter(|t| bv.contains_key(*t)).count();
    for m in ["model.embed_tokens.weight", "lm_head.weight"] {
        let (base, _) = rows_f32(&st_in, m);
        let (rows, _) = rows_f32(&st_out, m);
        assert_eq!(rows.len(), nv.len(), "{m}");
        assert_eq!(
            check_rows(&base, &rows, &bv, &by_id(&nv), |t| Some(t.to_string())),
            shared,
            "{m}"
        );
    }
    assert_eq!(doc["tokens"]["same_token"], shared as u64);
    let cfg = json(&out.join("config.json"));
    assert_eq!(
        (cfg["bos_token_id"].as_u64(), cfg["eos_token_id"].as_u64()),
        (Some(nv["<s>"].into()), Some(nv["</s>"].into()))
    );
    assert_eq!(
        std::fs::read(out.join("tokenizer.model")).unwrap(),
        std::fs::read(&new).unwrap()
    );
}

#[test]
fn a_wordpiece_bert_takes_another_wordpiece_vocabulary_rows_and_bias_by_string_including_continuation_pieces(
) {
    let dir = tempfile::tempdir().unwrap();
    // A BertForMaskedLM folder written by transformers (tied decoder, its own bias), its
    // tokenizer BERT's layout ([unused0..4] before [UNK]); the new one trained apart (cased).
    let base = testdata("families/wordpiece_bert");
    let new = testdata("tokenizers/wordpiece.json");
    let out = dir.path().join("out");
    let args = ["--tokenizer", new.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("transplant-tokenizer", &base, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let (bv, nv) = (vocab(&base.join("tokenizer.json")), vocab(&new));
    let (base_bytes, out_bytes) = (
        std::fs::read(base.join("model.safetensors")).unwrap(),
        std::fs::read(out.join("model.safetensors")).unwrap(),
    );
    let (st_in, st_out) = (
        SafeTensors::deserialize(&base_bytes).unwrap(),
        SafeTensors::deserialize(&out_bytes).unwrap(),
    );
    let shared = nv.keys().filter(|t| bv.contains_key(*t)).count();
    for m in [
        "bert.embeddings.word_embeddings.weight",
        "cls.predictions.bias",
    ] {
        let (old, _) = rows_f32(&st_in, m);
        let (got, _) = rows_f32(&st_out, m);
        assert_eq!(got.len(), nv.len(), "{m}: dropped ids gone");
        let copied = check_rows(&old, &got, &bv, &by_id(&nv), |t| Some(t.to_string()));
        assert_eq!(copied, shared, "{m}");
    }
    assert!(
        nv.keys().any(|t| t.starts_with("##") && bv.contains_key(t)),
        "the fixtures share ## pieces"
    );
    assert!(!nv.contains_key("[unused0]") && bv.contains_key("[unused0]"));
    assert_eq!(doc["tokens"]["same_token"], shared as u64);
    assert_eq!(doc["tokens"]["dropped_tokens"], (bv.len() - shared) as u64);
    let cfg = json(&out.join("config.json"));
    assert_eq!(cfg["vocab_size"], nv.len() as u64);
    assert_eq!(cfg["pad_token_id"], u64::from(nv["[PAD]"]));
    // The same model as one file: those rows, and a warning that the side files are not written.
    let file = dir.path().join("out.safetensors");
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &base.join("model.safetensors"),
        &file,
        &[
            &args[..],
            &[
                "--base-tokenizer",
                base.join("tokenizer.json").to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{err}");
    let file_bytes = std::fs::read(&file).unwrap();
    let st_file = SafeTensors::deserialize(&file_bytes).unwrap();
    for m in [
        "bert.embeddings.word_embeddings.weight",
        "cls.predictions.bias",
    ] {
        assert_eq!(
            st_file.tensor(m).unwrap().data(),
            st_out.tensor(m).unwrap().data(),
            "{m}"
        );
    }
    assert!(doc["warnings"][0].as_str().unwrap().contains("file output"));
}

#[test]
fn special_tokens_the_base_lacks_take_the_rows_of_their_roles_across_tokenizer_forms() {
    // GPT-2 (byte-level, one <|endoftext|> for bos/eos/unk) → a SentencePiece BPE folder whose
    // tokenizer_config.json names <s>, </s> and <unk>.
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    std::fs::copy(
        testdata("tokenizers/sp_bpe_english.model"),
        new.join("tokenizer.model"),
    )
    .unwrap();
    std::fs::write(
        new.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &testdata("gpt2"),
        &out,
        &["--tokenizer", new.to_str().unwrap(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    let roles: Vec<(String, u64, u64)> = doc["tokens"]["same_role"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap().to_string(),
                r["new"]["id"].as_u64().unwrap(),
                r["base"]["id"].as_u64().unwrap(),
            )
        })
        .collect();
    let nv = vocab(&testdata("tokenizers/sp_bpe_english_converted.json"));
    for (role, tok) in [("bos", "<s>"), ("eos", "</s>"), ("unk", "<unk>")] {
        assert!(
            roles.contains(&(role.to_string(), nv[tok].into(), 999)),
            "{role}: {roles:?}"
        );
    }
    let in_bytes = std::fs::read(testdata("gpt2/model.safetensors")).unwrap();
    let out_bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let (base, _) = rows_f32(
        &SafeTensors::deserialize(&in_bytes).unwrap(),
        "transformer.wte.weight",
    );
    let (rows, _) = rows_f32(
        &SafeTensors::deserialize(&out_bytes).unwrap(),
        "transformer.wte.weight",
    );
    assert_eq!(rows[nv["</s>"] as usize], base[999]);
    // Byte-level "Ġthe" and SentencePiece "▁the" are the same text: the same row.
    let bv = vocab(&testdata("gpt2/tokenizer.json"));
    assert_eq!(rows[nv["▁the"] as usize], base[bv["Ġthe"] as usize]);
    let cfg = json(&out.join("config.json"));
    assert_eq!(cfg["eos_token_id"], u64::from(nv["</s>"]));
    assert_eq!(cfg["bos_token_id"], u64::from(nv["<s>"]));
    // The folder's tokenizer is the new one: the old tokenizer.json is left out.
    assert!(out.join("tokenizer.model").is_file() && !out.join("tokenizer.json").exists());
    assert_eq!(
        json(&out.join("tokenizer_config.json"))["eos_token"],
        "</s>"
    );
}

#[test]
fn a_dry_run_reports_the_run_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = [
        "--tokenizer",
        "",
        "--allow-shrink",
        "--pad-to-multiple-of",
        "64",
    ];
    let new = testdata("tokenizers/bytelevel_bpe.json");
    let mut a: Vec<&str> = args.to_vec();
    a[1] = new.to_str().unwrap();
    let mut dry = a.clone();
    dry.push("--dry-run");
    let (code, planned, err) = run_job("transplant-tokenizer", &testdata("gpt2"), &out, &dry);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.exists());
    let (code, ran, err) = run_job("transplant-tokenizer", &testdata("gpt2"), &out, &a);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(planned["tokens"], ran["tokens"]);
    let n = vocab(&new).len() as u64;
    assert_eq!(planned["new_rows"], n.div_ceil(64) * 64);
    assert_eq!(ran["tokens"]["padding_rows"], n.div_ceil(64) * 64 - n);
    assert_eq!(
        planned["changed"][0]["new_shape"],
        ran["changed"][0]["new_shape"]
    );
    let edited = |d: &Value| {
        d["edited"]
            .as_array()
            .map(|a| a.iter().map(|e| e["changes"].clone()).collect::<Vec<_>>())
    };
    assert_eq!(edited(&planned), edited(&ran));
}

/// A tensor of a checkpoint file, as f32 rows.
fn torch_rows(path: &Path, name: &str) -> Vec<Vec<f32>> {
    let c = ckpt_surgery::formats::open_tensors(path, &Default::default()).unwrap();
    let t = c
        .tensor(name)
        .unwrap_or_else(|| panic!("{name} in {}", path.display()));
    let cols = t.shape[1] as usize;
    let vals: Vec<f32> = t
        .try_bytes()
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    vals.chunks(cols).map(<[f32]>::to_vec).collect()
}

#[test]
fn a_trainer_checkpoints_moments_follow_their_tokens_and_new_ids_start_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let new = testdata("tokenizers/bytelevel_bpe.json");
    let ckpt = testdata("trainer_untied/checkpoint-2");
    let out = dir.path().join("out");
    let (code, doc, err) = run_job(
        "transplant-tokenizer",
        &ckpt,
        &out,
        &["--tokenizer", new.to_str().unwrap(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    let (bv, nv) = (vocab(&ckpt.join("tokenizer.json")), vocab(&new));
    let moved = doc["optimizer"].as_array().unwrap();
    assert_eq!(
        moved.len(),
        4,
        "exp_avg and exp_avg_sq of embed_tokens and lm_head: {moved:?}"
    );
    for m in moved {
        let name = m["tensor"].as_str().unwrap();
        let before = torch_rows(&ckpt.join("optimizer.pt"), name);
        let after = torch_rows(&out.join("optimizer.pt"), name);
        assert_eq!(after.len(), nv.len(), "{name}");
        for (tok, &id) in &nv {
            match bv.get(tok) {
                Some(&b) => assert_eq!(after[id as usize], before[b as usize], "{name} {tok}"),
                None => assert!(after[id as usize].iter().all(|&v| v == 0.0), "{name} {tok}"),
            }
        }
    }
    // Everything else of the folder is carried: the Trainer resumes from it.
    for f in [
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "training_args.bin",
    ] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(ckpt.join(f)).unwrap(),
            "{f}"
        );
    }
    // --optimizer drop leaves optimizer.pt out.
    let dropped = dir.path().join("dropped");
    let (code, _, err) = run_job(
        "transplant-tokenizer",
        &ckpt,
        &dropped,
        &[
            "--tokenizer",
            new.to_str().unwrap(),
            "--allow-shrink",
            "--optimizer",
            "drop",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!dropped.join("optimizer.pt").exists() && dropped.join("model.safetensors").is_file());
}

#[test]
fn a_position_table_shaped_like_the_vocabulary_needs_the_optimizer_index_named() {
    let dir = tempfile::tempdir().unwrap();
    let new = testdata("tokenizers/bytelevel_bpe.json");
    let ckpt = testdata("trainer_positions/checkpoint-2");
    let out = dir.path().join("out");
    let base = ["--tokenizer", new.to_str().unwrap(), "--allow-shrink"];
    let (code, _, err) = run_job("transplant-tokenizer", &ckpt, &out, &base);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--optimizer-param transformer.wte.weight=INDEX"),
        "{err}"
    );
    assert!(!out.exists());
    let pinned: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--optimizer-param", "transformer.wte.weight=0"])
        .collect();
    let (code, doc, err) = run_job("transplant-tokenizer", &ckpt, &out, &pinned);
    assert_eq!(code, Some(0), "{err}");
    let moved: Vec<&str> = doc["optimizer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["of"].as_str().unwrap())
        .collect();
    assert!(
        moved.iter().all(|m| *m == "transformer.wte.weight") && moved.len() == 2,
        "{moved:?}"
    );
    // The position table's moments keep their rows.
    let wpe: Vec<String> = doc["optimizer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tensor"].as_str().unwrap().to_string())
        .collect();
    assert!(!wpe.iter().any(|t| t.starts_with("state.1.")), "{wpe:?}");
}

#[test]
fn of_several_vocabularies_the_one_the_base_tokenizer_indexes_is_transplanted() {
    let dir = tempfile::tempdir().unwrap();
    let bv = vocab(&testdata("gpt2/tokenizer.json"));
    // Two embedding tables nothing in their names tells apart: 1000 rows (GPT-2's tokenizer's
    // size) and 700 rows.
    let data = |rows: usize| -> Vec<u8> {
        (0..rows * 4)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect()
    };
    let (a, b) = (data(1000), data(700));
    fn view(rows: usize, d: &[u8]) -> safetensors::tensor::TensorView<'_> {
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, 4], d).unwrap()
    }
    let model = dir.path().join("two.safetensors");
    safetensors::serialize_to_file(
        [
            ("text.embed_tokens.weight", view(1000, &a)),
            ("other.embed_tokens.weight", view(700, &b)),
        ],
        None,
        &model,
    )
    .unwrap();
    let base = testdata("gpt2/tokenizer.json");
    let new = testdata("tokenizers/bytelevel_bpe.json");
    let out = dir.path().join("out.safetensors");
    let args = [
        "--tokenizer",
        new.to_str().unwrap(),
        "--base-tokenizer",
        base.to_str().unwrap(),
        "--allow-shrink",
    ];
    let (code, doc, err) = run_job("transplant-tokenizer", &model, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let changed: Vec<&str> = doc["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["text.embed_tokens.weight"]);
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(
        st.tensor("other.embed_tokens.weight").unwrap().data(),
        &b[..],
        "the other table is untouched"
    );
    assert_eq!(
        st.tensor("text.embed_tokens.weight").unwrap().shape()[0],
        vocab(&new).len()
    );
    assert_eq!(bv.len(), 1000);
}

#[test]
fn refusals_exit_2_name_the_file_or_flag_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let bt = testdata("tokenizers/bytelevel_bpe.json");
    let wp = testdata("tokenizers/amharic_wordpiece.json");
    let (bt, wp) = (bt.to_str().unwrap(), wp.to_str().unwrap());
    let cases: [(&[&str], &str); 4] = [
        (
            &["--tokenizer", wp, "--allow-shrink"],
            "shares no token with the model's tokenizer",
        ),
        (
            &["--tokenizer", bt, "--allow-shrink", "--init", "omp"],
            "--init omp needs --donor",
        ),
        (
            &["--tokenizer", bt, "--allow-shrink", "--donor", bt],
            "--donor is for --init omp or knn",
        ),
        (
            &["--tokenizer", bt, "--allow-shrink", "--init", "copy:a"],
            "not a transplant init",
        ),
    ];
    for (args, want) in cases {
        let (code, doc, err) = run_job("transplant-tokenizer", &testdata("gpt2"), &out, args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            doc["error"].as_str().is_some_and(|e| e.contains(want)),
            "{doc}"
        );
        assert!(!out.exists(), "{args:?} wrote");
    }
}

/// NEW given as a bare tokenizer.json: the base's tokenizer_config.json stays for its special
/// tokens, but not its tokenizer class and that class's own settings — transformers rebuilds a
/// BertTokenizer's normaliser (lowercasing) and [CLS]/[SEP] template from them over whatever
/// NEW's tokenizer.json says. The output names the generic class and keeps the generic keys.
#[test]
fn a_bare_tokenizer_json_is_not_rebuilt_by_the_base_tokenizer_class() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let new = testdata("tokenizers/wordpiece.json");
    let args = ["--tokenizer", new.to_str().unwrap(), "--allow-shrink"];
    let base = testdata("families/wordpiece_bert");
    let (code, _, err) = run_job("transplant-tokenizer", &base, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let before = json(&base.join("tokenizer_config.json"));
    assert_eq!(before["tokenizer_class"], "BertTokenizer");
    assert_eq!(before["do_lower_case"], true);
    let cfg = json(&out.join("tokenizer_config.json"));
    assert_eq!(cfg["tokenizer_class"], "PreTrainedTokenizerFast", "{cfg}");
    for gone in ["do_lower_case", "strip_accents", "tokenize_chinese_chars"] {
        assert!(cfg.get(gone).is_none(), "{gone}: {cfg}");
    }
    for kept in [
        "cls_token",
        "sep_token",
        "pad_token",
        "mask_token",
        "unk_token",
    ] {
        assert_eq!(cfg[kept], before[kept], "{kept}");
    }
}
