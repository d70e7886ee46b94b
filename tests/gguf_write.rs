//! The GGUF writer (issue 48): a file re-written with no edits is the same bytes; a header that
//! grows moves no tensor byte; the output is re-read by the strict reader before it replaces
//! anything, and is never written over its input.

mod common;

use ckpt_surgery::formats::gguf::write::{write_gguf, GgufOut, Part};
use ckpt_surgery::formats::gguf::{Gguf, Value};
use common::testdata;

const FIXTURES: [&str; 3] = [
    "gguf/llama_gpt2_tied.gguf",
    "gguf/llama_gpt2_untied_q8.gguf",
    "gguf/broken.gguf",
];

#[test]
fn rewriting_a_gguf_with_no_edits_gives_identical_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in FIXTURES {
        let g = Gguf::open(&testdata(rel)).unwrap();
        let out = tmp.path().join("same.gguf");
        write_gguf(&GgufOut::identity(&g), &out).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(testdata(rel)).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn a_header_that_grows_keeps_every_key_and_moves_no_tensor_byte() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in FIXTURES {
        let g = Gguf::open(&testdata(rel)).unwrap();
        let mut plan = GgufOut::identity(&g);
        let long = "{{ bos_token }}".repeat(40);
        plan.set("tokenizer.chat_template", Value::String(long.clone()));
        plan.set("test.added", Value::U32(7));
        let out = tmp.path().join("grown.gguf");
        write_gguf(&plan, &out).unwrap();
        let back = Gguf::open(&out).unwrap();
        assert!(back.data_start > g.data_start, "{rel}: the header grew");
        assert_eq!(
            back.get("tokenizer.chat_template").and_then(Value::as_str),
            Some(long.as_str())
        );
        assert_eq!(back.get("test.added"), Some(&Value::U32(7)));
        assert_eq!(
            back.kv.last().unwrap().key,
            "test.added",
            "new keys go last"
        );
        for kv in &g.kv {
            if kv.key != "tokenizer.chat_template" {
                assert_eq!(back.get(&kv.key), Some(&kv.value), "{rel}: {}", kv.key);
            }
        }
        assert_eq!(back.tensors.len(), g.tensors.len());
        for (a, b) in g.tensors.iter().zip(&back.tensors) {
            assert_eq!(
                (&a.name, a.ggml, &a.ne, a.offset),
                (&b.name, b.ggml, &b.ne, b.offset)
            );
            assert!(
                g.data(a).unwrap() == back.data(b).unwrap(),
                "{rel}: {}",
                a.name
            );
        }
    }
}

#[test]
fn appending_to_an_array_keeps_its_old_elements_and_adds_the_new() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Gguf::open(&testdata("gguf/llama_gpt2_tied.gguf")).unwrap();
    let mut plan = GgufOut::identity(&g);
    let new = vec![Value::String("<|new|>".into()), Value::String("▁x".into())];
    plan.append("tokenizer.ggml.tokens", new.clone()).unwrap();
    let e = plan
        .append("tokenizer.ggml.token_type", new.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("array of int32, not of string"), "{e}");
    let out = tmp.path().join("more.gguf");
    write_gguf(&plan, &out).unwrap();
    let back = Gguf::open(&out).unwrap();
    let old = g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    let got = back
        .get("tokenizer.ggml.tokens")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(got.len(), old.len() + 2);
    assert_eq!(&got[..old.len()], old);
    assert_eq!(&got[old.len()..], &new[..]);
}

#[test]
fn the_writer_refuses_to_write_over_its_input_and_leaves_it_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    std::fs::copy(testdata("gguf/llama_gpt2_tied.gguf"), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let g = Gguf::open(&path).unwrap();
    let mut plan = GgufOut::identity(&g);
    plan.set("test.added", Value::U32(7));
    let e = write_gguf(&plan, &path).unwrap_err();
    assert!(e.to_string().contains("m.gguf"), "{e}");
    drop(g);
    assert!(std::fs::read(&path).unwrap() == before);
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "no temp file left beside it");
}

#[test]
fn tensors_laid_out_anew_land_where_gguf_py_puts_them() {
    // Every tensor given as new bytes: the writer computes the offsets and padding itself, and
    // gguf.GGUFWriter's file comes out byte for byte.
    let tmp = tempfile::tempdir().unwrap();
    for rel in FIXTURES {
        let g = Gguf::open(&testdata(rel)).unwrap();
        let mut plan = GgufOut::identity(&g);
        for t in &mut plan.tensors {
            let from = t.from.take().unwrap();
            t.parts = vec![Part::New(g.data(from).unwrap().to_vec())];
        }
        let out = tmp.path().join("anew.gguf");
        write_gguf(&plan, &out).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(testdata(rel)).unwrap(),
            "{rel}"
        );
    }
}

/// A printed command split as a POSIX shell would (plain words and '…' quotes: what
/// `plan::quoted` writes).
fn shell_words(cmd: &str) -> Vec<String> {
    let (mut words, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in cmd.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

fn check_vocab(args: &[&std::ffi::OsStr]) -> (Option<i32>, serde_json::Value, String) {
    common::run_json("check-vocab", args)
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn checks(doc: &serde_json::Value) -> Vec<String> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap().to_string())
        .collect()
}

/// Every tensor of `b` is `a`'s: name, type, shape and bytes.
fn same_tensors(a: &Gguf, b: &Gguf) {
    assert_eq!(a.tensors.len(), b.tensors.len());
    for (x, y) in a.tensors.iter().zip(&b.tensors) {
        assert_eq!((&x.name, x.ggml, &x.ne), (&y.name, y.ggml, &y.ne));
        assert!(a.data(x).unwrap() == b.data(y).unwrap(), "{}", x.name);
    }
}

#[test]
fn each_fix_check_vocab_prints_for_a_gguf_works_when_run() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/broken.gguf");
    let (code, doc, err) = check_vocab(&[input.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let fixes: Vec<&serde_json::Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["action"]["tool"] == "check-vocab")
        .collect();
    assert!(
        !fixes.is_empty(),
        "the eos id's fix is a check-vocab command"
    );
    let g = Gguf::open(&input).unwrap();
    for f in fixes {
        let mut words = shell_words(f["fix"].as_str().unwrap());
        assert_eq!(words[0], "check-vocab");
        let at = words.iter().position(|w| w == "--output").unwrap() + 1;
        let out = tmp.path().join("fixed.gguf");
        words[at] = out.display().to_string();
        let args: Vec<&std::ffi::OsStr> = words[1..].iter().map(|w| os(w)).collect();
        let o = common::run(&words[0], &args);
        assert!(
            o.status.code().is_some_and(|c| c < 2),
            "{}",
            common::stderr(&o)
        );
        let (_, after, _) = check_vocab(&[out.as_os_str()]);
        let left: Vec<&serde_json::Value> = after["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["message"] == f["message"])
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", f["fix"]);
        let back = Gguf::open(&out).unwrap();
        if f["action"]["tool"] == "check-vocab" {
            same_tensors(&g, &back);
        }
    }
}

#[test]
fn fix_on_a_broken_gguf_grows_the_table_sets_the_eos_id_and_leaves_only_the_template() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/broken.gguf");
    let out = tmp.path().join("fixed.gguf");
    let (code, doc, err) = check_vocab(&[
        input.as_os_str(),
        os("--fix"),
        os("--output"),
        out.as_os_str(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        doc["executed"].as_array().unwrap().len(),
        2,
        "the grow, then the eos edit"
    );
    assert_eq!(
        checks(&doc["after"]),
        ["gguf-chat-template"],
        "{}",
        doc["after"]
    );
    let g = Gguf::open(&input).unwrap();
    let back = Gguf::open(&out).unwrap();
    // <|endoftext|> is token 999 of GPT-2's first 1000.
    assert_eq!(
        back.get("tokenizer.ggml.eos_token_id"),
        Some(&Value::U32(999))
    );
    assert_eq!(back.get("llama.vocab_size"), Some(&Value::U32(1000)));
    let (a, b) = (
        g.tensor("token_embd.weight").unwrap(),
        back.tensor("token_embd.weight").unwrap(),
    );
    assert_eq!(b.ne, [16, 1000]);
    let (old, new) = (g.data(a).unwrap(), back.data(b).unwrap());
    assert!(new[..old.len()] == *old, "the 998 old rows' bytes are kept");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "no staged file left beside the output");
}

#[test]
fn named_edits_set_ids_types_template_and_keys_by_token_string() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/llama_gpt2_untied_q8.gguf");
    let template = tmp.path().join("t.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    .unwrap();
    let out = tmp.path().join("edited.gguf");
    let (code, doc, err) = check_vocab(&[
        input.as_os_str(),
        os("--fix"),
        os("--output"),
        out.as_os_str(),
        os("--special"),
        os("pad=the"),
        os("--token-type"),
        os("<|endoftext|>=user-defined"),
        os("--token-type"),
        os("==control"),
        os("--chat-template"),
        template.as_os_str(),
        os("--vocab-size"),
        os("1024"),
        os("--remove-key"),
        os("general.name"),
        os("--pad-tokens"),
    ]);
    assert_eq!(code, Some(0), "{err} {doc}");
    let g = Gguf::open(&input).unwrap();
    let back = Gguf::open(&out).unwrap();
    same_tensors(&g, &back);
    let tokens = ckpt_surgery::formats::gguf::keys::tokens(&g).unwrap();
    let id = |t: &str| tokens.iter().position(|x| *x == t).unwrap();
    assert_eq!(
        back.get("tokenizer.ggml.padding_token_id"),
        Some(&Value::U32(id("the") as u32))
    );
    let types = back
        .get("tokenizer.ggml.token_type")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(types[id("<|endoftext|>")], Value::I32(4));
    assert_eq!(types[id("=")], Value::I32(3));
    let old = g
        .get("tokenizer.ggml.token_type")
        .unwrap()
        .as_array()
        .unwrap();
    let changed = old.iter().zip(types).filter(|(a, b)| a != b).count();
    assert_eq!(changed, 2, "only the two named tokens change type");
    // The 24 padding rows named [PAD1000].. [PAD1023], typed unused.
    let names = ckpt_surgery::formats::gguf::keys::tokens(&back).unwrap();
    assert_eq!(
        (names.len(), names[1000], names[1023]),
        (1024, "[PAD1000]", "[PAD1023]")
    );
    assert!(types[1000..].iter().all(|t| *t == Value::I32(5)));
    assert_eq!(
        back.get("tokenizer.chat_template").and_then(Value::as_str),
        Some("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    );
    assert_eq!(back.get("llama.vocab_size"), Some(&Value::U32(1024)));
    assert!(back.get("general.name").is_none());
    // Padded once, there is nothing left to pad: refused, naming the file and both counts.
    let again = tmp.path().join("again.gguf");
    let (code, _, err) = check_vocab(&[
        out.as_os_str(),
        os("--fix"),
        os("--output"),
        again.as_os_str(),
        os("--pad-tokens"),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}: token_embd.weight has 1024 rows for 1024 tokens",
            out.display()
        )),
        "{err}"
    );
    assert!(!again.exists());
}

#[test]
fn a_named_edit_of_a_token_the_vocabulary_lacks_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/llama_gpt2_tied.gguf");
    let out = tmp.path().join("x.gguf");
    for (flag, value, says) in [
        (
            "--special",
            "eos=<|im_end|>",
            "\"<|im_end|>\" is not a token",
        ),
        ("--special", "boss=the", "the role is one of bos, eos"),
        (
            "--token-type",
            "the=byte",
            "the type is normal, control or user-defined",
        ),
        ("--remove-key", "no.such.key", "has no such key"),
    ] {
        let (code, doc, err) = check_vocab(&[
            input.as_os_str(),
            os("--fix"),
            os("--output"),
            out.as_os_str(),
            os(flag),
            os(value),
        ]);
        assert_eq!(code, Some(2), "{flag} {value}: {err}");
        assert!(doc["error"].as_str().unwrap().contains(says), "{doc}");
        assert!(!out.exists());
    }
    let st = testdata("gpt2/model.safetensors");
    let (code, doc, _) = check_vocab(&[
        st.as_os_str(),
        os("--fix"),
        os("--output"),
        out.as_os_str(),
        os("--special"),
        os("eos=the"),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        doc["error"].as_str().unwrap().contains("not a GGUF file"),
        "{doc}"
    );
}

#[test]
fn a_template_token_typed_as_text_is_found_and_its_fix_marks_it_control() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("gguf/llama_gpt2_tied.gguf");
    let plain = tmp.path().join("plain.gguf");
    // The tied file's template writes <|endoftext|>, a control token: typed normal, it is split.
    let (code, _, err) = check_vocab(&[
        input.as_os_str(),
        os("--fix"),
        os("--output"),
        plain.as_os_str(),
        os("--token-type"),
        os("<|endoftext|>=normal"),
    ]);
    assert_eq!(code, Some(1), "{err}");
    let (code, doc, _) = check_vocab(&[plain.as_os_str()]);
    assert_eq!(code, Some(1));
    assert_eq!(checks(&doc), ["gguf-chat-template-types"], "{doc}");
    let fixed = tmp.path().join("fixed.gguf");
    let (code, doc, err) = check_vocab(&[
        plain.as_os_str(),
        os("--fix"),
        os("--output"),
        fixed.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err} {doc}");
    assert!(
        std::fs::read(&fixed).unwrap() == std::fs::read(&input).unwrap(),
        "marked control again, the file is the original byte for byte"
    );
}

/// testdata/gguf/quant_reference.json (testdata/generate.py `gguf_quant_reference`).
fn quant_reference() -> serde_json::Value {
    let text = std::fs::read_to_string(testdata("gguf/quant_reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn reference_rows(r: &serde_json::Value) -> Vec<Vec<f32>> {
    r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
                .collect()
        })
        .collect()
}

fn ggml_type(name: &str) -> &'static ckpt_surgery::formats::gguf::GgmlType {
    ckpt_surgery::formats::gguf::ggml::TYPES
        .iter()
        .find(|t| t.name == name)
        .unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn quantized_rows_equal_gguf_py_s_for_every_type_it_quantizes() {
    use ckpt_surgery::formats::gguf::quant;
    let r = quant_reference();
    let rows = reference_rows(&r);
    let types = r["types"].as_object().unwrap();
    assert_eq!(types.len(), 7, "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1");
    for (name, want) in types {
        let t = ggml_type(name);
        for (i, (row, want)) in rows.iter().zip(want.as_array().unwrap()).enumerate() {
            let mut out = Vec::new();
            assert!(quant::quantize_row(t, row, &mut out));
            assert_eq!(hex(&out), want.as_str().unwrap(), "{name} row {i}");
            // And back: every element within half a step of the type (its own dequantizer).
            let mut back = vec![0f32; row.len()];
            assert!(quant::dequantize_row(t, &out, &mut back));
            let mut again = Vec::new();
            quant::quantize_row(t, &back, &mut again);
            assert_eq!(
                hex(&again),
                hex(&out),
                "{name} row {i}: a dequantized row quantizes to itself"
            );
        }
    }
}

/// Root-mean-square of `a - b` over root-mean-square of `a`.
fn relative_rms(a: &[f32], b: &[f32]) -> f64 {
    let e: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let n: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    (e / n.max(1e-30)).sqrt()
}

#[test]
fn k_quant_rows_dequantize_within_the_type_s_error_and_equal_llama_cpp_s_quantizer() {
    use ckpt_surgery::formats::gguf::quant;
    let r = quant_reference();
    let rows = reference_rows(&r);
    // Relative RMS error of a normal row: ~ one step over sqrt(12) of the spread.
    for (name, bound) in [("Q4_K", 0.12), ("Q5_K", 0.06), ("Q6_K", 0.03)] {
        let t = ggml_type(name);
        for (i, row) in rows.iter().enumerate() {
            let mut out = Vec::new();
            assert!(quant::quantize_row(t, row, &mut out));
            assert_eq!(out.len() as u64, t.bytes, "{name}: one block");
            let mut back = vec![0f32; 256];
            assert!(quant::dequantize_row(t, &out, &mut back));
            let err = relative_rms(row, &back);
            // Rows 3 and 4 (all zero, constant) come back (nearly) exactly.
            let bound = if i == 3 || i == 4 { 0.01 } else { bound };
            assert!(err < bound, "{name} row {i}: relative error {err}");
            // llama.cpp's own quantizer (ggml_quantize_chunk of llama-cpp-python 0.3.36).
            let ours = r["llama_cpp"][name]["bytes"].as_array().unwrap();
            assert_eq!(
                hex(&out),
                ours[i].as_str().unwrap(),
                "{name} row {i}: llama.cpp's bytes"
            );
            let deq = &r["llama_cpp"][name]["dequantized"][i];
            let want: Vec<u32> = deq
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u32)
                .collect();
            let got: Vec<u32> = back.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{name} row {i}: gguf-py's dequantization");
        }
    }
}

/// A copy of the untied Q8_0 fixture whose token_embd and output are `rows` × `width` of type
/// `name` (deterministic values, quantized by our codec), written to `path`.
fn table_of_type(name: &str, width: u64, rows: u64, path: &std::path::Path) {
    use ckpt_surgery::formats::gguf::quant;
    let g = Gguf::open(&testdata("gguf/llama_gpt2_untied_q8.gguf")).unwrap();
    let t = ggml_type(name);
    let mut seed = 48u64;
    let mut bytes = Vec::new();
    for r in 0..rows {
        let row: Vec<f32> = (0..width)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1 + (r % 7) as f32 * 0.001
            })
            .collect();
        if !quant::quantize_row(t, &row, &mut bytes) {
            // A type we do not quantize: its blocks as zeros (the job must refuse it).
            bytes.resize(bytes.len() + (width / t.block * t.bytes) as usize, 0);
        }
    }
    let mut plan = GgufOut::identity(&g);
    for name in ["token_embd.weight", "output.weight"] {
        let out = plan.tensor_mut(name).unwrap();
        out.ggml = t;
        out.ne = vec![width, rows];
        out.parts = vec![Part::New(bytes.clone())];
    }
    write_gguf(&plan, path).unwrap();
}

fn extend(
    input: &std::path::Path,
    out: &std::path::Path,
    merged: &std::path::Path,
) -> (Option<i32>, serde_json::Value, String) {
    common::run_json(
        "extend-embeddings",
        &[
            input.as_os_str(),
            os("--tokenizer"),
            merged.as_os_str(),
            os("--output"),
            out.as_os_str(),
        ],
    )
}

/// The column mean (f64) of the first `n` rows of `t`, dequantized, as f32.
fn mean_row(g: &Gguf, t: &ckpt_surgery::formats::gguf::TensorInfo, n: u64) -> Vec<f32> {
    use ckpt_surgery::formats::gguf::quant;
    let width = t.ne[0] as usize;
    let rb = (t.bytes / t.rows()) as usize;
    let data = g.data(t).unwrap();
    let mut sum = vec![0f64; width];
    let mut row = vec![0f32; width];
    for r in 0..n as usize {
        quant::dequantize_row(t.ggml, &data[r * rb..(r + 1) * rb], &mut row);
        sum.iter_mut()
            .zip(&row)
            .for_each(|(s, v)| *s += f64::from(*v));
    }
    sum.iter().map(|s| (s / n as f64) as f32).collect()
}

/// `out` is `input` grown by the merged tokenizer: old rows' bytes kept, every new row the
/// type's quantization of the old rows' mean, the tokenizer arrays extended.
fn assert_grown(input: &std::path::Path, out: &std::path::Path, merged: &std::path::Path) {
    use ckpt_surgery::formats::gguf::{keys, quant};
    let (g, back) = (Gguf::open(input).unwrap(), Gguf::open(out).unwrap());
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged).unwrap()).unwrap();
    let mut want: Vec<(String, u64)> = tok["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    want.sort_by_key(|x| x.1);
    let tokens = keys::tokens(&back).unwrap();
    assert_eq!(tokens.len(), want.len());
    assert!(
        tokens.iter().zip(&want).all(|(a, b)| *a == b.0),
        "tokens are the merged tokenizer's by id"
    );
    let types = back.get(keys::TOKEN_TYPE).unwrap().as_array().unwrap();
    assert_eq!(types.len(), want.len());
    assert!(
        types[1000..].iter().all(|t| *t == Value::I32(1)),
        "new vocabulary tokens are normal"
    );
    let merges = back.get(keys::MERGES).unwrap().as_array().unwrap();
    assert_eq!(
        merges.len(),
        tok["model"]["merges"].as_array().unwrap().len()
    );
    for name in ["token_embd.weight", "output.weight"] {
        let Some(a) = g.tensor(name) else {
            assert!(back.tensor(name).is_none(), "a tied file stays tied");
            continue;
        };
        let b = back.tensor(name).unwrap();
        assert_eq!(
            (b.ggml, b.ne[0], b.rows()),
            (a.ggml, a.ne[0], a.rows().max(1047))
        );
        let rb = (a.bytes / a.rows()) as usize;
        let (old, new) = (g.data(a).unwrap(), back.data(b).unwrap());
        assert!(
            new[..1000 * rb] == old[..1000 * rb],
            "{name}: old rows' bytes kept"
        );
        let mut one = Vec::new();
        quant::quantize_row(a.ggml, &mean_row(&g, a, 1000), &mut one);
        for r in 1000..1047 {
            assert!(
                new[r * rb..(r + 1) * rb] == one[..],
                "{name} {}: row {r} is the mean",
                a.ggml.name
            );
        }
    }
}

#[test]
fn extend_embeddings_grows_a_gguf_table_in_every_supported_type() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    for (name, width) in [
        ("F32", 32),
        ("F16", 32),
        ("BF16", 32),
        ("Q8_0", 32),
        ("Q4_0", 32),
        ("Q4_1", 32),
        ("Q5_0", 32),
        ("Q5_1", 64),
        ("Q4_K", 256),
        ("Q5_K", 256),
        ("Q6_K", 256),
    ] {
        let input = tmp.path().join(format!("{name}.gguf"));
        table_of_type(name, width, 1000, &input);
        let out = tmp.path().join(format!("{name}-grown.gguf"));
        let (code, doc, err) = extend(&input, &out, &merged);
        assert_eq!(code, Some(0), "{name}: {err} {doc}");
        assert_eq!(doc["tables"].as_array().unwrap().len(), 2, "{name}: {doc}");
        assert_grown(&input, &out, &merged);
        let (code, check, _) = check_vocab(&[out.as_os_str()]);
        assert_eq!(code, Some(0), "{name}: {check}");
    }
}

#[test]
fn extend_embeddings_grows_a_tied_gguf_and_a_padded_one() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    let tied = testdata("gguf/llama_gpt2_tied.gguf");
    let out = tmp.path().join("tied.gguf");
    let (code, doc, err) = extend(&tied, &out, &merged);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["tied"], true);
    assert_grown(&tied, &out, &merged);
    // 1024 rows for 1000 tokens: the new tokens take padding rows 1000..1024 (re-initialised)
    // and rows 1024..1047 are appended.
    let padded = testdata("gguf/llama_gpt2_untied_q8.gguf");
    let out = tmp.path().join("padded.gguf");
    let (code, doc, err) = extend(&padded, &out, &merged);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        doc["tables"][0]["init_rows"],
        serde_json::json!([1000, 1047])
    );
    assert_grown(&padded, &out, &merged);
}

#[test]
fn extend_embeddings_refuses_a_gguf_table_of_another_type_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    let input = tmp.path().join("q2k.gguf");
    table_of_type("Q2_K", 256, 1000, &input);
    let out = tmp.path().join("out.gguf");
    let (code, doc, _) = extend(&input, &out, &merged);
    assert_eq!(code, Some(2), "{doc}");
    let e = doc["error"].as_str().unwrap();
    assert!(
        e.contains("token_embd.weight is Q2_K") && e.contains("Q6_K"),
        "{e}"
    );
    assert!(!out.exists());
    // An existing output is not replaced without --overwrite.
    std::fs::write(&out, b"keep me").unwrap();
    let (code, doc, _) = extend(&testdata("gguf/llama_gpt2_tied.gguf"), &out, &merged);
    assert_eq!(code, Some(2), "{doc}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    std::fs::remove_file(&out).unwrap();
    // A flag that does not apply to a GGUF file is refused by name.
    let (code, doc, _) = common::run_json(
        "extend-embeddings",
        &[
            input.as_os_str(),
            os("--tokenizer"),
            merged.as_os_str(),
            os("--output"),
            out.as_os_str(),
            os("--init"),
            os("zeros"),
        ],
    );
    assert_eq!(code, Some(2));
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("--init is not supported for a GGUF"),
        "{doc}"
    );
}

#[test]
fn extend_embeddings_refuses_a_tokenizer_that_does_not_extend_the_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap())
            .unwrap();
    let mut tok = tok;
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    let id = vocab.remove("the").unwrap();
    vocab.insert("THE".into(), id.clone());
    let path = tmp.path().join("other.json");
    std::fs::write(&path, serde_json::to_string(&tok).unwrap()).unwrap();
    let out = tmp.path().join("out.gguf");
    let (code, doc, _) = extend(&testdata("gguf/llama_gpt2_tied.gguf"), &out, &path);
    assert_eq!(code, Some(2), "{doc}");
    let e = doc["error"].as_str().unwrap();
    assert!(
        e.contains(&format!("id {id} is \"THE\" there")) && e.contains("\"the\""),
        "{e}"
    );
}

#[test]
fn growing_a_padded_gguf_by_fewer_tokens_than_its_padding_names_the_rest_pad() {
    let tmp = tempfile::tempdir().unwrap();
    // GPT-2's tokenizer with five new vocabulary tokens (ids 1000..1005), no new merges.
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap())
            .unwrap();
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    for (i, w) in ["alpha", "beta", "gamma", "delta", "epsilon"]
        .iter()
        .enumerate()
    {
        vocab.insert(format!("Ġ{w}"), serde_json::json!(1000 + i));
    }
    let merged = tmp.path().join("five.json");
    std::fs::write(&merged, serde_json::to_string(&tok).unwrap()).unwrap();
    let out = tmp.path().join("out.gguf");
    let padded = testdata("gguf/llama_gpt2_untied_q8.gguf");
    let (code, doc, err) = extend(&padded, &out, &merged);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["padding_tokens"], 19, "{doc}");
    let back = Gguf::open(&out).unwrap();
    let names = ckpt_surgery::formats::gguf::keys::tokens(&back).unwrap();
    assert_eq!(
        (names.len(), names[1004], names[1005]),
        (1024, "Ġepsilon", "[PAD1005]")
    );
    assert_eq!(back.tensor("token_embd.weight").unwrap().ne, [32, 1024]);
    let (code, check, _) = check_vocab(&[out.as_os_str()]);
    assert_eq!(code, Some(0), "the table and the tokens agree: {check}");
}

/// merge-tokenizers' merge of sp_amharic.model into sp_bpe_english.model (a `.model`: 400 + 116).
fn merged_sp_model(dir: &std::path::Path) -> std::path::PathBuf {
    let merged = dir.join("merged.model");
    let (code, _, err) = common::run_json(
        "merge-tokenizers",
        &[
            os("--base"),
            testdata("tokenizers/sp_bpe_english.model").as_os_str(),
            os("--add"),
            testdata("tokenizers/sp_amharic.model").as_os_str(),
            os("--output"),
            merged.as_os_str(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    merged
}

#[test]
fn extend_embeddings_grows_a_sentencepiece_gguf_by_a_merged_model_with_its_scores_and_types() {
    use ckpt_surgery::formats::gguf::{keys, quant};
    use ckpt_surgery::tokenizer::sentencepiece;
    let tmp = tempfile::tempdir().unwrap();
    let merged = merged_sp_model(tmp.path());
    let model = sentencepiece::parse(std::fs::read(&merged).unwrap()).unwrap();
    let n = model.pieces.len();
    assert_eq!(n, 516);
    let input = testdata("gguf/llama_sp_untied.gguf");
    let out = tmp.path().join("grown.gguf");
    let (code, doc, err) = extend(&input, &out, &merged);
    assert_eq!(code, Some(0), "{doc} {err}");
    let (g, back) = (Gguf::open(&input).unwrap(), Gguf::open(&out).unwrap());
    let tokens = keys::tokens(&back).unwrap();
    assert!(tokens
        .iter()
        .copied()
        .eq(model.pieces.iter().map(|p| p.piece.as_str())));
    for key in [keys::TOKENS, keys::SCORES, keys::TOKEN_TYPE] {
        let (old, new) = (
            g.get(key).unwrap().as_array().unwrap(),
            back.get(key).unwrap().as_array().unwrap(),
        );
        assert_eq!((old.len(), new.len()), (400, n), "{key}");
        assert_eq!(&new[..400], old, "{key}: old entries kept");
    }
    let scores = back.get(keys::SCORES).unwrap().as_array().unwrap();
    let types = back.get(keys::TOKEN_TYPE).unwrap().as_array().unwrap();
    for (i, p) in model.pieces.iter().enumerate().skip(400) {
        assert_eq!(scores[i], Value::F32(p.score), "score of {}", p.piece);
        let code = i32::try_from(p.kind.code()).unwrap();
        assert_eq!(types[i], Value::I32(code), "type of {}", p.piece);
    }
    assert_eq!(types[400], Value::I32(4), "<am> is USER_DEFINED");
    assert_eq!(types[401], Value::I32(1), "▁። is NORMAL");
    assert!(back.get(keys::MERGES).is_none(), "no merges key for SP");
    assert_eq!(back.get(keys::MODEL).and_then(Value::as_str), Some("llama"));
    for name in ["token_embd.weight", "output.weight"] {
        let (a, b) = (g.tensor(name).unwrap(), back.tensor(name).unwrap());
        assert_eq!((b.ggml, b.ne[0], b.rows()), (a.ggml, 16, n as u64));
        let rb = (a.bytes / a.rows()) as usize;
        let (old, new) = (g.data(a).unwrap(), back.data(b).unwrap());
        assert!(new[..400 * rb] == old[..], "{name}: old rows' bytes kept");
        let mut one = Vec::new();
        quant::quantize_row(a.ggml, &mean_row(&g, a, 400), &mut one);
        assert!(
            (400..n).all(|r| new[r * rb..(r + 1) * rb] == one[..]),
            "{name}: new rows the mean"
        );
    }
}

/// A tokenizer whose ids leave a gap past its entries (an id of 2^64 − 1), and a row target no
/// machine holds, are refused naming the file before anything is sized by them (they panicked
/// or aborted on the allocation).
#[test]
fn extend_refuses_a_tokenizer_id_gap_and_rows_past_memory_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = common::testdata("gguf/llama_gpt2_tied.gguf");
    let mut doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata("gpt2/tokenizer.json")).unwrap(),
    )
    .unwrap();
    doc["model"]["vocab"]["til"] = serde_json::json!(u64::MAX);
    let tok = tmp.path().join("tok.json");
    std::fs::write(&tok, doc.to_string()).unwrap();
    let out = tmp.path().join("o.gguf");
    let tok_s = tok.to_str().unwrap();
    for (extra, want) in [
        (
            vec!["--tokenizer", tok_s],
            "has id 18446744073709551615, but there are",
        ),
        (
            vec!["--new-rows", "18446744073709551615"],
            "would have 18446744073709551615 rows for the file's",
        ),
        (
            // Rows past the tokens, no tokens to name them: llama.cpp would refuse the table.
            vec!["--new-rows", "100000"],
            "llama.cpp takes n_vocab from the tokens and refuses a table of other rows",
        ),
    ] {
        let (code, r, err) = common::run_job("extend-embeddings", &gguf, &out, &extra);
        assert_eq!(code, Some(2), "{err}");
        assert!(r["error"].as_str().unwrap().contains(want), "{r}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists());
    }
}

#[test]
fn a_nan_in_the_rows_the_mean_reads_is_refused_naming_the_row_and_nothing_is_written() {
    // The mean would carry one NaN into every new row: the output's new tokens would be NaN.
    let tmp = tempfile::tempdir().unwrap();
    let src = testdata("gguf/llama_gpt2_tied.gguf");
    let mut b = std::fs::read(&src).unwrap();
    let p = ckpt_surgery::formats::gguf::parse(&src, &b).unwrap();
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .unwrap();
    assert_eq!(t.ggml.name, "F16");
    let at = (t.start + (3 * t.ne[0] + 5) * 2) as usize;
    b[at..at + 2].copy_from_slice(&half::f16::NAN.to_le_bytes());
    let input = tmp.path().join("nan.gguf");
    std::fs::write(&input, &b).unwrap();
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    let out = tmp.path().join("out.gguf");
    let (code, r, err) = extend(&input, &out, &merged);
    assert_eq!(code, Some(2), "{err}");
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("'token_embd.weight'") && e.contains("old row 3") && e.contains("column 5"),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        2,
        "no temp left"
    );
}

#[test]
fn a_token_whose_bytes_are_not_utf8_matches_no_tokenizer_text() {
    // Token 0 ('!') made the byte 0xff: shown as U+FFFD, it must not equal a tokenizer's "\u{fffd}".
    let tmp = tempfile::tempdir().unwrap();
    let src = testdata("gguf/llama_gpt2_tied.gguf");
    let mut b = std::fs::read(&src).unwrap();
    let key = b"tokenizer.ggml.tokens";
    let k = b.windows(key.len()).position(|w| w == key).unwrap();
    // key, u32 array type, u32 element type, u64 count, then u64 length 1 and '!'.
    let at = k + key.len() + 4 + 4 + 8 + 8;
    assert_eq!(b[at], b'!');
    b[at] = 0xff;
    let input = tmp.path().join("bytes.gguf");
    std::fs::write(&input, &b).unwrap();
    let g = ckpt_surgery::formats::gguf::parse(&input, &b).unwrap();
    let kv =
        g.kv.iter()
            .find(|kv| kv.key == "tokenizer.ggml.tokens")
            .unwrap();
    assert_eq!(kv.not_utf8, Some(0));
    // A tokenizer whose id 0 is U+FFFD: the file's bytes are not that text.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap())
            .unwrap();
    let vocab = doc["model"]["vocab"].as_object_mut().unwrap();
    vocab.remove("!");
    vocab.insert("\u{fffd}".into(), serde_json::json!(0));
    let tok = tmp.path().join("fffd.json");
    std::fs::write(&tok, doc.to_string()).unwrap();
    let corpus = tmp.path().join("c.txt");
    std::fs::write(&corpus, "the cat\n").unwrap();
    let out = tmp.path().join("out.gguf");
    let args = [
        "--tokenizer",
        tok.to_str().unwrap(),
        "--keep-corpus",
        corpus.to_str().unwrap(),
        "--allow-shrink",
    ];
    let (code, r, err) = common::run_job("trim-vocab", &input, &out, &args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("id 0 in tokenizer.ggml.tokens is bytes that are not UTF-8"),
        "{r}"
    );
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    let (code, r, err) = extend(&input, &out, &merged);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("bytes that are not UTF-8"),
        "{r}"
    );
    assert!(!out.exists());
}

/// A converter's embedded tokenizer.json (`tokenizer.huggingface.json`) becomes the merged one:
/// the file it was grown with, byte for byte.
#[test]
fn extend_embeddings_replaces_an_embedded_tokenizer_json_with_the_merged_one() {
    let tmp = tempfile::tempdir().unwrap();
    let merged = common::merged_gpt2_tokenizer(tmp.path());
    let g = Gguf::open(&testdata("gguf/llama_gpt2_tied.gguf")).unwrap();
    let mut plan = GgufOut::identity(&g);
    let base = std::fs::read_to_string(testdata("gpt2/tokenizer.json")).unwrap();
    plan.set("tokenizer.huggingface.json", Value::String(base));
    let input = tmp.path().join("embedded.gguf");
    write_gguf(&plan, &input).unwrap();
    let out = tmp.path().join("grown.gguf");
    let (code, doc, err) = extend(&input, &out, &merged);
    assert_eq!(code, Some(0), "{err} {doc}");
    let back = Gguf::open(&out).unwrap();
    let want = std::fs::read_to_string(&merged).unwrap();
    assert_eq!(
        back.get("tokenizer.huggingface.json"),
        Some(&Value::String(want))
    );
    assert_grown(&input, &out, &merged);
}
