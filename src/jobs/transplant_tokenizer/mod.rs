//! The `transplant-tokenizer` job: give a model another tokenizer's vocabulary, ids and all. Each
//! new id takes the base's row of the same token (by text, whatever each tokenizer's form), or
//! of the same special role, bit for bit; the rest are made by the init; base tokens the new
//! tokenizer lacks are dropped (`--allow-shrink`). Every vocabulary matrix and bias (tied or
//! not), config.json and generation_config.json (sizes, special ids found again by their text)
//! and the tokenizer files follow; every other tensor and file is copied untouched.
//!
//! One step per module: `options` (what it is asked), `roles` (special roles each side names),
//! `matching` (the row map), `init` (how made rows are made), `config` (config files),
//! `tokenizer_files` (the output's tokenizer), `plan` (the whole decision), `execute` (through
//! the format's writer), `report`. Gathering rows by a map and writing them is knowledge shared
//! with the other jobs: [`crate::rows`], [`crate::rowmap`].

mod config;
mod execute;
mod init;
mod matching;
mod options;
mod plan;
mod report;
mod roles;
mod to_plan;
mod tokenizer_files;

pub use crate::rows::moves::Moved;
pub use execute::execute;
pub use matching::{Matching, RoleMatch, Token};
pub use options::{Donor, Options};
pub use plan::{plan, Planned};
pub use report::{render, Changed, Report};
pub use to_plan::to_plan;

use crate::error::{Error, Result};
use crate::formats;
use crate::rows::moves;
use std::path::Path;

/// Transplant `opts.tokenizer` onto `input`, into `out`: [`plan()`], then [`execute()`].
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    let folder = !matches!(opened, formats::Checkpoint::File(_));
    if let formats::Checkpoint::Trainer(t) = &opened {
        let mut plan = plan(&t.model, input, opts)?;
        // As sanitize-checkpoint names it: the layout is the folder's, whatever its weights' format.
        plan.report.layout = (opened.layout(), false);
        if plan.report.row_map.is_none() {
            return Err(Error::format(&t.dir, "no vocabulary matrix to transplant"));
        }
        plan.inputs.push(t.optim_path.clone());
        if opts.drop_optimizer {
            let why = "dropped (--optimizer drop): training resumes with a fresh optimizer";
            let left = (t.optimizer_name().to_string(), why.to_string());
            plan.report.left_planned.push(left.clone());
            if let Some(tk) = plan.tokenizer.as_mut() {
                tk.stale.push(left);
            }
            return execute(&t.model, plan, out, opts);
        }
        let layout = moves::trainer(&mut plan.report, t, &opts.optimizer_params, WHAT)?;
        plan.optimizer = Some(layout);
        return execute(&t.model, plan, out, opts);
    }
    if let crate::formats::Checkpoint::Gguf(_) = &opened {
        return Err(opened.refusal("transplant-tokenizer", ""));
    }
    if let formats::Checkpoint::Zero {
        zero,
        model: Some(weights),
    } = &opened
    {
        // A Trainer run with DeepSpeed: planned on the weights beside global_step*/ (a folder
        // output), the save root's state gathered by the same map into the same folder.
        let mut plan = plan(weights, input, opts)?;
        plan.report.layout = (opened.layout(), false);
        plan.inputs
            .extend(zero.input_paths().iter().map(|p| p.to_path_buf()));
        let z = zero.get()?;
        let optimizer = moves::zero_beside(&mut plan.report, z, opts.drop_optimizer, WHAT)?;
        plan.optimizer = Some(optimizer);
        return execute(weights, plan, out, opts);
    }
    if let Some(tr) = opened.training()? {
        // Planned on the weights' own file (a ZeRO checkpoint's module states): a file output.
        // A Trainer checkpoint of a DeepSpeed run without weights: its folder's config and
        // tokenizer, one folder out.
        let ckpt = tr.weights();
        let at = opened.zero_trainer_folder().unwrap_or(&ckpt.path);
        let mut plan = plan(ckpt, at, opts)?;
        plan.report.layout = (opened.layout(), false);
        plan.report.input = input.to_path_buf();
        let how = (&opts.optimizer_params[..], opts.drop_optimizer);
        let optimizer = moves::training(&mut plan.report, &tr, how, WHAT)?;
        plan.optimizer = Some(optimizer);
        return execute(ckpt, plan, out, opts);
    }
    let ckpt = opened.weights_only().ok_or_else(|| {
        Error::unsupported(
            opened.path(),
            format!(
                "{} holds optimizer state in a layout transplant-tokenizer does not move yet (it moves the optimizer state of a Hugging Face Trainer folder, a torch training file, a ZeRO 1/2/3 save root and a DCP folder); transplant the model's weights (a model folder or weight file) and start the optimizer afresh",
                opened.layout()
            ),
        )
    })?;
    let mut plan = plan(ckpt, input, opts)?;
    plan.report.layout = (opened.layout(), folder);
    if opts.drop_optimizer {
        let path = opened.path().display();
        let w = format!("--optimizer drop: {path} holds no optimizer state; nothing was dropped");
        plan.report.warnings.push(w);
    }
    execute(ckpt, plan, out, opts)
}

/// What the refusals say the job does ("no vocabulary matrix to transplant").
const WHAT: &str = "transplant";
