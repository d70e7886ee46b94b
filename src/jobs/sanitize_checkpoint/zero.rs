//! sanitize-checkpoint on a DeepSpeed ZeRO checkpoint: grow or shrink the vocabulary matrices to
//! N rows in the model, the fp32 master weights and the Adam moments of every rank (same world
//! size). Old rows and every other parameter keep their bits; new rows' moments are zero and
//! their master weights are the model's new rows (mean of the old rows, or zeros).

use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::zero::write::{write, Resize};
use crate::formats::zero::{self, Param, Zero};
use crate::plan::Edit;
use crate::rowmap::RowMap;
use crate::rows::init::{self, Init, Matrix};
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
    pub globals: GlobalPolicy,
}

/// One resized parameter.
#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub name: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
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

/// Run the job: read, plan, write (unless a dry run); a Hugging Face Trainer checkpoint's files
/// beside the save root (`side`) follow in the same folder ([`super::zero_trainer`]).
pub fn run(
    z: &Zero,
    side: Option<&super::zero_trainer::Beside<'_>>,
    output: &Path,
    opts: &Options,
) -> Result<Report> {
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
    let resizes = report
        .resized
        .iter()
        .map(|r| {
            let p = z
                .param(&r.name)
                .ok_or_else(|| Error::format(&z.dir, &r.name))?;
            resize_param(z, p, r, &opts.init)
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(side) = side {
        let at = (output, opts.overwrite, opts.vocab_rows);
        let w = super::zero_trainer::write_folder(z, &resizes, side, at)?;
        report.left_out = w.tags_left;
        report.left_files = w.files_left;
        report.carried = w.carried;
        report.beside = w.weights;
        report.output = Some(output.to_path_buf());
        return Ok(report);
    }
    let (written, left) = write(z, &resizes, output, opts.overwrite)?;
    report.output = Some(written);
    report.left_out = left;
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
