//! extend-embeddings --init omp (issue 35). Donors are written here from the base's own rows:
//! donor row of a shared token = P · base row (P wider than the base, so base = P⁺ · donor is a
//! linear map of the donor), each new token's donor row an exact combination of ≤ 3 shared donor
//! rows. Then the new base rows must be the same combination of the base's rows, to f32
//! precision. Also: the pursuit against an independent f64 OMP, tied and untied, safetensors
//! and torch, folders and files, and the refusals.

mod common;
use ckpt_surgery::dtype::decode_row_f64;
use ckpt_surgery::formats;
use ckpt_surgery::rng::Rng;
use ckpt_surgery::rows::init::omp::{pursue, Combination, Rows};
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn extend(input: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    run_job("extend-embeddings", input, out, extra)
}

/// GPT-2's byte → symbol table, written independently of the library.
fn byte_symbols() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut n = 0;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            }
        })
        .collect()
}

fn bytelevel(s: &str) -> String {
    let t = byte_symbols();
    s.bytes().map(|b| t[b as usize]).collect()
}

fn unbytelevel(s: &str) -> Option<String> {
    let t = byte_symbols();
    let bytes: Option<Vec<u8>> = s
        .chars()
        .map(|c| t.iter().position(|&x| x == c).map(|b| b as u8))
        .collect();
    String::from_utf8(bytes?).ok()
}

fn wordlevel(vocab: &[(String, u32)]) -> String {
    let v: serde_json::Map<String, Value> =
        vocab.iter().map(|(t, i)| (t.clone(), json!(i))).collect();
    json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": v, "unk_token": "<unk>"}})
    .to_string()
}

fn write_st(path: &Path, tensors: &[(&str, &[f32], usize)]) {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| t.1.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            let shape = vec![t.1.len() / t.2, t.2];
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, b);
            (t.0.to_string(), v.unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn matrix(path: &Path, name: &str) -> (usize, Vec<f64>) {
    let c = formats::open_tensors(path, &Default::default()).unwrap();
    let t = c.tensor(name).unwrap();
    let mut v = vec![0f64; t.elements() as usize];
    decode_row_f64(t.dtype, &t.try_bytes().unwrap(), &mut v).unwrap();
    let cols = if t.shape.len() == 2 { t.shape[1] } else { 1 };
    (cols as usize, v)
}

/// A donor built from base rows: P (dd × d) times each shared base row; new rows exact
/// combinations of ≤ 3 shared donor rows. Returns the donor rows and, per new token, its
/// (shared index, coefficient) pairs.
struct Built {
    rows: Vec<f32>,
    combos: Vec<Vec<(usize, f64)>>,
}

fn build(base: &[f64], d: usize, shared: &[usize], dd: usize, n_new: usize, r: &mut Rng) -> Built {
    let p: Vec<f64> = (0..dd * d).map(|_| r.normal() * 0.3).collect();
    let mut rows = Vec::new();
    let mut shared_rows: Vec<Vec<f64>> = Vec::new();
    for &b in shared {
        let row: Vec<f64> = (0..dd)
            .map(|i| (0..d).map(|c| p[i * d + c] * base[b * d + c]).sum())
            .collect();
        let row32: Vec<f32> = row.iter().map(|&v| v as f32).collect();
        shared_rows.push(row32.iter().map(|&v| f64::from(v)).collect());
        rows.extend(row32);
    }
    let mut combos = Vec::new();
    for _ in 0..n_new {
        let mut c: Vec<(usize, f64)> = Vec::new();
        while c.len() < 3 {
            let a = (r.next_u64() % shared.len() as u64) as usize;
            if c.iter().all(|x| x.0 != a) {
                let s = if r.next_u64().is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                c.push((a, s * (0.5 + (r.next_u64() % 1000) as f64 / 1000.0)));
            }
        }
        rows.extend(
            (0..dd).map(|i| c.iter().map(|&(a, x)| x * shared_rows[a][i]).sum::<f64>() as f32),
        );
        combos.push(c);
    }
    Built { rows, combos }
}

/// New row j of `after` is Σ x · old base row, to f32 precision.
fn assert_combination(
    after: &[f64],
    before: &[f64],
    d: usize,
    row: usize,
    c: &[(usize, f64)],
    what: &str,
) {
    for col in 0..d {
        let want: f64 = c.iter().map(|&(b, x)| x * before[b * d + col]).sum();
        let scale: f64 = c
            .iter()
            .map(|&(b, x)| (x * before[b * d + col]).abs())
            .sum::<f64>()
            + 1e-6;
        let got = after[row * d + col];
        assert!(
            (got - want).abs() <= 2e-5 * scale,
            "{what} row {row} col {col}: {got} vs {want}"
        );
    }
}

/// GPT-2's folder as the base, and beside it in `tmp`: a donor folder whose WordLevel
/// vocabulary writes the shared tokens SentencePiece-style (ids differ from the base's) with
/// rows P · base row, and new tokens exact combinations of them; a merged tokenizer with the
/// new tokens (and one the donor lacks) in byte-level form.
struct Gpt2Donor {
    base_dir: PathBuf,
    d: usize,
    base: Vec<f64>,
    shared: Vec<(usize, String)>,
    /// The shared tokens' base ids.
    ids: Vec<usize>,
    built: Built,
    donor: PathBuf,
    merged_p: PathBuf,
}

fn gpt2_donor(tmp: &Path) -> Gpt2Donor {
    let base_dir = testdata("gpt2");
    let (d, base) = matrix(&base_dir, "transformer.wte.weight");
    let tok: Value =
        serde_json::from_str(&std::fs::read_to_string(base_dir.join("tokenizer.json")).unwrap())
            .unwrap();
    let mut by_id: Vec<(u32, String)> = tok["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, i)| (i.as_u64().unwrap() as u32, t.clone()))
        .collect();
    by_id.sort();
    // Shared: base ids 100..400 whose text is valid UTF-8, written SentencePiece-style.
    let shared: Vec<(usize, String)> = by_id[100..400]
        .iter()
        .filter_map(|(i, t)| unbytelevel(t).map(|s| (*i as usize, s.replace(' ', "\u{2581}"))))
        .collect();
    let new: Vec<String> = (0..6).map(|i| format!(" ሰላም{i}")).collect();
    let mut r = Rng::new(35, 1);
    let ids: Vec<usize> = shared.iter().map(|s| s.0).collect();
    let dd = 80;
    let built = build(&base, d, &ids, dd, new.len(), &mut r);
    // Donor vocabulary: <unk>, the shared tokens in reverse order (ids differ from the base's),
    // the new tokens.
    let mut vocab = vec![("<unk>".to_string(), 0u32)];
    let mut rows = vec![0.01f32; dd];
    for (n, s) in shared.iter().enumerate().rev() {
        vocab.push((s.1.clone(), vocab.len() as u32));
        rows.extend_from_slice(&built.rows[n * dd..(n + 1) * dd]);
    }
    for (j, t) in new.iter().enumerate() {
        vocab.push((t.replace(' ', "\u{2581}"), vocab.len() as u32));
        let at = (shared.len() + j) * dd;
        rows.extend_from_slice(&built.rows[at..at + dd]);
    }
    let donor = tmp.join("donor");
    std::fs::create_dir(&donor).unwrap();
    std::fs::write(donor.join("tokenizer.json"), wordlevel(&vocab)).unwrap();
    std::fs::write(
        donor.join("config.json"),
        r#"{"tie_word_embeddings": true}"#,
    )
    .unwrap();
    write_st(
        &donor.join("model.safetensors"),
        &[("model.embed_tokens.weight", &rows, dd)],
    );
    // Merged: the base's BPE with the new tokens (and one the donor lacks) in byte-level form.
    let mut merged = tok.clone();
    let mv = merged["model"]["vocab"].as_object_mut().unwrap();
    // Added tokens outside model.vocab are numbered after it: <|endoftext|> (999) goes in first.
    mv.insert("<|endoftext|>".into(), json!(999));
    for (j, t) in new.iter().chain([&" xyzzy".to_string()]).enumerate() {
        mv.insert(bytelevel(t), json!(1000 + j));
    }
    let merged_p = tmp.join("merged.json");
    std::fs::write(&merged_p, merged.to_string()).unwrap();

    Gpt2Donor {
        base_dir,
        d,
        base,
        shared,
        ids,
        built,
        donor,
        merged_p,
    }
}

/// The human report of a `--dry-run --init omp` of `base_dir` to `out`.
fn omp_dry_run_text(base_dir: &Path, out: &Path, merged: &str, donor: &Path) -> String {
    let o = run(
        "extend-embeddings",
        &[
            base_dir.as_os_str(),
            "--output".as_ref(),
            out.as_os_str(),
            "--dry-run".as_ref(),
            "--tokenizer".as_ref(),
            merged.as_ref(),
            "--init".as_ref(),
            "omp".as_ref(),
            "--donor".as_ref(),
            donor.as_os_str(),
        ],
    );
    stdout(&o)
}

#[test]
fn omp_on_tied_gpt2_folder_is_exact_across_byte_level_and_sentencepiece_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let Gpt2Donor {
        base_dir,
        d,
        base,
        shared,
        ids,
        built,
        donor,
        merged_p,
    } = gpt2_donor(tmp.path());
    let out = tmp.path().join("out");
    let m = merged_p.to_str().unwrap();
    let args = [
        "--tokenizer",
        m,
        "--init",
        "omp",
        "--donor",
        donor.to_str().unwrap(),
        "--omp-k",
        "8",
    ];
    let (code, rep, err) = extend(&base_dir, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let dr = &rep["donor"];
    assert_eq!(dr["shared_tokens"], shared.len(), "{dr}");
    assert_eq!(
        (dr["from_donor"].as_u64(), dr["missing"].as_u64()),
        (Some(6), Some(1))
    );
    assert_eq!(dr["missing_first"][0], bytelevel(" xyzzy"));
    assert_eq!(
        dr["pursuits"].as_array().unwrap().len(),
        1,
        "tied: one pursuit"
    );
    let (_, after) = matrix(&out, "transformer.wte.weight");
    assert_eq!(&after[..1000 * d], &base[..], "old rows kept");
    for (j, c) in built.combos.iter().enumerate() {
        let c: Vec<(usize, f64)> = c.iter().map(|&(a, x)| (ids[a], x)).collect();
        assert_combination(&after, &base, d, 1000 + j, &c, "wte");
    }
    // The token the donor lacks gets exactly what --init subword-mean gives it.
    let sub = tmp.path().join("sub");
    let b = base_dir.join("tokenizer.json");
    let sargs = [
        "--tokenizer",
        m,
        "--init",
        "subword-mean",
        "--base-tokenizer",
        b.to_str().unwrap(),
    ];
    let (code, _, err) = extend(&base_dir, &sub, &sargs);
    assert_eq!(code, Some(0), "{err}");
    let (_, want) = matrix(&sub, "transformer.wte.weight");
    for c in 0..d {
        let (x, y) = (after[1006 * d + c], want[1006 * d + c]);
        assert!(
            (x - y).abs() <= 1e-6 * y.abs().max(1e-3),
            "subword fallback col {c}: {x} vs {y}"
        );
    }
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"], 1007);
    // The text report says the same.
    let text = omp_dry_run_text(&base_dir, &tmp.path().join("o2"), m, &donor);
    assert!(
        text.contains("6 new tokens from the donor")
            && text.contains("1 new tokens not in the donor"),
        "{text}"
    );
}

#[test]
fn held_out_rows_of_a_linear_map_donor_are_rebuilt_exactly_once_k_reaches_the_rank() {
    // Donor rows are P · base row (P 80 × 64): the base's rows are a linear map of the donor's,
    // of rank 64, so a held-out token's donor row is an exact combination of any 64
    // independent other shared rows, and so is its base row: cosine 1 for k ≥ 64, below for 8.
    let tmp = tempfile::tempdir().unwrap();
    let g = gpt2_donor(tmp.path());
    let m = g.merged_p.to_str().unwrap();
    let donor = g.donor.to_str().unwrap();
    let quality = |k: &str| {
        let out = tmp.path().join(format!("out{k}"));
        let args = [
            "--tokenizer",
            m,
            "--init",
            "omp",
            "--donor",
            donor,
            "--omp-k",
            k,
        ];
        let (code, rep, err) = extend(&g.base_dir, &out, &[&args[..], &["--dry-run"]].concat());
        assert_eq!(code, Some(0), "{err}");
        rep["donor"]["quality"]["matrices"][0]["rebuilt"].clone()
    };
    let exact = quality("64");
    assert_eq!(exact["tokens"], (g.shared.len() * 5 + 50) / 100, "{exact}");
    for key in ["median", "p5"] {
        let c = exact[key].as_f64().unwrap();
        assert!(c > 1.0 - 1e-6, "k 64, {key}: {c}");
    }
    let few = quality("8")["median"].as_f64().unwrap();
    assert!(few < 0.99, "k 8 cannot rebuild a rank-64 row: {few}");
}

/// A WordLevel tokenizer t0…t{n-1}, plus extra tokens after.
fn numbered(n: usize, extra: &[&str]) -> String {
    let mut v: Vec<(String, u32)> = (0..n).map(|i| (format!("t{i}"), i as u32)).collect();
    v[0].0 = "<unk>".into();
    for e in extra {
        v.push((e.to_string(), v.len() as u32));
    }
    wordlevel(&v)
}

/// An untied donor weight file for `base` (embedding and head each mapped by their own P), its
/// tokenizer listing shared t{i} in reverse, then `new`.
fn untied_donor(
    dir: &Path,
    emb: &[f64],
    head: &[f64],
    d: usize,
    shared: &[usize],
    new: &[&str],
) -> (Built, Built) {
    let mut r = Rng::new(7, 3);
    let dd = 12;
    let e = build(emb, d, shared, dd, new.len(), &mut r);
    let h = build(head, d, shared, dd, new.len(), &mut r);
    let mut vocab = Vec::new();
    let (mut er, mut hr) = (Vec::new(), Vec::new());
    for (n, &s) in shared.iter().enumerate().rev() {
        vocab.push((format!("t{s}"), vocab.len() as u32));
        er.extend_from_slice(&e.rows[n * dd..(n + 1) * dd]);
        hr.extend_from_slice(&h.rows[n * dd..(n + 1) * dd]);
    }
    for (j, t) in new.iter().enumerate() {
        vocab.push((t.to_string(), vocab.len() as u32));
        let at = (shared.len() + j) * dd;
        er.extend_from_slice(&e.rows[at..at + dd]);
        hr.extend_from_slice(&h.rows[at..at + dd]);
    }
    std::fs::write(dir.join("donor_tok.json"), wordlevel(&vocab)).unwrap();
    write_st(
        &dir.join("donor.safetensors"),
        &[
            ("model.embed_tokens.weight", &er, dd),
            ("lm_head.weight", &hr, dd),
        ],
    );
    (e, h)
}

#[test]
fn omp_on_an_untied_llama_file_runs_a_head_pursuit_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("untied_llama_adamw/model.safetensors");
    let (d, emb) = matrix(&input, "model.embed_tokens.weight");
    let (_, head) = matrix(&input, "lm_head.weight");
    let new = ["n0", "n1", "n2", "n3"];
    let shared: Vec<usize> = (1..200).collect();
    let (e, h) = untied_donor(tmp.path(), &emb, &head, d, &shared, &new);
    std::fs::write(tmp.path().join("base.json"), numbered(1000, &[])).unwrap();
    std::fs::write(tmp.path().join("merged.json"), numbered(1000, &new)).unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let out = tmp.path().join("out.safetensors");
    let args = [
        "--tokenizer",
        &p("merged.json"),
        "--base-tokenizer",
        &p("base.json"),
        "--init",
        "omp",
        "--donor",
        &p("donor.safetensors"),
        "--donor-tokenizer",
        &p("donor_tok.json"),
        "--omp-k",
        "20",
    ];
    let (code, rep, err) = extend(&input, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let dr = &rep["donor"];
    assert_eq!(dr["pursuits"].as_array().unwrap().len(), 2, "{dr}");
    assert_eq!(dr["k"], 12, "clipped to the donor's width");
    assert!(
        dr["notes"][0].as_str().unwrap().contains("clipped to 12"),
        "{dr}"
    );
    let (_, e2) = matrix(&out, "model.embed_tokens.weight");
    let (_, h2) = matrix(&out, "lm_head.weight");
    assert_eq!(&h2[..1000 * d], &head[..]);
    for j in 0..new.len() {
        let ce: Vec<(usize, f64)> = e.combos[j].iter().map(|&(a, x)| (shared[a], x)).collect();
        let ch: Vec<(usize, f64)> = h.combos[j].iter().map(|&(a, x)| (shared[a], x)).collect();
        assert_combination(&e2, &emb, d, 1000 + j, &ce, "embedding");
        assert_combination(&h2, &head, d, 1000 + j, &ch, "head");
    }
}

#[test]
fn omp_on_a_tied_bert_torch_folder_gives_the_bias_the_same_coefficients() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("bert_mlm_bin");
    let (d, emb) = matrix(&input, "bert.embeddings.word_embeddings.weight");
    let (_, bias) = matrix(&input, "cls.predictions.decoder.bias");
    let new = ["n0", "n1", "n2"];
    let shared: Vec<usize> = (1..100).collect();
    let mut r = Rng::new(9, 9);
    let e = build(&emb, d, &shared, 40, new.len(), &mut r);
    let mut vocab: Vec<(String, u32)> = shared.iter().map(|s| (format!("t{s}"), 0)).collect();
    vocab.extend(new.iter().map(|t| (t.to_string(), 0)));
    for (i, v) in vocab.iter_mut().enumerate() {
        v.1 = i as u32;
    }
    std::fs::write(tmp.path().join("donor_tok.json"), wordlevel(&vocab)).unwrap();
    write_st(
        &tmp.path().join("donor.safetensors"),
        &[("embeddings.weight", &e.rows, 40)],
    );
    std::fs::write(tmp.path().join("base.json"), numbered(120, &[])).unwrap();
    std::fs::write(tmp.path().join("merged.json"), numbered(120, &new)).unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let out = tmp.path().join("out");
    let args = [
        "--tokenizer",
        &p("merged.json"),
        "--base-tokenizer",
        &p("base.json"),
        "--init",
        "omp",
        "--donor",
        &p("donor.safetensors"),
        "--donor-tokenizer",
        &p("donor_tok.json"),
    ];
    let (code, _, err) = extend(&input, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let (_, e2) = matrix(&out, "bert.embeddings.word_embeddings.weight");
    let (_, h2) = matrix(&out, "cls.predictions.decoder.weight");
    let (_, b2) = matrix(&out, "cls.predictions.decoder.bias");
    assert_eq!(e2, h2, "the tie holds");
    for j in 0..new.len() {
        let c: Vec<(usize, f64)> = e.combos[j].iter().map(|&(a, x)| (shared[a], x)).collect();
        assert_combination(&e2, &emb, d, 120 + j, &c, "embedding");
        assert_combination(&b2, &bias, 1, 120 + j, &c, "bias");
    }
}

/// OMP written plainly in f64: correlations D·r with the residual formed explicitly, the
/// refit by normal equations solved with Gaussian elimination.
fn naive_omp(dict: &[f32], s: usize, d: usize, y: &[f32], k: usize) -> (Vec<usize>, Vec<f64>) {
    let at = |i: usize, c: usize| f64::from(dict[i * d + c]);
    let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
    let (mut sel, mut x) = (Vec::new(), Vec::new());
    let mut r = y.clone();
    for _ in 0..k {
        let best = (0..s)
            .filter(|i| !sel.contains(i))
            .max_by(|&a, &b| {
                let ca: f64 = (0..d).map(|c| at(a, c) * r[c]).sum::<f64>().abs();
                let cb: f64 = (0..d).map(|c| at(b, c) * r[c]).sum::<f64>().abs();
                ca.total_cmp(&cb).then(b.cmp(&a))
            })
            .unwrap();
        sel.push(best);
        let n = sel.len();
        let mut g: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                let mut row: Vec<f64> = (0..n)
                    .map(|j| (0..d).map(|c| at(sel[i], c) * at(sel[j], c)).sum())
                    .collect();
                row.push((0..d).map(|c| at(sel[i], c) * y[c]).sum());
                row
            })
            .collect();
        for p in 0..n {
            for q in p + 1..n {
                let f = g[q][p] / g[p][p];
                let (top, bottom) = g.split_at_mut(q);
                for (a, b) in bottom[0][p..].iter_mut().zip(&top[p][p..]) {
                    *a -= f * b;
                }
            }
        }
        x = vec![0.0; n];
        for p in (0..n).rev() {
            x[p] = (g[p][n] - (p + 1..n).map(|c| g[p][c] * x[c]).sum::<f64>()) / g[p][p];
        }
        for c in 0..d {
            r[c] = y[c] - (0..n).map(|i| x[i] * at(sel[i], c)).sum::<f64>();
        }
    }
    (sel, x)
}

#[test]
fn the_pursuit_agrees_with_a_plain_f64_omp_on_random_inputs() {
    let (s, d, t, k) = (400, 48, 60, 12);
    let mut r = Rng::new(123, 0);
    let dict: Vec<f32> = (0..s * d).map(|_| r.normal() as f32).collect();
    let ys: Vec<f32> = (0..t * d).map(|_| r.normal() as f32).collect();
    let got = pursue(
        Rows {
            data: &dict,
            rows: s,
            cols: d,
        },
        Rows {
            data: &ys,
            rows: t,
            cols: d,
        },
        k,
    );
    for (i, g) in got.iter().enumerate() {
        let (atoms, coefs) = naive_omp(&dict, s, d, &ys[i * d..(i + 1) * d], k);
        assert_eq!(g.atoms, atoms, "target {i}: same atoms in the same order");
        for (a, b) in g.coefs.iter().zip(&coefs) {
            assert!((a - b).abs() <= 1e-4, "target {i}: {a} vs {b}");
        }
    }
}

/// The refusals' files in `dir`: an untied donor of `input` with one new token n0, the base and
/// merged tokenizers, and a stranger tokenizer sharing no token with the base.
fn refusal_files(input: &Path, dir: &Path) {
    let (d, emb) = matrix(input, "model.embed_tokens.weight");
    let (_, head) = matrix(input, "lm_head.weight");
    let shared: Vec<usize> = (1..50).collect();
    untied_donor(dir, &emb, &head, d, &shared, &["n0"]);
    std::fs::write(dir.join("base.json"), numbered(1000, &[])).unwrap();
    std::fs::write(dir.join("merged.json"), numbered(1000, &["n0"])).unwrap();
    std::fs::write(
        dir.join("stranger.json"),
        wordlevel(&[("zz".into(), 0), ("n0".into(), 1)]),
    )
    .unwrap();
}

/// `dir`/nan.safetensors: `dir`/donor.safetensors with a NaN in its embedding's row 3.
fn nan_donor(dir: &Path) {
    let (cols, mut rows) = matrix(&dir.join("donor.safetensors"), "model.embed_tokens.weight");
    let (_, hrows) = matrix(&dir.join("donor.safetensors"), "lm_head.weight");
    rows[3 * cols + 1] = f64::NAN;
    let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    write_st(
        &dir.join("nan.safetensors"),
        &[
            ("model.embed_tokens.weight", &f32s(&rows), cols),
            ("lm_head.weight", &f32s(&hrows), cols),
        ],
    );
}

#[test]
fn omp_refusals_exit_2_name_the_file_and_flag_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("untied_llama_adamw/model.safetensors");
    refusal_files(&input, tmp.path());
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let out = tmp.path().join("out.safetensors");
    let common = [
        "--tokenizer".to_string(),
        p("merged.json"),
        "--base-tokenizer".into(),
        p("base.json"),
        "--init".into(),
        "omp".into(),
    ];
    let try_ = |extra: &[String]| {
        let a: Vec<&str> = common.iter().chain(extra).map(String::as_str).collect();
        extend(&input, &out, &a)
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // No shared token.
    let (code, _, err) = try_(&s(&[
        "--donor",
        &p("donor.safetensors"),
        "--donor-tokenizer",
        &p("stranger.json"),
    ]));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("stranger.json") && err.contains("shares no token") && err.contains("--donor"),
        "{err}"
    );
    // A donor folder without a tokenizer.
    let bare = tmp.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(
        tmp.path().join("donor.safetensors"),
        bare.join("model.safetensors"),
    )
    .unwrap();
    let (code, _, err) = try_(&s(&["--donor", bare.to_str().unwrap()]));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("bare") && err.contains("--donor-tokenizer"),
        "{err}"
    );
    // k = 0.
    let (code, _, err) = try_(&s(&[
        "--donor",
        &p("donor.safetensors"),
        "--donor-tokenizer",
        &p("donor_tok.json"),
        "--omp-k",
        "0",
    ]));
    assert_eq!(code, Some(2));
    assert!(err.contains("--omp-k"), "{err}");
    // A NaN row in the donor.
    nan_donor(tmp.path());
    let (code, _, err) = try_(&s(&[
        "--donor",
        &p("nan.safetensors"),
        "--donor-tokenizer",
        &p("donor_tok.json"),
    ]));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("nan.safetensors") && err.contains("NaN") && err.contains("--donor"),
        "{err}"
    );
    // --donor without --init omp.
    let a = [
        "--tokenizer",
        &p("merged.json"),
        "--donor",
        &p("donor.safetensors"),
    ];
    let (code, _, err) = extend(&input, &out, &a);
    assert_eq!(code, Some(2));
    assert!(err.contains("--init omp"), "{err}");
    assert!(!out.exists());
    let left: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.iter().all(|p| !p.to_string_lossy().contains("out")),
        "{left:?}"
    );
}

/// A donor folder in `dir` as a SentencePiece-only model ships: its embedding and head (untied)
/// built from the base's by `build`, and only a `tokenizer.model` (written from the protobuf spec):
/// an unknown piece the base lacks, `shared` in reverse (ids differ from the base's), then `new`.
fn sp_donor(
    dir: &Path,
    (emb, head, d): (&[f64], &[f64], usize),
    shared: &[(usize, String)],
    new: &[&str],
) -> (Built, Built) {
    let mut r = Rng::new(43, 7);
    let dd = 24;
    let ids: Vec<usize> = shared.iter().map(|s| s.0).collect();
    let e = build(emb, d, &ids, dd, new.len(), &mut r);
    let h = build(head, d, &ids, dd, new.len(), &mut r);
    let mut model = sp_piece_field("<donor-unk>", 0.0, 2);
    let (mut er, mut hr) = (vec![0.5f32; dd], vec![0.5f32; dd]);
    let order = (0..shared.len())
        .rev()
        .chain(shared.len()..shared.len() + new.len());
    for (n, i) in order.enumerate() {
        let piece = shared
            .get(i)
            .map_or(new[i.saturating_sub(shared.len())], |s| &s.1);
        model.extend(sp_piece_field(piece, -(n as f32), 1));
        er.extend_from_slice(&e.rows[i * dd..(i + 1) * dd]);
        hr.extend_from_slice(&h.rows[i * dd..(i + 1) * dd]);
    }
    std::fs::create_dir(dir).unwrap();
    std::fs::write(dir.join("tokenizer.model"), model).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"tie_word_embeddings": false}"#).unwrap();
    write_st(
        &dir.join("model.safetensors"),
        &[
            ("model.embed_tokens.weight", &er, dd),
            ("lm_head.weight", &hr, dd),
        ],
    );
    (e, h)
}

#[test]
fn omp_on_a_sentencepiece_only_folder_takes_a_model_only_donor_and_splits_what_it_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let base_dir = testdata("sp_only/llama");
    let (d, emb) = matrix(&base_dir, "model.embed_tokens.weight");
    let (_, head) = matrix(&base_dir, "lm_head.weight");
    // Shared: the base's 241 normal pieces (after <unk>, <s>, </s> and 256 byte pieces).
    let sp = ckpt_surgery::tokenizer::sentencepiece::parse(
        std::fs::read(base_dir.join("tokenizer.model")).unwrap(),
    )
    .unwrap();
    let shared: Vec<(usize, String)> = (259..500)
        .map(|i| (i, sp.pieces[i].piece.clone()))
        .collect();
    // New: the reference pieces; the donor lacks "▁café", which gets the base's subword mean.
    let splits = sp_expected_splits("bpe");
    let lacks = splits.iter().position(|s| s.0 == "\u{2581}café").unwrap();
    let new: Vec<&str> = splits.iter().map(|s| s.0.as_str()).collect();
    let mut donor_new = new.clone();
    donor_new.remove(lacks);
    let donor = tmp.path().join("donor");
    let (e, h) = sp_donor(&donor, (&emb, &head, d), &shared, &donor_new);
    let merged = tmp.path().join("merged.model");
    sp_merged(&base_dir.join("tokenizer.model"), &new, &merged);
    let out = tmp.path().join("out");
    let args = [
        "--tokenizer",
        merged.to_str().unwrap(),
        "--init",
        "omp",
        "--donor",
        donor.to_str().unwrap(),
        "--omp-k",
        "20",
    ];
    let (code, rep, err) = extend(&base_dir, &out, &args);
    assert_eq!(code, Some(0), "{err}");
    let dr = &rep["donor"];
    assert_eq!(dr["pursuits"].as_array().unwrap().len(), 2, "{dr}");
    assert_eq!(dr["shared_tokens"], shared.len(), "{dr}");
    assert_eq!(
        (dr["from_donor"].as_u64(), dr["missing"].as_u64()),
        (Some(7), Some(1))
    );
    assert_eq!(dr["missing_first"][0], "\u{2581}café");
    assert!(!dr.to_string().contains("not possible"), "{dr}");
    assert_eq!(rep["fallbacks"].as_array().map_or(0, Vec::len), 0, "{rep}");
    let (_, e2) = matrix(&out, "model.embed_tokens.weight");
    let (_, h2) = matrix(&out, "lm_head.weight");
    assert_eq!(&e2[..500 * d], &emb[..]);
    assert_eq!(&h2[..500 * d], &head[..]);
    for (n, piece) in donor_new.iter().enumerate() {
        let row = 500 + new.iter().position(|p| p == piece).unwrap();
        let ce: Vec<(usize, f64)> = e.combos[n].iter().map(|&(a, x)| (shared[a].0, x)).collect();
        let ch: Vec<(usize, f64)> = h.combos[n].iter().map(|&(a, x)| (shared[a].0, x)).collect();
        assert_combination(&e2, &emb, d, row, &ce, "embedding");
        assert_combination(&h2, &head, d, row, &ch, "head");
    }
    // The piece the donor lacks: the mean of the base rows real sentencepiece splits it into.
    let ids = &splits[lacks].1;
    let mean: Vec<(usize, f64)> = ids.iter().map(|&i| (i, 1.0 / ids.len() as f64)).collect();
    assert_combination(&e2, &emb, d, 500 + lacks, &mean, "embedding, subword mean");
    assert_combination(&h2, &head, d, 500 + lacks, &mean, "head, subword mean");
}

/// Combinations by position, atoms sorted with their coefficients (the order OMP picks them in
/// depends on the batch).
fn sorted_atoms(c: &ckpt_surgery::rows::init::omp::Combination) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = c
        .atoms
        .iter()
        .copied()
        .zip(c.coefs.iter().copied())
        .collect();
    v.sort_by_key(|a| a.0);
    v
}

/// Combination `c` (for new row `j`) makes the row the donor of `g` was built with.
fn assert_built_combination(g: &Gpt2Donor, c: &Combination, j: usize) {
    let mut row = vec![0f64; 1000 * g.d + g.d];
    for (&a, &x) in c.atoms.iter().zip(&c.coefs) {
        for col in 0..g.d {
            row[1000 * g.d + col] += x * g.base[a * g.d + col];
        }
    }
    let built: Vec<(usize, f64)> = g.built.combos[j]
        .iter()
        .map(|&(a, x)| (g.ids[a], x))
        .collect();
    assert_combination(&row, &g.base, g.d, 1000, &built, "scattered target");
}

#[test]
fn donor_plan_for_scattered_targets_gives_row_j_the_combination_of_targets_j() {
    use ckpt_surgery::rows::donor::{plan, BaseRows, DonorRequest, Solver, K};
    use ckpt_surgery::rows::init::Init;
    let tmp = tempfile::tempdir().unwrap();
    let g = gpt2_donor(tmp.path());
    let base_tok = g.base_dir.join("tokenizer.json");
    let open = formats::OpenOptions::default();
    let base_ckpt = formats::open_tensors(&g.base_dir, &open).unwrap();
    let matrices = [(
        "transformer.wte.weight".to_string(),
        ckpt_surgery::vocab::Role::Embedding,
    )];
    // The tokenizers as a job that already loaded them hands them in (transplant-tokenizer).
    let load = |p: &std::path::Path| ckpt_surgery::tokenizer::base::load_tokenizer(p).unwrap();
    let (loaded_base, loaded_new) = (load(&base_tok), load(&g.merged_p));
    let ask = |targets: &[u64], loaded| {
        let req = DonorRequest {
            donor: &g.donor,
            donor_tokenizer: None,
            k: K::Fixed(8),
            seed: 0,
            base: BaseRows {
                ckpt: &base_ckpt,
                matrices: &matrices,
            },
            base_tokenizer: &base_tok,
            new_tokenizer: &g.merged_p,
            loaded,
            old_rows: 1000,
            targets,
            untied_head: false,
            open: &open,
            device: ckpt_surgery::rows::device::Request::Cpu,
            solver: Solver::Omp,
        };
        let (init, report) = plan(&req, &mut Vec::new(), &mut Vec::new()).unwrap();
        let Init::Donor { embedding, head } = init else {
            panic!("not a donor init: {init:?}")
        };
        assert_eq!(embedding, head, "tied: the head takes the embedding's");
        (embedding, report)
    };
    // Out of order, with gaps, and 1006 (" xyzzy") the donor lacks.
    let targets = [1005u64, 1002, 1006, 1000];
    let (got, report) = ask(&targets, None);
    let (all, _) = ask(
        &(1000..1007).collect::<Vec<_>>(),
        Some((&loaded_base, &loaded_new)),
    );
    assert_eq!(got.len(), targets.len());
    for (j, &id) in targets.iter().enumerate() {
        let c = got[j].as_ref().unwrap();
        let want = all[(id - 1000) as usize].as_ref().unwrap();
        let (a, b) = (sorted_atoms(c), sorted_atoms(want));
        assert_eq!(
            a.iter().map(|x| x.0).collect::<Vec<_>>(),
            b.iter().map(|x| x.0).collect::<Vec<_>>(),
            "target {id} (row {j}): the atoms extend's range gives it"
        );
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.1 - y.1).abs() <= 1e-6 * y.1.abs().max(1.0),
                "{id}: {x:?} vs {y:?}"
            );
        }
        if id == 1006 {
            continue;
        }
        // Independently: the row it makes is the combination the donor was built with.
        assert_built_combination(&g, c, (id - 1000) as usize);
    }
    // The token the donor lacks: the mean of the base's pieces of its text.
    let base = tokenizers::Tokenizer::from_file(&base_tok).unwrap();
    let pieces: Vec<usize> = base
        .encode(" xyzzy", false)
        .unwrap()
        .get_ids()
        .iter()
        .map(|&i| i as usize)
        .collect();
    let c = got[2].as_ref().unwrap();
    assert_eq!(c.atoms, pieces, "subword-mean of ' xyzzy'");
    assert!(c
        .coefs
        .iter()
        .all(|&x| (x - 1.0 / pieces.len() as f64).abs() < 1e-12));
    // The report names the targets' ids and tokens, not old_rows + position.
    let named: Vec<(u64, String)> = report
        .sample
        .iter()
        .map(|s| (s.id, s.token.clone()))
        .collect();
    let want: Vec<(u64, String)> = [(1005, " ሰላም5"), (1002, " ሰላም2"), (1000, " ሰላም0")]
        .iter()
        .map(|&(i, t)| (i, bytelevel(t)))
        .collect();
    assert_eq!(named, want);
    assert_eq!((report.from_donor, report.missing), (3, 1));
    assert_eq!(report.missing_first, [bytelevel(" xyzzy")]);
}
