//! The GGUF writer (issue 48): a file re-written with no edits is the same bytes; a header that
//! grows moves no tensor byte; the output is re-read by the strict reader before it replaces
//! anything, and is never written over its input.

mod common;

use ckpt_surgery::formats::gguf::write::{write_gguf, GgufOut};
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
            t.more = g.data(from).unwrap().to_vec();
        }
        let out = tmp.path().join("anew.gguf");
        write_gguf(&plan, &out).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(testdata(rel)).unwrap(),
            "{rel}"
        );
    }
}
