//! A Megatron-LM legacy save with the distributed optimizer (testdata/megatron/legacy_tp2_distrib,
//! written by megatron-core 0.16.1 on CPU: testdata/megatron_legacy_save.py ROOT
//! --distributed-optimizer --float16-module; TP = 2, bf16, each rank folder's distrib_optim.pt
//! one buffer of flat fp32 state): sanitize-checkpoint re-lays it with the vocabulary.

mod common;

use ckpt_surgery::formats::megatron::distrib_optim::DistribOptim;
use ckpt_surgery::formats::megatron::legacy::Legacy;
use common::{copy_tree, one_line_refusal, patch_zip_record, run_json, testdata};
use std::path::Path;

const ROOT: &str = "megatron/legacy_tp2_distrib";
const RANKS: [&str; 2] = ["mp_rank_00", "mp_rank_01"];
const VOCAB: [&str; 2] = ["embedding.word_embeddings.weight", "output_layer.weight"];

fn sanitize(root: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mut args: Vec<&std::ffi::OsStr> =
        vec![root.as_os_str(), "--output".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    run_json("sanitize-checkpoint", &args)
}

fn distrib_path(root: &Path, rank: &str) -> std::path::PathBuf {
    root.join("iter_0000010")
        .join(rank)
        .join("distrib_optim.pt")
}

/// Rank `rank`'s one buffer: its numel_unpadded and the three states' bytes.
fn states(root: &Path, rank: &str) -> (u64, [Vec<u8>; 3]) {
    let d = DistribOptim::open(&distrib_path(root, rank), &Default::default()).unwrap();
    let [b] = &d.buffers[..] else {
        panic!("{} buffers", d.buffers.len())
    };
    let s = [0, 1, 2].map(|i| d.state(b, i).unwrap().try_bytes().unwrap().into_owned());
    (b.numel, s)
}

/// The test's own layout of rank 0's model (all bf16: one buffer): parameters walked in reverse
/// module order, each start rounded up to 64 elements. (name, start, elements) in module order.
fn layout(root: &Path) -> Vec<(String, u64, u64)> {
    let l = Legacy::open(root, &Default::default()).unwrap();
    let params: Vec<(String, u64)> = l.ranks[0]
        .file
        .tensor_refs()
        .filter(|t| t.name.starts_with("model.") && !t.name.ends_with("_extra_state"))
        .map(|t| {
            (
                t.name["model.".len()..].to_string(),
                t.shape.iter().product(),
            )
        })
        .collect();
    let mut at = 0u64;
    let mut out = Vec::new();
    for (name, n) in params.into_iter().rev() {
        let start = at.next_multiple_of(64);
        out.push((name, start, n));
        at = start + n;
    }
    out.reverse();
    out
}

fn bf16_rows_as_f32(b: &[u8]) -> Vec<u8> {
    b.chunks(2).flat_map(|x| [0, 0, x[0], x[1]]).collect()
}

/// A rank's bf16 weight `name` (its rows), from its model_optim_rng.pt.
fn weight(root: &Path, rank: usize, name: &str) -> Vec<u8> {
    let l = Legacy::open(root, &Default::default()).unwrap();
    let path = format!("model.{name}");
    let t = l.ranks[rank].file.tensor_refs().find(|t| t.name == path);
    t.unwrap().try_bytes().unwrap().into_owned()
}

#[test]
fn sanitize_re_lays_the_distributed_optimizers_state_with_the_rows() {
    // 84 -> 150 tokens: 128 -> 256 padded rows, each TP rank's vocabulary shard 64 -> 128 rows
    // of 4. Every other parameter's state moves bit for bit to its new offset; the vocabulary
    // rows' states are the old rows (rank 1's old rows now on rank 0) then the new rows: main
    // params the new bf16 weights widened, moments zero; gaps zero.
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (testdata(ROOT), tmp.path().join("out"));
    let (code, doc, err) = sanitize(&src, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    let relaid: Vec<(String, u64, u64)> = doc["distrib_optim"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let n = |i: usize| b["numel"][i].as_u64().unwrap();
            (b["file"].as_str().unwrap().to_string(), n(0), n(1))
        })
        .collect();
    let want: Vec<(String, u64, u64)> = RANKS
        .iter()
        .map(|r| (format!("{r}/distrib_optim.pt"), 1088, 1600))
        .collect();
    assert_eq!(relaid, want, "{doc}");
    let (old_l, new_l) = (layout(&src), layout(&out));
    let olds: Vec<_> = RANKS.iter().map(|r| states(&src, r)).collect();
    let news: Vec<_> = RANKS.iter().map(|r| states(&out, r)).collect();
    for (rank, (numel, new)) in news.iter().enumerate() {
        assert_eq!(*numel, 1600);
        let (_, old) = &olds[rank];
        let mut covered = vec![false; 1600];
        for ((name, os, n), (name2, ns, nn)) in old_l.iter().zip(&new_l) {
            assert_eq!(name, name2);
            covered[*ns as usize..(ns + nn) as usize].fill(true);
            let seg = |b: &[u8], at: u64, len: u64| {
                b[(at * 4) as usize..((at + len) * 4) as usize].to_vec()
            };
            for s in 0..3 {
                if !VOCAB.contains(&name.as_str()) {
                    assert_eq!(
                        seg(&new[s], *ns, *nn),
                        seg(&old[s], *os, *n),
                        "{name} state {s}"
                    );
                    continue;
                }
                // Global rows 128r..128r+128 of the new table: old rows 0..128 are rank 0's
                // then rank 1's old shard (64 rows each), rows 128.. new.
                let rows = seg(&new[s], *ns, *nn);
                let row = 4 * 4;
                if rank == 0 {
                    assert_eq!(
                        rows[..64 * row],
                        seg(&olds[0].1[s], *os, *n)[..],
                        "{name} {s}"
                    );
                    assert_eq!(
                        rows[64 * row..],
                        seg(&olds[1].1[s], *os, *n)[..],
                        "{name} {s}"
                    );
                } else if s == 0 {
                    assert_eq!(rows, bf16_rows_as_f32(&weight(&out, 1, name)), "{name}");
                } else {
                    assert!(rows.iter().all(|&b| b == 0), "{name} state {s}");
                }
            }
        }
        // Everything no parameter covers is an alignment gap: zero in every state.
        for (i, c) in covered.iter().enumerate().filter(|(_, c)| !**c) {
            assert!(
                !c && new.iter().all(|s| s[i * 4..i * 4 + 4] == [0; 4]),
                "gap element {i}"
            );
        }
        assert!(covered.iter().any(|c| !c), "the bf16 norms leave gaps");
    }
    let r = run_json("inspect-checkpoint", &[out.as_os_str()]).1;
    assert_eq!(
        r["checkpoints"][0]["optimizer"]["form"],
        "DistributedOptimizer (parameter state in distrib_optim.pt)"
    );
}

#[test]
fn growing_then_cutting_back_gives_the_inputs_state_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let (grown, back) = (tmp.path().join("grown"), tmp.path().join("back"));
    let (code, _, err) = sanitize(&testdata(ROOT), &grown, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = sanitize(&grown, &back, &["--vocab-rows", "84", "--allow-shrink"]);
    assert_eq!(code, Some(0), "{err}");
    for r in RANKS {
        assert_eq!(states(&back, r), states(&testdata(ROOT), r), "{r}");
    }
}

#[test]
fn a_distrib_optim_whose_main_params_are_not_the_weights_is_refused_naming_the_parameter() {
    // Rank 1's main params with one element changed: the layout's proof (every parameter's
    // main copy rounds to its weight) fails there; nothing is written.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    copy_tree(&testdata(ROOT), &root);
    let p = distrib_path(&root, RANKS[1]);
    let bytes = std::fs::read(&p).unwrap();
    let (_, [main, _, _]) = states(&testdata(ROOT), RANKS[1]);
    // An element of the last 64 (output_layer's first rows: the layout starts with it).
    let at = 8 * 4;
    let mut to = main[at..at + 8].to_vec();
    to[3] ^= 0x40;
    std::fs::write(
        &p,
        patch_zip_record(&bytes, "distrib_optim/data/0", &main[at..at + 8], &to),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let msg = one_line_refusal(
        {
            let (c, d, e) = sanitize(&root, &out, &["--vocab-rows", "150"]);
            (c, &d.clone(), &e.clone())
        },
        &[
            "mp_rank_01/distrib_optim.pt",
            "main params",
            "--optimizer drop",
        ],
    );
    assert!(msg.contains("output_layer.weight"), "{msg}");
    assert!(!out.exists());
    // check-vocab names it too (and passes the fixture itself).
    let (code, doc, err) = run_json("check-vocab", &[root.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let f = &doc["findings"].as_array().unwrap();
    assert!(
        f.iter().any(|f| f["check"] == "optimizer-vs-weights"
            && f["message"].as_str().unwrap().contains("main params")),
        "{doc}"
    );
    let (code, doc, err) = run_json("check-vocab", &[testdata(ROOT).as_os_str()]);
    assert_eq!(
        (code, &doc["errors"]),
        (Some(0), &serde_json::json!(0)),
        "{err}{doc}"
    );
}

#[test]
fn a_distrib_optim_in_the_format_before_coalesced_buckets_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    copy_tree(&testdata(ROOT), &root);
    for r in RANKS {
        let p = distrib_path(&root, r);
        let bytes = std::fs::read(&p).unwrap();
        let patched = patch_zip_record(
            &bytes,
            "distrib_optim/data.pkl",
            b"buckets_coalesced",
            b"buckets_coalesceX",
        );
        std::fs::write(&p, patched).unwrap();
    }
    let out = tmp.path().join("out");
    let (c, d, e) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    one_line_refusal(
        (c, &d, &e),
        &["distrib_optim.pt", "buckets_coalesce", "--optimizer drop"],
    );
    assert!(!out.exists());
}

#[test]
fn check_vocab_fix_grows_the_save_to_its_tokenizer_keeping_the_distributed_optimizer() {
    // A 200-token tokenizer against the 128-row table: check-vocab's fix (sanitize-checkpoint
    // to the tokenizer, 256 padded rows, distrib_optim.pt re-laid) carried out by --fix gives
    // the files the printed command gives, and the output checks clean.
    let tok = testdata("tokenizers/amharic_wordpiece.json");
    let t = tok.to_str().unwrap();
    let (code, doc, err) = run_json(
        "check-vocab",
        &[
            testdata(ROOT).as_os_str(),
            "--tokenizer".as_ref(),
            t.as_ref(),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    let fix = doc["findings"][0]["fix"].as_str().unwrap();
    assert!(!fix.contains("--optimizer drop"), "{fix}");
    let tmp = tempfile::tempdir().unwrap();
    let (printed, fixed) = (tmp.path().join("printed"), tmp.path().join("fixed"));
    let (code, err) = common::run_fix(fix, &printed);
    assert_eq!(code, Some(0), "{err}");
    let args = [
        testdata(ROOT).into_os_string(),
        "--tokenizer".into(),
        t.into(),
        "--fix".into(),
        "--output".into(),
        fixed.clone().into_os_string(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let (code, doc, err) = run_json("check-vocab", &args);
    assert_eq!(
        (code, &doc["errors"]),
        (Some(0), &serde_json::json!(0)),
        "{err}{doc}"
    );
    for r in RANKS {
        assert_eq!(states(&fixed, r).0, 1600);
        assert_eq!(states(&fixed, r), states(&printed, r), "{r}");
    }
}

#[test]
fn a_re_lay_after_the_check_reads_no_main_copy_again() {
    // check-vocab proves every rank's state, then its dry run re-lays the same files: the
    // re-lay takes the layouts the proof gave, without comparing every main copy again. A main
    // copy spoiled between the two shows it: the proven save's re-lay goes through, a fresh
    // open of the same files refuses them.
    use ckpt_surgery::formats::megatron::legacy_distrib::{open_all, prove_all, relay};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    copy_tree(&testdata(ROOT), &root);
    let l = Legacy::open(&root, &Default::default()).unwrap();
    prove_all(&l, &open_all(&l, &Default::default()).unwrap()).unwrap();
    let p = distrib_path(&root, RANKS[1]);
    let bytes = std::fs::read(&p).unwrap();
    let (_, [main, _, _]) = states(&root, RANKS[1]);
    let mut to = main[32..40].to_vec();
    to[3] ^= 0x40;
    let spoiled = patch_zip_record(&bytes, "distrib_optim/data/0", &main[32..40], &to);
    std::fs::write(&p, spoiled).unwrap();
    let new_rows: Vec<Vec<u8>> = l
        .vocab
        .iter()
        .map(|v| vec![0u8; (256 - v.shape[0] as usize) * v.shape[1] as usize * 2])
        .collect();
    let files = open_all(&l, &Default::default()).unwrap();
    assert!(relay(&l, &files, 256, &new_rows).is_ok());
    let fresh = Legacy::open(&root, &Default::default()).unwrap();
    let files = open_all(&fresh, &Default::default()).unwrap();
    let err = relay(&fresh, &files, 256, &new_rows)
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_ref().is_some_and(|e| e.contains("main params")),
        "{err:?}"
    );
}
