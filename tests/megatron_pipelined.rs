//! A Megatron-Core `torch_dist` save with pipeline stages and data-parallel replicas, its
//! distributed-optimizer state in the default `dp_reshardable` layout
//! (testdata/megatron/tp2_pp2_dp3_bf16: megatron-core 0.16.1's own save of a bf16 run at TP 2 x
//! PP 2 x DP 3, one layer per stage, by `testdata/megatron_save.py ROOT dp_reshardable bf16 2
//! --dp 3 --bucket-size 200`). Group `stage x 2 + tp` holds its stage's parameters in flat fp32
//! buckets: with overlap_grad_reduce the first stage's close at 200 elements, so stage 0's
//! groups 0 and 1 have two (bucket_idx_0: the layer's fc2, fc1, norm and qkv; bucket_idx_1: its
//! proj, norm and the embedding), stage 1's groups 2 and 3 one (the output layer first;
//! Megatron buckets the first stage only). Each bucket is saved by three replicas, a third
//! each, so a parameter across a third's end is two chunks. sanitize-checkpoint re-lays the
//! buckets that hold a vocabulary matrix and carries the others over.

mod common;

use ckpt_surgery::formats::dcp::ItemKind;
use ckpt_surgery::formats::megatron::{buckets, Megatron};
use common::{
    copy_tree, one_line_refusal, patch_megatron_common, run_fix, run_job, run_json, testdata,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FIXTURE: &str = "megatron/tp2_pp2_dp3_bf16";
const STATES: [&str; 3] = ["param", "exp_avg", "exp_avg_sq"];
/// Each stage's vocabulary matrix.
const VOCAB: [&str; 2] = ["embedding.word_embeddings.weight", "output_layer.weight"];

/// The bucket rule of `m`'s run, from its common.pt.
fn rule(m: &Megatron) -> ckpt_surgery::formats::megatron::buckets::Rule {
    use ckpt_surgery::formats::megatron::relay;
    relay::rule(m, relay::run_args(m, &Default::default()).unwrap())
}

fn sanitize(root: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    run_job("sanitize-checkpoint", root, out, extra)
}

fn megatron(root: &Path) -> Megatron {
    match ckpt_surgery::formats::open(root, &Default::default()).unwrap() {
        ckpt_surgery::formats::Checkpoint::Megatron(m) => *m,
        _ => panic!("{} is not read as Megatron", root.display()),
    }
}

fn bucket(g: u64, index: u64, state: &str) -> String {
    format!("optimizer.distributed.dp_group_idx_{g}.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_{index}.{state}")
}

/// The buckets that hold a vocabulary matrix: stage 0's bucket_idx_1, stage 1's bucket_idx_0.
const RELAID: [(u64, u64); 4] = [(0, 1), (1, 1), (2, 0), (3, 0)];

/// Every tensor item's whole bytes, read by the library's Megatron reader.
fn tensors(m: &Megatron) -> BTreeMap<String, Vec<u8>> {
    m.dcp
        .items
        .iter()
        .filter(|i| matches!(i.kind, ItemKind::Tensor { .. }))
        .map(|i| (i.fqn.clone(), m.dcp.tensor_bytes(i).unwrap()))
        .collect()
}

/// Item `fqn`'s chunks of a 1-D (bucket) tensor as byte ranges, in offset order.
fn chunks(m: &Megatron, fqn: &str) -> Vec<std::ops::Range<usize>> {
    let Some(ItemKind::Tensor { chunks, .. }) = m.dcp.item(fqn).map(|i| &i.kind) else {
        panic!("no tensor '{fqn}'");
    };
    let mut v: Vec<_> = chunks
        .iter()
        .map(|c| {
            let start = c.offsets[0] as usize * 4;
            start..start + c.elements() as usize * 4
        })
        .collect();
    v.sort_by_key(|r| r.start);
    v
}

/// The per-bucket sizes objects of every group.
fn numels(m: &Megatron) -> Vec<Vec<u64>> {
    (0..4)
        .flat_map(|g| ["per_bucket_numel", "per_bucket_numel_unpadded"].map(move |w| (g, w)))
        .map(|(g, w)| {
            let key = format!("optimizer.distributed.dp_group_idx_{g}.{w}");
            let saved = buckets::per_buffer_numel(&m.dcp, &key).unwrap();
            let [one] = &saved[..] else {
                panic!("{key}: {} buffers", saved.len())
            };
            one.sizes.clone()
        })
        .collect()
}

/// Group `g`'s state `state` per parameter ((fqn, layer) -> bytes), over all its buckets, by
/// the layout the library proved against every chunk of `m`.
fn by_param(m: &Megatron, g: u64, state: &str) -> BTreeMap<(String, Option<u64>), Vec<u8>> {
    let bs = buckets::buckets(&m.dcp, rule(m)).unwrap();
    let params = buckets::params(&m.dcp, false).unwrap();
    let mut out = BTreeMap::new();
    for b in bs.iter().filter(|b| b.group == g) {
        let name = format!("{}.{state}", b.prefix);
        let bytes = m.dcp.tensor_bytes(m.dcp.item(&name).unwrap()).unwrap();
        for s in &b.segments {
            let Some(p) = s.param.map(|i| &params[i]) else {
                continue;
            };
            let range = s.start as usize * 4..(s.start + s.len) as usize * 4;
            out.insert((p.fqn.clone(), p.layer), bytes[range].to_vec());
        }
    }
    out
}

/// Whether some chunk of bucket item `name` ends inside a parameter, where a replica's third
/// of the bucket (its saved `per_bucket_numel` / 3) ends, and none crosses such an end.
fn cut_at_shards(m: &Megatron, (group, index): (u64, u64), state: &str) -> bool {
    let name = &bucket(group, index, state);
    let key = format!("optimizer.distributed.dp_group_idx_{group}.per_bucket_numel");
    let shard = buckets::per_buffer_numel(&m.dcp, &key).unwrap()[0].sizes[index as usize] / 3;
    let bs = buckets::buckets(&m.dcp, rule(m)).unwrap();
    let b = bs.iter().find(|b| name.starts_with(&b.prefix)).unwrap();
    let ranges: Vec<_> = chunks(m, name)
        .into_iter()
        .map(|r| (r.start / 4, r.end / 4))
        .collect();
    let shard = shard as usize;
    assert!(
        ranges.iter().all(|(s, e)| s / shard == (e - 1) / shard),
        "{name}: a chunk crosses a third's end"
    );
    ranges.len() > b.segments.len()
}

#[test]
fn sanitize_checkpoint_relays_each_pipeline_stages_buckets_moving_rows_across_tp_ranks() {
    // 84 -> 150 tokens: 128 -> 256 rows, 64 -> 128 per TP rank. In each stage's two groups the
    // vocabulary matrix's part grows from 64 to 128 rows of 4: TP rank 0's is the old rows
    // 0..128, its own old part then rank 1's; rank 1's is rows 128..256, all new (main params:
    // the new bf16 weight rows as f32; moments zero). Every other parameter's part is the
    // input's, bit for bit, and every other tensor (stage 0's bucket_idx_0 among them) is the
    // input's. The re-laid chunks are cut where each replica's third of the new bucket ends,
    // as Megatron saves them (stage 0's embedding, 128..640 of 768, at 256 and 512; stage 1's
    // output layer, 0..512 of 1152, at 384; in the input, stage 0's qkv, 192..384 of 384, at
    // 256).
    let tmp = tempfile::tempdir().unwrap();
    let (root, out) = (testdata(FIXTURE), tmp.path().join("out"));
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["padded_rows"], 256, "{doc}");
    let stages = &doc["buckets"]["stages"];
    assert_eq!(doc["buckets"]["groups"], 4, "{doc}");
    assert_eq!(stages[0]["groups"], serde_json::json!([0, 1]), "{doc}");
    assert_eq!(
        (&stages[0]["stage"], &stages[0]["bucket"]),
        (&0.into(), &1.into())
    );
    assert_eq!(stages[1]["groups"], serde_json::json!([2, 3]), "{doc}");
    assert_eq!(
        (&stages[1]["stage"], &stages[1]["bucket"]),
        (&1.into(), &0.into())
    );
    let (old_m, new_m) = (megatron(&root), megatron(&out));
    let (before, after) = (tensors(&old_m), tensors(&new_m));
    for (stage, w) in (0u64..).zip(VOCAB) {
        let weight = &after[w];
        assert_eq!(weight.len(), 256 * 4 * 2, "{w}");
        // bf16 -> f32 is exact: the 16 bits on top.
        let new_rows: Vec<u8> = weight[128 * 4 * 2..]
            .chunks(2)
            .flat_map(|b| [0, 0, b[0], b[1]])
            .collect();
        assert!(new_rows.iter().any(|&x| x != 0), "{w}: mean rows");
        for s in STATES {
            let (g0, g1) = (2 * stage, 2 * stage + 1);
            let mut vocab = Vec::new();
            for g in [g0, g1] {
                let (mut old, mut new) = (by_param(&old_m, g, s), by_param(&new_m, g, s));
                let key = (w.to_string(), None);
                let (o, n) = (old.remove(&key).unwrap(), new.remove(&key).unwrap());
                assert_eq!((o.len(), n.len()), (64 * 16, 128 * 16), "{g} {s}");
                assert!(old == new, "{g} {s}: the other parameters' state");
                assert!(!old.is_empty());
                vocab.push((o, n));
            }
            assert_eq!(
                vocab[0].1,
                [&vocab[0].0[..], &vocab[1].0[..]].concat(),
                "{w} {s}"
            );
            if s == "param" {
                assert_eq!(vocab[1].1, new_rows, "{w}: new main params");
            } else {
                assert!(vocab[1].1.iter().all(|&x| x == 0), "{w} {s}: new moments");
            }
        }
    }
    assert!(cut_at_shards(&old_m, (0, 0), "param"));
    for at in RELAID {
        for s in STATES {
            assert!(cut_at_shards(&new_m, at, s), "{at:?} {s}");
        }
    }
    let relaid = |k: &String| {
        let bucket_item = RELAID
            .iter()
            .any(|&(g, i)| STATES.iter().any(|s| *k == bucket(g, i, s)));
        bucket_item || VOCAB.contains(&k.as_str())
    };
    for (k, v) in before.iter().filter(|(k, _)| !relaid(k)) {
        assert_eq!(after.get(k), Some(v), "{k}");
    }
    assert_eq!(after.len(), before.len());
    // Stage 0's bucket_idx_1: 384 -> 640 elements, its bucket_idx_0 384 as before; stage 1:
    // 772 -> 1028; padded to lcm(DP 3, 128) = 384s.
    let (s0, s1) = (
        vec![vec![384, 768], vec![384, 640]],
        vec![vec![1152], vec![1028]],
    );
    assert_eq!(numels(&new_m), [s0.clone(), s0, s1.clone(), s1].concat());
    let (code, check, err) = run_json("check-vocab", &[out.as_os_str()]);
    assert_eq!(code, Some(0), "{err} {check}");
}

#[test]
fn sanitize_checkpoint_cuts_pipelined_buckets_back_to_the_original_bytes() {
    // Grown to 256 rows, then cut back to 128 (--allow-shrink): every tensor is the input's,
    // and so is every per-bucket size.
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata(FIXTURE);
    let (grown, back) = (tmp.path().join("grown"), tmp.path().join("back"));
    let (code, _, err) = sanitize(&root, &grown, &["--vocab-rows", "150"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = sanitize(&grown, &back, &["--vocab-rows", "84", "--allow-shrink"]);
    assert_eq!(code, Some(0), "{err}");
    let (a, b) = (megatron(&root), megatron(&back));
    assert!(tensors(&a) == tensors(&b));
    assert_eq!(numels(&a), numels(&b));
}

/// The fixture copied into `tmp` with its args' pipeline_model_parallel_size patched to 1.
fn copied_one_stage(tmp: &Path) -> PathBuf {
    let root = tmp.join("run");
    copy_tree(&testdata(FIXTURE), &root);
    patch_megatron_common(
        &root,
        b"pipeline_model_parallel_sizeq\x14K\x02",
        b"pipeline_model_parallel_sizeq\x14K\x01",
    );
    root
}

#[test]
fn pipelined_buckets_whose_args_say_another_stage_count_are_refused_by_name() {
    // The args say PP 1 but the buckets are TP 2 x PP 2 groups: which stage's parameters a
    // bucket holds is not what the run says. Refused in one line naming both, nothing
    // written; with --optimizer drop it is resized.
    let tmp = tempfile::tempdir().unwrap();
    let root = copied_one_stage(tmp.path());
    let out = tmp.path().join("out");
    let (code, doc, err) = sanitize(&root, &out, &["--vocab-rows", "150"]);
    let needles = [
        "pipeline_model_parallel_size 1",
        "TP 2 x PP 2",
        "--optimizer drop",
    ];
    one_line_refusal((code, &doc, &err), &needles);
    assert!(!out.exists());
    let (code, _, err) = sanitize(&root, &out, &["--vocab-rows", "150", "--optimizer", "drop"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(megatron(&out).optimizer.form.is_none());
}

#[test]
fn check_vocab_fixes_a_pipelined_save_keeping_its_optimizer_state() {
    // A tokenizer larger than the table: the fix check-vocab prints keeps the buckets (no
    // --optimizer drop), and it works.
    let tmp = tempfile::tempdir().unwrap();
    let root = testdata(FIXTURE);
    let tok = testdata("tokenizers/amharic_wordpiece.json");
    let (code, doc, err) = run_json(
        "check-vocab",
        &[root.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
    );
    assert_eq!(code, Some(1), "{err} {doc}");
    let fix = doc["findings"][0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("sanitize-checkpoint") && !fix.contains("--optimizer drop"),
        "{fix}"
    );
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fix, &out);
    assert_eq!(code, Some(0), "{fix}: {err}");
    assert_eq!(
        megatron(&out).optimizer.form.as_deref(),
        Some("dp_reshardable")
    );
    let (code, after, err) = run_json(
        "check-vocab",
        &[out.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
    );
    assert_eq!(code, Some(0), "{err} {after}");
}

#[test]
fn inspect_checkpoint_names_the_stages_and_replicas_of_a_pipelined_save() {
    // Two stages shown by the optimizer's groups and by the args, three replicas by the args.
    let root = testdata(FIXTURE);
    let (code, doc, err) = run_json("inspect-checkpoint", &[root.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let p = &doc["checkpoints"][0]["parallel"];
    assert_eq!(
        (&p["pipeline_parallel"], &p["args_pipeline_parallel"]),
        (&2.into(), &2.into()),
        "{p}"
    );
    assert_eq!(p["args_data_parallel"], 3, "{p}");
    let o = common::run("inspect-checkpoint", &[root.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("pipeline 2 (optimizer groups; args 2), data 3 (args)"),
        "{text}"
    );
}
