//! Row maps: their runs and queries, gathering f32 and bf16 matrices against an f64 reference,
//! and a non-append map carried through `Resize` and the safetensors writer.

use super::{RowMap, Run};
use crate::dtype::{self, DType};
use crate::error::Error;
use std::path::Path;

/// `rows × cols` values, exact in bf16 (small multiples of 1/4), distinct per row.
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

/// The f64 reference: new row i is old row ids[i], or the next init row.
fn reference(old: &[f64], init: &[f64], ids: &[Option<u64>], cols: usize) -> Vec<f64> {
    let mut next = init.chunks(cols);
    ids.iter()
        .flat_map(|id| match id {
            Some(r) => old[*r as usize * cols..(*r as usize + 1) * cols].to_vec(),
            None => next.next().unwrap().to_vec(),
        })
        .collect()
}

fn src() -> &'static Path {
    Path::new("map.json")
}

#[test]
fn append_is_an_identity_prefix_then_init_rows_and_a_cut_drops_the_tail() {
    let grow = RowMap::append(5, 8);
    assert_eq!(
        grow.runs(),
        [
            Run::Copy {
                from: 0,
                to: 0,
                len: 5
            },
            Run::Init { to: 5, len: 3 }
        ]
    );
    assert!(grow.is_append());
    assert_eq!((grow.init_rows(), grow.dropped_rows()), (3, 0));
    let cut = RowMap::append(8, 5);
    assert!(cut.is_append());
    assert_eq!(cut.dropped(), vec![5..8]);
    assert_eq!(cut.init_rows(), 0);
}

#[test]
fn ids_that_keep_a_prefix_then_only_init_rows_are_an_append() {
    let ids = [Some(0), Some(1), Some(2), None, None];
    let m = RowMap::from_ids(&ids, 3, src()).unwrap();
    assert_eq!(m, RowMap::append(3, 5));
    assert!(RowMap::from_ids(&[Some(0), Some(1)], 4, src())
        .unwrap()
        .is_append());
    // The same rows, moved: not an append.
    assert!(!RowMap::from_ids(&[Some(1), Some(0), None], 2, src())
        .unwrap()
        .is_append());
    assert!(!RowMap::from_ids(&[None, Some(0), Some(1)], 2, src())
        .unwrap()
        .is_append());
}

#[test]
fn a_trim_merges_neighbouring_ids_into_runs_and_lists_the_trained_rows_it_drops() {
    let ids = [Some(0), Some(1), Some(5), None, None, Some(2), Some(5)];
    let m = RowMap::from_ids(&ids, 8, src()).unwrap();
    assert_eq!(
        m.runs(),
        [
            Run::Copy {
                from: 0,
                to: 0,
                len: 2
            },
            Run::Copy {
                from: 5,
                to: 2,
                len: 1
            },
            Run::Init { to: 3, len: 2 },
            Run::Copy {
                from: 2,
                to: 5,
                len: 1
            },
            Run::Copy {
                from: 5,
                to: 6,
                len: 1
            },
        ]
    );
    assert_eq!((m.old_rows(), m.new_rows(), m.init_rows()), (8, 7, 2));
    assert_eq!(m.dropped(), vec![3..5, 6..8]);
    assert_eq!(m.dropped_rows(), 4);
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["runs"][2]["rows"], "init");
    assert_eq!(json["runs"][0]["rows"], "copy");
    assert_eq!(json["runs"][0]["len"], 2);
}

#[test]
fn an_old_id_past_the_table_is_refused_naming_the_new_id_the_old_id_and_the_rows() {
    let e = RowMap::from_ids(&[Some(0), None, Some(7)], 7, src()).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
    let msg = e.to_string();
    for want in ["map.json", "new id 2", "old row 7", "7 rows"] {
        assert!(msg.contains(want), "{msg}");
    }
    assert_eq!(e.exit_code(), 2);
    assert!(RowMap::from_ids(&[Some(u64::MAX)], u64::MAX, src()).is_err());
    assert!(RowMap::append(u64::MAX, 2).segmented(2).is_none());
    assert!(RowMap::append(3, 4).segmented(0).is_none());
}

fn gathers_exactly(dt: DType) {
    let (rows, cols) = (6, 3);
    let old = values(rows, cols);
    let init: Vec<f64> = (0..2 * cols).map(|i| 100.5 + i as f64).collect();
    let rb = cols * (dt.bits() / 8) as usize;
    let cases: [&[Option<u64>]; 3] = [
        &[Some(5), Some(4), Some(3), Some(2), Some(1), Some(0)], // permute
        &[Some(4), Some(1)],                                     // trim
        &[None, Some(2), Some(2), None, Some(0)],                // gather + init
    ];
    for ids in cases {
        let m = RowMap::from_ids(ids, rows as u64, src()).unwrap();
        let k = m.init_rows() as usize;
        let got = m
            .gather(&encode(dt, &old), rb, &encode(dt, &init[..k * cols]))
            .unwrap();
        let want = encode(dt, &reference(&old, &init, ids, cols));
        assert_eq!(got, want, "{dt} {ids:?}");
        let zeros = m.gather_zeros(&encode(dt, &old), rb).unwrap();
        let want = encode(dt, &reference(&old, &vec![0.0; k * cols], ids, cols));
        assert_eq!(zeros, want, "{dt} {ids:?}: moments of new ids are zeros");
    }
}

#[test]
fn gather_permutes_trims_and_fills_f32_rows_as_the_f64_reference() {
    gathers_exactly(DType::F32);
}

#[test]
fn gather_permutes_trims_and_fills_bf16_rows_as_the_f64_reference() {
    gathers_exactly(DType::BF16);
}

#[test]
fn a_segmented_map_maps_each_segment_alike_and_takes_init_rows_in_segment_order() {
    let (seg, cols) = (4usize, 2usize);
    let ids = [Some(3), None, Some(0)];
    let m = RowMap::from_ids(&ids, seg as u64, src())
        .unwrap()
        .segmented(2)
        .unwrap();
    assert_eq!((m.old_rows(), m.new_rows(), m.init_rows()), (8, 6, 2));
    assert_eq!(m.dropped(), vec![1..3, 5..7]);
    let old = values(2 * seg, cols);
    let init = vec![9.0, 9.5, 10.0, 10.5];
    let got = m
        .gather(
            &encode(DType::F32, &old),
            cols * 4,
            &encode(DType::F32, &init),
        )
        .unwrap();
    let mut want = reference(&old[..seg * cols], &init[..cols], &ids, cols);
    want.extend(reference(&old[seg * cols..], &init[cols..], &ids, cols));
    assert_eq!(got, encode(DType::F32, &want));
}

#[test]
fn a_segmented_append_gathers_the_interleaved_layout_the_writers_lay_out() {
    // Payload::Interleave / try_resized: segment c is its old rows, then its new rows.
    let m = RowMap::append(3, 5).segmented(2).unwrap();
    assert!(m.is_append());
    let old: Vec<u8> = (0..6).collect();
    let new: Vec<u8> = (100..104).collect();
    let got = m.gather(&old, 1, &new).unwrap();
    assert_eq!(got, [0, 1, 2, 100, 101, 3, 4, 5, 102, 103]);
}

#[test]
fn gather_refuses_bytes_that_disagree_with_the_map() {
    let m = RowMap::from_ids(&[Some(1), None], 2, src()).unwrap();
    let e = m.gather(&[0; 8], 4, &[]).unwrap_err();
    assert!(e.contains("2 old rows and 1 init rows"), "{e}");
    assert!(m.gather(&[0; 7], 4, &[0; 4]).is_err());
    assert_eq!(
        m.gather(&[1; 8], 4, &[2; 4]).unwrap(),
        [1, 1, 1, 1, 2, 2, 2, 2]
    );
}
