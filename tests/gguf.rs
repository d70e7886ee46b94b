//! The GGUF reader (issue 48): ours agrees with gguf-py's `GGUFReader` on every key and tensor
//! of fixtures `gguf.GGUFWriter` wrote (testdata/generate.py `gguf_files`), its ggml type table
//! is gguf-py's, and a truncated, lying or corrupted file is refused with one line, never a panic.

mod common;

use ckpt_surgery::formats::gguf::{self, ggml, Gguf, Value};
use ckpt_surgery::formats::{self, Checkpoint, OpenOptions};
use common::testdata;
use serde_json::{json, Value as Json};
use std::path::Path;

const FIXTURES: [&str; 4] = [
    "gguf/llama_gpt2_tied.gguf",
    "gguf/llama_gpt2_untied_q8.gguf",
    "gguf/broken.gguf",
    "gguf/llama_sp_untied.gguf",
];

fn listing(rel: &str) -> Json {
    let text = std::fs::read_to_string(testdata(&format!("{rel}.listing.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn element(v: &Value) -> Json {
    match v {
        Value::Array(t, _) => json!(t.name()),
        _ => Json::Null,
    }
}

#[test]
fn reader_agrees_with_gguf_reader_on_every_key_and_tensor() {
    for rel in FIXTURES {
        let g = Gguf::open(&testdata(rel)).unwrap();
        let want = listing(rel);
        assert_eq!(json!(g.version), want["version"], "{rel}");
        assert_eq!(json!(g.alignment), want["alignment"], "{rel}");
        assert_eq!(json!(g.data_start), want["data_offset"], "{rel}");
        let keys: Vec<Json> =
            g.kv.iter()
                .map(|kv| {
                    json!({"key": kv.key, "type": kv.value.kind().name(),
                       "element": element(&kv.value), "value": kv.value.to_json()})
                })
                .collect();
        assert_eq!(Json::Array(keys), want["keys"], "{rel}: keys");
        let tensors: Vec<Json> = g
            .tensors
            .iter()
            .map(|t| {
                json!({"name": t.name, "ggml_type": t.ggml.id, "ggml_type_name": t.ggml.name,
                       "ne": t.ne, "elements": t.elements(), "bytes": t.bytes, "offset": t.start})
            })
            .collect();
        assert_eq!(Json::Array(tensors), want["tensors"], "{rel}: tensors");
    }
}

#[test]
fn ggml_type_table_is_gguf_py_s() {
    let text = std::fs::read_to_string(testdata("gguf/ggml_types.json")).unwrap();
    let want: std::collections::BTreeMap<String, (u32, u64, u64)> =
        serde_json::from_str(&text).unwrap();
    assert_eq!(want.len(), ggml::TYPES.len());
    for (name, (id, block, bytes)) in want {
        let t = ggml::of(id).unwrap_or_else(|| panic!("{name} ({id}) missing"));
        assert_eq!((t.name, t.block, t.bytes), (name.as_str(), block, bytes));
    }
}

#[test]
fn open_recognises_gguf_by_content_and_lists_its_vocabulary_matrices() {
    let opts = OpenOptions::default();
    let tied = formats::open(&testdata(FIXTURES[0]), &opts).unwrap();
    assert!(matches!(tied, Checkpoint::Gguf(_)));
    assert_eq!(tied.layout(), "GGUF");
    let e = tied.entries(&[]).unwrap();
    assert_eq!(e.len(), 1, "tied: the embedding only");
    assert_eq!(
        (e[0].tensor.as_str(), e[0].shape.clone()),
        ("token_embd.weight", vec![1000, 16])
    );
    let untied = formats::open(&testdata(FIXTURES[1]), &opts).unwrap();
    let e = untied.entries(&[]).unwrap();
    let names: Vec<_> = e
        .iter()
        .map(|e| (e.tensor.as_str(), e.shape.clone()))
        .collect();
    assert_eq!(
        names,
        [
            ("token_embd.weight", vec![1024, 32]),
            ("output.weight", vec![1024, 32])
        ]
    );
    // A tool that does not read GGUF refuses it by name.
    let e = untied
        .tensors_for("vocab-blocks", "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("GGUF") && e.contains("vocab-blocks"), "{e}");
}

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(testdata(rel)).unwrap()
}

fn parse(b: &[u8]) -> Result<gguf::Parsed, String> {
    gguf::parse(Path::new("t.gguf"), b).map_err(|e| e.to_string())
}

#[test]
fn truncated_anywhere_before_the_last_tensor_ends_is_refused_with_one_line() {
    for (i, rel) in FIXTURES.into_iter().enumerate() {
        let b = bytes(rel);
        let full = parse(&b).unwrap();
        let end = full
            .tensors
            .iter()
            .map(|t| t.start + t.bytes)
            .max()
            .unwrap() as usize;
        // Every header offset of one fixture; of the others every 7th and every one from the
        // tensor infos on (a debug build's time).
        let infos = full.tensors[0].info.start as usize;
        let step = if i == 1 { 1 } else { 7 };
        let mut cuts: Vec<usize> = (0..infos).step_by(step).collect();
        cuts.extend(infos..=full.data_start as usize);
        cuts.extend((full.data_start as usize..end).step_by(97));
        cuts.push(end - 1);
        for n in cuts {
            let e = parse(&b[..n]).expect_err(&format!("{rel} cut at {n} was accepted"));
            assert!(e.starts_with("t.gguf: ") && !e.contains('\n'), "{e}");
        }
        assert!(
            parse(&b[..end]).is_ok(),
            "{rel}: the padding after the last tensor is optional"
        );
    }
}

#[test]
fn header_bytes_flipped_never_panic() {
    for rel in FIXTURES {
        let b = bytes(rel);
        let p = parse(&b).unwrap();
        // Every byte of the counts, the first key/values and the tensor infos; every 61st byte
        // of the rest of the key/values (thousands of token strings: a debug build's time).
        let infos = p.tensors[0].info.start as usize..p.data_start as usize;
        let positions = (0..512)
            .chain(infos)
            .chain((512..p.tensors[0].info.start as usize).step_by(61));
        let mut c = b.clone();
        for i in positions {
            for flip in [0xff, 0x80] {
                c[i] ^= flip;
                let _ = parse(&c);
                c[i] ^= flip;
            }
        }
    }
}

/// `b` with the u32 or u64 at `at` replaced.
fn patch(b: &[u8], at: u64, new: &[u8]) -> Vec<u8> {
    let mut c = b.to_vec();
    c[at as usize..at as usize + new.len()].copy_from_slice(new);
    c
}

#[test]
fn version_2_is_read_and_1_and_big_endian_are_refused_by_name() {
    let b = bytes(FIXTURES[1]);
    let v3 = parse(&b).unwrap();
    let v2 = parse(&patch(&b, 4, &2u32.to_le_bytes())).unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.tensors.len(), v3.tensors.len());
    let e = parse(&patch(&b, 4, &1u32.to_le_bytes())).unwrap_err();
    assert!(e.contains("version 1"), "{e}");
    let e = parse(&patch(&b, 4, &3u32.to_be_bytes())).unwrap_err();
    assert!(e.contains("big-endian"), "{e}");
}

#[test]
fn a_tensor_name_or_key_that_is_not_utf8_is_refused_not_renamed() {
    // gguf-py refuses both; shown with U+FFFD, the tensor would be written under another name.
    let b = bytes(FIXTURES[1]);
    let at = |needle: &[u8]| b.windows(needle.len()).position(|w| w == needle).unwrap() as u64;
    for (needle, what) in [
        (&b"output.weight"[..], "a tensor name"),
        (b"general.architecture", "a key"),
    ] {
        let e = parse(&patch(&b, at(needle) + 3, b"\xff")).unwrap_err();
        assert!(
            e.contains(&format!("{what} (")) && e.contains("is not UTF-8"),
            "{e}"
        );
    }
}

#[test]
fn an_unknown_ggml_type_is_refused_naming_its_number() {
    let b = bytes(FIXTURES[1]);
    let t = &parse(&b).unwrap().tensors[0];
    // A tensor info ends with its u32 type and u64 offset.
    let e = parse(&patch(&b, t.info.end - 12, &31u32.to_le_bytes())).unwrap_err();
    assert!(
        e.contains("ggml type 31") && e.contains("token_embd.weight"),
        "{e}"
    );
}

#[test]
fn a_lying_tensor_offset_or_shape_is_refused_naming_the_tensor() {
    let b = bytes(FIXTURES[1]);
    let p = parse(&b).unwrap();
    let last = p.tensors.last().unwrap();
    let off = last.info.end - 8;
    let e = parse(&patch(&b, off, &(u64::MAX - 63).to_le_bytes())).unwrap_err();
    assert!(
        e.contains("'output.weight'") && e.contains("past the end"),
        "{e}"
    );
    let e = parse(&patch(&b, off, &(last.offset + 1).to_le_bytes())).unwrap_err();
    assert!(e.contains("not a multiple of the alignment 64"), "{e}");
    let e = parse(&patch(&b, off, &p.tensors[0].offset.to_le_bytes())).unwrap_err();
    assert!(e.contains("overlaps"), "{e}");
    // ne[0] of the Q8_0 embedding: 33 is not whole blocks of 32.
    let first = &p.tensors[0];
    let ne0 = first.info.end - 12 - 16;
    let e = parse(&patch(&b, ne0, &33u64.to_le_bytes())).unwrap_err();
    assert!(e.contains("whole Q8_0 blocks of 32"), "{e}");
    let e = parse(&patch(&b, ne0, &(1u64 << 62).to_le_bytes())).unwrap_err();
    assert!(e.contains("overflows") || e.contains("past the end"), "{e}");
}

#[test]
fn inspect_checkpoint_shows_a_gguf_s_keys_tensors_rows_first_and_tokenizer() {
    let path = testdata(FIXTURES[1]);
    let (code, doc, err) = common::run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let r = &doc["checkpoints"][0];
    assert_eq!(r["format"], "gguf");
    assert_eq!(r["version"], 3);
    assert_eq!(r["alignment"], 64);
    let meta = r["metadata"].as_array().unwrap();
    let want = listing(FIXTURES[1]);
    assert_eq!(meta.len(), want["keys"].as_array().unwrap().len());
    let tokens = meta
        .iter()
        .find(|m| m["key"] == "tokenizer.ggml.tokens")
        .unwrap();
    assert_eq!(tokens["length"], 1000);
    assert_eq!(
        tokens["first"].as_array().unwrap().len(),
        8,
        "a long array: its first items"
    );
    let t: Vec<(String, String, Json)> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["ggml_type"].as_str().unwrap().into(),
                t["shape"].clone(),
            )
        })
        .collect();
    assert_eq!(
        t[0],
        ("token_embd.weight".into(), "Q8_0".into(), json!([1024, 32]))
    );
    assert_eq!(
        t[2],
        (
            "blk.0.ffn_down.weight".into(),
            "Q4_K".into(),
            json!([2, 256])
        )
    );
    assert_eq!(r["vocabulary"]["head"]["rows"], 1024);
    assert_eq!(r["vocabulary"]["tied"], false);
    let tok = &r["tokenizer"];
    assert_eq!(
        (
            &tok["model"],
            &tok["pre"],
            &tok["tokens"],
            &tok["merges"],
            &tok["scores"]
        ),
        (
            &json!("gpt2"),
            &json!("gpt-2"),
            &json!(1000),
            &json!(743),
            &json!(false)
        )
    );
    assert_eq!(tok["token_types"], json!({"normal": 999, "control": 1}));
    assert_eq!(
        tok["special_ids"],
        json!({"bos": 999, "eos": 999, "pad": 999})
    );
    assert_eq!(tok["chat_templates"], json!(["tokenizer.chat_template"]));
    // The text names the order shown, and a tied file says it is tied.
    let tied = testdata(FIXTURES[0]);
    let out = common::run("inspect-checkpoint", &[tied.as_os_str()]);
    let text = common::stdout(&out);
    assert!(
        text.contains("shape rows first") && text.contains("[1000, 16]"),
        "{text}"
    );
    assert!(text.contains("head tied to the embedding"), "{text}");
    assert!(
        text.contains("test.array.nested") && text.contains("[[1,2], [3]]"),
        "{text}"
    );
}

fn check(rel: &str, extra: &[&str]) -> (Option<i32>, Json, String) {
    let path = testdata(rel);
    let mut args = vec![path.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    common::run_json("check-vocab", &args)
}

fn findings<'a>(doc: &'a Json, check: &str) -> Vec<&'a Json> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

#[test]
fn check_vocab_on_a_broken_gguf_finds_the_short_table_the_vocab_size_the_ids_and_the_template() {
    let (code, doc, err) = check(FIXTURES[2], &[]);
    assert_eq!(code, Some(1), "{err}");
    let table = findings(&doc, "gguf-embedding-rows");
    assert_eq!(table.len(), 1, "{doc}");
    assert_eq!(table[0]["numbers"]["tokens"], 1000);
    assert_eq!(table[0]["numbers"]["rows"], 998);
    assert_eq!(
        findings(&doc, "gguf-vocab-size")[0]["numbers"]["value"],
        1000
    );
    let ids = findings(&doc, "gguf-special-ids");
    let roles: Vec<&Json> = ids.iter().map(|f| &f["numbers"]["role"]).collect();
    assert_eq!(roles, [&json!("bos"), &json!("eos")], "{doc}");
    // eos 1005 names no token: the fix points it at the eos token by its string, a
    // check-vocab command (tests/gguf_write.rs runs it).
    let eos_fix = ids[1]["fix"].as_str().unwrap();
    assert!(
        eos_fix.contains("--fix --output") && eos_fix.ends_with("--special 'eos=<|endoftext|>'"),
        "{eos_fix}"
    );
    // bos 999 is a token without a row: the table's fix is its fix.
    assert_eq!(ids[0]["fix"], table[0]["fix"]);
    let t = findings(&doc, "gguf-chat-template");
    assert_eq!(t[0]["numbers"]["missing"], json!(["<|im_start|>"]));
    // llama.vocab_size disagreeing with the table: llama.cpp ignores the key (a warning).
    assert_eq!(
        findings(&doc, "gguf-vocab-size")[0]["severity"],
        json!("warning")
    );
    assert_eq!(
        (doc["errors"].clone(), doc["warnings"].clone()),
        (json!(4), json!(1))
    );
}

#[test]
fn check_vocab_reports_a_table_larger_than_the_vocabulary_as_an_error_llama_cpp_refuses() {
    // llama.cpp 0.3.36 takes n_vocab from the token count and refuses a 1024-row table for 1000
    // tokens, with or without llama.vocab_size (scripts/gguf_consumer.py, "open point").
    let (code, doc, err) = check(FIXTURES[1], &[]);
    assert_eq!(code, Some(1), "{err}");
    let pad = findings(&doc, "gguf-padding-rows");
    assert_eq!(pad[0]["severity"], "error");
    assert_eq!(pad[0]["numbers"]["padding"], 24);
    assert!(
        pad[0]["fix"].as_str().unwrap().ends_with("--pad-tokens"),
        "{}",
        pad[0]["fix"]
    );
    assert_eq!(
        (doc["errors"].clone(), doc["warnings"].clone()),
        (json!(1), json!(0))
    );
    let (code, doc, err) = check(FIXTURES[0], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["findings"], json!([]), "the tied file is sound");
}

#[test]
fn check_vocab_refuses_side_inputs_on_a_gguf_by_flag() {
    let tok = testdata("gpt2/tokenizer.json");
    let (code, doc, _) = check(FIXTURES[2], &["--tokenizer", tok.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("--tokenizer is not supported for a GGUF"),
        "{doc}"
    );
}

#[test]
fn inspect_checkpoint_hash_and_filter_on_a_gguf_digest_the_tensor_s_stored_bytes() {
    let path = testdata(FIXTURES[1]);
    let args = ["--hash", "--filter", "^output\\.weight$"].map(std::ffi::OsStr::new);
    let mut all = vec![path.as_os_str()];
    all.extend(args);
    let (code, doc, err) = common::run_json("inspect-checkpoint", &all);
    assert_eq!(code, Some(0), "{err}");
    let t = doc["checkpoints"][0]["tensors"].as_array().unwrap();
    assert_eq!(t.len(), 1);
    let want = listing(FIXTURES[1]);
    let w = want["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "output.weight")
        .unwrap();
    let (start, len) = (
        w["offset"].as_u64().unwrap() as usize,
        w["bytes"].as_u64().unwrap() as usize,
    );
    let b = bytes(FIXTURES[1]);
    assert_eq!(
        t[0]["digest"],
        json!(common::blake3_hex(&b[start..start + len]))
    );
}

#[test]
fn inspect_and_check_vocab_read_a_sentencepiece_llama_gguf_s_scores_types_and_special_ids() {
    let path = testdata(FIXTURES[3]);
    let (code, doc, err) = common::run_json("inspect-checkpoint", &[path.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let r = &doc["checkpoints"][0];
    let meta = r["metadata"].as_array().unwrap();
    let want = listing(FIXTURES[3]);
    assert_eq!(meta.len(), want["keys"].as_array().unwrap().len());
    let key = |k: &str| meta.iter().find(|m| m["key"] == k).unwrap().clone();
    assert_eq!(key("tokenizer.ggml.model")["value"], "llama");
    assert_eq!(key("tokenizer.ggml.tokens")["length"], 400);
    assert_eq!(key("tokenizer.ggml.scores")["length"], 400);
    let types = key("tokenizer.ggml.token_type");
    assert_eq!(types["first"][0], 2, "<unk> UNKNOWN: {types}");
    assert_eq!(types["first"][1], 3, "<s> CONTROL: {types}");
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_inspect-checkpoint"))
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("model llama, pre default, 400 tokens (types: control 2, normal 397, unknown 1), scores present"),
        "{text}"
    );
    assert!(text.contains("special ids: bos 1, eos 2, unk 0"), "{text}");
    assert!(
        text.contains("head output.weight F16 [400, 16]"),
        "untied: {text}"
    );
    let (code, doc, err) = check(FIXTURES[3], &[]);
    assert_eq!(
        code,
        Some(0),
        "a well-formed SentencePiece GGUF: {doc} {err}"
    );
    assert_eq!(doc["findings"].as_array().unwrap().len(), 0, "{doc}");
}
