//! The writer: round trips of every fixture, refusal to overwrite inputs, atomic replacement.

mod common;
use ckpt_surgery::error::Overlap;
use ckpt_surgery::formats::safetensors::write::{
    write_safetensors, Payload, PlannedTensor, SafetensorsLayout,
};
use ckpt_surgery::formats::sharded::write::{write_sharded, ShardOut};
use ckpt_surgery::formats::{self, safetensors::SafetensorsFile};
use ckpt_surgery::Error;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const SINGLE_FIXTURES: [&str; 3] = [
    "chatterbox_t3/t3_f32.safetensors",
    "chatterbox_t3/t3_bf16.safetensors",
    "gpt2/model.safetensors",
];

/// (name, dtype, shape, bytes) of every tensor, and the metadata, sorted.
type ReferenceView = (
    Vec<(String, String, Vec<usize>, Vec<u8>)>,
    Option<Vec<(String, String)>>,
);

/// Names, dtypes, shapes, bytes and metadata of a file as the reference implementation reads it.
fn reference_view(path: &Path) -> ReferenceView {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut v: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                format!("{:?}", t.dtype()),
                t.shape().to_vec(),
                t.data().to_vec(),
            )
        })
        .collect();
    v.sort();
    let mut m: Option<Vec<(String, String)>> = meta
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    if let Some(m) = m.as_mut() {
        m.sort();
    }
    (v, m)
}

#[test]
fn every_single_file_fixture_round_trips_with_identical_tensors_and_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in SINGLE_FIXTURES {
        let input = testdata(rel);
        let before = std::fs::read(&input).unwrap();
        let file = SafetensorsFile::open(&input).unwrap();
        let dest = tmp.path().join(rel.replace('/', "_"));
        let mut plan = SafetensorsLayout::identity(&file);
        assert!(
            !plan.file_sha256,
            "the whole-file hash is asked for, not default"
        );
        plan.file_sha256 = true;
        let manifest = write_safetensors(&plan, &dest, &[]).unwrap();

        // Read back with our reader and with the reference implementation.
        let back = SafetensorsFile::open(&dest).unwrap();
        assert_eq!(back.header.metadata, file.header.metadata, "{rel}");
        assert_eq!(back.header.tensors.len(), file.header.tensors.len());
        for (a, b) in file.header.tensors.iter().zip(&back.header.tensors) {
            assert_eq!((&a.name, a.dtype, &a.shape), (&b.name, b.dtype, &b.shape));
            assert_eq!(
                file.try_bytes(a).unwrap(),
                back.try_bytes(b).unwrap(),
                "{rel}: {}",
                a.name
            );
        }
        assert_eq!(reference_view(&input), reference_view(&dest), "{rel}");

        // The manifest is the truth about the written file.
        let written = std::fs::read(&dest).unwrap();
        assert_eq!(manifest.digest, Some(blake3_hex(&written)));
        assert_eq!(manifest.bytes, written.len() as u64);
        for (m, t) in manifest.tensors.iter().zip(&back.header.tensors) {
            assert_eq!(m.digest, blake3_hex(back.try_bytes(t).unwrap()));
        }
        // Files the reference writer made come back byte for byte (same layout, same header).
        assert_eq!(written, before, "{rel}: not byte-identical");
        assert_eq!(std::fs::read(&input).unwrap(), before, "input modified");
    }
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

#[test]
fn sharded_fixture_round_trips_through_shards_and_index() {
    let input = testdata("gpt2_sharded");
    let before = snapshot(&input);
    let ckpt = formats::open_tensors(&input, &Default::default()).unwrap();
    let index = ckpt.index.as_ref().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let shards: Vec<(String, ShardOut)> = ckpt
        .files
        .iter()
        .map(|f| {
            (
                f.path().file_name().unwrap().to_string_lossy().into_owned(),
                ShardOut::Safetensors(SafetensorsLayout::identity(f)),
            )
        })
        .collect();
    let mut keys = (*index.other).clone();
    if let Some(meta) = &index.metadata {
        keys.insert("metadata".into(), serde_json::Value::Object(meta.clone()));
    }
    let m = write_sharded(
        tmp.path(),
        "model.safetensors.index.json",
        &keys,
        &shards,
        &index.weight_map,
        &ckpt.input_paths(),
        false,
    )
    .unwrap();
    assert_eq!(m.shards.len(), 2);
    // Not asked for: no whole-file hashes, but every tensor's.
    for s in &m.shards {
        assert_eq!(s.digest, None);
        assert!(s.tensors.iter().all(|t| t.digest.len() == 64));
    }
    let back = formats::open_tensors(tmp.path(), &Default::default()).unwrap();
    let a: Vec<_> = ckpt
        .tensors()
        .map(|t| {
            (
                t.name(),
                t.dtype,
                t.shape.to_vec(),
                t.try_bytes().unwrap().into_owned(),
            )
        })
        .collect();
    let b: Vec<_> = back
        .tensors()
        .map(|t| {
            (
                t.name(),
                t.dtype,
                t.shape.to_vec(),
                t.try_bytes().unwrap().into_owned(),
            )
        })
        .collect();
    assert_eq!(a, b);
    assert_eq!(back.index.as_ref().unwrap().metadata, index.metadata);
    let mut wa = index.weight_map.clone();
    let mut wb = back.index.as_ref().unwrap().weight_map.clone();
    wa.sort();
    wb.sort();
    assert_eq!(wa, wb);
    for s in &m.shards {
        assert_eq!(
            reference_view(&input.join(s.path.file_name().unwrap())),
            reference_view(&s.path)
        );
    }
    assert_eq!(snapshot(&input), before, "inputs modified");
}

#[test]
fn computed_tensors_are_written_and_verified_and_reference_order_sorts_like_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("new.safetensors");
    let f32_row: Vec<u8> = [1.0f32, -2.5, 3.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut plan = SafetensorsLayout {
        file_sha256: false,
        metadata: Some(vec![("format".into(), "pt".into())]),
        tensors: vec![
            PlannedTensor {
                name: "z".into(),
                dtype: ckpt_surgery::dtype::DType::U8,
                shape: vec![2],
                payload: Payload::Bytes(vec![7, 9]),
            },
            PlannedTensor {
                name: "b".into(),
                dtype: ckpt_surgery::dtype::DType::F32,
                shape: vec![3],
                payload: Payload::Bytes(f32_row.clone()),
            },
            PlannedTensor {
                name: "a".into(),
                dtype: ckpt_surgery::dtype::DType::F32,
                shape: vec![1, 3],
                payload: Payload::Bytes(f32_row.clone()),
            },
        ],
    };
    plan.sort_like_reference();
    let names: Vec<&str> = plan.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "z"]);
    write_safetensors(&plan, &dest, &[]).unwrap();
    let (tensors, meta) = reference_view(&dest);
    assert_eq!(meta, Some(vec![("format".into(), "pt".into())]));
    assert_eq!(
        tensors[0],
        ("a".into(), "F32".into(), vec![1, 3], f32_row.clone())
    );
    assert_eq!(tensors[2], ("z".into(), "U8".into(), vec![2], vec![7, 9]));
    // The header is padded with spaces to 8 bytes, like the reference writer's.
    let bytes = std::fs::read(&dest).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(n % 8, 0);
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    let json_len = header.trim_end_matches(' ').len();
    assert!(
        header[..json_len].ends_with('}') && n - json_len < 8,
        "{header:?}"
    );
}

#[test]
fn a_payload_that_does_not_match_its_shape_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("bad.safetensors");
    let plan = SafetensorsLayout {
        file_sha256: false,
        metadata: None,
        tensors: vec![PlannedTensor {
            name: "w".into(),
            dtype: ckpt_surgery::dtype::DType::F32,
            shape: vec![2, 2],
            payload: Payload::Bytes(vec![0; 12]),
        }],
    };
    let err = write_safetensors(&plan, &dest, &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("needs 16 bytes but the payload has 12"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn writing_over_an_input_is_refused_by_path_by_symlink_and_by_hard_link() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.safetensors");
    std::fs::copy(testdata("gpt2/model.safetensors"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let file = SafetensorsFile::open(&input).unwrap();
    let plan = SafetensorsLayout::identity(&file);

    let link = tmp.path().join("link.safetensors");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let hard = tmp.path().join("hard.safetensors");
    std::fs::hard_link(&input, &hard).unwrap();
    let dotted = tmp.path().join(".").join("in.safetensors");
    for dest in [&input, &link, &hard, &dotted] {
        let err = write_safetensors(&plan, dest, &[]).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::OutputIsInput {
                    overlap: Overlap::Same,
                    ..
                }
            ) && err.flag() == Some("--output"),
            "{dest:?}: {err}"
        );
        assert!(
            err.to_string().contains("refusing to write over an input"),
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&input).unwrap(), before);
    // An extra protected path (e.g. a tokenizer the job read) is refused the same way.
    let other = tmp.path().join("other.json");
    std::fs::write(&other, b"{}").unwrap();
    let err = write_safetensors(&plan, &other, &[&other]).unwrap_err();
    assert!(err.to_string().contains("refusing to write over an input"));
    assert_eq!(std::fs::read(&other).unwrap(), b"{}");
}

#[test]
fn replacing_an_existing_output_keeps_its_permissions() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("out.safetensors");
    std::fs::write(&dest, b"old").unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o640)).unwrap();
    let file = SafetensorsFile::open(&testdata("gpt2/model.safetensors")).unwrap();
    write_safetensors(&SafetensorsLayout::identity(&file), &dest, &[]).unwrap();
    let meta = std::fs::metadata(&dest).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        std::fs::read(testdata("gpt2/model.safetensors")).unwrap()
    );
}

#[test]
fn a_new_output_gets_the_mode_a_plain_create_would() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    std::fs::File::create(&plain).unwrap();
    let dest = tmp.path().join("out.safetensors");
    let file = SafetensorsFile::open(&testdata("gpt2/model.safetensors")).unwrap();
    write_safetensors(&SafetensorsLayout::identity(&file), &dest, &[]).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dest), mode(&plain));
}
