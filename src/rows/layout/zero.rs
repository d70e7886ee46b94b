//! A DeepSpeed ZeRO checkpoint at N rows: the vocabulary matrices grown or shrunk in the model,
//! the fp32 master weights and the Adam moments of every rank (same world size). Old rows and
//! every other parameter keep their bits; new rows' moments are zero and their master weights
//! are the model's new rows (mean of the old rows, or zeros).

use super::zero_beside::{write_folder, Beside};
use crate::error::{Error, Result};
use crate::formats::zero::write::{write, Resize};
use crate::formats::zero::{self, Param};
pub use crate::formats::zero::{Zero, LAYOUT};
use crate::plan::Edit;
use crate::rowmap::RowMap;
use crate::rows::init::{self, Init, Matrix};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One resized parameter.
#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub name: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
}

/// Which parameters change, and to what shape, from the ZeRO checkpoint's answer to the
/// row-surgery interface; with the edits of the module weight, master copy and moments of each.
pub fn plan(
    z: &Zero,
    rows: u64,
    tensors: &[String],
    init: &str,
    allow_shrink: bool,
) -> Result<(Vec<Resized>, Vec<Edit>)> {
    let entries = zero::keys::entries(z, tensors)?;
    if rows == 0 {
        return Err(Error::arg(
            "--vocab-rows",
            "--vocab-rows must be at least 1",
        ));
    }
    let (mut out, mut edits) = (Vec::new(), Vec::new());
    let mut names: Vec<&str> = entries.iter().map(|e| e.tensor.as_str()).collect();
    names.dedup();
    for p in names.into_iter().filter_map(|n| z.param(n)) {
        if p.shape.is_empty() || p.shape[0] == rows {
            continue;
        }
        // The weights are the module's (stages 1/2); master weights and moments sized above
        // them are optimizer state, cut down to them freely. Stage 3 keeps no module copy.
        let weight_rows = z
            .module_tensor(&p.name)
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(p.shape[0]);
        crate::rows::refuse_weight_cut(&z.dir, &p.name, weight_rows, rows, allow_shrink)?;
        let map = RowMap::append(p.shape[0], rows);
        edits.extend(
            entries
                .iter()
                .filter(|e| e.tensor == p.name)
                .map(|e| e.edit(&map, init)),
        );
        let mut new_shape = p.shape.clone();
        new_shape[0] = rows;
        out.push(Resized {
            name: p.name.clone(),
            old_shape: p.shape.clone(),
            new_shape,
        });
    }
    Ok((out, edits))
}

/// The new values of one resized parameter: the ZeRO writer lays module, master copy and moments
/// out; the new model rows are the init's, from the old rows it hands over.
fn resize_param(z: &Zero, p: &Param, r: &Resized, how: &Init) -> Result<Resize> {
    let cols = p.shape.iter().skip(1).product::<u64>() as usize;
    Resize::of(z, p, &r.new_shape, |dtype, old, bytes, lp, grow| {
        let m = Matrix {
            dtype,
            rows: old as usize,
            cols,
            bytes,
        };
        Ok(init::encode(
            lp,
            &init::new_rows(&m, &init::stats(&m), how, grow),
        ))
    })
}

/// What [`write_resized`] wrote: the output, the subfolders left out (other tags) and, beside a Trainer
/// folder, its files left out (and why), carried, and the weights file grown.
pub struct Written {
    pub output: PathBuf,
    pub left_out: Vec<String>,
    pub left_files: Vec<(String, String)>,
    pub carried: Vec<String>,
    pub beside: Option<String>,
}

/// Write `z` with `resized` (from [`plan`]) at `rows` rows into `output`, new model rows by
/// `how`; a Trainer folder's files beside the save root (`side`) follow in the same folder.
pub fn write_resized(
    z: &Zero,
    resized: &[Resized],
    side: Option<&Beside<'_>>,
    (output, overwrite, rows): (&Path, bool, u64),
    how: &Init,
) -> Result<Written> {
    let resizes = resized
        .iter()
        .map(|r| {
            let p = z
                .param(&r.name)
                .ok_or_else(|| Error::format(&z.dir, &r.name))?;
            resize_param(z, p, r, how)
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(side) = side {
        let w = write_folder(z, &resizes, side, (output, overwrite, rows))?;
        return Ok(Written {
            output: output.to_path_buf(),
            left_out: w.tags_left,
            left_files: w.files_left,
            carried: w.carried,
            beside: w.weights,
        });
    }
    let (written, left) = write(z, &resizes, output, overwrite)?;
    Ok(Written {
        output: written,
        left_out: left,
        left_files: Vec::new(),
        carried: Vec::new(),
        beside: None,
    })
}
