//! Pruning a tokenizer to a keep set (tokenizer::trim), on the real tokenizers in testdata: every
//! family keeps what the corpus uses, tokenizes it to the same token strings, loads in
//! `tokenizers`, and sends no other text to the unknown token.

use ckpt_surgery::tokenizer::form::{byte_level_bytes, WORD_MARK};
use ckpt_surgery::tokenizer::trim::{
    check_corpus, corpus_ids, prune, reason, script_ids, Pruned, PrunedFile,
};
use ckpt_surgery::Error;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

fn lines(rel: &str) -> Vec<String> {
    std::fs::read_to_string(testdata(rel))
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Every family: a tokenizer.json (or .model) of each kind in testdata.
const FAMILIES: &[&str] = &[
    "tokenizers/bytelevel_bpe.json",
    "gpt2/tokenizer.json",
    "tokenizers/sp_bpe_english.model",
    "tokenizers/sp_bpe_english_converted.json",
    "tokenizers/unigram_english.json",
    "tokenizers/sp_english.model",
    "tokenizers/wordpiece.json",
    "tokenizers/bert_uncased.json",
];

/// The map is dense and in the old order: new ids 0, 1, 2, … as old ids rise.
fn assert_dense(p: &Pruned) {
    let new: Vec<u32> = p.map.iter().flatten().copied().collect();
    assert_eq!(new, (0..new.len() as u32).collect::<Vec<_>>());
}

fn kept(p: &Pruned) -> usize {
    p.map.iter().flatten().count()
}

#[test]
fn trimmed_to_a_corpus_every_family_tokenizes_it_to_the_same_strings() {
    let english = lines("tokenizers/english.txt");
    let (keep_lines, rest) = english.split_at(40);
    let amharic = lines("tokenizers/amharic.txt");
    for base in FAMILIES {
        let path = testdata(base);
        let ids: Vec<u32> = corpus_ids(&path, keep_lines, 1)
            .unwrap()
            .iter()
            .map(|p| p.0)
            .collect();
        let p = prune(&path, &ids).unwrap();
        assert_dense(&p);
        assert!(
            ids.iter().all(|&i| p.map[i as usize].is_some()),
            "{base}: asked ids kept"
        );
        assert!(
            kept(&p) < p.map.len(),
            "{base}: something dropped ({} of {})",
            kept(&p),
            p.map.len()
        );
        if let PrunedFile::Json(text) = &p.file {
            let t: tokenizers::Tokenizer = text.parse().unwrap();
            assert_eq!(t.get_vocab_size(true), kept(&p), "{base}");
        }
        let c = check_corpus(&path, &p.file, keep_lines).unwrap();
        assert_eq!(c.lines, 40, "{base}");
        assert!(c.tokens > 400, "{base}");
        assert_eq!(c.mismatches, 0, "{base}: {:?}", c.first_mismatches);
        assert_eq!(c.new_unknown, 0, "{base}");
        // Text outside the kept set still tokenizes, never to the unknown token where the base
        // had none (byte fallback, the byte alphabet or the characters).
        for other in [rest, &amharic[..]] {
            let c = check_corpus(&path, &p.file, other).unwrap();
            assert_eq!(c.new_unknown, 0, "{base}: {:?}", c.first_new_unknown);
        }
        eprintln!(
            "{base}: kept {} of {}, {:?}",
            kept(&p),
            p.map.len(),
            reasons(&p)
        );
    }
}

fn reasons(p: &Pruned) -> Vec<(&'static str, usize)> {
    let mut r: Vec<(&'static str, usize)> = Vec::new();
    for (_, why) in &p.added {
        match r.iter_mut().find(|x| x.0 == *why) {
            Some(x) => x.1 += 1,
            None => r.push((why, 1)),
        }
    }
    r
}

/// The id of `token` in a tokenizer.json's vocab or a .model's pieces.
fn id_of(path: &Path, token: &str) -> u32 {
    use ckpt_surgery::tokenizer::base::load_base;
    *load_base(path).unwrap().ids().get(token).unwrap()
}

#[test]
fn a_kept_token_keeps_every_symbol_bpe_builds_it_from() {
    // GPT-2 joins Ġ t, h e, then Ġt he: keeping Ġthe alone would leave it unreachable.
    for (base, token, line, parts) in [
        ("gpt2/tokenizer.json", "Ġthe", " the", &["Ġt", "he"][..]),
        (
            "tokenizers/bytelevel_bpe.json",
            "Ġthe",
            " the",
            &["Ġt", "he"],
        ),
        (
            "tokenizers/sp_bpe_english_converted.json",
            "▁function",
            "function",
            &["unction"],
        ),
        (
            "tokenizers/sp_bpe_english.model",
            "▁function",
            "function",
            &["unction"],
        ),
    ] {
        let path = testdata(base);
        let id = id_of(&path, token);
        let p = prune(&path, &[id]).unwrap();
        for part in parts {
            let part = id_of(&path, part);
            assert!(
                p.added.contains(&(part, reason::MERGE_CLOSURE)),
                "{base}: {token} is built through {part}"
            );
        }
        let c = check_corpus(&path, &p.file, &[line.to_string()]).unwrap();
        assert_eq!(c.mismatches, 0, "{base}: {:?}", c.first_mismatches);
        assert_eq!(c.tokens, 1, "{base}: '{line}' is one token");
    }
}

/// GPT-2's tokenizer.json with its end-of-text token (the last id) named by a post-processor
/// (a RoBERTa-style pair inside a Sequence, and a template) and by padding.
fn gpt2_with_specials_named(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let eot = json!(["<|endoftext|>", 999]);
    doc["post_processor"] = json!({"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        {"type": "RobertaProcessing", "sep": eot, "cls": eot, "trim_offsets": true,
         "add_prefix_space": false},
    ]});
    doc["padding"] = json!({"strategy": "BatchLongest", "direction": "Right",
        "pad_to_multiple_of": null, "pad_id": 999, "pad_type_id": 0, "pad_token": "<|endoftext|>"});
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

#[test]
fn ids_the_post_processor_and_padding_name_follow_the_renumbering() {
    let dir = tempfile::tempdir().unwrap();
    let path = gpt2_with_specials_named(dir.path());
    let english = lines("tokenizers/english.txt");
    let ids: Vec<u32> = corpus_ids(&path, &english[..20], 1)
        .unwrap()
        .iter()
        .map(|p| p.0)
        .collect();
    let p = prune(&path, &ids).unwrap();
    let new = p.map[999].unwrap();
    assert!(new < 999, "ids before it were dropped");
    let PrunedFile::Json(text) = &p.file else {
        panic!("a tokenizer.json")
    };
    let doc: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        doc["post_processor"]["processors"][1]["sep"],
        json!(["<|endoftext|>", new])
    );
    assert_eq!(
        doc["post_processor"]["processors"][1]["cls"],
        json!(["<|endoftext|>", new])
    );
    assert_eq!(doc["padding"]["pad_id"], json!(new));
    assert_eq!(doc["added_tokens"][0]["id"], json!(new));
    // Encoded with special tokens, the pruned ids name the base's strings.
    let c = check_corpus(&path, &p.file, &english[..20]).unwrap();
    assert_eq!(c.mismatches, 0, "{:?}", c.first_mismatches);
}

/// GPT-2's tokenizer.json with a TemplateProcessing that appends the special token `single` to
/// a single sequence (`special_tokens` lists `<|endoftext|>` only).
fn gpt2_with_template(dir: &Path, single: &str) -> PathBuf {
    let text = std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["post_processor"] = json!({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": single, "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [999], "tokens": ["<|endoftext|>"]}}});
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

#[test]
fn a_template_processing_id_follows_the_renumbering() {
    let dir = tempfile::tempdir().unwrap();
    let path = gpt2_with_template(dir.path(), "<|endoftext|>");
    let line = vec![" the".to_string()];
    let p = prune(&path, &[id_of(&path, "Ġthe")]).unwrap();
    let PrunedFile::Json(text) = &p.file else {
        panic!("a tokenizer.json")
    };
    let doc: Value = serde_json::from_str(text).unwrap();
    let new = p.map[999].unwrap();
    assert_eq!(
        doc["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"],
        json!([new])
    );
    let c = check_corpus(&path, &p.file, &line).unwrap();
    assert_eq!((c.tokens, c.mismatches), (2, 0), "{:?}", c.first_mismatches);
}

#[test]
fn trimmed_to_a_script_the_scripts_text_tokenizes_as_before() {
    let path = testdata("tokenizers/amharic_bytelevel.json");
    let ethiopic = script_ids(&path, &["Ethiopic"]).unwrap();
    let latin = script_ids(&path, &["latin"]).unwrap();
    let vocab: Vec<(String, u32)> = {
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let v = doc["model"]["vocab"].as_object().unwrap();
        v.iter()
            .map(|(k, i)| (k.clone(), i.as_u64().unwrap() as u32))
            .collect()
    };
    // Tokens may hold parts of characters (shown as U+FFFD).
    let text = |id: u32| {
        let tok = &vocab.iter().find(|v| v.1 == id).unwrap().0;
        String::from_utf8_lossy(&byte_level_bytes(tok).unwrap()).into_owned()
    };
    let is_ethiopic = |c: char| (0x1200..=0x139F).contains(&(c as u32));
    assert!(ethiopic.iter().any(|&i| text(i).chars().any(is_ethiopic)));
    for &i in &ethiopic {
        let t = text(i);
        assert!(
            t.chars().filter(|c| c.is_alphabetic()).all(is_ethiopic),
            "{t}"
        );
    }
    // Tokens with no letter (spaces, ።) are in every script's set.
    for &i in &latin {
        let t = text(i);
        assert!(
            !t.chars().any(|c| c.is_alphabetic() && is_ethiopic(c)),
            "{t}"
        );
    }
    // Each script's text tokenizes as before with the tokenizer trimmed to that script (an
    // Amharic tokenizer trimmed to Latin drops its Ethiopic tokens).
    for (keep, text) in [(&ethiopic, "amharic.txt"), (&latin, "english.txt")] {
        let p = prune(&path, keep).unwrap();
        let c = check_corpus(&path, &p.file, &lines(&format!("tokenizers/{text}"))).unwrap();
        assert_eq!(
            (c.mismatches, c.new_unknown),
            (0, 0),
            "{:?}",
            c.first_mismatches
        );
    }
    let p = prune(&path, &latin).unwrap();
    for (tok, id) in &vocab {
        if text(*id)
            .chars()
            .any(|c| c.is_alphabetic() && is_ethiopic(c))
        {
            assert_eq!(p.map[*id as usize], None, "{tok}");
        }
    }
    let sp = script_ids(&testdata("tokenizers/sp_english.model"), &["Latin"]).unwrap();
    let m = ckpt_surgery::tokenizer::sentencepiece::parse(
        std::fs::read(testdata("tokenizers/sp_english.model")).unwrap(),
    )
    .unwrap();
    assert!(sp
        .iter()
        .any(|&i| m.pieces[i as usize].piece.starts_with(WORD_MARK)));
}

#[test]
fn an_unknown_script_is_a_usage_error_naming_keep_script() {
    let err = script_ids(
        &testdata("tokenizers/bytelevel_bpe.json"),
        &["Latin", "Klingon"],
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg {
                flag: "--keep-script",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("Klingon") && err.to_string().contains("Ethiopic"));
}

#[test]
fn an_id_the_tokenizer_lacks_is_a_usage_error() {
    let err = prune(&testdata("tokenizers/wordpiece.json"), &[3, 500]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg {
                flag: "--keep-list",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("500"), "{err}");
}

#[test]
fn a_pruned_sentencepiece_model_has_the_kept_pieces_in_order_and_the_same_normaliser() {
    use ckpt_surgery::tokenizer::sentencepiece as sp;
    let path = testdata("tokenizers/sp_bpe_english.model");
    let base = sp::parse(std::fs::read(&path).unwrap()).unwrap();
    let ids: Vec<u32> = corpus_ids(&path, &lines("tokenizers/english.txt")[..10], 1)
        .unwrap()
        .iter()
        .map(|p| p.0)
        .collect();
    let p = prune(&path, &ids).unwrap();
    let PrunedFile::Sp(bytes) = &p.file else {
        panic!("a .model")
    };
    let pruned = sp::parse(bytes.clone()).unwrap();
    let expected: Vec<&str> = (0..base.pieces.len())
        .filter(|&i| p.map[i].is_some())
        .map(|i| base.pieces[i].piece.as_str())
        .collect();
    let got: Vec<&str> = pruned.pieces.iter().map(|p| p.piece.as_str()).collect();
    assert_eq!(got, expected);
    assert_eq!(pruned.model_type, Some(2));
    assert_eq!(sp::normalizer(&pruned), sp::normalizer(&base));
}

/// A tokenizer.json saved with truncation and padding (transformers writes them when a user set
/// them) has whole lines counted and checked: a corpus line longer than `max_length` keeps every
/// token it uses, not only the first `max_length`, and the check compares the whole line.
#[test]
fn truncation_and_padding_in_tokenizer_json_do_not_cut_the_corpus() {
    let path = testdata("tokenizers/bytelevel_bpe.json");
    let corpus = lines("tokenizers/english.txt")[..5].to_vec();
    let whole = corpus_ids(&path, &corpus, 1).unwrap();
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["truncation"] =
        json!({"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0});
    doc["padding"] = json!({"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "!"});
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("tokenizer.json");
    std::fs::write(&cut, serde_json::to_string(&doc).unwrap()).unwrap();
    assert!(
        whole.len() > 3 * corpus.len(),
        "the lines are long enough to be cut"
    );
    assert_eq!(corpus_ids(&cut, &corpus, 1).unwrap(), whole);
    let keep: Vec<u32> = whole.iter().map(|p| p.0).collect();
    let p = prune(&cut, &keep).unwrap();
    let c = check_corpus(&cut, &p.file, &corpus).unwrap();
    assert!(
        c.tokens > 3 * corpus.len(),
        "whole lines checked: {} tokens",
        c.tokens
    );
    assert_eq!((c.mismatches, c.new_unknown), (0, 0));
}

/// A template naming a special token its `special_tokens` lacks makes the `tokenizers` library
/// panic when it encodes: the corpus check is an error, not a crash.
#[test]
fn a_template_naming_an_unlisted_special_token_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = gpt2_with_template(dir.path(), "<|endof");
    let line = vec![" the".to_string()];
    let got = prune(&path, &[id_of(&path, "Ġthe")])
        .and_then(|p| check_corpus(&path, &p.file, &line).map(|_| ()));
    let e = got.unwrap_err().to_string();
    assert!(e.contains("cannot read it"), "{e}");
}
