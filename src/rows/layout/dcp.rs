//! A DCP folder at N rows: grow or shrink the vocabulary matrices and their optimizer moments
//! (new weight rows from the init, new moment rows zero). Growing adds one chunk of new rows per
//! tensor; shrinking drops or cuts the chunks past the new end; every other chunk and item keeps
//! its bytes.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::keys::{entries, shape};
pub use crate::formats::dcp::write::Written;
use crate::formats::dcp::write::{write_dcp, TensorEdit};
pub use crate::formats::dcp::Dcp;
pub use crate::formats::dcp::METADATA;
use crate::formats::dcp::{Item, ItemKind};
use crate::plan::{Edit, Role};
use crate::rowmap::RowMap;
use crate::rows::init::{self, Init, Matrix};
use std::path::Path;

/// The tensors to resize, from the DCP's answer to the row-surgery interface: each vocabulary
/// matrix and each of its moments whose rows are not `rows`, with its edit (weights grown by
/// `init`, moments by zeros, or cut). A cut of a weight's trained rows needs `allow_shrink`.
pub fn plan<'d>(
    d: &'d Dcp,
    rows: u64,
    init: &str,
    allow_shrink: bool,
) -> Result<Vec<(&'d Item, Edit)>> {
    let mut out = Vec::new();
    for (item, e) in entries(d)? {
        if !e.is_state() {
            crate::rows::refuse_weight_cut(&d.dir, &e.tensor, e.rows(), rows, allow_shrink)?;
        }
        if e.rows() != rows {
            out.push((item, e.edit(&RowMap::append(e.rows(), rows), init)));
        }
    }
    Ok(out)
}

/// Rows `old..rows` of a weight, made by `init` from its old rows.
fn init_rows(d: &Dcp, w: &Item, dtype: DType, old: u64, rows: u64, how: &Init) -> Result<Vec<u8>> {
    let all = d.tensor_bytes(w)?;
    let sh = shape(w).unwrap_or(&[]);
    let cols: u64 = sh.iter().skip(1).product();
    if !dtype.is_convertible_float() {
        return Err(Error::tensor(
            &d.dir,
            &w.fqn,
            format!("{dtype} is not a float type: cannot make new rows"),
        ));
    }
    let m = Matrix {
        dtype,
        rows: old as usize,
        cols: cols as usize,
        bytes: &all,
    };
    let stats = init::stats(&m);
    let values = init::new_rows(&m, &stats, how, (rows - old) as usize);
    Ok(init::encode(dtype, &values))
}

/// One tensor resized: its name, role and shape in the input.
pub struct Changed {
    pub name: String,
    pub role: Role,
    pub shape: Vec<u64>,
}

/// What [`resize`] did: the tensors changed, what was written (None: a dry run or nothing to
/// do), the plan's edits.
pub struct Resized {
    pub changed: Vec<Changed>,
    pub written: Option<Written>,
    pub edits: Vec<Edit>,
}

/// Resize the vocabulary of `d` to `rows` and write it to `out` (`(path, overwrite)`; None: a dry
/// run). The new rows are made, and the CRCs of the items they come from checked, either way.
pub fn resize(
    d: &Dcp,
    rows: u64,
    how: &Init,
    allow_shrink: bool,
    out: Option<(&Path, bool)>,
) -> Result<Resized> {
    let todo = plan(d, rows, how.name(), allow_shrink)?;
    let mut edits = Vec::new();
    let mut changed = Vec::new();
    for (item, planned) in &todo {
        // Its bytes are read into the new chunks: corrupt data must not be carried into them.
        d.verify_item_crcs(item)?;
        let ItemKind::Tensor { dtype, shape, .. } = &item.kind else {
            continue;
        };
        let cols: u64 = shape.iter().skip(1).product();
        let es = dtype.bytes_for(cols).unwrap_or(0);
        let moment = planned.role == Role::Moment;
        edits.push(TensorEdit::resized(d, item, rows, |old| {
            if moment {
                Ok(vec![0u8; ((rows - old) * es) as usize])
            } else {
                init_rows(d, item, *dtype, old, rows, how)
            }
        })?);
        changed.push(Changed {
            name: item.fqn.clone(),
            role: planned.role,
            shape: shape.clone(),
        });
    }
    let written = match out {
        Some((output, overwrite)) if !changed.is_empty() => {
            Some(write_dcp(d, &edits, output, overwrite)?)
        }
        _ => None,
    };
    Ok(Resized {
        changed,
        written,
        edits: todo.into_iter().map(|(_, e)| e).collect(),
    })
}
