//! sanitize-checkpoint for a DCP folder: the vocabulary matrices and their optimizer moments at
//! `--vocab-rows`, its report and rendering; the planning against the DCP's entries and the
//! writing are `rows::layout::dcp`'s.

use crate::error::Result;
use crate::plan::{Edit, Role};
use crate::rows::init::Init;
use crate::rows::layout::dcp::{resize, Dcp, Written};
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
    let done = resize(
        d,
        rows,
        how,
        allow_shrink,
        (!dry_run).then_some((output, overwrite)),
    )?;
    let resized: Vec<Resized> = done
        .changed
        .into_iter()
        .map(|c| Resized {
            name: c.name,
            role: c.role,
            old_rows: c.shape[0],
            new_rows: rows,
            shape: c.shape,
        })
        .collect();
    let nothing_to_do = resized.is_empty();
    Ok(Report {
        input: input.to_path_buf(),
        output: (!dry_run && !nothing_to_do).then(|| output.to_path_buf()),
        vocab_rows: rows,
        resized,
        written: done.written,
        nothing_to_do,
        edits: done.edits,
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
