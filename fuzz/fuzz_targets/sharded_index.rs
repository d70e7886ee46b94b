//! A `model.safetensors.index.json` beside the two real GPT-2 shards: the index parse and its
//! cross-checks against the shards (missing files, tensors in the wrong shard, duplicates).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Once;

static SHARDS: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    let dir = ckpt_surgery_fuzz::scratch();
    SHARDS.call_once(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gpt2_sharded");
        for f in [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ] {
            std::fs::copy(src.join(f), dir.join(f)).expect("copy shard");
        }
    });
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ckpt_surgery::formats::sharded::parse_index(Path::new("fuzz.index.json"), text)
            .map(|i| ckpt_surgery::formats::sharded::shard_names(&i));
    }
    let p = ckpt_surgery_fuzz::put("model.safetensors.index.json", data);
    ckpt_surgery_fuzz::read_through(&p);
});
