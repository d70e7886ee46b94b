//! The donor init's held-out quality report and `--omp-k auto` (issue 46, item 3), against
//! testdata/donor_quality/reference.json: the same report computed independently in numpy
//! float64 (testdata/generate.py, `donor_quality`) on a base and a donor written there with
//! safetensors and tokenizers (untied, widths 16 and 72, 300 shared tokens).

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn reference() -> Value {
    let p = testdata("donor_quality/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// `extend-embeddings` of the fixture's base with its merged tokenizer and donor; `extra` added.
fn extend(out: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let d = testdata("donor_quality");
    let merged = d.join("merged.json");
    let donor = d.join("donor");
    let mut args = vec![
        "--tokenizer",
        merged.to_str().unwrap(),
        "--init",
        "omp",
        "--donor",
        donor.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_job("extend-embeddings", &d.join("base"), out, &args)
}

/// The report's matrix whose pursuit is `used_for`.
fn matrix<'a>(quality: &'a Value, used_for: &str) -> &'a Value {
    quality["matrices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["used_for"] == used_for)
        .unwrap_or_else(|| panic!("no {used_for} in {quality}"))
}

fn assert_figures(got: &Value, want: &Value, what: &str) {
    assert_eq!(got["tokens"], want["tokens"], "{what}: tokens measured");
    for key in ["median", "p5"] {
        let (g, w) = (got[key].as_f64().unwrap(), want[key].as_f64().unwrap());
        assert!((g - w).abs() <= 1e-5, "{what} {key}: {g} vs numpy's {w}");
    }
}

fn tmp_out(tmp: &tempfile::TempDir, name: &str) -> PathBuf {
    tmp.path().join(name)
}

#[test]
fn held_out_cosines_and_the_subword_mean_baseline_match_numpy() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    for k in ["8", "64"] {
        let (code, rep, err) = extend(&tmp_out(&tmp, k), &["--omp-k", k, "--dry-run"]);
        assert_eq!(code, Some(0), "{err}");
        let q = &rep["donor"]["quality"];
        assert_eq!(q["seed"], 0, "{q}");
        assert_eq!(q["held_out"], 15, "round(5 % of 300)");
        assert_eq!(q["rebuilt_from"], r["rest"]);
        assert_eq!(q["k"].to_string(), k);
        for m in ["embedding", "head"] {
            let got = matrix(q, m);
            assert_figures(&got["rebuilt"], &r["ks"][k][m], &format!("k {k}, {m}"));
            assert_figures(
                &got["subword_mean"],
                &r["subword_mean"][m],
                &format!("{m}, subword-mean"),
            );
        }
    }
}

#[test]
fn held_out_tokens_are_the_seeded_hash_choice_whatever_the_thread_count() {
    use ckpt_surgery::rows::donor::held_out;
    let r = reference();
    // The fixture's shared tokens are every base id 0..300 (the donor ids do not matter).
    let shared: Vec<(u32, u32)> = (0..300).map(|b| (b, 299 - b)).collect();
    for seed in [0u64, 7] {
        let want: Vec<u64> = r["held_out_base_ids"][seed.to_string()]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let split = held_out(&shared, seed);
        let got: Vec<u64> = split.held.iter().map(|&i| u64::from(shared[i].0)).collect();
        assert_eq!(got, want, "seed {seed}");
        assert_eq!(split.rest.len() + split.held.len(), 300);
    }
    // The report itself: the same on one thread and on three.
    let d = testdata("donor_quality");
    let run_with = |threads: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_extend-embeddings"))
            .env("RAYON_NUM_THREADS", threads)
            .args([d.join("base").as_os_str(), "--output".as_ref()])
            .arg(d.join("never_written"))
            .args(["--tokenizer".as_ref(), d.join("merged.json").as_os_str()])
            .args(["--init", "omp", "--omp-k", "auto", "--dry-run", "--json"])
            .args(["--donor".as_ref(), d.join("donor").as_os_str()])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["donor"]["quality"].clone()
    };
    let one = run_with("1");
    assert!(one.is_object(), "{one}");
    assert_eq!(one, run_with("3"));
}

#[test]
fn omp_k_auto_takes_the_k_with_the_best_held_out_median_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    let (code, rep, err) = extend(&tmp_out(&tmp, "auto"), &["--omp-k", "auto"]);
    assert_eq!(code, Some(0), "{err}");
    let q = &rep["donor"]["quality"];
    let tried = q["auto_k"]["tried"].as_array().unwrap();
    let ks: Vec<u64> = tried.iter().map(|t| t["k"].as_u64().unwrap()).collect();
    assert_eq!(
        ks,
        [8, 16, 32, 64, 72],
        "128 clipped to the donor's width 72"
    );
    for t in tried {
        let k = t["k"].to_string();
        let want = &r["ks"][&k]["embedding"];
        for key in ["median", "p5"] {
            let (g, w) = (t[key].as_f64().unwrap(), want[key].as_f64().unwrap());
            assert!((g - w).abs() <= 1e-5, "k {k} {key}: {g} vs {w}");
        }
    }
    // numpy's best is k = 8, well ahead of 64: auto must take it, not the largest k.
    let best = r["auto"].as_u64().unwrap();
    assert_eq!(best, 8);
    let m8 = r["ks"]["8"]["embedding"]["median"].as_f64().unwrap();
    let m64 = r["ks"]["64"]["embedding"]["median"].as_f64().unwrap();
    assert!(m8 - m64 > 0.02, "{m8} vs {m64}");
    assert_eq!(q["auto_k"]["chosen"], best);
    assert_eq!(
        (&rep["donor"]["k"], &q["k"]),
        (&Value::from(best), &Value::from(best))
    );
    // The rows are those of --omp-k 8.
    let (code, _, err) = extend(&tmp_out(&tmp, "k8"), &["--omp-k", "8"]);
    assert_eq!(code, Some(0), "{err}");
    let read = |n: &str| std::fs::read(tmp_out(&tmp, n).join("model.safetensors")).unwrap();
    assert!(read("auto") == read("k8"), "auto's output is --omp-k 8's");
    // The text report says which k it took and each k's score.
    let o = run(
        "extend-embeddings",
        &[
            testdata("donor_quality/base").as_os_str(),
            "--output".as_ref(),
            tmp_out(&tmp, "text").as_os_str(),
            "--dry-run".as_ref(),
            "--tokenizer".as_ref(),
            testdata("donor_quality/merged.json").as_os_str(),
            "--init".as_ref(),
            "omp".as_ref(),
            "--donor".as_ref(),
            testdata("donor_quality/donor").as_os_str(),
            "--omp-k".as_ref(),
            "auto".as_ref(),
        ],
    );
    let text = stdout(&o);
    assert!(
        text.contains("--omp-k auto: k = 8 (held-out median embedding cosine: k 8 0.9203")
            && text.contains("held-out embedding: 15 of the shared tokens (seed 0) rebuilt from the other 285 (k = 8)")
            && text.contains("held-out head: 15"),
        "{text}"
    );
}

#[test]
fn number_and_byte_targets_from_the_donor_are_counted_and_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    // The fixture's new tokens: ten words, "2024" and the byte piece "<0x41>".
    let (code, rep, err) = extend(&tmp_out(&tmp, "o"), &["--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    let d = &rep["donor"];
    assert_eq!(
        (&d["from_donor"], &d["missing"]),
        (&Value::from(12), &Value::from(0))
    );
    assert_eq!(
        (&d["number_tokens"], &d["byte_tokens"]),
        (&Value::from(1), &Value::from(1))
    );
    let w = d["warnings"][0].as_str().unwrap();
    assert!(
        w.starts_with(
            "1 number token(s) and 1 byte token(s) are rebuilt from the donor (2024 <0x41>)"
        ),
        "{w}"
    );
}

#[test]
fn one_shared_token_gives_no_held_out_report_and_auto_says_what_it_took() {
    use ckpt_surgery::rows::donor::{plan, BaseRows, DonorRequest, Solver, K};
    use ckpt_surgery::vocab::Role;
    let d = testdata("donor_quality");
    let open = ckpt_surgery::formats::OpenOptions::default();
    let base = ckpt_surgery::formats::open_tensors(&d.join("base"), &open).unwrap();
    let matrices = [
        ("model.embed_tokens.weight".to_string(), Role::Embedding),
        ("lm_head.weight".to_string(), Role::Head),
    ];
    let (base_tok, merged, donor) = (
        d.join("base/tokenizer.json"),
        d.join("merged.json"),
        d.join("donor"),
    );
    let targets: Vec<u64> = (300..312).collect();
    let req = DonorRequest {
        donor: &donor,
        donor_tokenizer: None,
        k: K::Auto,
        seed: 0,
        base: BaseRows {
            ckpt: &base,
            matrices: &matrices,
        },
        base_tokenizer: &base_tok,
        new_tokenizer: &merged,
        loaded: None,
        // Only id 0 (<unk>) is an old row: one shared token, none can be held out.
        old_rows: 1,
        targets: &targets,
        untied_head: true,
        open: &open,
        device: ckpt_surgery::rows::device::Request::Cpu,
        solver: Solver::Omp,
    };
    let (_, report) = plan(&req, &mut Vec::new(), &mut Vec::new()).unwrap();
    assert_eq!(report.shared_tokens, 1);
    assert!(report.quality.is_none());
    assert_eq!(
        report.k, 1,
        "auto's fallback 64, clipped to the one shared token"
    );
    let notes = report.notes.join("\n");
    assert_eq!(
        notes.matches("none can be held out").count(),
        1,
        "said once: {notes}"
    );
    assert!(
        notes.contains("--omp-k auto had nothing to measure: k = 64"),
        "{notes}"
    );
}
