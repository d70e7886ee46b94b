//! DeepSpeed ZeRO checkpoints (issue 36): reading the flat partitions of stages 1, 2 and 3
//! against DeepSpeed's own zero_to_fp32 and safe_get_full_optimizer_state (fixtures written by
//! DeepSpeed on CPU, 2 ranks), bad input, and sanitize-checkpoint's rebuild of the partitions.

mod common;
use ckpt_surgery::formats::torch::pickle::GlobalPolicy;
use ckpt_surgery::formats::zero::{self, Zero};
use ckpt_surgery::formats::{self, Checkpoint};
use common::*;
use std::path::{Path, PathBuf};

const FIXTURES: [&str; 3] = ["zero1", "zero2_bf16", "zero3"];

fn open(p: &Path) -> Zero {
    match formats::open(p, &Default::default()).unwrap() {
        Checkpoint::Zero { zero, .. } => zero.into_zero().unwrap(),
        other => panic!("{}: opened as {}", p.display(), other.layout()),
    }
}

/// name → (shape, f32 bytes) of a safetensors reference written by generate.py.
fn reference(name: &str) -> Vec<(String, Vec<u64>, Vec<u8>)> {
    let c = formats::open_tensors(&testdata(&format!("zero/{name}")), &Default::default()).unwrap();
    c.tensors()
        .map(|t| {
            (
                t.name.to_string(),
                t.shape.to_vec(),
                t.try_bytes().unwrap().into_owned(),
            )
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn master_weights_equal_deepspeeds_zero_to_fp32_in_every_stage() {
    for name in FIXTURES {
        let z = open(&testdata(&format!("zero/{name}")));
        let want = reference(&format!("{name}.fp32.safetensors"));
        assert_eq!(z.params.len(), want.len(), "{name}");
        for (n, shape, bytes) in want {
            let p = z.param(&n).unwrap_or_else(|| panic!("{name}: {n}"));
            assert_eq!(p.shape, shape, "{name}: {n}");
            assert!(z.master(p).unwrap() == bytes, "{name}: {n} differs");
        }
    }
}

#[test]
fn moments_equal_deepspeeds_own_full_optimizer_state() {
    for name in ["zero2_bf16", "zero3"] {
        let z = open(&testdata(&format!("zero/{name}")));
        let want = reference(&format!("{name}.moments.safetensors"));
        assert_eq!(want.len(), 2 * z.params.len());
        for (n, _, bytes) in want {
            let (param, key) = n.rsplit_once('.').unwrap();
            let p = z.param(param).unwrap();
            assert!(z.moment(p, key).unwrap() == bytes, "{name}: {n} differs");
        }
    }
}

#[test]
fn layout_pins_deepspeeds_alignment_padding() {
    // Stages 1/2: group 0 holds 2997 + 9 + 3 = 3009 elements, padded to 3012 (2 x 2 ranks): 1506
    // per rank, rank 1 holding 1503 of them; group 1: 2997 → 3000, 1500 per rank, rank 1 1497.
    let z = open(&testdata("zero/zero1"));
    assert_eq!(z.flat_lens, vec![vec![1506, 1500], vec![1503, 1497]]);
    let embed = z.param("embed.weight").unwrap();
    let pieces: Vec<(usize, u64, u64)> = embed
        .pieces
        .iter()
        .map(|p| (p.rank, p.start, p.len))
        .collect();
    assert_eq!(pieces, vec![(0, 0, 1506), (1, 0, 1491)]);
    let bias = z.param("proj.bias").unwrap();
    assert_eq!((bias.pieces[0].rank, bias.pieces[0].start), (1, 1500));
    // Stage 3: each parameter split on its own: ceil(2997 / 2) = 1499, ceil(9 / 2) = 5, 2.
    let z = open(&testdata("zero/zero3"));
    assert_eq!(z.flat_lens, vec![vec![1506, 1499], vec![1506, 1499]]);
    let proj = z.param("proj.weight").unwrap();
    let pieces: Vec<(usize, u64, u64)> = proj
        .pieces
        .iter()
        .map(|p| (p.rank, p.start, p.len))
        .collect();
    assert_eq!(pieces, vec![(0, 1499, 5), (1, 1499, 4)]);
}

#[test]
fn inspect_lists_every_parameter_with_its_full_shape() {
    for name in FIXTURES {
        for path in [
            testdata(&format!("zero/{name}")),
            testdata(&format!("zero/{name}/global_step1")),
        ] {
            let (code, v, err) = run_json("inspect-checkpoint", &[path.as_os_str()]);
            assert_eq!(code, Some(0), "{err}");
            let c = &v["checkpoints"][0];
            assert_eq!(c["format"], "deepspeed-zero");
            assert_eq!(c["world_size"], 2);
            let params: Vec<(String, Vec<u64>)> = c["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_string(),
                        serde_json::from_value(p["shape"].clone()).unwrap(),
                    )
                })
                .collect();
            let want: Vec<(String, Vec<u64>)> = reference(&format!("{name}.fp32.safetensors"))
                .into_iter()
                .map(|(n, s, _)| (n, s))
                .collect();
            let mut sorted = params.clone();
            sorted.sort();
            let mut want_sorted = want.clone();
            want_sorted.sort();
            assert_eq!(sorted, want_sorted, "{name}");
        }
    }
}

#[test]
fn a_missing_rank_file_is_one_line_naming_the_rank() {
    for name in FIXTURES {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(name);
        copy_dir(&testdata(&format!("zero/{name}")), &root);
        let dir = root.join("global_step1");
        let victim = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("rank_1_mp_rank_00_optim"))
            .unwrap();
        std::fs::remove_file(&victim).unwrap();
        let o = run("inspect-checkpoint", &[root.as_os_str()]);
        assert_eq!(o.status.code(), Some(2));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("rank 1") && err.contains("missing"), "{err}");
        assert!(
            err.contains("zero_pp_rank_1_mp_rank_00_optim_states.pt"),
            "{err}"
        );
    }
}

#[test]
fn a_world_size_that_does_not_match_the_files_is_refused() {
    // A third rank's file beside a two-rank checkpoint: files of two runs mixed.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("zero1");
    copy_dir(&testdata("zero/zero1"), &root);
    let dir = root.join("global_step1");
    std::fs::copy(
        dir.join("zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        dir.join("zero_pp_rank_2_mp_rank_00_optim_states.pt"),
    )
    .unwrap();
    let o = run("inspect-checkpoint", &[root.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("rank 2") && err.contains("world size is 2"),
        "{err}"
    );
    // One rank's partition from another layout (rank 1's file where rank 0's should be): the
    // lengths do not fit the shapes over 2 ranks.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("zero1");
    copy_dir(&testdata("zero/zero1"), &root);
    let dir = root.join("global_step1");
    std::fs::copy(
        dir.join("zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        dir.join("zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    )
    .unwrap();
    let o = run("inspect-checkpoint", &[root.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("rank 0") && err.contains("world size"),
        "{err}"
    );
}

/// sanitize-checkpoint DIR --vocab-rows N --output OUT (--allow-shrink: these tests check the
/// layout's bytes both ways; the shrink rule's refusal is tested in no_silent_loss.rs).
fn sanitize(name: &str, rows: u64, out: &Path) -> serde_json::Value {
    let (code, v, err) = run_job(
        "sanitize-checkpoint",
        &testdata(&format!("zero/{name}")),
        out,
        &["--vocab-rows", &rows.to_string(), "--allow-shrink"],
    );
    assert_eq!(code, Some(0), "{err}");
    v
}

#[test]
fn grow_rebuilds_every_ranks_partitions_keeping_other_parameters_bit_identical() {
    for name in FIXTURES {
        for rows in [999 + 64, 990] {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("out");
            sanitize(name, rows, &out);
            assert!(out.join("latest").is_file() && out.join("global_step1").is_dir());
            let (a, b) = (open(&testdata(&format!("zero/{name}"))), open(&out));
            assert_eq!((b.stage, b.world), (a.stage, a.world));
            let keep = rows.min(999) as usize * 3 * 4;
            for pa in &a.params {
                let pb = b.param(&pa.name).unwrap();
                let vocab = pa.name == "embed.weight" || pa.name == "head.weight";
                let (ma, mb) = (a.master(pa).unwrap(), b.master(pb).unwrap());
                if !vocab {
                    assert_eq!(pb.shape, pa.shape);
                    assert!(ma == mb, "{name}: {} master", pa.name);
                    for k in ["exp_avg", "exp_avg_sq"] {
                        assert!(a.moment(pa, k).unwrap() == b.moment(pb, k).unwrap());
                    }
                    continue;
                }
                assert_eq!(pb.shape, vec![rows, 3]);
                assert!(ma[..keep] == mb[..keep], "{name}: old rows of {}", pa.name);
                for k in ["exp_avg", "exp_avg_sq"] {
                    let (oa, ob) = (a.moment(pa, k).unwrap(), b.moment(pb, k).unwrap());
                    assert_eq!(ob.len(), rows as usize * 12);
                    assert!(oa[..keep] == ob[..keep], "{name}: {k} old rows");
                    assert!(ob[keep..].iter().all(|&x| x == 0), "{name}: {k} new rows");
                }
                if rows > 999 {
                    check_new_rows(&a, pa, &mb, rows);
                }
            }
            check_layout(&b);
        }
    }
}

/// New master rows are the model's new rows: the column mean of the old rows as the module's
/// dtype holds it (bf16 for zero2_bf16), exactly representable in f32.
fn check_new_rows(a: &Zero, p: &ckpt_surgery::formats::zero::Param, master: &[u8], rows: u64) {
    let old: Vec<f64> = match a.module_tensor(&p.name) {
        Some(t) => {
            let b = t.try_bytes().unwrap();
            let mut v = vec![0f64; 999 * 3];
            ckpt_surgery::dtype::decode_row_f64(t.dtype, &b, &mut v).unwrap();
            v
        }
        None => f32s(&a.master(p).unwrap())
            .iter()
            .map(|&x| x as f64)
            .collect(),
    };
    let mean: Vec<f64> = (0..3)
        .map(|c| (0..999).map(|r| old[r * 3 + c]).sum::<f64>() / 999.0)
        .collect();
    let new = f32s(&master[999 * 12..]);
    assert_eq!(new.len(), (rows as usize - 999) * 3);
    for (i, x) in new.iter().enumerate() {
        // One rounding to the module dtype (bf16: 8 bits of mantissa).
        let m = mean[i % 3];
        assert!(
            (*x as f64 - m).abs() <= m.abs() * 1e-2 + 1e-6,
            "{}: {x} vs {m}",
            p.name
        );
        assert_eq!(*x, new[i % 3], "every new row is the same mean row");
    }
}

/// The written partitions have DeepSpeed's lengths for the new shapes: stage 1/2 groups padded
/// to a multiple of 2 x world size (moments keep the padding, master weights do not), stage 3
/// parameters split into ceil(numel / world) parts.
fn check_layout(z: &Zero) {
    let numel: Vec<u64> = z
        .groups
        .iter()
        .map(|g| g.iter().map(|n| z.param(n).unwrap().numel()).sum())
        .collect();
    for r in 0..z.world {
        for (k, &n) in numel.iter().enumerate() {
            let master = z.flat(r, &z.master_path(k)).unwrap().shape[0];
            let moment = z.flat(r, &z.moment_path(k, "exp_avg")).unwrap().shape[0];
            if z.stage <= 2 {
                let (total, part) = zero::stage12_partition(n, 2);
                assert_eq!(total % 4, 0);
                assert_eq!(moment, part);
                assert_eq!(master, n.saturating_sub(r as u64 * part).min(part));
            } else {
                let want: u64 = z.groups[k]
                    .iter()
                    .map(|x| z.param(x).unwrap().numel().div_ceil(2))
                    .sum();
                assert_eq!((master, moment), (want, want));
            }
        }
    }
}

#[test]
fn stage12_bookkeeping_follows_the_new_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    sanitize("zero2_bf16", 1063, &out);
    // Group 0: 3189 + 9 + 3 = 3201 → 3204, 1602 per rank; rank 1 holds 1599 (padding 3).
    let z = open(&out);
    let f = &z.optim[1];
    let p = &f.pickle;
    let osd = p.get(p.root, "optimizer_state_dict").unwrap();
    let pads = canonical(p, p.get(osd, "group_paddings").unwrap(), "");
    assert_eq!(pads, serde_json::json!([{"int": "3"}, {"int": "3"}]));
    let maps = canonical(p, p.get(osd, "param_slice_mappings").unwrap(), "");
    let text = maps.to_string();
    // Rank 1's part of group 0 starts at element 1602: embed's last 3189 - 1602 = 1587 elements.
    assert!(text.contains("1587"), "{text}");
    // param_shapes (read back by the reader) says the new shape.
    assert_eq!(z.param("embed.weight").unwrap().shape, vec![1063, 3]);
    // The module's tensor grew with the optimizer.
    assert_eq!(z.module_tensor("embed.weight").unwrap().shape, &[1063, 3]);
}

#[test]
fn sanitize_output_is_written_whole_or_not_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("zero1");
    copy_dir(&testdata("zero/zero1"), &root);
    std::fs::remove_file(root.join("global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt"))
        .unwrap();
    let out = tmp.path().join("out");
    let (code, _, err) = run_job(
        "sanitize-checkpoint",
        &root,
        &out,
        &["--vocab-rows", "1063"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("rank 1"), "{err}");
    let left: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        left,
        vec![root.clone()],
        "nothing written, no temp folder left"
    );
}

/// A copy of fixture `name` whose model states hold `module.embed.weight` grown to 1063 rows (row
/// 5 repeated as the new rows) while param_shapes and every rank's partitions stay at 999: the
/// model was resized and the optimizer saved as it was (seed 001's state, in ZeRO form).
fn resized_model_only(name: &str, tmp: &Path) -> PathBuf {
    use ckpt_surgery::formats::torch::writer::{StoragePayload, TorchLayout};
    use ckpt_surgery::formats::torch::TorchFile;
    let root = tmp.join(name);
    copy_dir(&testdata(&format!("zero/{name}")), &root);
    let path = root.join("global_step1/mp_rank_00_model_states.pt");
    let policy = zero::policy(&GlobalPolicy::default());
    let f = TorchFile::open(&path, &policy).unwrap();
    let t = f
        .tensor_refs()
        .find(|t| t.name == "module.embed.weight")
        .unwrap();
    let mut bytes = t.try_bytes().unwrap().into_owned();
    let row = bytes.len() / 999;
    let five = bytes[5 * row..6 * row].to_vec();
    for _ in 0..64 {
        bytes.extend_from_slice(&five);
    }
    let mut plan = TorchLayout::try_identity(&f).unwrap();
    plan.replace_rows(
        &f,
        "module.embed.weight",
        1063,
        StoragePayload::Bytes(bytes),
    )
    .unwrap();
    let tmp_file = tmp.join("model_states.pt");
    ckpt_surgery::formats::torch::write::write_torch(&plan, &tmp_file, &[path.as_path()], &policy)
        .unwrap();
    drop(f);
    std::fs::rename(&tmp_file, &path).unwrap();
    root
}

#[test]
fn check_vocab_finds_a_model_resized_without_its_optimizer_and_the_fix_works() {
    for name in ["zero1", "zero2_bf16"] {
        let tmp = tempfile::tempdir().unwrap();
        let root = resized_model_only(name, tmp.path());
        let (code, v, err) = run_json("check-vocab", &[root.as_os_str()]);
        assert_eq!(code, Some(1), "{err}");
        let f = &v["findings"][0];
        assert_eq!(f["check"], "zero-optimizer-rows");
        let msg = f["message"].as_str().unwrap();
        assert!(
            msg.contains("[1063, 3]") && msg.contains("[999, 3]"),
            "{msg}"
        );
        let fix = f["fix"].as_str().unwrap();
        assert!(fix.contains("--vocab-rows 1063"), "{fix}");
        let out = tmp.path().join("fixed");
        let (code, err) = run_fix(fix, &out);
        assert_eq!(code, Some(0), "{err}");
        let (code, v, err) = run_json("check-vocab", &[out.as_os_str()]);
        assert_eq!(code, Some(0), "{err} {v}");
        // The model's rows are kept, and the master weights' new rows are exactly the model's.
        let (a, b) = (open(&root), open(&out));
        let module = a.module_tensor("embed.weight").unwrap();
        assert!(
            b.module_tensor("embed.weight")
                .unwrap()
                .try_bytes()
                .unwrap()
                == module.try_bytes().unwrap()
        );
        let master = f32s(&b.master(b.param("embed.weight").unwrap()).unwrap());
        let mut want = vec![0f64; 1063 * 3];
        ckpt_surgery::dtype::decode_row_f64(module.dtype, &module.try_bytes().unwrap(), &mut want)
            .unwrap();
        for (i, x) in master.iter().enumerate().skip(999 * 3) {
            assert_eq!(*x as f64, want[i], "{name}: element {i}");
        }
        let old = a.master(a.param("embed.weight").unwrap()).unwrap();
        let new = b.master(b.param("embed.weight").unwrap()).unwrap();
        assert!(old[..999 * 12] == new[..999 * 12]);
    }
}

#[test]
fn check_vocab_finds_a_tokenizer_larger_than_the_table_and_the_fix_works() {
    let tok = testdata("tokenizers/chatterbox_base.json");
    let root = testdata("zero/zero3");
    let (code, v, err) = run_json(
        "check-vocab",
        &[root.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
    );
    assert_eq!(code, Some(1), "{err}");
    let f = &v["findings"][0];
    assert_eq!(f["check"], "tokenizer-rows");
    let fix = f["fix"].as_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fixed");
    let (code, err) = run_fix(fix, &out);
    assert_eq!(code, Some(0), "{err}");
    let (code, v, err) = run_json(
        "check-vocab",
        &[out.as_os_str(), "--tokenizer".as_ref(), tok.as_os_str()],
    );
    assert_eq!(code, Some(0), "{err} {v}");
    let (code, _, err) = run_json("check-vocab", &[root.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_moment_whose_length_does_not_fit_the_layout_is_refused_naming_it() {
    use ckpt_surgery::formats::torch::writer::{StoragePayload, TorchLayout};
    use ckpt_surgery::formats::torch::TorchFile;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("zero3");
    copy_dir(&testdata("zero/zero3"), &root);
    let path = root.join("global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    let policy = zero::policy(&GlobalPolicy::default());
    let f = TorchFile::open(&path, &policy).unwrap();
    let name = "optimizer_state_dict.optimizer_state_dict.state.1.exp_avg_sq";
    let mut plan = TorchLayout::try_identity(&f).unwrap();
    plan.replace_rows(&f, name, 1400, StoragePayload::Bytes(vec![0; 1400 * 4]))
        .unwrap();
    let tmp_file = tmp.path().join("optim.pt");
    ckpt_surgery::formats::torch::write::write_torch(&plan, &tmp_file, &[path.as_path()], &policy)
        .unwrap();
    drop(f);
    std::fs::rename(&tmp_file, &path).unwrap();
    let o = run("inspect-checkpoint", &[root.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(name) && err.contains("1400") && err.contains("1499"),
        "{err}"
    );
}

#[test]
fn sanitize_carries_the_roots_other_files_and_reports_other_tags_left_out() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("in");
    copy_dir(&testdata("zero/zero1"), &root);
    copy_dir(&root.join("global_step1"), &root.join("global_step0"));
    let script = root.join("zero_to_fp32.py");
    std::fs::write(&script, "# DeepSpeed's script\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o744)).unwrap();
    let out = tmp.path().join("out");
    let (code, v, err) = run_job(
        "sanitize-checkpoint",
        &root,
        &out,
        &["--vocab-rows", "1000"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["left_out"], serde_json::json!(["global_step0"]));
    assert!(!out.join("global_step0").exists());
    assert_eq!(
        std::fs::read_to_string(out.join("latest")).unwrap(),
        "global_step1"
    );
    let carried = out.join("zero_to_fp32.py");
    assert_eq!(
        std::fs::read(&carried).unwrap(),
        std::fs::read(&script).unwrap()
    );
    let mode = std::fs::metadata(&carried).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o744);
}

#[test]
fn dry_run_reports_the_resize_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (code, v, err) = run_job(
        "sanitize-checkpoint",
        &testdata("zero/zero3"),
        &out,
        &["--vocab-rows", "1063", "--dry-run"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["stage"], 3);
    assert_eq!(v["resized"][0]["new_shape"], serde_json::json!([1063, 3]));
    assert_eq!(v["resized"].as_array().unwrap().len(), 2);
    assert!(!out.exists());
}

/// A Hugging Face Trainer checkpoint of a DeepSpeed run: the save root `name` with the
/// consolidated weights (DeepSpeed's own fp32 view of its parameters; `weights: false`: ZeRO-3
/// saved none), config.json and the Trainer's files beside `global_step*/`.
fn trainer_root(name: &str, tmp: &Path, weights: bool) -> PathBuf {
    let root = tmp.join(format!("{name}_{weights}_trainer"));
    copy_dir(&testdata(&format!("zero/{name}")), &root);
    if weights {
        let w = testdata(&format!("zero/{name}.fp32.safetensors"));
        std::fs::copy(w, root.join("model.safetensors")).unwrap();
    }
    std::fs::write(root.join("config.json"), br#"{"vocab_size": 999}"#).unwrap();
    std::fs::write(root.join("trainer_state.json"), br#"{"global_step": 1}"#).unwrap();
    root
}

/// sanitize-checkpoint on a DeepSpeed run's Trainer checkpoint grows the weights beside
/// `global_step*/` and config.json with the ZeRO state, in one folder: none of them is left
/// sized for the old vocabulary (the weights' new rows are the ZeRO model's, in their dtype).
#[test]
fn sanitize_grows_a_deepspeed_trainer_checkpoints_weights_and_config_with_its_zero_state() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, weights) in [("zero2_bf16", true), ("zero3", true), ("zero3", false)] {
        let root = trainer_root(name, tmp.path(), weights);
        let out = tmp.path().join(format!("{name}_{weights}_out"));
        let (code, _, err) = run_job(
            "sanitize-checkpoint",
            &root,
            &out,
            &["--vocab-rows", "1003"],
        );
        assert_eq!(code, Some(0), "{name}: {err}");
        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(config["vocab_size"], 1003, "{name}");
        assert_eq!(
            std::fs::read(out.join("trainer_state.json")).unwrap(),
            std::fs::read(root.join("trainer_state.json")).unwrap()
        );
        let z = open(&out);
        assert!(
            z.params.iter().all(|p| p.shape[0] != 999),
            "{name}: ZeRO grown"
        );
        assert_eq!(out.join("model.safetensors").exists(), weights, "{name}");
        if !weights {
            continue;
        }
        let (a, b) = (
            std::fs::read(root.join("model.safetensors")).unwrap(),
            std::fs::read(out.join("model.safetensors")).unwrap(),
        );
        let (a, b) = (
            safetensors::SafeTensors::deserialize(&a).unwrap(),
            safetensors::SafeTensors::deserialize(&b).unwrap(),
        );
        for (n, before) in a.tensors() {
            let after = b.tensor(&n).unwrap();
            if before.shape()[0] != 999 {
                assert_eq!(after.data(), before.data(), "{name}: {n}");
                continue;
            }
            assert_eq!(after.shape(), &[1003, 3], "{name}: {n}");
            assert_eq!(
                &after.data()[..999 * 12],
                before.data(),
                "{name}: {n} old rows"
            );
            // The new rows: the ZeRO model's (its master copy holds them exactly in f32).
            let p = z.param(&n).unwrap();
            let master = z.master(p).unwrap();
            assert_eq!(
                &after.data()[999 * 12..],
                &master[999 * 12..],
                "{name}: {n} new rows"
            );
        }
    }
}
