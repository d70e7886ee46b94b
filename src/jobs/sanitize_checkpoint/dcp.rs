//! sanitize-checkpoint for a DCP folder: grow or shrink the vocabulary matrices and their
//! optimizer moments to `--vocab-rows` (new weight rows from the init, new moment rows zero).
//! Growing adds one chunk of new rows per tensor; shrinking drops or cuts the chunks past the
//! new end; every other chunk and item keeps its bytes.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::keys::{entries, shape};
use crate::formats::dcp::write::{write_dcp, TensorEdit, Written};
use crate::formats::dcp::{Dcp, Item, ItemKind};
use crate::plan::{Edit, Role};
use crate::rowmap::RowMap;
use crate::rows::init::{self, Init, Matrix};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One tensor resized.
#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub name: String,
    /// `embedding`, `head`, `head-bias` or `moment`.
    pub role: Role,
    pub old_rows: u64,
    pub new_rows: u64,
    /// Its shape in the input (for the plan's edits; the report keeps its rows).
    #[serde(skip)]
    pub shape: Vec<u64>,
}

/// What sanitize did to a DCP folder.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    pub vocab_rows: u64,
    pub resized: Vec<Resized>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<Written>,
    /// Every vocabulary matrix and its moments already have `vocab_rows` rows: nothing written.
    pub nothing_to_do: bool,
    /// The plan's edits, as the row-surgery interface gave them.
    #[serde(skip)]
    pub edits: Vec<Edit>,
}

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

/// How a run writes: `dry_run` writes nothing; `overwrite` replaces an existing output;
/// `allow_shrink` lets a target below the weights' rows drop trained rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub dry_run: bool,
    pub overwrite: bool,
    pub allow_shrink: bool,
}

/// Resize the vocabulary of `input` to `rows` and write it to `output` (nothing written with
/// `dry_run`).
pub fn run(d: &Dcp, output: &Path, rows: u64, how: &Init, run: Run) -> Result<Report> {
    let input = d.dir.as_path();
    let Run {
        dry_run,
        overwrite,
        allow_shrink,
    } = run;
    crate::output::atomic::refuse_overlap(output, &[input])?;
    let todo = plan(d, rows, how.name(), allow_shrink)?;
    let mut edits = Vec::new();
    let mut resized = Vec::new();
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
        resized.push(Resized {
            name: item.fqn.clone(),
            role: planned.role,
            old_rows: shape[0],
            new_rows: rows,
            shape: shape.clone(),
        });
    }
    let nothing_to_do = resized.is_empty();
    let written = if dry_run || nothing_to_do {
        None
    } else {
        Some(write_dcp(d, &edits, output, overwrite)?)
    };
    Ok(Report {
        input: input.to_path_buf(),
        output: (!dry_run && !nothing_to_do).then(|| output.to_path_buf()),
        vocab_rows: rows,
        resized,
        written,
        nothing_to_do,
        edits: todo.into_iter().map(|(_, e)| e).collect(),
    })
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    for x in &r.resized {
        s.push_str(&format!(
            "resized {} ({}): {} -> {} rows\n",
            x.name, x.role, x.old_rows, x.new_rows
        ));
    }
    match (&r.output, &r.written) {
        (Some(o), Some(w)) => {
            s.push_str(&format!(
                "wrote {}: {} data file(s) carried over unchanged, {} new chunk(s){}, new .metadata\n",
                o.display(),
                w.carried.len(),
                w.new_chunks,
                w.new_file.as_ref().map(|f| format!(" in {f}")).unwrap_or_default()
            ));
        }
        _ if r.nothing_to_do => s.push_str(&format!(
            "nothing to do: every vocabulary matrix and its moments already have {} rows; nothing written\n",
            r.vocab_rows
        )),
        _ => s.push_str("dry run: nothing written\n"),
    }
    s
}
