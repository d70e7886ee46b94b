//! trim-vocab through the binary on models and tokenizers written by the real libraries: the
//! kept rows are the old rows at the kept ids (by the written map), bit for bit; the trimmed
//! tokenizer (read by the `tokenizers` library, the oracle) splits the keep corpus into the same
//! token strings, its ids the old ones through the map; config ids follow; a Trainer folder's
//! moments are gathered with their tokens; refusals write nothing.

mod common;
use common::{copy_tree, one_line_refusal, run_job, testdata};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn corpus(dir: &Path, n: usize) -> PathBuf {
    let text = std::fs::read_to_string(testdata("tokenizers/english.txt")).unwrap();
    let p = dir.join("corpus.txt");
    let lines: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

fn rows(path: &Path, name: &str) -> Vec<Vec<u8>> {
    let c = ckpt_surgery::formats::open_tensors(path, &Default::default()).unwrap();
    let t = c.tensor(name).unwrap_or_else(|| panic!("{name}"));
    let b = t.try_bytes().unwrap();
    let row = b.len() / t.shape[0] as usize;
    b.chunks(row).map(<[u8]>::to_vec).collect()
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn old_to_new(map: &Value) -> Vec<Option<u64>> {
    map["old_to_new"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_u64)
        .collect()
}

#[test]
fn a_byte_level_folder_trimmed_to_a_corpus_keeps_its_rows_splits_and_config_ids() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let out = dir.path().join("out");
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("trim-vocab", &testdata("gpt2"), &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let kept = map.iter().flatten().count();
    assert!(kept < 1000 && kept as u64 == doc["kept_tokens"].as_u64().unwrap());
    let (before, after) = (
        rows(&testdata("gpt2"), "transformer.wte.weight"),
        rows(&out, "transformer.wte.weight"),
    );
    assert_eq!(after.len(), kept);
    for (old, new) in map.iter().enumerate() {
        if let Some(n) = new {
            assert_eq!(after[*n as usize], before[old], "old {old} → new {n}");
        }
    }
    let (a, b) = (
        tokenizers::Tokenizer::from_file(testdata("gpt2/tokenizer.json")).unwrap(),
        tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap(),
    );
    for line in std::fs::read_to_string(&c).unwrap().lines() {
        let (x, y) = (
            a.encode(line, false).unwrap(),
            b.encode(line, false).unwrap(),
        );
        assert_eq!(x.get_tokens(), y.get_tokens(), "{line}");
        let mapped: Vec<u32> = x
            .get_ids()
            .iter()
            .map(|&i| map[i as usize].unwrap() as u32)
            .collect();
        assert_eq!(mapped, y.get_ids(), "{line}");
    }
    let cfg = json(&out.join("config.json"));
    assert_eq!(cfg["vocab_size"], kept as u64);
    assert_eq!(
        b.id_to_token(cfg["eos_token_id"].as_u64().unwrap() as u32)
            .as_deref(),
        Some("<|endoftext|>")
    );
    assert_eq!(doc["corpus_check"]["mismatches"], 0);
}

#[test]
fn a_trainer_folders_moments_are_gathered_with_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let ckpt = testdata("trainer_untied/checkpoint-2");
    let out = dir.path().join("out");
    let (code, doc, err) = run_job(
        "trim-vocab",
        &ckpt,
        &out,
        &["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let moved = doc["optimizer"].as_array().unwrap();
    assert_eq!(moved.len(), 4, "{moved:?}");
    for m in moved {
        let name = m["tensor"].as_str().unwrap();
        let (before, after) = (
            rows(&ckpt.join("optimizer.pt"), name),
            rows(&out.join("optimizer.pt"), name),
        );
        for (old, new) in map.iter().enumerate() {
            if let Some(n) = new {
                assert_eq!(after[*n as usize], before[old], "{name} old {old}");
            }
        }
    }
}

#[test]
fn a_file_output_gets_its_map_beside_it_and_a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 10);
    let out = dir.path().join("out.safetensors");
    let tk = testdata("gpt2/tokenizer.json");
    let args = [
        "--keep-corpus",
        c.to_str().unwrap(),
        "--allow-shrink",
        "--tokenizer",
        tk.to_str().unwrap(),
    ];
    let dry: Vec<&str> = args.iter().copied().chain(["--dry-run"]).collect();
    let (code, plan, err) = run_job(
        "trim-vocab",
        &testdata("gpt2/model.safetensors"),
        &out,
        &dry,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.exists() && !dir.path().join("out.safetensors.token_map.json").exists());
    let (code, doc, err) = run_job(
        "trim-vocab",
        &testdata("gpt2/model.safetensors"),
        &out,
        &args,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(plan["new_rows"], doc["new_rows"]);
    let map = json(&dir.path().join("out.safetensors.token_map.json"));
    assert_eq!(map["new_vocab_size"], doc["new_rows"]);
}

#[test]
fn refusals_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 10);
    let c = c.to_str().unwrap();
    let out = dir.path().join("out");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--keep-corpus", c], "--allow-shrink"),
        (&["--allow-shrink"], "say what to keep"),
        (
            &["--keep-script", "Klingon", "--allow-shrink"],
            "--keep-script",
        ),
        (&["--keep-list", empty, "--allow-shrink"], "names no token"),
        (
            &["--keep-corpus", c, "--keep-top", "0", "--allow-shrink"],
            "--keep-top 0",
        ),
    ];
    for (args, want) in cases {
        let (code, _, err) = run_job("trim-vocab", &testdata("gpt2"), &out, args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!out.exists());
    }
}

/// A copy of testdata/sp_only/llama (a Llama folder with only its tokenizer.model) in `dir`.
fn sp_llama(dir: &Path) -> PathBuf {
    let model = dir.join("llama");
    std::fs::create_dir(&model).unwrap();
    for f in std::fs::read_dir(testdata("sp_only/llama")).unwrap() {
        let p = f.unwrap().path();
        std::fs::copy(&p, model.join(p.file_name().unwrap())).unwrap();
    }
    model
}

#[test]
fn a_folder_with_both_tokenizer_forms_gets_both_trimmed_to_the_same_ids() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    // The SentencePiece Llama folder with transformers' conversion of its .model beside it, as
    // transformers saves a Llama tokenizer (tokenizer.json and tokenizer.model).
    let model = sp_llama(dir.path());
    std::fs::copy(
        testdata("sp_only/converted_tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    let out = dir.path().join("out");
    let (code, doc, err) = run_job(
        "trim-vocab",
        &model,
        &out,
        &["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        doc["left_out"].as_array().is_none_or(|l| l.is_empty()),
        "{doc}"
    );
    let json = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let sp = ckpt_surgery::tokenizer::sentencepiece::parse(
        std::fs::read(out.join("tokenizer.model")).unwrap(),
    )
    .unwrap();
    assert_eq!(sp.pieces.len(), json.get_vocab_size(true));
    for (i, p) in sp.pieces.iter().enumerate() {
        assert_eq!(
            json.id_to_token(i as u32).as_deref(),
            Some(p.piece.as_str()),
            "id {i}"
        );
    }
    assert_eq!(sp.pieces.len() as u64, doc["new_rows"].as_u64().unwrap());
}

/// `--keep-top N` and `--min-count N` leave some of the corpus's tokens out on purpose: the lines
/// that use them split otherwise (smaller pieces, byte-level falls back to bytes), which is what
/// was asked; the run succeeds, reports them as `resplit`, and still checks every line for new
/// unknown tokens. Lines whose tokens were all kept must still split the same.
#[test]
fn keep_top_and_min_count_trim_below_the_corpus_and_report_the_resplit_lines() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 40);
    // Lines of the corpus's most frequent words, which any top-60 or count-3 cut keeps.
    let mut text = std::fs::read_to_string(&c).unwrap();
    text.push_str(&"\nthe of and the of and".repeat(10));
    std::fs::write(&c, text).unwrap();
    for (i, extra) in [["--keep-top", "60"], ["--min-count", "3"]]
        .iter()
        .enumerate()
    {
        let out = dir.path().join(format!("out{i}"));
        let mut args = vec!["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
        args.extend(extra.iter());
        let (code, doc, err) = run_job("trim-vocab", &testdata("gpt2"), &out, &args);
        assert_eq!(code, Some(0), "{extra:?}: {err}");
        let check = &doc["corpus_check"];
        assert_eq!(check["mismatches"], 0, "{check}");
        assert_eq!(check["new_unknown"], 0, "{check}");
        let resplit = check["resplit"].as_u64().unwrap();
        assert!(
            resplit > 0 && resplit < check["lines"].as_u64().unwrap(),
            "{check}"
        );
        // Every line whose base tokens all survived splits the same.
        let map = old_to_new(&json(&out.join("token_map.json")));
        let (a, b) = (
            tokenizers::Tokenizer::from_file(testdata("gpt2/tokenizer.json")).unwrap(),
            tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap(),
        );
        let mut same = 0;
        for line in std::fs::read_to_string(&c).unwrap().lines() {
            let x = a.encode(line, false).unwrap();
            if x.get_ids().iter().all(|&i| map[i as usize].is_some()) {
                assert_eq!(x.get_tokens(), b.encode(line, false).unwrap().get_tokens());
                same += 1;
            }
        }
        assert!(same > 0, "{extra:?}: some lines keep all their tokens");
    }
}

/// A safetensors file's rows of `name` as bytes, read with the safetensors crate itself.
fn st_rows(file: &Path, name: &str) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    let row = t.data().len() / t.shape()[0];
    t.data().chunks(row).map(<[u8]>::to_vec).collect()
}

/// A transformers-written folder (testdata/families) trimmed to 20 English lines: every matrix
/// and bias in `matrices` has the old row at each kept id's new id, bit for bit; the trimmed
/// tokenizer (the `tokenizers` library) splits every line, its specials added by the
/// post-processor included, into the same token strings with the old ids mapped; each
/// (file, key, token) of `roles` names that token in the output, as it did in the input.
fn trim_family(
    folder: &str,
    matrices: &[&str],
    roles: &[(&str, &str, &str)],
) -> (Value, Vec<Option<u64>>, tokenizers::Tokenizer, Value) {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let (base, out) = (testdata(folder), dir.path().join("out"));
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("trim-vocab", &base, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let kept = map.iter().flatten().count();
    assert!(kept < map.len() && kept as u64 == doc["kept_tokens"].as_u64().unwrap());
    for m in matrices {
        let before = st_rows(&base.join("model.safetensors"), m);
        let after = st_rows(&out.join("model.safetensors"), m);
        assert_eq!((before.len(), after.len()), (map.len(), kept), "{m}");
        for (old, new) in map.iter().enumerate() {
            if let Some(n) = new {
                assert_eq!(after[*n as usize], before[old], "{m}: old {old} → new {n}");
            }
        }
    }
    let (a, b) = (
        tokenizers::Tokenizer::from_file(base.join("tokenizer.json")).unwrap(),
        tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap(),
    );
    for line in std::fs::read_to_string(&c).unwrap().lines() {
        let (x, y) = (a.encode(line, true).unwrap(), b.encode(line, true).unwrap());
        assert_eq!(x.get_tokens(), y.get_tokens(), "{line}");
        let mapped: Vec<u32> = x
            .get_ids()
            .iter()
            .map(|&i| map[i as usize].unwrap() as u32)
            .collect();
        assert_eq!(mapped, y.get_ids(), "{line}");
    }
    assert_eq!(json(&out.join("config.json"))["vocab_size"], kept as u64);
    for (file, key, token) in roles {
        let id = |t: &tokenizers::Tokenizer, p: &Path| {
            let id = json(&p.join(file))[key].as_u64().unwrap() as u32;
            t.id_to_token(id)
        };
        assert_eq!(id(&a, &base).as_deref(), Some(*token), "input {file} {key}");
        assert_eq!(id(&b, &out).as_deref(), Some(*token), "output {file} {key}");
    }
    assert_eq!(doc["corpus_check"]["mismatches"], 0);
    assert_eq!(doc["corpus_check"]["new_unknown"], 0);
    (doc, map, b, json(&out.join("tokenizer.json")))
}

#[test]
fn a_wordpiece_bert_folder_trimmed_to_a_corpus_keeps_its_rows_bias_splits_and_special_ids() {
    let (doc, map, trimmed, _) = trim_family(
        "families/wordpiece_bert",
        &[
            "bert.embeddings.word_embeddings.weight",
            "cls.predictions.bias",
        ],
        &[("config.json", "pad_token_id", "[PAD]")],
    );
    // BERT's layout: [unused0..4] before [UNK] [CLS] [SEP] [MASK]; trimmed away, the specials
    // (and the post-processor's [CLS]/[SEP], checked through every line above) move down.
    let base = tokenizers::Tokenizer::from_file(testdata("families/wordpiece_bert/tokenizer.json"))
        .unwrap();
    assert_eq!(map[base.token_to_id("[unused0]").unwrap() as usize], None);
    let cls = base.token_to_id("[CLS]").unwrap();
    assert_eq!(trimmed.token_to_id("[CLS]"), Some(cls - 5));
    assert_eq!(map[cls as usize], Some(u64::from(cls - 5)));
    // `##` forms the kept words need stay, and `##` + each character for text outside the corpus.
    assert!(doc["kept_beyond"]["## form"].as_u64().unwrap() > 0, "{doc}");
    assert!(trimmed
        .get_vocab(true)
        .keys()
        .any(|t| t.len() > 3 && t.starts_with("##")));
}

#[test]
fn an_untied_unigram_folder_trimmed_to_a_corpus_keeps_both_matrices_scores_splits_and_config_ids() {
    let (_, map, trimmed, file) = trim_family(
        "families/unigram_llama",
        &["model.embed_tokens.weight", "lm_head.weight"],
        &[
            ("config.json", "bos_token_id", "<s>"),
            ("config.json", "eos_token_id", "</s>"),
            ("generation_config.json", "bos_token_id", "<s>"),
            ("generation_config.json", "eos_token_id", "</s>"),
        ],
    );
    // The added <s> and </s> follow the pieces: their ids move with every dropped piece.
    assert_eq!(trimmed.token_to_id("<s>"), map[300].map(|n| n as u32));
    assert!(map[300].unwrap() < 300);
    // Unigram: pieces dropped, each kept piece's score as it was, at its new id.
    let before = json(&testdata("families/unigram_llama/tokenizer.json"));
    let (before, after) = (
        before["model"]["vocab"].as_array().unwrap(),
        file["model"]["vocab"].as_array().unwrap(),
    );
    let pieces = map.iter().take(before.len()).flatten().count();
    assert_eq!(after.len(), pieces);
    for (old, new) in map.iter().enumerate().take(before.len()) {
        if let Some(n) = new {
            assert_eq!(after[*n as usize], before[old], "piece {old} → {n}");
        }
    }
}

#[test]
fn a_sentencepiece_model_named_spiece_model_is_trimmed_under_its_own_name_and_no_full_copy_is_left()
{
    // T5, mT5, ALBERT and XLNet folders name their SentencePiece model spiece.model, alone or
    // beside transformers' tokenizer.json: the SP Llama folder so named, in both layouts.
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    for with_json in [false, true] {
        let model = dir.path().join(format!("t5_style_{with_json}"));
        std::fs::create_dir(&model).unwrap();
        for f in std::fs::read_dir(testdata("sp_only/llama")).unwrap() {
            let p = f.unwrap().path();
            let name = p
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .replace("tokenizer.model", "spiece.model");
            std::fs::copy(&p, model.join(name)).unwrap();
        }
        if with_json {
            std::fs::copy(
                testdata("sp_only/converted_tokenizer.json"),
                model.join("tokenizer.json"),
            )
            .unwrap();
        }
        let out = dir.path().join(format!("out_{with_json}"));
        let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
        let (code, doc, err) = run_job("trim-vocab", &model, &out, &args);
        assert_eq!(code, Some(0), "{err}");
        let sp = ckpt_surgery::tokenizer::sentencepiece::parse(
            std::fs::read(out.join("spiece.model")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            sp.pieces.len() as u64,
            doc["new_rows"].as_u64().unwrap(),
            "with tokenizer.json: {with_json}"
        );
        assert!(
            !out.join("tokenizer.model").exists(),
            "with tokenizer.json: {with_json}"
        );
        if with_json {
            let json = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
            for (i, p) in sp.pieces.iter().enumerate() {
                assert_eq!(
                    json.id_to_token(i as u32).as_deref(),
                    Some(p.piece.as_str()),
                    "id {i}"
                );
            }
        }
    }
}

/// The same with both tokenizer forms in the folder: the tokenizer.model side of the check also
/// knows which lines `--keep-top` re-splits on purpose, and both forms are written.
#[test]
fn keep_top_on_a_folder_with_both_tokenizer_forms_trims_both() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let model = sp_llama(dir.path());
    let converted = testdata("sp_only/converted_tokenizer.json");
    std::fs::copy(converted, model.join("tokenizer.json")).unwrap();
    let out = dir.path().join("out");
    let args = [
        "--keep-corpus",
        c.to_str().unwrap(),
        "--allow-shrink",
        "--keep-top",
        "40",
    ];
    let (code, doc, err) = run_job("trim-vocab", &model, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        doc["corpus_check"]["resplit"].as_u64().unwrap() > 0,
        "{doc}"
    );
    let sp = ckpt_surgery::tokenizer::sentencepiece::parse(
        std::fs::read(out.join("tokenizer.model")).unwrap(),
    )
    .unwrap();
    let json = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    assert_eq!(sp.pieces.len(), json.get_vocab_size(true));
}

/// A copy of testdata/gpt2 in `dir`, with `edit` applied to its config files' JSON.
fn gpt2_copy(dir: &Path, edit: impl Fn(&str, &mut Value)) -> PathBuf {
    let src = dir.join("gpt2");
    std::fs::create_dir(&src).unwrap();
    for e in std::fs::read_dir(testdata("gpt2")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with("config.json") {
            let mut v = json(&p);
            edit(&name, &mut v);
            std::fs::write(src.join(&name), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        } else {
            std::fs::copy(&p, src.join(&name)).unwrap();
        }
    }
    src
}

#[test]
fn every_config_key_naming_a_token_id_follows_the_map() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    // Two ids the corpus keeps (its first tokens), named by keys outside the special roles.
    let tok = tokenizers::Tokenizer::from_file(testdata("gpt2/tokenizer.json")).unwrap();
    let line = std::fs::read_to_string(&c).unwrap();
    let ids = tok.encode(line.lines().next().unwrap(), false).unwrap();
    let (a, b) = (ids.get_ids()[0], ids.get_ids()[1]);
    let src = gpt2_copy(dir.path(), |name, v| {
        if name == "config.json" {
            v["image_token_id"] = a.into();
            v["boi_token_index"] = b.into();
        } else if name == "generation_config.json" {
            v["forced_eos_token_id"] = serde_json::json!([a, b]);
        }
    });
    let out = dir.path().join("out");
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, _, err) = run_job("trim-vocab", &src, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let (na, nb) = (map[a as usize].unwrap(), map[b as usize].unwrap());
    assert!(
        na != u64::from(a) || nb != u64::from(b),
        "the test needs ids that move"
    );
    let config = json(&out.join("config.json"));
    assert_eq!(config["image_token_id"], na);
    assert_eq!(config["boi_token_index"], nb);
    let generation = json(&out.join("generation_config.json"));
    assert_eq!(
        generation["forced_eos_token_id"],
        serde_json::json!([na, nb])
    );
}

/// transformers takes an added token's id from tokenizer.json when tokenizer_config.json's
/// `added_tokens_decoder` names it under another: the trim keys each entry by its content's id,
/// and refuses an entry naming a token the tokenizer lacks.
#[test]
fn added_tokens_decoder_entries_follow_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let tok = tokenizers::Tokenizer::from_file(testdata("gpt2/tokenizer.json")).unwrap();
    let eos = tok.token_to_id("<|endoftext|>").unwrap();
    let entry = |content: &str| serde_json::json!({"content": content, "special": true});
    // The file says id 5 for <|endoftext|> (the tokenizer says `eos`).
    let wrong = gpt2_copy(dir.path(), |name, v| {
        if name == "tokenizer_config.json" {
            v["added_tokens_decoder"] = serde_json::json!({"5": entry("<|endoftext|>")});
        }
    });
    let out = dir.path().join("out");
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, _, err) = run_job("trim-vocab", &wrong, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let new_eos = map[eos as usize].unwrap().to_string();
    let dec = json(&out.join("tokenizer_config.json"))["added_tokens_decoder"].clone();
    let keys: Vec<&String> = dec.as_object().unwrap().keys().collect();
    assert_eq!(keys, [&new_eos], "{dec}");
    assert_eq!(dec[&new_eos]["content"], "<|endoftext|>");
    // An entry naming a token the tokenizer does not have.
    let dir2 = tempfile::tempdir().unwrap();
    let unknown = gpt2_copy(dir2.path(), |name, v| {
        if name == "tokenizer_config.json" {
            v["added_tokens_decoder"] = serde_json::json!({"5": entry("<|nope|>")});
        }
    });
    let out = dir2.path().join("out");
    let (code, doc, err) = run_job("trim-vocab", &unknown, &out, &args);
    one_line_refusal((code, &doc, &err), &["added_tokens_decoder", "'<|nope|>'"]);
    assert!(!out.exists());
}

#[test]
fn what_the_trim_cannot_move_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 10);
    let c = c.to_str().unwrap();
    let out = dir.path().join("out");
    let keep = ["--keep-corpus", c, "--allow-shrink"];
    // generation_config.json listing ids in a shape the trim does not move.
    let suppress = gpt2_copy(dir.path(), |name, v| {
        if name == "generation_config.json" {
            v["suppress_tokens"] = serde_json::json!([5, 7]);
        }
    });
    let (code, doc, err) = run_job("trim-vocab", &suppress, &out, &keep);
    one_line_refusal((code, &doc, &err), &["'suppress_tokens'"]);
    assert!(!out.exists());
    // --config naming no file.
    let missing = dir.path().join("none.json");
    let args = [&keep[..], &["--config", missing.to_str().unwrap()]].concat();
    let (code, doc, err) = run_job("trim-vocab", &testdata("gpt2"), &out, &args);
    one_line_refusal((code, &doc, &err), &["--config", "no such file"]);
    assert!(!out.exists());
    // --tensor naming the embedding of an untied model but not its head.
    let llama = testdata("families/unigram_llama");
    let args = [&keep[..], &["--tensor", "model.embed_tokens.weight"]].concat();
    let (code, doc, err) = run_job("trim-vocab", &llama, &out, &args);
    one_line_refusal((code, &doc, &err), &["'lm_head.weight'", "--tensor"]);
    assert!(!out.exists());
}

/// `file` (a safetensors with GPT-2's `transformer.wte.weight`) plus BART's buffer
/// `final_logits_bias` [1, V] holding 0.5·id (so each value names its row).
fn add_logits_bias(file: &Path) {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let v = st.tensor("transformer.wte.weight").unwrap().shape()[0];
    let bias: Vec<u8> = (0..v)
        .flat_map(|i| (0.5 * i as f32).to_le_bytes())
        .collect();
    let mut views: Vec<(String, TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
    views.push((
        "final_logits_bias".into(),
        TensorView::new(Dtype::F32, vec![1, v], &bias).unwrap(),
    ));
    let out = serialize(views, None).unwrap();
    std::fs::write(file, out).unwrap();
}

/// The output's `final_logits_bias`: its shape and values.
fn logits_bias(folder: &Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("final_logits_bias").unwrap();
    let v = t
        .data()
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (t.shape().to_vec(), v)
}

/// BART's `final_logits_bias` [1, V] holds one value per token along its second dimension: a
/// trim gathers it by the token map (in a Trainer folder too, where it has no optimizer state), a
/// growth appends the mean (0 for the zeros BART saves; sanitize-checkpoint's too), and the shape
/// stays [1, V'] (the model's buffer). scripts/bart_consumer.py checks them with transformers.
#[test]
fn a_bart_final_logits_bias_follows_the_rows_in_trim_and_extend() {
    let dir = tempfile::tempdir().unwrap();
    let src = gpt2_copy(dir.path(), |_, _| {});
    add_logits_bias(&src.join("model.safetensors"));
    // inspect-checkpoint lists it with the vocabulary.
    let (code, doc, err) = common::run_json("inspect-checkpoint", &[src.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let names: Vec<&Value> = doc["checkpoints"][0]["vocabulary"]["vocabulary"]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert!(
        names.contains(&&Value::from("final_logits_bias")),
        "{names:?}"
    );
    let c = corpus(dir.path(), 10);
    let out = dir.path().join("trimmed");
    let trim = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("trim-vocab", &src, &out, &trim);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let kept = map.iter().flatten().count();
    let (shape, bias) = logits_bias(&out);
    assert_eq!(shape, [1, kept]);
    for (old, new) in map.iter().enumerate() {
        if let Some(n) = new {
            assert_eq!(bias[*n as usize], 0.5 * old as f32, "old {old} → new {n}");
        }
    }
    let changed: Vec<&Value> = doc["changed"].as_array().unwrap().iter().collect();
    let entry = changed
        .iter()
        .find(|c| c["name"] == "final_logits_bias")
        .expect("the bias is listed");
    assert_eq!(entry["new_shape"], serde_json::json!([1, kept]));

    let grown = dir.path().join("grown");
    let (code, _, err) = run_job("extend-embeddings", &src, &grown, &["--new-rows", "1010"]);
    assert_eq!(code, Some(0), "{err}");
    let (shape, bias) = logits_bias(&grown);
    assert_eq!(shape, [1, 1010]);
    let old: Vec<f32> = (0..1000).map(|i| 0.5 * i as f32).collect();
    assert_eq!(bias[..1000], old[..]);
    let mean = old.iter().map(|&x| f64::from(x)).sum::<f64>() / 1000.0;
    assert!(
        bias[1000..].iter().all(|&x| x == mean as f32),
        "{:?}",
        &bias[1000..]
    );
    assert_eq!(rows(&grown, "transformer.wte.weight").len(), 1010);

    // A Trainer folder: the bias is a buffer (no optimizer state); the moments of the
    // parameters move as without it.
    let trainer = dir.path().join("checkpoint-2");
    copy_tree(&testdata("trainer/checkpoint-2"), &trainer);
    add_logits_bias(&trainer.join("model.safetensors"));
    let out = dir.path().join("trainer-out");
    let (code, doc, err) = run_job("trim-vocab", &trainer, &out, &trim);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    let (shape, bias) = logits_bias(&out);
    assert_eq!(shape, [1, map.iter().flatten().count()]);
    for (old, new) in map.iter().enumerate() {
        if let Some(n) = new {
            assert_eq!(bias[*n as usize], 0.5 * old as f32, "old {old} → new {n}");
        }
    }
    let moved = doc["optimizer"].as_array().unwrap();
    assert!(!moved.is_empty() && moved.iter().all(|m| m["of"] != "final_logits_bias"));
    // sanitize-checkpoint grows the Trainer folder: the bias with the rows, the parameters'
    // moments as without it.
    let out = dir.path().join("sanitized");
    let args = ["--vocab-rows", "1010"];
    let (code, doc, err) = run_job("sanitize-checkpoint", &trainer, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let (shape, bias) = logits_bias(&out);
    assert_eq!(shape, [1, 1010]);
    assert_eq!(bias[..1000], old[..]);
    assert!(bias[1000..].iter().all(|&x| x == mean as f32));
    // The optimizer's vocabulary parameter is the embedding alone; its two moments grew.
    let o = &doc["optimizers"][0];
    assert_eq!(
        o["vocabulary_params"],
        serde_json::json!([[0, "transformer.wte.weight"]])
    );
    let repaired: Vec<&Value> = o["repaired"].as_array().unwrap().iter().collect();
    assert_eq!(repaired.len(), 2, "{repaired:?}");
    assert!(repaired
        .iter()
        .all(|r| r["new_shape"] == serde_json::json!([1010, 16])));
    let changed = doc["model_changed"].as_array().unwrap();
    assert!(changed
        .iter()
        .any(|c| c["tensor"] == "final_logits_bias"
            && c["new_shape"] == serde_json::json!([1, 1010])));
}

/// In a sharded set the bias follows the rows too, and transformers' `total_parameters` (which
/// counts parameters, not buffers) moves by the embedding's new rows only.
#[test]
fn a_sharded_sets_logits_bias_grows_and_total_parameters_counts_only_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sharded");
    copy_tree(&testdata("gpt2_sharded"), &src);
    let shard = "model-00001-of-00002.safetensors";
    add_logits_bias(&src.join(shard));
    let index = src.join("model.safetensors.index.json");
    let mut doc = json(&index);
    doc["weight_map"]["final_logits_bias"] = shard.into();
    let params = doc["metadata"]["total_parameters"].as_u64().unwrap();
    std::fs::write(&index, doc.to_string()).unwrap();
    let out = dir.path().join("out");
    let (code, _, err) = run_job("extend-embeddings", &src, &out, &["--new-rows", "1010"]);
    assert_eq!(code, Some(0), "{err}");
    let c = ckpt_surgery::formats::open_tensors(&out, &Default::default()).unwrap();
    let bias = c.tensor("final_logits_bias").unwrap();
    assert_eq!(bias.shape, [1, 1010]);
    let d = c.tensor("transformer.wte.weight").unwrap().shape[1];
    let meta = json(&out.join("model.safetensors.index.json"))["metadata"].clone();
    assert_eq!(meta["total_parameters"], params + 10 * d);
    let total: u64 = c.tensors().map(|t| t.nbytes()).sum();
    assert_eq!(meta["total_size"], total);
}

/// BPE dropout skips merges at random: the keep corpus is counted and checked with it off, and
/// the written tokenizer keeps it.
#[test]
fn a_tokenizer_with_bpe_dropout_is_trimmed_and_keeps_its_dropout() {
    let dir = tempfile::tempdir().unwrap();
    let src = gpt2_copy(dir.path(), |_, _| {});
    let tok = src.join("tokenizer.json");
    let mut v = json(&tok);
    v["model"]["dropout"] = 0.5.into();
    std::fs::write(&tok, serde_json::to_vec(&v).unwrap()).unwrap();
    let c = corpus(dir.path(), 20);
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let mut kept = Vec::new();
    for i in 0..3 {
        let out = dir.path().join(format!("out{i}"));
        let (code, doc, err) = run_job("trim-vocab", &src, &out, &args);
        assert_eq!(code, Some(0), "run {i}: {err}");
        assert_eq!(json(&out.join("tokenizer.json"))["model"]["dropout"], 0.5);
        kept.push(doc["kept_tokens"].clone());
    }
    assert!(kept.windows(2).all(|w| w[0] == w[1]), "{kept:?}");
}

/// A chat template's literal text (tokenizer_config.json's, and a named one under
/// additional_chat_templates/) is kept whatever the corpus uses: the trimmed tokenizer splits it
/// as the full one does.
#[test]
fn a_chat_templates_literal_text_keeps_its_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 20);
    let (said, tool) = ("Zebra quokka says:", "Xylophone tool result ~~");
    let src = gpt2_copy(dir.path(), |name, v| {
        if name == "tokenizer_config.json" {
            v["chat_template"] = format!("{{% for m in messages %}}{{{{ m['content'] }}}}<|endoftext|>{{% endfor %}}{{% if add_generation_prompt %}}{{{{ '{said}' }}}}{{% endif %}}").into();
        }
    });
    std::fs::create_dir(src.join("additional_chat_templates")).unwrap();
    std::fs::write(
        src.join("additional_chat_templates/tool.jinja"),
        format!("{{% for m in messages %}}\n  {{% if m.role == 'tool' %}}\n{tool}{{{{ m.content }}}}\n{{% endif %}}\n{{% endfor %}}"),
    )
    .unwrap();
    let base = tokenizers::Tokenizer::from_file(testdata("gpt2/tokenizer.json")).unwrap();
    let ids = |text: &str| base.encode(text, false).unwrap().get_ids().to_vec();
    let used: std::collections::HashSet<u32> = std::fs::read_to_string(&c)
        .unwrap()
        .lines()
        .flat_map(&ids)
        .collect();
    let wanted: Vec<u32> = [ids(said), ids(tool)].concat();
    assert!(
        wanted.iter().any(|i| !used.contains(i)),
        "the test needs template tokens the corpus does not use"
    );
    let out = dir.path().join("out");
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("trim-vocab", &src, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let map = old_to_new(&json(&out.join("token_map.json")));
    for i in &wanted {
        assert!(map[*i as usize].is_some(), "id {i} dropped");
    }
    assert!(doc["asked"]["template"].as_u64().unwrap() >= 2, "{doc}");
    let pieces = doc["asked"]["template_pieces"].as_array().unwrap();
    for text in [said, tool] {
        assert!(pieces.iter().any(|p| p == text), "{text}: {pieces:?}");
    }
    let trimmed = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    for text in [said, tool] {
        let (a, b) = (
            base.encode(text, false).unwrap(),
            trimmed.encode(text, false).unwrap(),
        );
        assert_eq!(a.get_tokens(), b.get_tokens(), "{text}");
    }
}

/// `--optimizer drop` on a folder without optimizer state does nothing: the report says so.
#[test]
fn optimizer_drop_on_a_model_folder_says_nothing_was_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 5);
    let drop = ["--allow-shrink", "--optimizer", "drop"];
    let trim = [&["--keep-corpus", c.to_str().unwrap()][..], &drop].concat();
    let bpe = testdata("tokenizers/bytelevel_bpe.json");
    let transplant = [&["--tokenizer", bpe.to_str().unwrap()][..], &drop].concat();
    for (job, args) in [("trim-vocab", trim), ("transplant-tokenizer", transplant)] {
        let out = dir.path().join(job);
        let (code, doc, err) = run_job(job, &testdata("gpt2"), &out, &args);
        assert_eq!(code, Some(0), "{job}: {err}");
        let warned = doc["warnings"].as_array().unwrap().iter().any(|w| {
            w.as_str().is_some_and(|w| {
                w.contains("--optimizer drop") && w.contains("nothing was dropped")
            })
        });
        assert!(warned, "{job}: {doc}");
    }
}

/// A folder whose tokenizer.json has a token its tokenizer.model lacks (transformers saves the
/// .model unchanged when tokens are added): the trim follows tokenizer.json, which transformers
/// loads, and leaves the .model out saying why (it was refused, naming --keep-list).
#[test]
fn a_sentencepiece_model_short_of_tokenizer_json_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let c = corpus(dir.path(), 10);
    let llama = sp_llama(dir.path());
    let mut tj = json(&testdata("sp_only/converted_tokenizer.json"));
    let size = tj["model"]["vocab"].as_object().unwrap().len();
    tj["added_tokens"].as_array_mut().unwrap().push(serde_json::json!({"id": size, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
    let added = dir.path().join("added.json");
    std::fs::write(&added, tj.to_string()).unwrap();
    let grown = dir.path().join("grown");
    let args = ["--tokenizer", added.to_str().unwrap()];
    let (code, _, err) = run_job("extend-embeddings", &llama, &grown, &args);
    assert_eq!(code, Some(0), "{err}");
    std::fs::copy(llama.join("tokenizer.model"), grown.join("tokenizer.model")).unwrap();
    let out = dir.path().join("out");
    let args = ["--keep-corpus", c.to_str().unwrap(), "--allow-shrink"];
    let (code, doc, err) = run_job("trim-vocab", &grown, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let left = doc["left_out"].as_array().unwrap();
    let why = left
        .iter()
        .find(|l| l["name"] == "tokenizer.model")
        .unwrap_or_else(|| panic!("{doc}"));
    assert!(
        why["why"]
            .as_str()
            .unwrap()
            .contains(&format!("tokenizer.json {}", size + 1)),
        "{why}"
    );
    assert!(!out.join("tokenizer.model").exists());
    let trimmed = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    assert!(trimmed.token_to_id("<|im_start|>").is_some());
}
