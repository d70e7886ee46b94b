//! Writes a sharded safetensors checkpoint of SIZE_GIB (default 28) for
//! benches/larger_than_memory.sh: `model.embed_tokens.weight` [262144, 2560] bf16 in the first
//! shard, an untied `lm_head.weight` of the same shape in the last, ~2 GiB shards of 128 MiB
//! layers between, the index and a config.json. Cheap data (a xorshift stream), written at the
//! disk's speed. Run: `cargo bench --bench make_big_sharded -- DIR` (SIZE_GIB to change the size).

use ckpt_surgery::dtype::DType;
use ckpt_surgery::formats::safetensors::{serialize_header, HeaderEntry};
use std::io::Write;
use std::path::Path;

const V: u64 = 262_144;
const D: u64 = 2560;
const LAYER: [u64; 2] = [8192, 8192];

fn shard(path: &Path, tensors: &[(String, [u64; 2])], seed: &mut u64) -> u64 {
    let entries: Vec<HeaderEntry> = tensors
        .iter()
        .map(|(n, s)| HeaderEntry {
            name: n,
            dtype: DType::BF16,
            shape: s,
            len: s[0] * s[1] * 2,
        })
        .collect();
    let header =
        serialize_header(path, Some(&[("format".into(), "pt".into())]), &entries).expect("header");
    let f = std::fs::File::create(path).expect("create shard");
    let mut w = std::io::BufWriter::with_capacity(16 << 20, f);
    w.write_all(&header).expect("write");
    let mut buf = vec![0u8; 16 << 20];
    let mut total = 0;
    for e in &entries {
        let mut left = e.len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            for c in buf[..n].chunks_exact_mut(8) {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                // bf16 values in [-0.5, 0.5): exponent bits kept small.
                let v = *seed & 0x3EFF_3EFF_3EFF_3EFF;
                c.copy_from_slice(&v.to_le_bytes());
            }
            w.write_all(&buf[..n]).expect("write");
            left -= n as u64;
        }
        total += e.len;
    }
    w.flush().expect("flush");
    total
}

fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .expect("usage: make_big_sharded DIR");
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).expect("create dir");
    let size_gib: u64 = std::env::var("SIZE_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(28);
    let layer_bytes = LAYER[0] * LAYER[1] * 2;
    let vocab_bytes = V * D * 2;
    let layers = ((size_gib << 30) - 2 * vocab_bytes) / layer_bytes;
    let per_shard = 16u64;
    let shards = 2 + layers.div_ceil(per_shard);
    let mut plan: Vec<Vec<(String, [u64; 2])>> =
        vec![vec![("model.embed_tokens.weight".into(), [V, D])]];
    for s in 0..layers.div_ceil(per_shard) {
        plan.push(
            (s * per_shard..((s + 1) * per_shard).min(layers))
                .map(|i| (format!("model.layers.{i}.weight"), LAYER))
                .collect(),
        );
    }
    plan.push(vec![("lm_head.weight".into(), [V, D])]);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut weight_map = serde_json::Map::new();
    let mut total = 0;
    for (i, tensors) in plan.iter().enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards);
        total += shard(&dir.join(&name), tensors, &mut seed);
        for (t, _) in tensors {
            weight_map.insert(t.clone(), serde_json::Value::String(name.clone()));
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).expect("index"),
    )
    .expect("write index");
    std::fs::write(
        dir.join("config.json"),
        format!("{{\"vocab_size\": {V}, \"hidden_size\": {D}, \"tie_word_embeddings\": false}}\n"),
    )
    .expect("write config");
    println!(
        "{}: {shards} shards, {total} bytes of tensors",
        dir.display()
    );
}
