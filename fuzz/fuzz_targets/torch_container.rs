//! torch .pt files, zip and legacy containers: directory, records, pickle, storages, views.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = ckpt_surgery_fuzz::put("model.pt", data);
    ckpt_surgery_fuzz::read_through(&p);
});
