//! A chat template's literal text, as trim-vocab reads it from tokenizer_config.json or a GGUF
//! header: any text, Jinja or not. Every piece is non-empty and appears once; a panic is a bug.
#![no_main]
use ckpt_surgery::tokenizer::chat_template::literals;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let pieces = literals(&text);
    for (i, p) in pieces.iter().enumerate() {
        assert!(!p.is_empty(), "an empty piece");
        assert!(!pieces[..i].contains(p), "{p:?} twice");
    }
});
