//! trim-vocab on a GGUF file (issue 47, every layout): the tokenizer it was made from is pruned
//! and checked as for any layout; the file keeps the kept tokens' rows bit for bit in their own
//! ggml type, its tokenizer arrays gathered, merges pruned, special ids and `<arch>.vocab_size`
//! moved, every other key and tensor as it was; a tokenizer that is not the file's is refused.

mod common;

use ckpt_surgery::formats::gguf::write::{write_gguf, GgufOut, Part};
use ckpt_surgery::formats::gguf::{keys, quant, Gguf, Value};
use common::testdata;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// The first 40 lines of the English corpus.
fn corpus(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(testdata("tokenizers/english.txt")).unwrap();
    let lines: Vec<&str> = text.lines().take(40).collect();
    let p = dir.join("corpus.txt");
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

fn trim(
    input: &Path,
    tok: &Path,
    corpus: &Path,
    out: &Path,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let mut args = vec![
        input.as_os_str(),
        os("--tokenizer"),
        tok.as_os_str(),
        os("--keep-corpus"),
        corpus.as_os_str(),
        os("--output"),
        out.as_os_str(),
        os("--allow-shrink"),
    ];
    args.extend(extra.iter().map(|s| os(s)));
    common::run_json("trim-vocab", &args)
}

fn ggml_type(name: &str) -> &'static ckpt_surgery::formats::gguf::GgmlType {
    ckpt_surgery::formats::gguf::ggml::TYPES
        .iter()
        .find(|t| t.name == name)
        .unwrap()
}

/// The chat template [`table_of_type`] writes: <|im_start|> is no token of testdata/gpt2, and
/// the corpus has no "Xylophone".
const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|endoftext|>{% endfor %}{% if add_generation_prompt %}Xylophone:{% endif %}";

/// A copy of the untied Q8_0 fixture (its chat template [`CHATML`]) whose token_embd and output are 1000 rows × `width` of
/// type `name` (deterministic values quantized by our codec; a type it does not quantize gets
/// deterministic bytes: a gather copies them, whatever they mean), with `llama.vocab_size` 1000.
fn table_of_type(name: &str, width: u64, path: &Path) {
    let g = Gguf::open(&testdata("gguf/llama_gpt2_untied_q8.gguf")).unwrap();
    let t = ggml_type(name);
    let mut seed = 47u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 40
    };
    let mut tables = Vec::new();
    for _ in 0..2 {
        let mut bytes = Vec::new();
        for _ in 0..1000 {
            let row: Vec<f32> = (0..width)
                .map(|_| (next() as f32 / (1u64 << 24) as f32 - 0.5) * 0.1)
                .collect();
            if !quant::quantize_row(t, &row, &mut bytes) {
                let n = (width / t.block * t.bytes) as usize;
                bytes.extend((0..n).map(|_| next() as u8));
            }
        }
        tables.push(bytes);
    }
    let mut plan = GgufOut::identity(&g);
    for (name, bytes) in ["token_embd.weight", "output.weight"].iter().zip(tables) {
        let out = plan.tensor_mut(name).unwrap();
        out.ggml = t;
        out.ne = vec![width, 1000];
        out.parts = vec![Part::New(bytes)];
    }
    plan.set("llama.vocab_size", Value::U32(1000));
    plan.set("tokenizer.chat_template", Value::String(CHATML.into()));
    write_gguf(&plan, path).unwrap();
}

/// The map file's old → new ids.
fn map_of(out: &Path) -> Vec<Option<u64>> {
    let mut name = out.file_name().unwrap().to_os_string();
    name.push(".token_map.json");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.with_file_name(name)).unwrap()).unwrap();
    doc["old_to_new"]
        .as_array()
        .unwrap()
        .iter()
        .map(serde_json::Value::as_u64)
        .collect()
}

fn array<'a>(g: &'a Gguf, key: &str) -> &'a [Value] {
    g.get(key).and_then(Value::as_array).unwrap_or(&[])
}

/// `out` is `input` trimmed by its map: every table's kept rows bit for bit at their new ids,
/// the tokenizer arrays gathered, the merges those of the input whose parts and result are kept,
/// special ids and vocab_size moved, every other key and tensor as it was.
fn assert_trimmed(input: &Path, out: &Path) -> Vec<Option<u64>> {
    let (a, b) = (Gguf::open(input).unwrap(), Gguf::open(out).unwrap());
    let map = map_of(out);
    let kept: Vec<(usize, usize)> = map
        .iter()
        .enumerate()
        .filter_map(|(o, n)| n.map(|n| (o, n as usize)))
        .collect();
    assert!(kept.len() < map.len() && kept.iter().enumerate().all(|(i, k)| k.1 == i));
    for name in [keys::EMBEDDING, keys::HEAD] {
        let Some(ta) = a.tensor(name) else {
            assert!(b.tensor(name).is_none(), "a tied file stays tied");
            continue;
        };
        let tb = b.tensor(name).unwrap();
        assert_eq!(
            (tb.ggml, tb.ne[0], tb.rows()),
            (ta.ggml, ta.ne[0], kept.len() as u64)
        );
        let rb = (ta.bytes / ta.rows()) as usize;
        let (da, db) = (a.data(ta).unwrap(), b.data(tb).unwrap());
        for &(o, n) in &kept {
            assert!(
                da[o * rb..(o + 1) * rb] == db[n * rb..(n + 1) * rb],
                "{name} row {o} → {n}"
            );
        }
    }
    for key in [keys::TOKENS, keys::TOKEN_TYPE, keys::SCORES] {
        let (va, vb) = (array(&a, key), array(&b, key));
        assert_eq!(
            vb.len(),
            if va.is_empty() { 0 } else { kept.len() },
            "{key}"
        );
        for &(o, n) in kept.iter().filter(|_| !va.is_empty()) {
            assert_eq!(va[o], vb[n], "{key} {o} → {n}");
        }
    }
    let tokens: HashSet<&str> = keys::tokens(&b).unwrap().into_iter().collect();
    let expected: Vec<&Value> = array(&a, keys::MERGES)
        .iter()
        .filter(|m| {
            let (l, r) = m.as_str().unwrap().split_once(' ').unwrap();
            tokens.contains(l) && tokens.contains(r) && tokens.contains(format!("{l}{r}").as_str())
        })
        .collect();
    assert_eq!(array(&b, keys::MERGES).iter().collect::<Vec<_>>(), expected);
    for kv in &a.kv {
        let arrays = [keys::TOKENS, keys::TOKEN_TYPE, keys::SCORES, keys::MERGES];
        let id = kv.key.starts_with("tokenizer.ggml.") && kv.key.ends_with("_token_id");
        let moved = arrays.contains(&kv.key.as_str()) || id;
        if id {
            let want = map[kv.value.as_u64().unwrap() as usize].unwrap();
            let got = b.get(&kv.key).unwrap();
            assert_eq!(got.as_u64(), Some(want), "{}", kv.key);
            assert_eq!(got.kind(), kv.value.kind(), "{}: its type kept", kv.key);
        } else if kv.key == "llama.vocab_size" {
            assert_eq!(b.get(&kv.key), Some(&Value::U32(kept.len() as u32)));
        } else if !moved {
            assert_eq!(b.get(&kv.key), Some(&kv.value), "{}", kv.key);
        }
    }
    for ta in a
        .tensors
        .iter()
        .filter(|t| t.name != keys::EMBEDDING && t.name != keys::HEAD)
    {
        let tb = b.tensor(&ta.name).unwrap();
        assert_eq!((tb.ggml, &tb.ne), (ta.ggml, &ta.ne));
        assert!(a.data(ta).unwrap() == b.data(tb).unwrap(), "{}", ta.name);
    }
    map
}

#[test]
fn trimming_a_gguf_keeps_each_kept_row_bit_for_bit_in_f32_f16_q8_0_and_k_quants() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let tok = testdata("gpt2/tokenizer.json");
    let mut inputs = vec![
        ("F16 tied", testdata("gguf/llama_gpt2_tied.gguf")),
        (
            "Q8_0 untied, padded",
            testdata("gguf/llama_gpt2_untied_q8.gguf"),
        ),
    ];
    for (ty, width) in [("F32", 32), ("Q4_K", 256), ("Q2_K", 256)] {
        let p = tmp.path().join(format!("{ty}.gguf"));
        table_of_type(ty, width, &p);
        inputs.push((ty, p));
    }
    for (what, input) in inputs {
        let out = tmp
            .path()
            .join(format!("{}.trimmed.gguf", what.replace([' ', ','], "_")));
        let (code, doc, err) = trim(&input, &tok, &corpus, &out, &[]);
        assert_eq!(code, Some(0), "{what}: {err} {doc}");
        let map = assert_trimmed(&input, &out);
        let kept = map.iter().flatten().count() as u64;
        assert_eq!(doc["kept_tokens"], kept, "{what}");
        assert_eq!(doc["corpus_check"]["mismatches"], 0, "{what}");
        assert_eq!(doc["merges"][0], 743, "{what}");
        if what == "F32" {
            // Its chat template's literal text: the pieces are kept.
            let base = tokenizers::Tokenizer::from_file(&tok).unwrap();
            let ids = base
                .encode("<|im_start|>Xylophone:", false)
                .unwrap()
                .get_ids()
                .to_vec();
            let used: Vec<u32> = std::fs::read_to_string(&corpus)
                .unwrap()
                .lines()
                .flat_map(|l| base.encode(l, false).unwrap().get_ids().to_vec())
                .collect();
            assert!(
                ids.iter().any(|i| !used.contains(i)),
                "the corpus has them all"
            );
            assert!(ids.iter().all(|&i| map[i as usize].is_some()), "{ids:?}");
            assert!(doc["asked"]["template"].as_u64().unwrap() >= 2, "{doc}");
        }
    }
}

#[test]
fn trimming_a_sentencepiece_gguf_gathers_its_scores_and_types_and_keeps_its_specials() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let input = testdata("gguf/llama_sp_untied.gguf");
    let out = tmp.path().join("sp.gguf");
    let tok = testdata("tokenizers/sp_bpe_english.model");
    let (code, doc, err) = trim(&input, &tok, &corpus, &out, &[]);
    assert_eq!(code, Some(0), "{err} {doc}");
    let map = assert_trimmed(&input, &out);
    let b = Gguf::open(&out).unwrap();
    // <unk>, <s>, </s> kept at 0, 1, 2 with their types (unknown, control, control).
    assert_eq!(map[..3], [Some(0), Some(1), Some(2)]);
    let types: Vec<u64> = array(&b, keys::TOKEN_TYPE)[..3]
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(types, [2, 3, 3]);
}

#[test]
fn trimming_a_gguf_moves_its_special_ids_and_refuses_one_that_names_no_kept_token() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let tok = testdata("gpt2/tokenizer.json");
    // The Q8_0 fixture (bos, eos, pad: <|endoftext|>, id 999) with a cls id (llama.cpp's BERT
    // key, I32) at "the" and a FIM key by its older name at "and".
    let g = Gguf::open(&testdata("gguf/llama_gpt2_untied_q8.gguf")).unwrap();
    let ids = keys::tokens(&g).unwrap();
    let at = |t: &str| ids.iter().position(|x| *x == t).unwrap() as u64;
    let (the, and) = (at("the"), at("and"));
    let mut plan = GgufOut::identity(&g);
    plan.set("tokenizer.ggml.cls_token_id", Value::I32(the as i32));
    plan.set("tokenizer.ggml.prefix_token_id", Value::U32(and as u32));
    let input = tmp.path().join("ids_in.gguf");
    write_gguf(&plan, &input).unwrap();
    let out = tmp.path().join("ids.gguf");
    // A dry run writes nothing and says what it would keep.
    let (code, doc, err) = trim(&input, &tok, &corpus, &out, &["--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(doc["written"].is_null() && doc["kept_tokens"].as_u64().unwrap() < 1000);
    assert!(!out.exists() && !tmp.path().join("ids.gguf.token_map.json").exists());
    let (code, doc, err) = trim(&input, &tok, &corpus, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    let map = assert_trimmed(&input, &out);
    let b = Gguf::open(&out).unwrap();
    let eot = map[999].unwrap();
    assert!(eot < 999, "<|endoftext|> moved down: {doc}");
    for key in ["bos", "eos", "padding"] {
        let key = format!("tokenizer.ggml.{key}_token_id");
        assert_eq!(b.get(&key), Some(&Value::U32(eot as u32)), "{key}");
    }
    let (the, and) = (map[the as usize].unwrap(), map[and as usize].unwrap());
    assert_eq!(
        b.get("tokenizer.ggml.cls_token_id"),
        Some(&Value::I32(the as i32))
    );
    assert_eq!(
        b.get("tokenizer.ggml.prefix_token_id"),
        Some(&Value::U32(and as u32))
    );
    assert_eq!(keys::tokens(&b).unwrap()[the as usize], "the");
    // An eos id past the vocabulary: one line, exit 2, nothing written.
    let mut plan = GgufOut::identity(&g);
    plan.set("tokenizer.ggml.eos_token_id", Value::U32(1005));
    let bad = tmp.path().join("bad_eos.gguf");
    write_gguf(&plan, &bad).unwrap();
    let out = tmp.path().join("never.gguf");
    let (code, doc, _) = trim(&bad, &tok, &corpus, &out, &[]);
    assert_eq!(code, Some(2), "{doc}");
    let e = doc["error"].as_str().unwrap();
    assert!(
        e.contains("tokenizer.ggml.eos_token_id = 1005: that token is not kept"),
        "{e}"
    );
    assert!(!out.exists() && !tmp.path().join("never.gguf.token_map.json").exists());
}

#[test]
fn a_tokenizer_that_is_not_the_gguf_s_is_refused_naming_both_files_and_the_first_id() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let input = testdata("gguf/llama_gpt2_tied.gguf");
    let out = tmp.path().join("out.gguf");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap())
            .unwrap();
    // "the" and "and" swap ids: a valid tokenizer, not the file's.
    let vocab = doc["model"]["vocab"].as_object_mut().unwrap();
    let (the, and) = (vocab["the"].clone(), vocab["and"].clone());
    vocab.insert("the".into(), and.clone());
    vocab.insert("and".into(), the.clone());
    let (id, there, here) = match the.as_u64() < and.as_u64() {
        true => (the, "and", "the"),
        false => (and, "the", "and"),
    };
    let other = tmp.path().join("other.json");
    std::fs::write(&other, doc.to_string()).unwrap();
    let refused = |tok: &Path, extra: &[&str], want: &[&str]| {
        let (code, doc, _) = trim(&input, tok, &corpus, &out, extra);
        assert_eq!(code, Some(2), "{doc}");
        let e = doc["error"].as_str().unwrap();
        assert!(want.iter().all(|w| e.contains(w)), "{e}");
        assert!(!out.exists() && !tmp.path().join("out.gguf.token_map.json").exists());
    };
    let other_s = other.display().to_string();
    let input_s = input.display().to_string();
    let id_s = format!("id {id} is {there:?} in the tokenizer but {here:?}");
    refused(&other, &[], &[&other_s, &input_s, &id_s]);
    // The same tokens, one merge fewer: its merges differ.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap())
            .unwrap();
    doc["model"]["merges"].as_array_mut().unwrap().pop();
    let fewer = tmp.path().join("fewer.json");
    std::fs::write(&fewer, doc.to_string()).unwrap();
    refused(&fewer, &[], &["merge 742 is no merge in the tokenizer"]);
    // Another family's tokenizer differs at id 0.
    let sp = testdata("tokenizers/sp_bpe_english.model");
    refused(&sp, &[], &["id 0 is \"<unk>\" in the tokenizer"]);
    // A flag that does not apply to a GGUF file, by name.
    let tok = testdata("gpt2/tokenizer.json");
    refused(
        &tok,
        &["--pad-to-multiple-of", "64"],
        &["--pad-to-multiple-of is not supported for a GGUF"],
    );
    // Without --tokenizer: the flag named.
    let (code, doc, _) = common::run_json(
        "trim-vocab",
        &[
            input.as_os_str(),
            os("--keep-corpus"),
            corpus.as_os_str(),
            os("--output"),
            out.as_os_str(),
            os("--allow-shrink"),
        ],
    );
    assert_eq!(code, Some(2), "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("--tokenizer"),
        "{doc}"
    );
    assert!(!out.exists());
}

/// A converter's embedded tokenizer.json (`tokenizer.huggingface.json`) is replaced by the
/// trimmed one: the same text the pruned tokenizer has, whose ids are the trimmed arrays'.
#[test]
fn an_embedded_tokenizer_json_is_replaced_by_the_trimmed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let tok = testdata("gpt2/tokenizer.json");
    let g = Gguf::open(&testdata("gguf/llama_gpt2_tied.gguf")).unwrap();
    let mut plan = GgufOut::identity(&g);
    let full = std::fs::read_to_string(&tok).unwrap();
    plan.set("tokenizer.huggingface.json", Value::String(full.clone()));
    let input = tmp.path().join("embedded.gguf");
    write_gguf(&plan, &input).unwrap();
    let out = tmp.path().join("trimmed.gguf");
    let (code, doc, err) = trim(&input, &tok, &corpus, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    let b = Gguf::open(&out).unwrap();
    let Some(Value::String(text)) = b.get("tokenizer.huggingface.json") else {
        panic!("the key is gone: {doc}");
    };
    assert_ne!(*text, full, "still the full tokenizer");
    let embedded: tokenizers::Tokenizer = text.parse().unwrap();
    let tokens = keys::tokens(&b).unwrap();
    assert_eq!(embedded.get_vocab_size(true), tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        assert_eq!(
            embedded.id_to_token(id as u32).as_deref(),
            Some(*t),
            "id {id}"
        );
    }
}
