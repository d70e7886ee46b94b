//! The non-executing pickle machine on raw bytes: unpickle, find tensors, walk, and whatever
//! reads must write back and read again.
#![no_main]
use ckpt_surgery::formats::torch::pickle::{unpickle, GlobalPolicy, Limits, Origin};
use ckpt_surgery::formats::torch::{tensor_paths, walk, writer::emit_pickle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut policy = GlobalPolicy::default();
    policy.extra.insert("argparse.Namespace".into());
    let origin = || Origin {
        path: std::path::Path::new("fuzzed.pkl"),
        record: "data.pkl",
    };
    if let Ok((p, _)) = unpickle(data, origin(), &policy, Limits::default()) {
        let _ = tensor_paths(&p);
        let _ = walk(&p, 1 << 16, &mut |_, _| true);
        if let Ok(e) = emit_pickle(&p) {
            let bytes = e.bytes;
            assert!(
                unpickle(&bytes, origin(), &policy, Limits::default()).is_ok(),
                "what we write must read back"
            );
        }
    }
});
