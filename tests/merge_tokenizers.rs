//! merge-tokenizers on the shipped tokenizers: ids stable, new tokens reachable, bad input refused.

mod common;
use ckpt_surgery::tokenizer::sentencepiece as sp;
use common::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

fn tok(rel: &str) -> PathBuf {
    testdata(&format!("tokenizers/{rel}"))
}

/// Run a merge; return (exit code, parsed JSON report or error, stderr).
fn merge(base: &Path, adds: &[&Path], out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--base"), base.as_os_str()];
    for a in adds {
        args.push(OsStr::new("--add"));
        args.push(a.as_os_str());
    }
    args.extend([OsStr::new("--output"), out.as_os_str()]);
    args.extend(extra.iter().map(OsStr::new));
    run_json("merge-tokenizers", &args)
}

fn lines(rel: &str) -> Vec<String> {
    std::fs::read_to_string(tok(rel))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn chatterbox_plus_81_amharic_tokens_is_2535_with_every_base_id_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    for add in ["amharic_vocab.json", "amharic_addition.json"] {
        let out = tmp.path().join(format!("merged_{add}"));
        let (code, r, err) = merge(&tok("chatterbox_base.json"), &[&tok(add)], &out, &[]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(r["base_size"], 2454);
        assert_eq!(r["merged_size"], 2535);
        assert_eq!(r["added"].as_array().unwrap().len(), 81);
        assert_eq!(
            r["skipped"].as_array().unwrap().len(),
            3,
            "the 3 shared specials"
        );

        let base = Tokenizer::from_file(tok("chatterbox_base.json")).unwrap();
        let merged = Tokenizer::from_file(&out).unwrap();
        let base_vocab = base.get_vocab(true);
        assert_eq!(base_vocab.len(), 2454);
        for (t, id) in &base_vocab {
            assert_eq!(merged.token_to_id(t), Some(*id), "{t}");
        }
        assert_eq!(merged.token_to_id("[START]"), Some(255));
        for line in lines("english.txt") {
            assert_eq!(
                base.encode(line.as_str(), false).unwrap().get_ids(),
                merged.encode(line.as_str(), false).unwrap().get_ids(),
                "{line}"
            );
        }
        for line in lines("amharic.txt") {
            let ids = merged
                .encode(line.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            assert!(
                !ids.is_empty() && ids.iter().all(|&i| (2454..2535).contains(&i)),
                "{line}: {ids:?}"
            );
        }
    }
}

#[test]
fn both_forms_of_the_addition_give_the_same_ids_and_the_tokenizer_json_keeps_its_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.json"), tmp.path().join("b.json"));
    let (_, ra, _) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_vocab.json")],
        &a,
        &[],
    );
    let (_, rb, _) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_addition.json")],
        &b,
        &[],
    );
    let ids = |r: &Value| -> Vec<(String, u64)> {
        r["added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["token"].as_str().unwrap().to_string(),
                    t["id"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(ids(&ra), ids(&rb));
    // vocab.json has no merges: its multi-character tokens become added tokens.
    assert_eq!(ra["merges_appended"].as_array().unwrap().len(), 0);
    assert_eq!(ra["became_added_tokens"].as_array().unwrap().len(), 20);
    // tokenizer.json brings its 20 merges, appended after the base's, so they stay in the vocab.
    assert_eq!(rb["merges_appended"].as_array().unwrap().len(), 20);
    assert_eq!(rb["became_added_tokens"].as_array().unwrap().len(), 0);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let base: Value =
        serde_json::from_str(&std::fs::read_to_string(tok("chatterbox_base.json")).unwrap())
            .unwrap();
    let (m, bm) = (
        json["model"]["merges"].as_array().unwrap(),
        base["model"]["merges"].as_array().unwrap(),
    );
    assert_eq!(&m[..bm.len()], &bm[..], "base merges first, in their order");
    assert_eq!(m.len(), bm.len() + 20);
    assert!(rb["unreachable"].as_array().unwrap().is_empty());
}

#[test]
fn check_text_shows_english_unchanged_and_amharic_compressing_better() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_addition.json")],
        &out,
        &[
            "--check-text",
            tok("english.txt").to_str().unwrap(),
            "--check-text",
            tok("amharic.txt").to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let en = &r["check_text"][0];
    let am = &r["check_text"][1];
    assert_eq!(en["changed_lines"], 0);
    assert_eq!(en["changed_percent"], 0.0);
    assert!(en["lines"].as_u64().unwrap() > 100);
    assert!(
        am["tokens_per_char_after"].as_f64().unwrap()
            < am["tokens_per_char_before"].as_f64().unwrap()
    );
}

#[test]
fn sentencepiece_merge_keeps_every_base_piece_and_field_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged.model");
    let (code, r, err) = merge(
        &tok("sp_english.model"),
        &[&tok("sp_amharic.model")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let base = sp::parse(std::fs::read(tok("sp_english.model")).unwrap()).unwrap();
    let addition = sp::parse(std::fs::read(tok("sp_amharic.model")).unwrap()).unwrap();
    let merged = sp::parse(std::fs::read(&out).unwrap()).unwrap();
    let n = base.pieces.len();
    for (a, b) in base.pieces.iter().zip(&merged.pieces) {
        assert_eq!(
            base.bytes[a.raw.clone()],
            merged.bytes[b.raw.clone()],
            "{}",
            a.piece
        );
    }
    // Everything before the first new piece and after the last is the base's own bytes.
    let inserted = merged.bytes.len() - base.bytes.len();
    assert_eq!(merged.bytes[..base.insert_at], base.bytes[..base.insert_at]);
    assert_eq!(
        merged.bytes[base.insert_at + inserted..],
        base.bytes[base.insert_at..]
    );
    assert_eq!(merged.model_type, base.model_type);
    // New pieces keep the addition's scores and types, at ids from 400 on.
    let scores: std::collections::HashMap<&str, (f32, sp::PieceType)> = addition
        .pieces
        .iter()
        .map(|p| (p.piece.as_str(), (p.score, p.kind)))
        .collect();
    for (i, p) in merged.pieces[n..].iter().enumerate() {
        assert_eq!(scores[p.piece.as_str()].0, p.score, "{}", p.piece);
        let want = if scores[p.piece.as_str()].1 == sp::PieceType::UserDefined {
            sp::PieceType::UserDefined
        } else {
            sp::PieceType::Normal
        };
        assert_eq!(p.kind, want, "{}", p.piece);
        assert_eq!(r["added"][i]["id"], (n + i) as u64);
    }
    assert_eq!(
        merged
            .pieces
            .iter()
            .find(|p| p.piece == "<am>")
            .unwrap()
            .kind,
        sp::PieceType::UserDefined
    );
    // Byte-fallback pieces of the base are still there, untouched.
    assert_eq!(
        merged
            .pieces
            .iter()
            .filter(|p| p.kind == sp::PieceType::Byte)
            .count(),
        256
    );
}

#[test]
fn merging_a_tokenizer_with_itself_adds_nothing_and_lists_every_token_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    for base in [
        "chatterbox_base.json",
        "wordpiece.json",
        "bytelevel_bpe.json",
    ] {
        let out = tmp.path().join(base);
        let (code, r, err) = merge(&tok(base), &[&tok(base)], &out, &[]);
        assert_eq!(code, Some(0), "{base}: {err}");
        assert_eq!(r["added"].as_array().unwrap().len(), 0, "{base}");
        let size = Tokenizer::from_file(tok(base))
            .unwrap()
            .get_vocab(true)
            .len();
        assert_eq!(r["skipped"].as_array().unwrap().len(), size, "{base}");
        assert_eq!(r["merged_size"], r["base_size"]);
    }
    let out = tmp.path().join("self.model");
    let (code, r, _) = merge(
        &tok("sp_english.model"),
        &[&tok("sp_english.model")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0));
    assert_eq!(r["added"].as_array().unwrap().len(), 0);
}

#[test]
fn added_tokens_above_the_vocab_are_never_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(tok("chatterbox_base.json")).unwrap())
            .unwrap();
    // Added tokens outside model.vocab sit right after it (tokenizers numbers them so).
    for (id, tok) in [(2454, "<|lang_en|>"), (2455, "<|lang_de|>")] {
        json["added_tokens"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "id": id, "content": tok, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            }));
    }
    let base = tmp.path().join("base.json");
    std::fs::write(&base, serde_json::to_string(&json).unwrap()).unwrap();
    let out = tmp.path().join("out.json");
    let (code, r, err) = merge(&base, &[&tok("amharic_vocab.json")], &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["base_size"], 2456);
    let ids: Vec<u64> = r["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.first(), Some(&2456));
    assert!(!ids.contains(&2454) && !ids.contains(&2455));
    assert_eq!(r["pinned"].as_array().unwrap().len(), 2);
    let merged = Tokenizer::from_file(&out).unwrap();
    assert_eq!(merged.token_to_id("<|lang_en|>"), Some(2454));
    assert_eq!(merged.token_to_id("<|lang_de|>"), Some(2455));
    assert_eq!(merged.token_to_id("ሀ"), Some(2456));

    // A file whose added-token ids disagree with how tokenizers numbers them is refused.
    json["added_tokens"]
        .as_array_mut()
        .unwrap()
        .last_mut()
        .unwrap()["id"] = serde_json::json!(3000);
    std::fs::write(&base, serde_json::to_string(&json).unwrap()).unwrap();
    let (code, _, err) = merge(&base, &[&tok("amharic_vocab.json")], &out, &[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("has id 3000 in the file but tokenizers loads it as 2455"),
        "{err}"
    );
}

#[test]
fn a_token_holding_a_base_added_token_is_explained_by_it_and_special_reaches_it() {
    let tmp = tempfile::tempdir().unwrap();
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "ab[UNK]cd\n").unwrap();
    let out = tmp.path().join("m.json");
    let base = tok("chatterbox_base.json");
    let (code, _, err) = merge(&base, &[&add], &out, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("'ab[UNK]cd' holds BASE's added token '[UNK]'") && err.contains("--special"),
        "{err}"
    );
    assert!(!out.exists());
    // The fix the message names works: matched whole, the token is reached.
    let (code, r, err) = merge(&base, &[&add], &out, &["--special", "ab[UNK]cd"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["unreachable"], serde_json::json!([]), "{r}");
}

#[test]
fn wordpiece_takes_new_tokens_in_its_vocab_and_byte_level_converts_a_plain_addition() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("wp.json");
    // Each plain token of the vocab.json becomes a word-start and a `##` piece; two of them
    // ([STOP], [SPACE]) are split by WordPiece's pre-tokenizer: an error naming them, nothing
    // written, unless allowed.
    let (code, _, err) = merge(
        &tok("wordpiece.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("2 of 163 new tokens do not encode alone to their id ([STOP] [SPACE])")
            && err.contains("--allow-unreachable"),
        "{err}"
    );
    assert!(!out.exists());
    let (code, r, err) = merge(
        &tok("wordpiece.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &["--allow-unreachable"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["unreachable"], serde_json::json!(["[STOP]", "[SPACE]"]));
    assert!(r["added"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["place"] == "vocab"));
    let merged = Tokenizer::from_file(&out).unwrap();
    let base_size = r["base_size"].as_u64().unwrap() as u32;
    let ids = merged
        .encode(lines("amharic.txt")[0].as_str(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert!(ids.iter().all(|&i| i >= base_size), "{ids:?}");

    // A byte-level base splits text into bytes first: the plain-character addition's tokens are
    // converted into byte-level form (bare and word-start) and made reachable with merges; its
    // own character-level merges do not apply and are not appended.
    let out = tmp.path().join("bl.json");
    let (code, r, err) = merge(
        &tok("bytelevel_bpe.json"),
        &[&tok("amharic_addition.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    assert_eq!(r["merges_appended"].as_array().unwrap().len(), 0);
    assert_eq!(r["converted"], 162, "81 plain tokens, bare and word-start");
    let merged = Tokenizer::from_file(&out).unwrap();
    let word_start = merged.token_to_id("ĠáĪĢ").unwrap();
    assert!(word_start >= 600);
    assert_eq!(merged.encode(" ሀ", false).unwrap().get_ids(), [word_start]);
    assert!(r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("pre_tokenizer differs")));
}

#[test]
fn bad_input_exits_2_with_a_message_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base_text = std::fs::read_to_string(tok("chatterbox_base.json")).unwrap();
    let mut missing: Value = serde_json::from_str(&base_text).unwrap();
    missing["model"]["merges"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(["zq", "qz"]));
    let mut collision: Value = serde_json::from_str(&base_text).unwrap();
    collision["model"]["vocab"]["zzz"] = serde_json::json!(7);
    // The new ids would pass 2^32 − 1 (they wrapped onto BASE's ids, exit 0).
    let mut huge: Value = serde_json::from_str(&base_text).unwrap();
    huge["model"]["vocab"]["zzzz"] = serde_json::json!(4_294_967_290u64);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "not_a_tokenizer.json",
            b"\x00\x01binary".to_vec(),
            "not a usable base tokenizer",
        ),
        (
            "missing_merge_part.json",
            missing.to_string().into_bytes(),
            "BPE merge #",
        ),
        (
            "id_collision.json",
            collision.to_string().into_bytes(),
            "id collision",
        ),
        (
            "huge_id.json",
            huge.to_string().into_bytes(),
            "largest id is 4294967290",
        ),
        (
            "no_model.json",
            br#"{"version": "1.0"}"#.to_vec(),
            "not a tokenizer.json",
        ),
    ];
    for (name, bytes, want) in cases {
        let base = tmp.path().join(name);
        std::fs::write(&base, bytes).unwrap();
        let out = tmp.path().join(format!("{name}.out.json"));
        let (code, _, err) = merge(&base, &[&tok("amharic_vocab.json")], &out, &[]);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(want) && err.contains(name), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!out.exists());
    }
    // An addition that is not one either.
    let bad = tmp.path().join("bad_add.bin");
    std::fs::write(&bad, [0xffu8, 0xfe, 0x00, 0x9c]).unwrap();
    let (code, _, err) = merge(
        &tok("chatterbox_base.json"),
        &[&bad],
        &tmp.path().join("x.json"),
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("not a usable addition"), "{err}");
    // The output may not be an input.
    let copy = tmp.path().join("base_copy.json");
    std::fs::copy(tok("chatterbox_base.json"), &copy).unwrap();
    let (code, _, err) = merge(&copy, &[&tok("amharic_vocab.json")], &copy, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("refusing to write over an input"), "{err}");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), base_text);
}

#[test]
fn dry_run_plans_and_verifies_but_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, _) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &["--dry-run"],
    );
    assert_eq!(code, Some(0));
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["merged_size"], 2535);
    assert!(!out.exists());
}

#[test]
fn help_has_an_example() {
    let o = run("merge-tokenizers", &[OsStr::new("--help")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Examples:"));
}

#[test]
fn the_output_is_named_for_bases_format_and_an_existing_one_is_not_replaced_unasked() {
    let tmp = tempfile::tempdir().unwrap();
    // A SentencePiece base gives a SentencePiece model: a .json name for it is refused.
    let out = tmp.path().join("o.json");
    let (code, _, err) = merge(
        &tok("sp_english.model"),
        &[&tok("sp_amharic.model")],
        &out,
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("SentencePiece") && err.contains(".model"),
        "{err}"
    );
    assert!(!out.exists());
    // And a tokenizer.json base gives a tokenizer.json.
    let out = tmp.path().join("o.model");
    let (code, _, err) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(!out.exists());
    // An existing output is left alone without --overwrite.
    let out = tmp.path().join("merged.json");
    std::fs::write(&out, b"mine").unwrap();
    let (code, _, err) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--overwrite"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"mine");
    let (code, _, err) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_vocab.json")],
        &out,
        &["--overwrite"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(Tokenizer::from_file(&out).is_ok());
}

/// The ids of every BASE token, BASE's merges first and in order, English encoded as before,
/// every new token produced by the merged *model* from its own symbols (not by decoding text),
/// and Amharic text using the new tokens and needing fewer of them.
fn assert_byte_level_merge_is_sound(out: &Path, r: &Value) -> Tokenizer {
    use tokenizers::Model;
    let base = Tokenizer::from_file(tok("bytelevel_bpe.json")).unwrap();
    let merged = Tokenizer::from_file(out).unwrap();
    for (t, id) in base.get_vocab(true) {
        assert_eq!(merged.token_to_id(&t), Some(id), "{t}");
    }
    let json =
        |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    let (m, b) = (json(out), json(&tok("bytelevel_bpe.json")));
    let (mm, bm) = (
        m["model"]["merges"].as_array().unwrap(),
        b["model"]["merges"].as_array().unwrap(),
    );
    assert_eq!(
        &mm[..bm.len()],
        &bm[..],
        "base merges first, in their order"
    );
    assert_eq!(m["added_tokens"], b["added_tokens"], "no new added tokens");
    let added = r["added"].as_array().unwrap();
    assert!(!added.is_empty());
    for a in added {
        let (t, id) = (
            a["token"].as_str().unwrap(),
            a["id"].as_u64().unwrap() as u32,
        );
        assert!(id >= 600 && a["place"] == "vocab", "{a}");
        let got: Vec<u32> = merged
            .get_model()
            .tokenize(t)
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(got, [id], "{t}");
    }
    for line in lines("english.txt") {
        assert_eq!(
            base.encode(line.as_str(), false).unwrap().get_ids(),
            merged.encode(line.as_str(), false).unwrap().get_ids(),
            "{line}"
        );
    }
    let (mut before, mut after) = (0, 0);
    for line in lines("amharic.txt") {
        let ids = merged
            .encode(line.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert!(ids.iter().any(|&i| i >= 600), "{line}");
        assert_eq!(merged.decode(&ids, false).unwrap(), line);
        before += base.encode(line.as_str(), false).unwrap().len();
        after += ids.len();
    }
    assert!(after * 2 < before, "{before} → {after}");
    merged
}

#[test]
fn byte_level_addition_brings_its_merges_and_every_new_token_is_produced_by_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(
        &tok("bytelevel_bpe.json"),
        &[&tok("amharic_bytelevel.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let addition = Tokenizer::from_file(tok("amharic_bytelevel.json")).unwrap();
    let new = addition.get_vocab(true).len() - r["skipped"].as_array().unwrap().len();
    assert_eq!(r["added"].as_array().unwrap().len(), new);
    assert!(r["merges_appended"].as_array().unwrap().len() >= new);
    assert_eq!(r["converted"], 0, "already in BASE's form");
    let merged = assert_byte_level_merge_is_sound(&out, &r);
    // Amharic text splits as the addition alone splits it.
    for line in lines("amharic.txt") {
        let pieces = |t: &Tokenizer| {
            t.encode(line.as_str(), false)
                .unwrap()
                .get_tokens()
                .to_vec()
        };
        assert_eq!(pieces(&merged), pieces(&addition), "{line}");
    }
}

#[test]
fn a_token_list_into_a_byte_level_base_becomes_ordinary_tokens_bare_and_word_start() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(
        &tok("bytelevel_bpe.json"),
        &[&tok("amharic_words.txt")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let entries = lines("amharic_words.txt");
    assert_eq!(r["converted"], 2 * entries.len());
    assert!(!r["merges_synthesized"].as_array().unwrap().is_empty());
    let merged = assert_byte_level_merge_is_sound(&out, &r);
    // Each entry, bare and after a space, is one token: a single character too.
    for e in &entries {
        for text in [e.clone(), format!(" {e}")] {
            let ids = merged
                .encode(text.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            assert_eq!(ids.len(), 1, "{text:?}: {ids:?}");
            assert!(ids[0] >= 600);
        }
    }
    assert!(entries.contains(&"ሀ".to_string()));
    // The listed entries take the first ids, in list order; intermediates come after.
    assert_eq!(r["added"][0]["id"], 600);
    let n = 2 * entries.len();
    let inter = r["intermediates"].as_array().unwrap();
    assert_eq!(r["added"].as_array().unwrap().len(), n + inter.len());
    assert_eq!(r["added"][n]["token"], inter[0]);
}

/// A token list as editors write it: a byte-order mark first, a first entry starting with `{`
/// (not JSON: the file is not named *.json), an entry with a space inside. Into a `▁` BPE base
/// whose pre-tokenizer does not split words, the space is a `▁` as the model sees it, so the
/// entry encodes to its one token.
#[test]
fn a_token_lists_mark_leading_brace_and_inner_space_are_read_as_the_model_sees_them() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "\u{FEFF}{a\nab cd\n").unwrap();
    let out = tmp.path().join("m.json");
    let base = tok("sp_bpe_english_converted.json");
    let (code, r, err) = merge(&base, &[&list], &out, &["--allow-base-change"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    let listed: Vec<String> = tokens_of(&r).into_iter().take(4).collect();
    assert_eq!(
        listed,
        ["{a", "\u{2581}{a", "ab\u{2581}cd", "\u{2581}ab\u{2581}cd"]
    );
    let merged = Tokenizer::from_file(&out).unwrap();
    let id = merged.token_to_id("\u{2581}ab\u{2581}cd").unwrap();
    assert_eq!(merged.encode("ab cd", false).unwrap().get_ids(), [id]);
    // Named *.json, the same text is refused as JSON, saying how it would be read as a list.
    let named = tmp.path().join("list.json");
    std::fs::write(&named, "{a\nab cd\n").unwrap();
    let (code, r, _) = merge(&base, &[&named], &tmp.path().join("n.json"), &[]);
    assert_eq!(code, Some(2));
    assert!(
        r["error"].as_str().unwrap().contains("not named *.json"),
        "{r}"
    );
}

/// A word holding BASE's special token that lives in added_tokens only (GPT-2's
/// `<|endoftext|>`, pinned into the vocab at its id when anything is added): a piece on the
/// word's way that equals it is that entry, not a new token at another id.
#[test]
fn a_piece_equal_to_a_base_added_token_outside_the_vocab_is_that_token() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "<|endoftext|>x\n<|endoftext|> x\n").unwrap();
    let out = tmp.path().join("m.json");
    let base = testdata("gpt2/tokenizer.json");
    let (code, r, err) = merge(&base, &[&list], &out, &["--allow-base-change"]);
    assert_eq!(code, Some(0), "{err}");
    let merged = Tokenizer::from_file(&out).unwrap();
    assert_eq!(merged.token_to_id("<|endoftext|>"), Some(999));
    assert!(!tokens_of(&r).contains(&"<|endoftext|>".to_string()));
    use tokenizers::Model;
    for a in r["added"].as_array().unwrap() {
        let got = merged
            .get_model()
            .tokenize(a["token"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            got.iter().map(|t| t.id).collect::<Vec<_>>(),
            [a["id"].as_u64().unwrap() as u32]
        );
    }
}

#[test]
fn a_token_list_into_a_sentencepiece_bpe_base_gets_the_pieces_bpe_joins_through() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.model");
    let (code, r, err) = merge(
        &tok("sp_bpe_english.model"),
        &[&tok("amharic_words.txt")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    let base = sp::parse(std::fs::read(tok("sp_bpe_english.model")).unwrap()).unwrap();
    let merged = sp::parse(std::fs::read(&out).unwrap()).unwrap();
    let n = base.pieces.len();
    for (a, b) in base.pieces.iter().zip(&merged.pieces) {
        assert_eq!(base.bytes[a.raw.clone()], merged.bytes[b.raw.clone()]);
    }
    let inter = r["intermediates"].as_array().unwrap();
    assert!(!inter.is_empty(), "BPE needs the joins on the way");
    let lowest_base = base.pieces.iter().map(|p| p.score).fold(0f32, f32::min);
    let scores: std::collections::HashMap<&str, f32> = merged
        .pieces
        .iter()
        .filter(|p| p.kind == sp::PieceType::Normal)
        .map(|p| (p.piece.as_str(), p.score))
        .collect();
    for p in &merged.pieces[n..] {
        assert!(
            p.score < lowest_base,
            "{}: BASE's joins come first",
            p.piece
        );
    }
    // Every listed word, at a word start (SentencePiece's ▁) and inside a word, is one piece;
    // so is the single character ሀ.
    for w in lines("amharic_words.txt") {
        for form in [w.clone(), format!("\u{2581}{w}")] {
            let got = sp::bpe_pieces(|p| scores.get(p).copied(), &form);
            assert_eq!(got, [form.as_str()], "{form}");
        }
    }
    // English pieces join as before.
    let base_scores: std::collections::HashMap<&str, f32> = base
        .pieces
        .iter()
        .filter(|p| p.kind == sp::PieceType::Normal)
        .map(|p| (p.piece.as_str(), p.score))
        .collect();
    for line in lines("english.txt").iter().take(50) {
        let text = format!("\u{2581}{}", line.replace(' ', "\u{2581}"));
        assert_eq!(
            sp::bpe_pieces(|p| base_scores.get(p).copied(), &text),
            sp::bpe_pieces(|p| scores.get(p).copied(), &text)
        );
    }
}

#[test]
fn a_merge_that_changes_base_text_fails_naming_the_line_and_writes_nothing() {
    // The GPT-2 fixture's byte-level BPE was trained on the same English to 999 tokens: its extra
    // merges, appended after the 600-token base's, re-split English words — the base changes.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let english = tok("english.txt");
    let check = ["--check-text", english.to_str().unwrap()];
    let add = testdata("gpt2/tokenizer.json");
    let (code, _, err) = merge(&tok("bytelevel_bpe.json"), &[&add], &out, &check);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("check failed: line ")
            && err.contains("is base text")
            && err.contains("--allow-base-change"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!out.exists());
    let mut extra = check.to_vec();
    extra.push("--allow-base-change");
    let (code, r, err) = merge(&tok("bytelevel_bpe.json"), &[&add], &out, &extra);
    assert_eq!(code, Some(0), "{err}");
    let en = &r["check_text"][0];
    assert!(en["base_changed"].as_u64().unwrap() > 0, "{en}");
    assert!(out.exists());
}

#[test]
fn every_merge_checks_built_in_base_text_and_reports_new_text_compression() {
    let tmp = tempfile::tempdir().unwrap();
    // No --check-text: the built-in lines are checked anyway; the Amharic one is new text.
    let (code, r, err) = merge(
        &tok("chatterbox_base.json"),
        &[&tok("amharic_addition.json")],
        &tmp.path().join("m.json"),
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let s = &r["base_sample"];
    assert!(s["base_lines"].as_u64().unwrap() >= 15, "{s}");
    assert_eq!(s["base_changed"], 0);
    assert_eq!(s["new_lines"], 1, "{s}");
    // A SentencePiece base is checked too, --check-text included (refused before).
    let amharic = tok("amharic.txt");
    let english = tok("english.txt");
    let (code, r, err) = merge(
        &tok("sp_english.model"),
        &[&tok("sp_amharic.model")],
        &tmp.path().join("m.model"),
        &[
            "--check-text",
            english.to_str().unwrap(),
            "--check-text",
            amharic.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (en, am) = (&r["check_text"][0], &r["check_text"][1]);
    assert_eq!(en["base_changed"], 0);
    assert_eq!(en["base_lines"], en["lines"]);
    assert_eq!(am["new_lines"], am["lines"]);
    assert!(am["new_tokens_after"].as_u64() < am["new_tokens_before"].as_u64());
    let human = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            tok("sp_english.model").as_os_str(),
            OsStr::new("--add"),
            tok("sp_amharic.model").as_os_str(),
            OsStr::new("--output"),
            tmp.path().join("n.model").as_os_str(),
            OsStr::new("--dry-run"),
        ],
    );
    let text = stdout(&human);
    assert!(text.contains("base text: 0 of "), "{text}");
    assert!(text.contains("new text: 1 lines"), "{text}");
}

#[test]
fn tekken_and_tiktoken_files_are_refused_naming_the_format_and_the_conversion() {
    let tmp = tempfile::tempdir().unwrap();
    // The shapes of Mistral's tekken.json and of a tiktoken ranks file (as tiktoken writes them).
    let tekken = tmp.path().join("tekken.json");
    std::fs::write(
        &tekken,
        r#"{"config": {"pattern": "[^\\r\\n]+", "num_vocab_tokens": 2, "default_vocab_size": 2},
            "vocab": [{"rank": 0, "token_bytes": "YQ==", "token_str": "a"},
                      {"rank": 1, "token_bytes": "Yg==", "token_str": "b"}],
            "special_tokens": []}"#,
    )
    .unwrap();
    let ranks = tmp.path().join("cl100k.tiktoken");
    std::fs::write(&ranks, "IQ== 0\nIg== 1\nIw== 2\naGVsbG8= 3\n").unwrap();
    for (file, what, tool) in [
        (&tekken, "tekken.json", "convert_tekken_tokenizer"),
        (&ranks, "tiktoken ranks file", "TikTokenConverter"),
    ] {
        let out = tmp.path().join("o.json");
        let (code, _, err) = merge(file, &[&tok("amharic_words.txt")], &out, &[]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(what) && err.contains(tool), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let (code, _, err) = merge(&tok("bytelevel_bpe.json"), &[file], &out, &[]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("not a usable addition") && err.contains(what) && err.contains(tool),
            "{err}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn special_flag_adds_special_tokens_matched_whole_and_marks_listed_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    // ሀ is listed by the addition: marked special (kept whole, as written); <|am|> is not: added.
    let (code, _, err) = merge(
        &tok("bytelevel_bpe.json"),
        &[&tok("amharic_words.txt")],
        &out,
        &["--special", "<|am|>", "--special", "ሀ"],
    );
    assert_eq!(code, Some(0), "{err}");
    let merged = Tokenizer::from_file(&out).unwrap();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let base: Value =
        serde_json::from_str(&std::fs::read_to_string(tok("bytelevel_bpe.json")).unwrap()).unwrap();
    let added = json["added_tokens"].as_array().unwrap();
    let nb = base["added_tokens"].as_array().unwrap().len();
    assert_eq!(&added[..nb], &base["added_tokens"].as_array().unwrap()[..]);
    let new: Vec<(&str, bool, bool)> = added[nb..]
        .iter()
        .map(|a| {
            (
                a["content"].as_str().unwrap(),
                a["special"].as_bool().unwrap(),
                a["normalized"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(new, [("ሀ", true, false), ("<|am|>", true, false)]);
    let am = merged.token_to_id("<|am|>").unwrap();
    let ha = merged.token_to_id("ሀ").unwrap();
    assert!(am >= 600 && ha >= 600);
    let ids = merged
        .encode("<|am|>ሀ hi", false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(&ids[..2], [am, ha], "{ids:?}");
    let decoded = merged.decode(&ids, true).unwrap();
    assert!(!decoded.contains("<|am|>"), "{decoded}");
    // In a SentencePiece base a special token is a USER_DEFINED piece: matched whole.
    let out = tmp.path().join("m.model");
    let (code, _, err) = merge(
        &tok("sp_bpe_english.model"),
        &[&tok("amharic_words.txt")],
        &out,
        &["--special", "<|am|>"],
    );
    assert_eq!(code, Some(0), "{err}");
    let m = sp::parse(std::fs::read(&out).unwrap()).unwrap();
    let p = m.pieces.iter().find(|p| p.piece == "<|am|>").unwrap();
    assert_eq!(p.kind, sp::PieceType::UserDefined);
}

#[test]
fn train_learns_the_addition_in_bases_form_from_a_corpus_and_reports_fertility() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tok("amharic.txt");
    let train = ["--train", corpus.to_str().unwrap(), "--train-size", "120"];
    // Byte-level BPE: merges continued from the base's, every new token produced by the model.
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(&tok("bytelevel_bpe.json"), &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    let t = &r["trained"];
    assert_eq!(t["learned"], 120, "{t}");
    let (before, after) = (
        t["fertility_before"].as_f64().unwrap(),
        t["fertility_after"].as_f64().unwrap(),
    );
    assert!(after * 3.0 < before, "{before} → {after}");
    assert_eq!(r["merges_appended"].as_array().unwrap().len(), 120);
    assert_byte_level_merge_is_sound(&out, &r);
    // SentencePiece BPE: the corpus's characters, then its joins, scored below the base's.
    let out = tmp.path().join("m.model");
    let (code, r, err) = merge(&tok("sp_bpe_english.model"), &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    let t = &r["trained"];
    assert!(
        t["fertility_after"].as_f64() < t["fertility_before"].as_f64(),
        "{t}"
    );
    let merged = sp::parse(std::fs::read(&out).unwrap()).unwrap();
    let scores: std::collections::HashMap<&str, f32> = merged
        .pieces
        .iter()
        .map(|p| (p.piece.as_str(), p.score))
        .collect();
    for line in lines("amharic.txt") {
        for w in line.split_whitespace() {
            let word = format!("\u{2581}{w}");
            let pieces = sp::bpe_pieces(|p| scores.get(p).copied(), &word);
            assert!(
                pieces.iter().all(|p| scores.contains_key(p.as_str())),
                "{word}"
            );
        }
    }
}

#[test]
fn a_new_script_covers_its_block_so_one_word_does_not_fail_the_base_text_check() {
    // ሀሁ's bytes join through E1 88, which every character of U+1200–U+123F starts with: the
    // built-in Amharic line (ሰላም …) splits differently, and it is new-script text, not base text.
    let tmp = tempfile::tempdir().unwrap();
    let words = tmp.path().join("one.txt");
    std::fs::write(&words, "ሀሁ\n").unwrap();
    let (code, r, err) = merge(
        &tok("bytelevel_bpe.json"),
        &[&words],
        &tmp.path().join("m.json"),
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["base_sample"]["new_lines"], 1);
    assert_eq!(r["base_sample"]["base_changed"], 0);
}

fn tokens_of(r: &Value) -> Vec<String> {
    r["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["token"].as_str().unwrap().to_string())
        .collect()
}

/// Every base token keeps its id in the merged tokenizer.json.
fn assert_base_ids_kept(base: &Path, merged: &Tokenizer) {
    let b = Tokenizer::from_file(base).unwrap();
    for (t, i) in b.get_vocab(true) {
        assert_eq!(merged.token_to_id(&t), Some(i), "{t}");
    }
}

#[test]
fn a_token_list_into_a_wordpiece_base_gives_word_start_and_continuing_pieces_the_model_produces() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "ሰላም\nሀ\n።\nCheckpoint\n").unwrap();
    let out = tmp.path().join("m.json");
    let english = tok("english.txt");
    let check = ["--check-text", english.to_str().unwrap()];
    let (code, r, err) = merge(&tok("bert_uncased.json"), &[&list], &out, &check);
    assert_eq!(code, Some(0), "{err}");
    // Each word bare (word start) and `##` (inside a word), written as the uncased base writes
    // text; `##።` is not: BERT makes punctuation a word of its own, so nothing continues with it.
    let added = tokens_of(&r);
    assert_eq!(
        added,
        [
            "ሰላም",
            "##ሰላም",
            "ሀ",
            "##ሀ",
            "።",
            "checkpoint",
            "##checkpoint"
        ]
    );
    let skipped = r["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|k| k["token"] == "##።"
                && k["reason"].as_str().unwrap().contains("word of its own")),
        "{skipped:?}"
    );
    assert_eq!(r["base_form"], "word-piece");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    assert_eq!(r["base_sample"]["base_changed"], 0);
    assert_eq!(r["check_text"][0]["base_changed"], 0);
    let m = Tokenizer::from_file(&out).unwrap();
    assert_base_ids_kept(&tok("bert_uncased.json"), &m);
    let id = |t: &str| m.token_to_id(t).unwrap();
    let ids = |s: &str| m.encode(s, false).unwrap().get_ids().to_vec();
    assert_eq!(ids("ሰላም ።"), [id("ሰላም"), id("።")]);
    assert_eq!(ids("aሰላም"), [id("a"), id("##ሰላም")]);
    assert_eq!(ids("ሀሀ"), [id("ሀ"), id("##ሀ")]);
    assert_eq!(ids("CHECKPOINT"), [id("checkpoint")]);
}

#[test]
fn train_on_a_wordpiece_base_learns_pieces_with_its_trainer_and_merges_them() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tok("amharic.txt");
    let out = tmp.path().join("m.json");
    let train = ["--train", corpus.to_str().unwrap(), "--train-size", "300"];
    let (code, r, err) = merge(&tok("bert_uncased.json"), &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    // The alphabet bare and `##` (about 120), then the pairs seen at least twice: the small
    // corpus has fewer than 300.
    let t = &r["trained"];
    let learned = t["learned"].as_u64().unwrap();
    assert!((130..300).contains(&learned), "{t}");
    // BASE has no Ge'ez letter: every Amharic word was one [UNK]; now none is, and a word is
    // less than two pieces.
    let after = t["fertility_after"].as_f64().unwrap();
    assert!((1.0..2.0).contains(&after), "{t}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    assert_eq!(r["base_sample"]["base_changed"], 0);
    let added = tokens_of(&r);
    assert!(added.iter().any(|t| t.starts_with("##")), "{added:?}");
    assert!(added
        .iter()
        .any(|t| !t.starts_with("##") && t.chars().count() > 1));
    let m = Tokenizer::from_file(&out).unwrap();
    assert_base_ids_kept(&tok("bert_uncased.json"), &m);
    let unk = m.token_to_id("[UNK]").unwrap();
    for line in lines("amharic.txt") {
        let ids = m.encode(line.as_str(), false).unwrap().get_ids().to_vec();
        assert!(!ids.contains(&unk), "{line}");
    }
    // The same bytes run to run (the trainer numbers some pieces in hash order).
    let again = tmp.path().join("again.json");
    let (code, _, err) = merge(&tok("bert_uncased.json"), &[], &again, &train);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn a_trained_wordpiece_addition_keeps_its_pieces_as_they_are_in_a_wordpiece_base() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(
        &tok("bert_uncased.json"),
        &[&tok("amharic_wordpiece.json")],
        &out,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["converted"], 0, "same form: nothing converted");
    let added = tokens_of(&r);
    assert!(added
        .iter()
        .any(|t| t.starts_with("##") && t.chars().count() > 3));
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    assert_eq!(r["base_sample"]["base_changed"], 0);
    let m = Tokenizer::from_file(&out).unwrap();
    assert_base_ids_kept(&tok("bert_uncased.json"), &m);
    let alone = Tokenizer::from_file(tok("amharic_wordpiece.json")).unwrap();
    let unk = m.token_to_id("[UNK]").unwrap();
    for line in lines("amharic.txt") {
        let e = m.encode(line.as_str(), false).unwrap();
        assert!(!e.get_ids().contains(&unk), "{line}");
        // Text in the new script splits as the addition alone splits it.
        let a = alone.encode(line.as_str(), false).unwrap();
        assert_eq!(e.get_tokens(), a.get_tokens(), "{line}");
    }
}

#[test]
fn train_on_unigram_bases_learns_scored_pieces_that_viterbi_picks() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tok("amharic.txt");
    let train = ["--train", corpus.to_str().unwrap(), "--train-size", "100"];
    // A tokenizer.json Unigram: pieces with their log probabilities as scores.
    let out = tmp.path().join("u.json");
    let (code, r, err) = merge(&tok("unigram_english.json"), &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    assert_eq!(r["base_sample"]["base_changed"], 0);
    // BASE wrote each Amharic word as ▁ and one <unk>; now in pieces, none unknown.
    let after = r["trained"]["fertility_after"].as_f64().unwrap();
    assert!((2.0..3.0).contains(&after), "{after}");
    let scores: Vec<f64> = r["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["score"].as_f64().unwrap())
        .collect();
    assert!(scores.iter().all(|s| *s < 0.0), "{scores:?}");
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first");
    let m = Tokenizer::from_file(&out).unwrap();
    assert_base_ids_kept(&tok("unigram_english.json"), &m);
    let base = r["base_size"].as_u64().unwrap() as u32;
    let line = &lines("amharic.txt")[0];
    let e = m.encode(line.as_str(), false).unwrap();
    let new = e.get_ids().iter().filter(|&&i| i >= base).count();
    assert!(new * 2 > e.get_ids().len(), "{:?}", e.get_tokens());
    assert!(
        !e.get_tokens().iter().any(|t| t == "<unk>"),
        "{:?}",
        e.get_tokens()
    );
    // T5's conversion puts <pad> above the Unigram's vocab: pinned into it at its id, and the
    // new pieces after it.
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(tok("unigram_english.json")).unwrap())
            .unwrap();
    let pad = serde_json::json!({"id": 300, "content": "<pad>", "single_word": false,
        "lstrip": false, "rstrip": false, "normalized": false, "special": true});
    doc["added_tokens"].as_array_mut().unwrap().push(pad);
    let t5 = tmp.path().join("t5.json");
    std::fs::write(&t5, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = tmp.path().join("t5_merged.json");
    let (code, r, err) = merge(&t5, &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["pinned"], serde_json::json!(["<pad>"]));
    assert_eq!(r["added"][0]["id"], 301);
    let m = Tokenizer::from_file(&out).unwrap();
    assert_base_ids_kept(&t5, &m);
    // A SentencePiece unigram model (byte fallback: 3 pieces a Ge'ez letter before): NORMAL
    // pieces with their scores.
    let out = tmp.path().join("u.model");
    let (code, r, err) = merge(&tok("sp_english.model"), &[], &out, &train);
    assert_eq!(code, Some(0), "{err}");
    assert!(r["unreachable"].as_array().unwrap().is_empty());
    let t = &r["trained"];
    assert!(
        t["fertility_after"].as_f64().unwrap() * 2.0 < t["fertility_before"].as_f64().unwrap(),
        "{t}"
    );
    let merged = sp::parse(std::fs::read(&out).unwrap()).unwrap();
    let base = sp::parse(std::fs::read(tok("sp_english.model")).unwrap()).unwrap();
    let new = &merged.pieces[base.pieces.len()..];
    assert!(!new.is_empty() && new.iter().all(|p| p.kind == sp::PieceType::Normal));
    assert!(new.windows(2).any(|w| w[0].score != w[1].score));
}

#[test]
fn a_unigram_additions_pieces_its_own_viterbi_splits_are_skipped_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // "ላም" (-10) loses to "ላ" + "ም" (-4) in the addition itself: a trainer's dead piece.
    let add = serde_json::json!({"version": "1.0", "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
        "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
            "vocab": [["<unk>", 0.0], ["▁ሰ", -2.0], ["ላ", -2.0], ["ም", -2.0], ["ላም", -10.0], ["▁ሰላም", -3.0]]}});
    let add_path = tmp.path().join("add.json");
    std::fs::write(&add_path, add.to_string()).unwrap();
    let out = tmp.path().join("m.json");
    let (code, r, err) = merge(&tok("unigram_english.json"), &[&add_path], &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    let added = tokens_of(&r);
    assert!(added.contains(&"▁ሰላም".to_string()) && !added.contains(&"ላም".to_string()));
    let skipped = r["skipped"].as_array().unwrap();
    assert!(
        skipped.iter().any(|k| k["token"] == "ላም"
            && k["reason"]
                .as_str()
                .unwrap()
                .contains("own Viterbi splits it")),
        "{skipped:?}"
    );
    assert!(r["unreachable"].as_array().unwrap().is_empty());
}

/// Every id at or above `base_size` in the written tokenizer, with its token, in id order: read
/// back with `tokenizers` (tokenizer.json) or the SentencePiece parser (.model).
fn written_additions(out: &Path, base_size: u64) -> Vec<(u64, String)> {
    let mut got: Vec<(u64, String)> = if out.extension() == Some(OsStr::new("model")) {
        let m = sp::parse(std::fs::read(out).unwrap()).unwrap();
        let pieces = m.pieces.iter().enumerate();
        pieces.map(|(i, p)| (i as u64, p.piece.clone())).collect()
    } else {
        let t = Tokenizer::from_file(out).unwrap();
        let vocab = t.get_vocab(true).into_iter();
        vocab.map(|(tok, id)| (u64::from(id), tok)).collect()
    };
    got.retain(|(id, _)| *id >= base_size);
    got.sort();
    got
}

#[test]
fn dry_run_plans_exactly_the_tokens_and_ids_the_run_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        // A real byte-level BPE (GPT-2 form) with a plain word list: converted entries, the
        // intermediate pieces the synthesized merges pass through, and a special token.
        ("bytelevel_bpe.json", "amharic_words.txt", "bl.json"),
        // SentencePiece unigram with a SentencePiece addition (scores and piece types).
        ("sp_english.model", "sp_amharic.model", "sp.model"),
        // SentencePiece BPE with a word list: the pieces its joins need, appended.
        ("sp_bpe_english.model", "amharic_words.txt", "sp_bpe.model"),
    ];
    for (base, add, name) in cases {
        let out = tmp.path().join(name);
        let extra = ["--special", "<|am|>"];
        let dry: Vec<&str> = extra.iter().copied().chain(["--dry-run"]).collect();
        let (code, plan, err) = merge(&tok(base), &[&tok(add)], &out, &dry);
        assert_eq!(code, Some(0), "{base}: {err}");
        assert_eq!(plan["dry_run"], true);
        assert!(!out.exists(), "{base}: a dry run writes nothing");
        let (code, run, err) = merge(&tok(base), &[&tok(add)], &out, &extra);
        assert_eq!(code, Some(0), "{base}: {err}");
        let planned: Vec<(u64, String)> = plan["added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["id"].as_u64().unwrap(),
                    a["token"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert!(planned.len() > 10, "{base}: {}", planned.len());
        assert!(planned.iter().any(|(_, t)| t == "<|am|>"), "{base}");
        assert_eq!(plan["added"], run["added"], "{base}");
        assert_eq!(plan["skipped"], run["skipped"], "{base}");
        assert_eq!(plan["merged_size"], run["merged_size"], "{base}");
        // The plan's bytes are the written bytes.
        assert_eq!(plan["output_sha256"], run["output_sha256"], "{base}");
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(plan["output_sha256"].as_str().unwrap(), sha256_hex(&bytes));
        // Read back: exactly the planned tokens at the planned ids, nothing else above BASE's.
        let base_size = plan["base_size"].as_u64().unwrap();
        let mut want = planned.clone();
        want.sort();
        assert_eq!(written_additions(&out, base_size), want, "{base}");
        assert_eq!(
            plan["merged_size"].as_u64().unwrap(),
            base_size + planned.len() as u64,
            "{base}"
        );
    }
}

#[test]
fn a_plan_made_for_a_dry_run_executes_to_its_bytes_and_checks_the_destination_then() {
    use ckpt_surgery::jobs::merge_tokenizers as merge;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let opts = merge::Options {
        dry_run: true,
        train_size: 1000,
        ..Default::default()
    };
    let (base, add) = (tok("chatterbox_base.json"), tok("amharic_vocab.json"));
    let plan = merge::plan(&base, &[add], &out, &opts).unwrap();
    assert!(!out.exists());
    assert_eq!(plan.report.merged_size, 2535);
    let r = merge::execute(&plan).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), plan.bytes());
    assert_eq!(r.output.as_deref(), Some(out.as_path()));
    assert!(!r.dry_run);
    assert_eq!(r.output_sha256, plan.report.output_sha256);
    // The plan did not check the destination (a dry run); executing it does: an existing
    // output is not replaced.
    let err = merge::execute(&plan).unwrap_err().to_string();
    assert!(err.contains("--overwrite"), "{err}");
}

/// The tokens a `--train` run learned that hold `▁` anywhere but first (across or after words).
fn with_inner_word_mark(r: &Value) -> Vec<String> {
    tokens_of(r)
        .into_iter()
        .filter(|t| t.char_indices().any(|(i, c)| i > 0 && c == '\u{2581}'))
        .collect()
}

#[test]
fn train_on_a_converted_sentencepiece_tokenizer_json_learns_words_as_sentencepiece_does() {
    // sp_bpe_english.model as transformers converts it (LlamaTokenizer): a Metaspace
    // pre-tokenizer with split: false, which leaves each line one "word".
    let base = tok("sp_bpe_english_converted.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    assert_eq!(doc["pre_tokenizer"]["type"], "Metaspace");
    assert_eq!(doc["pre_tokenizer"]["split"], false);
    let tmp = tempfile::tempdir().unwrap();
    for corpus in ["english.txt", "amharic.txt"] {
        let corpus = tok(corpus);
        // English text is BASE's own: new English tokens change how it encodes.
        let train = [
            "--train",
            corpus.to_str().unwrap(),
            "--train-size",
            "400",
            "--allow-base-change",
        ];
        let out = tmp.path().join("m.json");
        let (code, r, err) = merge(&base, &[], &out, &[&train[..], &["--overwrite"]].concat());
        assert_eq!(code, Some(0), "{err}");
        assert!(r["unreachable"].as_array().unwrap().is_empty(), "{r}");
        assert!(tokens_of(&r).len() > 100, "{r}");
        assert_eq!(with_inner_word_mark(&r), Vec::<String>::new());
        // The same model as a .model learns the same pieces.
        let out_sp = tmp.path().join("m.model");
        let (code, r_sp, err) = merge(
            &tok("sp_bpe_english.model"),
            &[],
            &out_sp,
            &[&train[..], &["--overwrite"]].concat(),
        );
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(tokens_of(&r_sp), tokens_of(&r), "{}", corpus.display());
    }
}

#[test]
fn train_across_words_is_opt_in_and_refused_where_base_splits_words() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tok("english.txt");
    let train = [
        "--train",
        corpus.to_str().unwrap(),
        "--train-size",
        "100",
        "--allow-base-change",
        "--train-across-words",
    ];
    // A base that keeps a line whole, as a tokenizer.json and as a .model: tokens across words,
    // each produced by the merged model.
    for (base, out) in [
        ("sp_bpe_english_converted.json", "m.json"),
        ("sp_bpe_english.model", "m.model"),
    ] {
        let out = tmp.path().join(out);
        let (code, r, err) = merge(&tok(base), &[], &out, &train);
        assert_eq!(code, Some(0), "{err}");
        assert!(r["unreachable"].as_array().unwrap().is_empty(), "{r}");
        let across = with_inner_word_mark(&r);
        assert!(
            across.iter().any(|t| t == "\u{2581}of\u{2581}the"),
            "{across:?}"
        );
    }
    // A pre-tokenizer that splits words (byte-level) would never produce them: refused, exit 2.
    let out = tmp.path().join("b.json");
    let (code, r, err) = merge(&tok("bytelevel_bpe.json"), &[], &out, &train);
    assert_eq!(code, Some(2), "{r}");
    assert!(err.contains("--train-across-words") && err.contains("splits text into words"));
    assert!(!out.exists());
    let help = stdout(&run("merge-tokenizers", &[OsStr::new("--help")]));
    assert!(help.contains("--train-across-words"), "{help}");
}

#[test]
fn a_base_without_its_unknown_token_is_judged_on_the_built_in_lines_it_can_encode() {
    // BPE(unk_token="[UNK]") trained with special tokens ["<unk>"]: "[UNK]" is not in the
    // vocabulary, so tokenizers fails on any character the base lacks (most built-in lines).
    let base = tok("bpe_unk_missing.json");
    assert!(Tokenizer::from_file(&base)
        .unwrap()
        .encode("ሰላም", false)
        .is_err());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let words = tok("amharic_words.txt");
    let english = tok("english.txt");
    let check = ["--check-text", english.to_str().unwrap()];
    let (code, r, err) = merge(&base, &[&words], &out, &check);
    assert_eq!(code, Some(0), "{err}");
    let b = &r["base_sample"];
    assert_eq!(b["skipped_lines"], 19, "{b}");
    assert_eq!(b["lines"], 2, "{b}");
    let why = b["skipped_because"].as_str().unwrap();
    assert!(why.contains("[UNK]"), "{why}");
    assert_eq!(r["check_text"][0]["lines"], 300);
    assert_eq!(r["check_text"][0]["skipped_lines"], 0);
    assert!(out.exists());
    // The text report says so.
    let o = run(
        "merge-tokenizers",
        &[
            OsStr::new("--base"),
            base.as_os_str(),
            OsStr::new("--add"),
            words.as_os_str(),
            OsStr::new("--output"),
            tmp.path().join("d.json").as_os_str(),
            OsStr::new("--dry-run"),
        ],
    );
    assert!(
        stdout(&o).contains("built-in sample: 19 of 21 lines skipped: BASE cannot encode them"),
        "{}",
        stdout(&o)
    );
    // A --check-text line BASE cannot encode is still an error: exit 2, nothing written.
    let am = tmp.path().join("am.txt");
    std::fs::write(&am, "hello\n\u{1230}\u{120b}\u{121d}\n").unwrap();
    let out = tmp.path().join("m2.json");
    let (code, _, err) = merge(
        &base,
        &[&words],
        &out,
        &["--check-text", am.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("am.txt") && err.contains("cannot encode"),
        "{err}"
    );
    assert!(!out.exists());
}

/// A word whose BPE joins pass through BASE's control piece `<s>` (SentencePiece BPE never joins
/// into one): refused saying so, and `--special` (matched whole) adds it.
#[test]
fn a_sentencepiece_bpe_word_through_a_control_piece_is_refused_naming_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "<s>x\n").unwrap();
    let base = tok("sp_bpe_english.model");
    let out = tmp.path().join("m.model");
    let (code, r, _) = merge(&base, &[&list], &out, &["--allow-base-change"]);
    assert_eq!(code, Some(2));
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("control or unused piece") && !e.contains("unigram"),
        "{e}"
    );
    let (code, _, err) = merge(
        &base,
        &[&list],
        &out,
        &["--allow-base-change", "--special", "<s>x"],
    );
    assert_eq!(code, Some(0), "{err}");
}

/// A SentencePiece BASE that `sentencepiece` refuses is refused (the library's checks, made when
/// the model is read); one this merge writes no reachable pieces for (char model, `▁` ending
/// words, a new word that is BASE's control piece) is refused naming why; a stray unknown enum
/// value after `model_type: BPE` leaves it BPE, as protobuf reads it. Nothing is written on a
/// refusal.
#[test]
fn sentencepiece_bases_are_read_as_the_library_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let bpe = std::fs::read(tok("sp_bpe_english.model")).unwrap();
    let unigram = std::fs::read(tok("sp_english.model")).unwrap();
    let with = |base: &[u8], tail: Vec<u8>| [base, &tail[..]].concat();
    let refused: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "empty",
            with(&bpe, sp_piece_field("", -1e6, 1)),
            "is empty: sentencepiece refuses the model",
        ),
        (
            "twice",
            with(&bpe, sp_piece_field("▁the", -1e6, 1)),
            "'▁the' is defined twice",
        ),
        (
            "unk2",
            with(&bpe, sp_piece_field("<unk2>", 0.0, 2)),
            "are both the unknown piece",
        ),
        (
            "nan",
            with(&unigram, sp_piece_field("▁zz", f32::NAN, 1)),
            "has score NaN",
        ),
        (
            "byte",
            with(&bpe, sp_piece_field("<0x41>", 0.0, 6)),
            "byte piece but trainer_spec.byte_fallback is false",
        ),
        // trainer_spec { model_type: CHAR } merged in after the file's own.
        (
            "char",
            with(&bpe, vec![0x12, 0x02, 0x18, 0x04]),
            "BASE is a char model",
        ),
        // trainer_spec { treat_whitespace_as_suffix: true }.
        (
            "suffix",
            with(&bpe, vec![0x12, 0x03, 0xc0, 0x01, 0x01]),
            "treat_whitespace_as_suffix",
        ),
        // The word ሰላም is already BASE's, as a control piece.
        (
            "control",
            with(&bpe, sp_piece_field("▁ሰላም", 0.0, 3)),
            "'▁ሰላም' is BASE's control piece, which SentencePiece never produces",
        ),
    ];
    for (name, bytes, says) in refused {
        let base = tmp.path().join(format!("{name}.model"));
        std::fs::write(&base, bytes).unwrap();
        let out = tmp.path().join(format!("{name}.out.model"));
        let (code, _, err) = merge(&base, &[&tok("amharic_words.txt")], &out, &[]);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{name}: {err}"
        );
        assert!(!out.exists(), "{name}");
    }
    // model_type BPE, then a stray 0 (no ModelType): still BPE, and the merge is the plain one's.
    let base = tmp.path().join("stray.model");
    std::fs::write(&base, with(&bpe, vec![0x12, 0x02, 0x18, 0x00])).unwrap();
    let (out, plain) = (
        tmp.path().join("stray.out.model"),
        tmp.path().join("plain.model"),
    );
    let (code, r, err) = merge(&base, &[&tok("amharic_words.txt")], &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(r["base_format"].as_str().unwrap().contains("BPE"), "{r}");
    let (code, _, err) = merge(
        &tok("sp_bpe_english.model"),
        &[&tok("amharic_words.txt")],
        &plain,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let (a, b) = (std::fs::read(&out).unwrap(), std::fs::read(&plain).unwrap());
    assert_eq!(
        a.len(),
        b.len() + 4,
        "the same pieces, the stray field kept"
    );
}

/// SentencePiece BPE matches user-defined pieces whole before it joins the rest: a new word
/// holding one (`zqx` in `▁zqxab`) is never produced, and is refused naming that piece (the joins
/// alone said it was reachable).
#[test]
fn a_new_word_holding_a_base_user_defined_piece_is_unreachable_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "zqxab\n").unwrap();
    let mut bytes = std::fs::read(tok("sp_bpe_english.model")).unwrap();
    bytes.extend(sp_piece_field("zqx", 0.0, 4));
    let base = tmp.path().join("base.model");
    std::fs::write(&base, bytes).unwrap();
    let out = tmp.path().join("out.model");
    let (code, _, err) = merge(&base, &[&add], &out, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("▁zqxab") && err.contains("holds BASE's user-defined piece 'zqx'"),
        "{err}"
    );
    assert!(!out.exists());
}

/// A unigram model scores a user-defined piece of n bytes 0.1 × n − 0.1, whatever its own score
/// (sentencepiece 0.2.3, measured): a new `▁zqx` is produced over `▁` + user-defined `zqx` (0.2)
/// only when it scores above `▁`'s score + 0.2 (sentencepiece flips between the same two scores).
#[test]
fn a_unigram_user_defined_piece_competes_by_the_score_sentencepiece_gives_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(tok("sp_english.model")).unwrap();
    bytes.extend(sp_piece_field("zqx", -50.0, 4));
    let model = ckpt_surgery::tokenizer::sentencepiece::parse(bytes.clone()).unwrap();
    let space = model.pieces.iter().find(|p| p.piece == "▁").unwrap().score;
    let base = tmp.path().join("base.model");
    std::fs::write(&base, bytes).unwrap();
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "zqx\n").unwrap();
    for (above, reached) in [(0.3f32, true), (0.1, false)] {
        let score = format!("--score={}", space + above);
        let out = tmp.path().join(format!("out{above}.model"));
        let (code, r, err) = merge(&base, &[&add], &out, &[&score, "--allow-unreachable"]);
        assert_eq!(code, Some(0), "{err}");
        let unreachable = r["unreachable"].to_string();
        assert_eq!(
            !unreachable.contains("▁zqx"),
            reached,
            "{score}: {unreachable}"
        );
    }
}

/// A unigram piece scored high enough can beat one of BASE's on BASE's own text: BASE has
/// `▁zqy` (−15); the word `zqy` adds bare `zqy`, and at `--score 0` `▁` + `zqy` wins, so BASE's
/// piece is never produced again (sentencepiece agrees: `encode('zqy')` becomes `['▁', 'zqy']`).
/// A failed check naming both, unless `--allow-base-change`, which writes it with a warning.
#[test]
fn a_new_unigram_piece_that_beats_a_base_piece_on_its_own_text_fails_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(tok("sp_english.model")).unwrap();
    bytes.extend(sp_piece_field("▁zqy", -15.0, 1));
    let base = tmp.path().join("base.model");
    std::fs::write(&base, bytes).unwrap();
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "zqy\n").unwrap();
    let out = tmp.path().join("out.model");
    let (code, _, err) = merge(&base, &[&add], &out, &["--score", "0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "BASE's piece '▁zqy' is no longer what its own text encodes to: the new piece 'zqy'"
        ),
        "{err}"
    );
    assert!(!out.exists());
    let (code, r, err) = merge(
        &base,
        &[&add],
        &out,
        &["--score", "0", "--allow-base-change"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(r["warnings"].to_string().contains("'zqy' beats it"), "{r}");
    // Scored below BASE's pieces (the default), the new piece beats nothing.
    let (code, _, err) = merge(&base, &[&add], &tmp.path().join("low.model"), &[]);
    assert_eq!(code, Some(0), "{err}");
    // With an unreachable word too (BASE has `▁ctl` as a control piece), the input's problem is
    // named first, exit 2: fixing it changes the merge the check judges.
    let mut bytes = std::fs::read(&base).unwrap();
    bytes.extend(sp_piece_field("▁ctl", 0.0, 3));
    let both = tmp.path().join("both.model");
    std::fs::write(&both, bytes).unwrap();
    std::fs::write(&add, "zqy\nctl\n").unwrap();
    let (code, _, err) = merge(
        &both,
        &[&add],
        &tmp.path().join("both.out.model"),
        &["--score", "0"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'▁ctl' is BASE's control piece"), "{err}");
    std::fs::write(&add, "zqy\n").unwrap();
    // The same in a tokenizer.json Unigram, checked with `tokenizers`' own models.
    let mut json: Value =
        serde_json::from_slice(&std::fs::read(tok("unigram_english.json")).unwrap()).unwrap();
    let vocab = json["model"]["vocab"].as_array_mut().unwrap();
    vocab.push(serde_json::json!(["▁zqy", -15.0]));
    let base = tmp.path().join("base.json");
    std::fs::write(&base, serde_json::to_string(&json).unwrap()).unwrap();
    let out = tmp.path().join("out.json");
    let (code, _, err) = merge(&base, &[&add], &out, &["--score", "0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("BASE's piece '▁zqy' is no longer"), "{err}");
    assert!(!out.exists());
    let (code, _, err) = merge(&base, &[&add], &out, &[]);
    assert_eq!(code, Some(0), "{err}");
}

/// A base whose normaliser folds case (`nmt_nfkc_cf`, as trained with that rule) never produces a
/// piece with capitals: such new words are unreachable, named with the fix (lower case).
#[test]
fn a_case_folding_base_refuses_new_words_with_capitals() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(tok("sp_english.model")).unwrap();
    // normalizer_spec { name: "nmt_nfkc_cf" }, merged in after the file's own.
    bytes.extend([0x1a, 13, 0x0a, 11]);
    bytes.extend(b"nmt_nfkc_cf");
    let base = tmp.path().join("cf.model");
    std::fs::write(&base, bytes).unwrap();
    let add = tmp.path().join("add.txt");
    std::fs::write(&add, "Zanzibar\nzanzibar\n").unwrap();
    let out = tmp.path().join("out.model");
    let (code, _, err) = merge(&base, &[&add], &out, &["--score", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("(Zanzibar ▁Zanzibar)") && err.contains("folds text to lower case"),
        "{err}"
    );
    // Scored far below BASE's pieces, the lower-case ones lose on score: each cause is named
    // with the tokens it explains.
    let (code, _, err) = merge(&base, &[&add], &out, &["--score=-1000"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("2 of them: BASE's normaliser (nmt_nfkc_cf) folds text")
            && err.contains("; the others: a unigram model picks the best-scoring segmentation"),
        "{err}"
    );
    // In lower case alone it merges.
    std::fs::write(&add, "zanzibar\n").unwrap();
    let (code, _, err) = merge(&base, &[&add], &out, &["--score", "0"]);
    assert_eq!(code, Some(0), "{err}");
}

/// Work not counted in bytes says so on stderr: a plain line per interval where stderr is not a
/// terminal (the interval at 0 s here: one line at once), nothing for a short run at the default.
#[test]
fn a_merge_reports_progress_in_a_log_and_stays_quiet_when_short() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.json");
    let args: [std::ffi::OsString; 6] = [
        "--base".into(),
        tok("chatterbox_base.json").into(),
        "--add".into(),
        tok("amharic_vocab.json").into(),
        "--output".into(),
        out.clone().into(),
    ];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_merge-tokenizers"))
        .args(&args)
        .env("CKPT_SURGERY_PROGRESS_SECS", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.lines().any(|l| l == "merging: 0 s"), "{err:?}");
    std::fs::remove_file(&out).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_merge-tokenizers"))
        .args(&args)
        .env_remove("CKPT_SURGERY_PROGRESS_SECS")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "a short merge prints nothing on stderr");
}
