//! A range that lies past the end of its data is an error naming the file and the tensor, never
//! an empty tensor; an output path that cannot be used names `--output` (issue 33).

use ckpt_surgery::dtype::DType;
use ckpt_surgery::error::Error;
use ckpt_surgery::formats::safetensors::write::{
    write_safetensors, Payload, PlannedTensor, SafetensorsLayout,
};
use ckpt_surgery::formats::safetensors::{SafetensorsFile, TensorInfo};
use ckpt_surgery::formats::torch::pickle::GlobalPolicy;
use ckpt_surgery::formats::torch::writer::{Piece, StoragePayload, TorchLayout};
use ckpt_surgery::formats::torch::{Container, TorchFile};
use ckpt_surgery::formats::TensorRef;
use ckpt_surgery::mapped::Mapped;
use ckpt_surgery::output;
use ckpt_surgery::output::later::Later;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// A file of `n` bytes 0, 1, 2, … mapped.
fn mapped(dir: &Path, n: u8) -> Mapped {
    let path = dir.join("data.bin");
    std::fs::write(&path, (0..n).collect::<Vec<u8>>()).unwrap();
    Mapped::open(&path).unwrap()
}

/// The error is about `path` and tensor `name`, and says where the bytes were.
fn assert_names(e: &Error, path: &Path, name: &str) {
    match e {
        Error::Tensor {
            path: p, tensor, ..
        } => {
            assert_eq!(p, path, "{e}");
            assert_eq!(tensor, name, "{e}");
        }
        other => panic!("expected a tensor error, got {other:?}"),
    }
    assert_eq!(e.kind(), "bad-input");
}

#[test]
fn a_contiguous_tensor_past_the_end_of_its_file_is_an_error_not_an_empty_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let map = mapped(tmp.path(), 16);
    let shape = [2u64, 2];
    let inside = TensorRef {
        name: "w",
        dtype: DType::F32,
        shape: &shape,
        map: &map,
        start: 0,
        strides: None,
    };
    assert_eq!(
        &*inside.try_bytes().unwrap(),
        &(0..16).collect::<Vec<u8>>()[..]
    );
    let past = TensorRef { start: 4, ..inside };
    let e = past.try_bytes().unwrap_err();
    assert_names(&e, &map.path, "w");
    assert!(
        e.to_string().contains("4..+16") && e.to_string().contains("16 bytes"),
        "{e}"
    );
}

#[test]
fn a_strided_tensor_whose_last_element_is_past_the_end_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let map = mapped(tmp.path(), 16);
    let (shape, strides) = ([2u64, 2], [1u64, 2]);
    // The transpose of a 2x2 f32 matrix: elements 0, 2, 1, 3.
    let t = TensorRef {
        name: "w.T",
        dtype: DType::F32,
        shape: &shape,
        map: &map,
        start: 0,
        strides: Some(&strides),
    };
    let want: Vec<u8> = [0u8, 2, 1, 3]
        .iter()
        .flat_map(|&e| e * 4..e * 4 + 4)
        .collect();
    assert_eq!(&*t.try_bytes().unwrap(), &want[..]);
    let past = TensorRef { start: 4, ..t };
    assert_names(&past.try_bytes().unwrap_err(), &map.path, "w.T");
}

#[test]
fn a_safetensors_tensor_info_past_the_end_of_the_file_is_an_error() {
    let path = testdata("gpt2/model.safetensors");
    let file = SafetensorsFile::open(&path).unwrap();
    let first = &file.header.tensors[0];
    let (start, end) = (first.start as usize, (first.start + first.len) as usize);
    assert_eq!(
        file.try_bytes(first).unwrap(),
        &file.map.bytes()[start..end]
    );
    let past = TensorInfo {
        start: file.map.len - 2,
        ..first.clone()
    };
    assert_names(&file.try_bytes(&past).unwrap_err(), &path, &first.name);
}

#[test]
fn a_torch_piece_or_resize_past_the_tensor_is_an_error_naming_it() {
    let path = testdata("torch/state_dict.pt");
    let file = TorchFile::open(&path, &GlobalPolicy::default()).unwrap();
    let t = file.tensor_refs().find(|t| t.shape.len() == 2).unwrap();
    let n = t.nbytes();
    assert_eq!(Piece::try_of_tensor(&t, 0, n).unwrap().len(), n);
    assert_names(
        &Piece::try_of_tensor(&t, 1, n).err().unwrap(),
        &path,
        t.name,
    );

    let row = n / t.shape[0];
    let grown = StoragePayload::try_resized(&t, n, None, Cow::Owned(vec![7; row as usize]));
    assert_eq!(grown.unwrap().len(), n + row);
    // More bytes kept than the tensor holds.
    let e = StoragePayload::try_resized(&t, n + 4, None, Cow::Owned(vec![0; row as usize]));
    assert_names(&e.err().unwrap(), &path, t.name);
    // Two segments each grown by `row` bytes, but new rows for one only.
    let parts = Some((2, n / 2, row));
    let e = StoragePayload::try_resized(&t, n, parts, Cow::Owned(vec![0; row as usize]));
    assert_names(&e.err().unwrap(), &path, t.name);
    let ok = StoragePayload::try_resized(&t, n, parts, Cow::Owned(vec![0; 2 * row as usize]));
    assert_eq!(ok.unwrap().len(), n + 2 * row);
}

#[test]
fn a_torch_record_past_the_end_of_the_file_is_an_error_naming_the_record() {
    let path = testdata("torch/state_dict.pt");
    let mut file = TorchFile::open(&path, &GlobalPolicy::default()).unwrap();
    let n = TorchLayout::try_identity(&file).unwrap().records.len();
    assert!(n > 0, "the fixture carries small records (version, …)");
    let Container::Zip(zip) = &mut file.container else {
        panic!("a zip fixture")
    };
    let r = zip
        .records
        .iter_mut()
        .find(|r| r.name == "version")
        .unwrap();
    r.len = u64::MAX / 2;
    let e = TorchLayout::try_identity(&file).err().unwrap();
    assert!(
        matches!(&e, Error::Format { path: p, .. } if p == &path),
        "{e:?}"
    );
    assert!(e.to_string().contains("record 'version'"), "{e}");
}

#[test]
fn a_grown_payload_keeping_more_than_its_input_is_refused_before_anything_is_written() {
    let input = testdata("gpt2/model.safetensors");
    let file = SafetensorsFile::open(&input).unwrap();
    let mut plan = SafetensorsLayout::identity(&file);
    let Payload::Copy(head) = plan.tensors[0].payload else {
        panic!("identity plans copy")
    };
    // `keep` past the input tensor's end, the shape made to agree with the payload's length.
    let tail = Box::leak(Box::new(Later::ready(vec![0; 4])));
    let keep = head.nbytes() + 4;
    plan.tensors[0] = PlannedTensor {
        name: "grown".into(),
        dtype: DType::U8,
        shape: vec![keep + 4],
        payload: Payload::Grow { head, keep, tail },
    };
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("out.safetensors");
    let e = write_safetensors(&plan, &dest, &[]).unwrap_err();
    assert_names(&e, &dest, "grown");
    assert!(
        e.to_string().contains(&format!("keeps {keep} bytes")),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn new_rows_that_never_came_fail_the_write_naming_the_destination() {
    let input = testdata("gpt2/model.safetensors");
    let file = SafetensorsFile::open(&input).unwrap();
    let mut plan = SafetensorsLayout::identity(&file);
    let tail = Box::leak(Box::new(Later::new(8)));
    tail.fail("stopped before they were computed");
    plan.tensors.push(PlannedTensor {
        name: "new".into(),
        dtype: DType::U8,
        shape: vec![8],
        payload: Payload::Interleave {
            head: match plan.tensors[0].payload {
                Payload::Copy(h) => h,
                _ => unreachable!(),
            },
            parts: 1,
            old: 0,
            new: 8,
            tail,
        },
    });
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("out.safetensors");
    let e = write_safetensors(&plan, &dest, &[]).unwrap_err();
    assert!(
        matches!(&e, Error::Verify { path, .. } if path == &dest),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("the new rows could not be computed"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn an_output_path_that_cannot_be_used_names_the_output_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let exists = tmp.path().join("out.safetensors");
    std::fs::write(&exists, b"x").unwrap();
    let flag = |e: Error| match e {
        Error::Arg { flag, problem } => (flag, problem),
        other => panic!("expected an argument error, got {other:?}"),
    };
    // An existing file is its own refusal: --overwrite is the way on.
    let e = output::folder::file_destination(&exists, &[], "safetensors", &["safetensors"], false)
        .unwrap_err();
    assert!(
        matches!(&e, Error::OutputExists { path, folder: false } if path == &exists),
        "{e:?}"
    );
    assert_eq!((e.flag(), e.kind()), (Some("--overwrite"), "usage"));
    let problem = e.to_string();
    assert!(
        problem.contains("exists; give a new output path, or --overwrite"),
        "{problem}"
    );
    let (f, _) = flag(
        output::folder::file_destination(&exists, &[], "torch", &["pt", "bin"], true).unwrap_err(),
    );
    assert_eq!(f, "--output");
    let (f, problem) = flag(
        output::folder::AtomicFolder::create(&exists, &[], false)
            .err()
            .unwrap(),
    );
    assert_eq!(f, "--output");
    assert!(problem.contains("exists and is not a folder"), "{problem}");
}
