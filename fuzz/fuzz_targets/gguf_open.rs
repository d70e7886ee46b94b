//! A GGUF file: header, every key/value type, tensor infos and every tensor's byte range, then
//! every tensor read and the inspect report (through `formats::open`, as the tools open it).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ckpt_surgery::formats::gguf::parse(std::path::Path::new("model.gguf"), data);
    let p = ckpt_surgery_fuzz::put("model.gguf", data);
    ckpt_surgery_fuzz::read_through(&p);
});
