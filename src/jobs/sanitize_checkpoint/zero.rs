//! sanitize-checkpoint on a DeepSpeed ZeRO checkpoint: the vocabulary matrices at N rows in the
//! model, the fp32 master weights and the Adam moments of every rank; its options, report and
//! rendering. The planning against the ZeRO entries and the writing (a save root alone, or a
//! Trainer folder with the weights beside it) are `rows::layout::{zero, zero_beside}`'s.

use crate::error::{Error, Result};
use crate::plan::Edit;
use crate::rows::init::Init;
pub use crate::rows::layout::zero::Resized;
use crate::rows::layout::zero::{plan, write_resized, Zero};
use crate::rows::layout::zero_beside::Beside;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What the job is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub vocab_rows: u64,
    /// Vocabulary matrices by name; empty: detected from the parameter names.
    pub tensors: Vec<String>,
    /// `mean` or `zeros`.
    pub init: Init,
    pub overwrite: bool,
    pub dry_run: bool,
    /// Let a target below a weight's rows drop its trained rows (`--allow-shrink`).
    pub allow_shrink: bool,
}

/// The job's report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    pub format: &'static str,
    pub stage: u8,
    pub world_size: usize,
    pub tag: String,
    pub resized: Vec<Resized>,
    /// Parameters whose master weights and moments were copied bit for bit.
    pub unchanged: usize,
    pub dry_run: bool,
    /// Subfolders of the input not written (other tags: only the one `latest` names is resized).
    pub left_out: Vec<String>,
    /// A Trainer folder's files left out, and why.
    pub left_files: Vec<(String, String)>,
    /// A Trainer folder's files carried unchanged.
    pub carried: Vec<String>,
    /// A Trainer folder's weights beside `global_step*/`, grown with the same rows.
    pub beside: Option<String>,
    /// The plan's edits, as the row-surgery interface gave them.
    #[serde(skip)]
    pub edits: Vec<Edit>,
}

/// Run the job: read, plan, write (unless a dry run); a Hugging Face Trainer checkpoint's files
/// beside the save root (`side`) follow in the same folder (`rows::layout::zero_beside`).
pub fn run(z: &Zero, side: Option<&Beside<'_>>, output: &Path, opts: &Options) -> Result<Report> {
    let input = z.path();
    if !matches!(opts.init, Init::Mean | Init::Zeros) {
        return Err(Error::arg(
            "--init",
            "--init: a ZeRO checkpoint's new rows are 'mean' (default) or 'zeros'",
        ));
    }
    crate::output::atomic::refuse_overlap(output, &[input])?;
    let (resized, edits) = plan(
        z,
        opts.vocab_rows,
        &opts.tensors,
        opts.init.name(),
        opts.allow_shrink,
    )?;
    let mut report = Report {
        input: input.to_path_buf(),
        output: None,
        format: "deepspeed-zero",
        stage: z.stage,
        world_size: z.world,
        tag: z.tag.clone(),
        unchanged: z.params.len() - resized.len(),
        resized,
        dry_run: opts.dry_run,
        left_out: Vec::new(),
        left_files: Vec::new(),
        carried: Vec::new(),
        beside: None,
        edits,
    };
    if opts.dry_run {
        return Ok(report);
    }
    let at = (output, opts.overwrite, opts.vocab_rows);
    let w = write_resized(z, &report.resized, side, at, &opts.init)?;
    report.output = Some(w.output);
    report.left_out = w.left_out;
    report.left_files = w.left_files;
    report.carried = w.carried;
    report.beside = w.beside;
    Ok(report)
}

/// The human rendering of [`Report`].
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "{}: DeepSpeed ZeRO-{} checkpoint, tag {}, {} ranks\n",
        r.input.display(),
        r.stage,
        r.tag,
        r.world_size
    );
    if r.resized.is_empty() {
        s.push_str("  nothing to resize: the vocabulary matrices already have that many rows\n");
    }
    for x in &r.resized {
        s.push_str(&format!(
            "  {}: {:?} -> {:?} (model, fp32 master weights and moments of every rank; new rows' moments zero)\n",
            x.name, x.old_shape, x.new_shape
        ));
    }
    s.push_str(&format!(
        "  {} other parameters: master weights and moments copied bit for bit\n",
        r.unchanged
    ));
    if let Some(b) = &r.beside {
        s.push_str(&format!(
            "  {b} (the weights beside global_step*/): the same new rows in its own dtype; config.json's vocabulary size follows\n"
        ));
    }
    if !r.carried.is_empty() {
        s.push_str(&format!("  carried over: {}\n", r.carried.join(", ")));
    }
    for l in &r.left_out {
        s.push_str(&format!(
            "  left out {l}/: a folder this job does not resize (another tag)\n"
        ));
    }
    for (l, why) in &r.left_files {
        s.push_str(&format!("  left out {l}: {why}\n"));
    }
    match (&r.output, r.dry_run) {
        (_, true) => s.push_str("  dry run: nothing written\n"),
        (Some(o), _) => s.push_str(&format!("  wrote {} (verified)\n", o.display())),
        _ => {}
    }
    s
}
