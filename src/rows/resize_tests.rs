//! Row maps through `Resize` and the safetensors writer: an append map is today's resize, byte for
//! byte; any other map writes its copied rows bit for bit and its init rows from today's
//! statistics (all old rows), read back with the reference safetensors library.

use crate::dtype::{self, DType};
use crate::formats;
use crate::output::later::Later;
use crate::rowmap::RowMap;
use crate::rows::device::Device;
use crate::rows::init::Init;
use crate::rows::resize::{grown_map, Resize};
use crate::rows::write::{write, WriteOptions};
use crate::vocab::Role;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// Row r, column c: 2r + c/4 − 3 (exact in bf16; column means over any rows are exact too).
fn values(rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|i| ((i / cols) as f64) * 2.0 + (i % cols) as f64 * 0.25 - 3.0)
        .collect()
}

fn encode(dt: DType, v: &[f64]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * (dt.bits() / 8) as usize];
    dtype::encode_row_f64(dt, v, &mut out).unwrap();
    out
}

/// A safetensors file written by the reference library: `emb` f32 6×4, `head` bf16 6×4, `codes`
/// f32 8×2 (two codebooks of 4), `other` f32 2×2.
fn fixture(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("in.safetensors");
    let (emb, head) = (
        encode(DType::F32, &values(6, 4)),
        encode(DType::BF16, &values(6, 4)),
    );
    let (codes, other) = (
        encode(DType::F32, &values(8, 2)),
        encode(DType::F32, &[7.0; 4]),
    );
    let view = |dt, shape: Vec<usize>, b: &'static [u8]| {
        safetensors::tensor::TensorView::new(dt, shape, b).unwrap()
    };
    let leak = |v: Vec<u8>| -> &'static [u8] { Box::leak(v.into_boxed_slice()) };
    let tensors = vec![
        ("emb", view(Dtype::F32, vec![6, 4], leak(emb))),
        ("head", view(Dtype::BF16, vec![6, 4], leak(head))),
        ("codes", view(Dtype::F32, vec![8, 2], leak(codes))),
        ("other", view(Dtype::F32, vec![2, 2], leak(other))),
    ];
    safetensors::serialize_to_file(tensors, None, &path).unwrap();
    path
}

#[test]
fn an_append_map_lays_out_and_computes_exactly_todays_resize() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = formats::open_tensors(&fixture(tmp.path()), &Default::default()).unwrap();
    let cpu = Device::cpu(None);
    let t = ckpt.tensor("emb").unwrap();
    let today = Resize::new(t, Role::Embedding, 6, 9).unwrap();
    let mapped = Resize::mapped(t, Role::Embedding, &RowMap::append(6, 9)).unwrap();
    // Today's layout: the 6 old rows kept in place, 3 new rows of the column mean (2 + c/4).
    let mean: Vec<f64> = (0..3)
        .flat_map(|_| (0..4).map(|c| 2.0 + c as f64 * 0.25))
        .collect();
    for r in [&today, &mapped] {
        assert_eq!((r.keep, r.tail_len, r.parts()), (6 * 16, 3 * 16, None));
        let (tail, norms) = r.compute(&Init::Mean, &cpu).unwrap();
        assert_eq!(tail, encode(DType::F32, &mean));
        assert!(norms.is_some());
    }
    // Two codebooks of 4 rows, each grown by 2 from its own mean (0 + c/4, then 8 + c/4).
    let t = ckpt.tensor("codes").unwrap();
    let today = Resize::new(t, Role::Embedding, 8, 12)
        .unwrap()
        .segmented(2)
        .unwrap();
    let map = RowMap::append(4, 6).segmented(2).unwrap();
    let mapped = Resize::mapped(t, Role::Embedding, &map).unwrap();
    let want = encode(DType::F32, &[0.0, 0.25, 0.0, 0.25, 8.0, 8.25, 8.0, 8.25]);
    for r in [&today, &mapped] {
        assert_eq!((r.keep, r.tail_len, r.parts()), (64, 32, Some((2, 32, 16))));
        assert_eq!(r.compute(&Init::Mean, &cpu).unwrap().0, want);
    }
    // A cut: the first rows kept, nothing computed.
    let t = ckpt.tensor("emb").unwrap();
    let cut = Resize::mapped(t, Role::Embedding, &RowMap::append(6, 4)).unwrap();
    assert_eq!((cut.keep, cut.tail_len), (4 * 16, 0));
    assert!(cut.compute(&Init::Mean, &cpu).unwrap().0.is_empty());
}

#[test]
fn a_gather_map_writes_copied_rows_bit_for_bit_and_init_rows_from_all_old_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixture(tmp.path());
    let ckpt = formats::open_tensors(&input, &Default::default()).unwrap();
    // New ids: old 5, init, old 4, old 4, init; old rows 0..4 dropped. The init rows are the
    // mean of all 6 old rows (2 + c/4), not of the kept ones (rows 4, 5: 6 + c/4).
    let ids = [Some(5), None, Some(4), Some(4), None];
    let map = RowMap::from_ids(&ids, 6, &input).unwrap();
    assert_eq!(map.dropped(), vec![0..4]);
    let resizes: Vec<Resize<'_>> = [("emb", Role::Embedding), ("head", Role::Head)]
        .into_iter()
        .map(|(n, role)| Resize::mapped(ckpt.tensor(n).unwrap(), role, &map).unwrap())
        .collect();
    for r in &resizes {
        assert_eq!((r.keep, r.parts()), (0, None), "nothing kept in place");
    }
    let tails: Vec<Later> = resizes.iter().map(|r| Later::new(r.tail_len)).collect();
    for (r, tail) in resizes.iter().zip(&tails) {
        tail.set(r.compute(&Init::Mean, &Device::cpu(None)).unwrap().0);
    }
    let out = tmp.path().join("out.safetensors");
    let new_bytes = grown_map(&resizes, &tails, &[]);
    write(
        &ckpt,
        &out,
        new_bytes,
        5,
        &WriteOptions::default(),
        &[&input],
        None,
    )
    .unwrap();

    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let old = values(6, 4);
    let row = |r: usize| old[r * 4..r * 4 + 4].to_vec();
    let mean: Vec<f64> = (0..4).map(|c| 2.0 + c as f64 * 0.25).collect();
    let want: Vec<f64> = [row(5), mean.clone(), row(4), row(4), mean].concat();
    for (name, dt) in [("emb", DType::F32), ("head", DType::BF16)] {
        let v = st.tensor(name).unwrap();
        assert_eq!(v.shape(), [5, 4], "{name}");
        assert_eq!(v.data(), encode(dt, &want).as_slice(), "{name}");
    }
    let other = st.tensor("other").unwrap();
    assert_eq!(other.data(), encode(DType::F32, &[7.0; 4]).as_slice());
    assert_eq!(st.tensor("codes").unwrap().shape(), [8, 2]);
}

#[test]
fn a_map_for_another_row_count_than_the_tensor_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = formats::open_tensors(&fixture(tmp.path()), &Default::default()).unwrap();
    let t = ckpt.tensor("emb").unwrap();
    let e = Resize::mapped(t, Role::Embedding, &RowMap::append(5, 9))
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(msg.contains("'emb'") && msg.contains("5 old rows"), "{msg}");
}

#[test]
fn a_gather_map_goes_through_the_torch_writer_for_contiguous_and_strided_tensors() {
    // Written by torch.save (testdata/generate.py); `extra.transposed` is a strided view.
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/torch/state_dict.pt");
    let ckpt = formats::open_tensors(&input, &Default::default()).unwrap();
    let cpu = Device::cpu(None);
    let mut maps = Vec::new();
    let mut want = Vec::new();
    for (name, rows) in [("text_emb.weight", 100u64), ("extra.transposed", 6)] {
        let t = ckpt.tensor(name).unwrap();
        // New ids: the last old row, two init rows, rows 1..3, an init row.
        let ids = [Some(rows - 1), None, None, Some(1), Some(2), None];
        let row = (t.nbytes() / rows) as usize;
        let old = t.try_bytes().unwrap().into_owned();
        // Today's init rows: an append of 3 rows, its statistics over all old rows.
        let today = Resize::new(t, Role::Embedding, rows, rows + 3).unwrap();
        let init = today.compute(&Init::Mean, &cpu).unwrap().0;
        let r = |i: u64| old[i as usize * row..(i as usize + 1) * row].to_vec();
        let k = |i: usize| init[i * row..(i + 1) * row].to_vec();
        want.push([r(rows - 1), k(0), k(1), r(1), r(2), k(2)].concat());
        maps.push(RowMap::from_ids(&ids, rows, &input).unwrap());
    }
    let resizes: Vec<Resize<'_>> = ["text_emb.weight", "extra.transposed"]
        .iter()
        .zip(&maps)
        .map(|(n, m)| Resize::mapped(ckpt.tensor(n).unwrap(), Role::Embedding, m).unwrap())
        .collect();
    let tails: Vec<Later> = resizes.iter().map(|r| Later::new(r.tail_len)).collect();
    for (r, tail) in resizes.iter().zip(&tails) {
        tail.set(r.compute(&Init::Mean, &cpu).unwrap().0);
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.pt");
    let new_bytes = grown_map(&resizes, &tails, &[]);
    write(
        &ckpt,
        &out,
        new_bytes,
        6,
        &WriteOptions::default(),
        &[&input],
        None,
    )
    .unwrap();
    let back = formats::open_tensors(&out, &Default::default()).unwrap();
    for (name, want) in ["text_emb.weight", "extra.transposed"].iter().zip(&want) {
        let t = back.tensor(name).unwrap();
        assert_eq!(t.shape[0], 6, "{name}");
        assert_eq!(&t.try_bytes().unwrap().into_owned(), want, "{name}");
    }
    let (a, b) = (
        ckpt.tensor("layer.weight").unwrap(),
        back.tensor("layer.weight").unwrap(),
    );
    assert_eq!(a.try_bytes().unwrap(), b.try_bytes().unwrap(), "untouched");
}
