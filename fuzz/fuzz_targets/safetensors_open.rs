//! A single .safetensors file: header parse, offsets, dtypes, then every tensor read.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = ckpt_surgery_fuzz::put("model.safetensors", data);
    ckpt_surgery_fuzz::read_through(&p);
});
