//! transplant-tokenizer --init omp / knn. The donor is written here from GPT-2's own rows: donor
//! row of a shared token = P · base row (P wider than the base: the base is a linear map of the
//! donor), each new token's donor row an exact combination of 3 shared donor rows; its
//! vocabulary writes tokens SentencePiece-style in another order, and is the new tokenizer.
//! Then each new token's transplanted row must be the same combination of the base's rows (omp,
//! to f32 precision), or the distance-weighted mean of its k nearest shared tokens' base rows
//! (knn, an f64 reference computed here), and each shared token's row the base's, bit for bit.

mod common;
use ckpt_surgery::dtype::decode_row_f64;
use ckpt_surgery::formats;
use ckpt_surgery::rng::Rng;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// GPT-2's byte → symbol table, written independently of the library.
fn unbytelevel(s: &str) -> Option<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut n = 0;
    let table: Vec<char> = (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            }
        })
        .collect();
    let bytes: Option<Vec<u8>> = s
        .chars()
        .map(|c| table.iter().position(|&x| x == c).map(|b| b as u8))
        .collect();
    String::from_utf8(bytes?).ok()
}

fn matrix(path: &Path, name: &str) -> (usize, Vec<f64>) {
    let c = formats::open_tensors(path, &Default::default()).unwrap();
    let t = c.tensor(name).unwrap();
    let mut v = vec![0f64; t.elements() as usize];
    decode_row_f64(t.dtype, &t.try_bytes().unwrap(), &mut v).unwrap();
    (t.shape[1] as usize, v)
}

struct Donor {
    dir: PathBuf,
    /// Base ids of the shared tokens, in the donor's order (donor id = 1 + index).
    shared: Vec<usize>,
    /// Donor rows (f32 as f64) of shared tokens, then new tokens.
    rows: Vec<Vec<f64>>,
    /// Per new token, (shared index, coefficient).
    combos: Vec<Vec<(usize, f64)>>,
    dd: usize,
}

fn donor(tmp: &Path, base: &[f64], d: usize) -> Donor {
    let tok: Value =
        serde_json::from_slice(&std::fs::read(testdata("gpt2/tokenizer.json")).unwrap()).unwrap();
    let mut by_id: Vec<(u64, String)> = tok["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, i)| (i.as_u64().unwrap(), t.clone()))
        .collect();
    by_id.sort();
    let picked: Vec<(usize, String)> = by_id[100..400]
        .iter()
        .rev()
        .filter_map(|(i, t)| unbytelevel(t).map(|s| (*i as usize, s.replace(' ', "\u{2581}"))))
        .collect();
    let (dd, mut r) = (80, Rng::new(46, 1));
    let p: Vec<f64> = (0..dd * d).map(|_| r.normal() * 0.3).collect();
    let f32r = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| f64::from(x as f32)).collect() };
    let mut rows: Vec<Vec<f64>> = picked
        .iter()
        .map(|(b, _)| {
            f32r(
                (0..dd)
                    .map(|i| (0..d).map(|c| p[i * d + c] * base[b * d + c]).sum())
                    .collect(),
            )
        })
        .collect();
    let mut combos = Vec::new();
    for _ in 0..6 {
        let mut c: Vec<(usize, f64)> = Vec::new();
        while c.len() < 3 {
            let a = (r.next_u64() % picked.len() as u64) as usize;
            if c.iter().all(|x| x.0 != a) {
                c.push((a, 0.5 + (r.next_u64() % 1000) as f64 / 1000.0));
            }
        }
        rows.push(f32r(
            (0..dd)
                .map(|i| c.iter().map(|&(a, x)| x * rows[a][i]).sum())
                .collect(),
        ));
        combos.push(c);
    }
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    for (n, (_, t)) in picked.iter().enumerate() {
        vocab.insert(t.clone(), json!(n + 1));
    }
    for j in 0..6 {
        vocab.insert(format!("\u{2581}ሰላም{j}"), json!(picked.len() + 1 + j));
    }
    let dir = tmp.join("donor");
    std::fs::create_dir(&dir).unwrap();
    let tj = json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}});
    std::fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"tie_word_embeddings": true}"#).unwrap();
    let mut flat: Vec<u8> = vec![0.01f32; dd]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for row in &rows {
        flat.extend(row.iter().flat_map(|&v| (v as f32).to_le_bytes()));
    }
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![rows.len() + 1, dd],
        &flat,
    )
    .unwrap();
    safetensors::serialize_to_file(
        [("model.embed_tokens.weight", view)],
        None,
        &dir.join("model.safetensors"),
    )
    .unwrap();
    Donor {
        dir,
        shared: picked.iter().map(|p| p.0).collect(),
        rows,
        combos,
        dd,
    }
}

fn run_transplant(tmp: &Path, d: &Donor, init: &str) -> (Option<i32>, Value, String, PathBuf) {
    let out = tmp.join(format!("out_{init}"));
    let dir = d.dir.to_str().unwrap();
    let args = [
        "--tokenizer",
        dir,
        "--donor",
        dir,
        "--init",
        init,
        "--omp-k",
        "8",
        "--allow-shrink",
    ];
    let (code, rep, err) = run_job("transplant-tokenizer", &testdata("gpt2"), &out, &args);
    (code, rep, err, out)
}

/// The donor's tokenizer names its special roles: <unk> is its bos, eos and unk.
fn name_roles(d: &Donor) {
    let roles = r#"{"bos_token": "<unk>", "eos_token": "<unk>", "unk_token": "<unk>"}"#;
    std::fs::write(d.dir.join("tokenizer_config.json"), roles).unwrap();
}

fn transplant(tmp: &Path, d: &Donor, init: &str) -> (PathBuf, Value) {
    name_roles(d);
    let (code, rep, err, out) = run_transplant(tmp, d, init);
    assert_eq!(code, Some(0), "{err}");
    (out, rep)
}

fn close(got: &[f64], want: &[f64], what: &str) {
    for (c, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 * w.abs().max(1e-2),
            "{what} col {c}: {g} vs {w}"
        );
    }
}

#[test]
fn omp_transplant_rebuilds_new_tokens_exactly_on_a_linear_map_donor_and_copies_shared_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, base) = matrix(&testdata("gpt2"), "transformer.wte.weight");
    let don = donor(tmp.path(), &base, d);
    // config.json's bos/eos (999, <|endoftext|>) have no place in a tokenizer that lacks the
    // token and names no role: refused, nothing written.
    let (code, _, err, out) = run_transplant(tmp.path(), &don, "omp");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("bos_token_id = 999") && err.contains("bos_token"),
        "{err}"
    );
    assert!(!out.exists());
    let (out, rep) = transplant(tmp.path(), &don, "omp");
    let (_, after) = matrix(&out, "transformer.wte.weight");
    let n = don.shared.len();
    assert_eq!(
        after.len(),
        (n + 7) * d,
        "the table is the donor's vocabulary"
    );
    for (k, &b) in don.shared.iter().enumerate() {
        assert_eq!(
            &after[(k + 1) * d..(k + 2) * d],
            &base[b * d..(b + 1) * d],
            "shared {k}"
        );
    }
    for (j, c) in don.combos.iter().enumerate() {
        let want: Vec<f64> = (0..d)
            .map(|col| {
                c.iter()
                    .map(|&(a, x)| x * base[don.shared[a] * d + col])
                    .sum()
            })
            .collect();
        close(
            &after[(n + 1 + j) * d..(n + 2 + j) * d],
            &want,
            &format!("new token {j}"),
        );
    }
    assert_eq!(rep["donor"]["from_donor"], 6, "{}", rep["donor"]);
    assert_eq!(rep["tokens"]["same_token"], n as u64);
    // <unk> is the new tokenizer's bos/eos/unk: it takes <|endoftext|>'s row, and config.json's
    // ids point at it.
    assert_eq!(&after[..d], &base[999 * d..1000 * d]);
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (cfg["bos_token_id"].as_u64(), cfg["eos_token_id"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn knn_transplant_takes_the_distance_weighted_mean_of_the_nearest_shared_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, base) = matrix(&testdata("gpt2"), "transformer.wte.weight");
    let don = donor(tmp.path(), &base, d);
    let (out, _) = transplant(tmp.path(), &don, "knn");
    let (_, after) = matrix(&out, "transformer.wte.weight");
    let n = don.shared.len();
    for j in 0..don.combos.len() {
        let y = &don.rows[n + j];
        // The 8 nearest shared donor rows (Euclidean), weights 1/distance normalised.
        let mut dist: Vec<(f64, usize)> = (0..n)
            .map(|a| {
                (
                    (0..don.dd)
                        .map(|i| (y[i] - don.rows[a][i]).powi(2))
                        .sum::<f64>()
                        .sqrt(),
                    a,
                )
            })
            .collect();
        dist.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let near = &dist[..8];
        let total: f64 = near.iter().map(|(dv, _)| 1.0 / dv.max(1e-6)).sum();
        let want: Vec<f64> = (0..d)
            .map(|col| {
                near.iter()
                    .map(|(dv, a)| (1.0 / dv.max(1e-6)) / total * base[don.shared[*a] * d + col])
                    .sum()
            })
            .collect();
        close(
            &after[(n + 1 + j) * d..(n + 2 + j) * d],
            &want,
            &format!("knn token {j}"),
        );
    }
}

#[test]
fn a_donor_whose_tokenizer_outgrows_its_table_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, base) = matrix(&testdata("gpt2"), "transformer.wte.weight");
    let don = donor(tmp.path(), &base, d);
    name_roles(&don);
    // The donor's table loses its last 5 rows; its tokenizer still names them.
    let rows = don.rows.len() + 1 - 5;
    let flat: Vec<u8> = (0..rows * don.dd)
        .flat_map(|i| (i as f32 * 1e-3).to_le_bytes())
        .collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, don.dd], &flat)
            .unwrap();
    safetensors::serialize_to_file(
        [("model.embed_tokens.weight", view)],
        None,
        &don.dir.join("model.safetensors"),
    )
    .unwrap();
    let (code, doc, err, out) = run_transplant(tmp.path(), &don, "omp");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("tokenizer and weights disagree") && err.contains(&format!("{rows} rows")),
        "{err}"
    );
    assert_eq!(doc["kind"], "bad-input");
    assert!(!out.exists());
}
