//! merge-tokenizers with a fuzzed base tokenizer.json and the shipped Amharic addition, then
//! the fuzzed file as an addition to the shipped Chatterbox-like base.
#![no_main]
use ckpt_surgery::jobs::merge_tokenizers::{run, Options};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let tok = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/tokenizers");
    let p = ckpt_surgery_fuzz::put("tokenizer.json", data);
    let out = ckpt_surgery_fuzz::scratch().join("merged.json");
    let opts = Options {
        score: None,
        check_text: vec![],
        dry_run: false,
        // Every iteration writes the same scratch path, and reaches the writer even when some
        // new tokens are unreachable.
        allow_unreachable: true,
        overwrite: true,
        // A fuzzed base may encode anything differently: the writer is what is fuzzed.
        allow_base_change: true,
        ..Default::default()
    };
    let _ = run(&p, &[tok.join("amharic_addition.json")], &out, &opts);
    let dry = Options {
        dry_run: true,
        ..opts
    };
    let _ = run(&tok.join("chatterbox_base.json"), &[p], &out, &dry);
});
