//! The `trim-vocab` job: keep the tokens a language or a corpus needs. The keep set (`keep`: a
//! corpus's tokens, scripts, a list, and every id the config names) is pruned per tokenizer
//! family so kept tokens stay reachable (`tokenizer::trim`), the trimmed tokenizer is checked to
//! split the keep corpus into the same token strings, and every vocabulary matrix, bias and (in a
//! Trainer folder or a torch training file) optimizer moment is gathered by the same old → new row
//! map (`rows::apply`);
//! config ids follow the map; the map is written with the output.
//!
//! One step per module: `options`, `keep` (the keep set), `files` (config, tokenizer files, the
//! map file), `plan`, `execute`, `report`, `to_plan`; a GGUF file is trimmed by `gguf`.

mod execute;
mod files;
pub mod gguf;
mod keep;
mod options;
mod plan;
mod report;
mod to_plan;

pub use execute::execute;
pub use keep::Asked;
pub use options::Options;
pub use plan::{plan, Planned};
pub use report::{render, Changed, Report};
pub use to_plan::to_plan;

use crate::error::{Error, Result};
use crate::formats::{self, Checkpoint};
use crate::rows::moves;
use std::path::Path;

/// What a run gave: a tensor store's report, or a GGUF file's (a report of its own).
pub enum Outcome {
    Tensors(Box<Report>),
    Gguf(Box<gguf::GgufReport>),
}

/// Trim whatever `input` is into `out`: a GGUF file by [`gguf::run`] (its own flags and
/// report), everything else as [`run`] does.
pub fn run_any(input: &Path, out: &Path, opts: &Options) -> Result<Outcome> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    if let Checkpoint::Gguf(g) = &opened {
        return gguf::run(g, out, opts).map(|r| Outcome::Gguf(Box::new(r)));
    }
    run_opened(&opened, input, out, opts).map(|r| Outcome::Tensors(Box::new(r)))
}

/// Trim `input` into `out`: [`plan()`], then [`execute()`]. A GGUF file is refused: [`run_any`]
/// trims it.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    run_opened(&opened, input, out, opts)
}

/// [`run`] on the checkpoint `formats::open` found at `input`.
fn run_opened(opened: &Checkpoint, input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let folder = !matches!(opened, Checkpoint::File(_));
    if let Checkpoint::Trainer(t) = opened {
        let mut plan = plan(&t.model, input, opts)?;
        plan.report.layout = (opened.layout(), false);
        plan.inputs.push(t.optim_path.clone());
        if opts.drop_optimizer {
            let why = "dropped (--optimizer drop): training resumes with a fresh optimizer";
            let left = (t.optimizer_name().to_string(), why.to_string());
            plan.report.left_planned.push(left.clone());
            if let Some(f) = plan.folder.as_mut() {
                f.stale.push(left);
            }
            return execute(&t.model, plan, None, out, opts);
        }
        let layout = moves::trainer(&mut plan.report, t, &opts.optimizer_params, WHAT)?;
        return execute(&t.model, plan, Some(layout), out, opts);
    }
    if let Checkpoint::Gguf(_) = opened {
        return Err(Error::unsupported(
            input,
            "a GGUF file: it is trimmed by trim_vocab::run_any (the trim-vocab command does this)",
        ));
    }
    if let Checkpoint::Zero {
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
        return execute(weights, plan, Some(optimizer), out, opts);
    }
    if let Some(tr) = opened.training()? {
        // Planned on the weights' own file (a ZeRO checkpoint's module states): a file output;
        // a Trainer checkpoint of a DeepSpeed run without weights: its folder's config and
        // tokenizer, one folder out.
        let ckpt = tr.weights();
        let at = opened.zero_trainer_folder().unwrap_or(&ckpt.path);
        let mut plan = plan(ckpt, at, opts)?;
        plan.report.layout = (opened.layout(), false);
        plan.report.input = input.to_path_buf();
        let how = (&opts.optimizer_params[..], opts.drop_optimizer);
        let optimizer = moves::training(&mut plan.report, &tr, how, WHAT)?;
        return execute(ckpt, plan, Some(optimizer), out, opts);
    }
    let ckpt = opened.weights_only().ok_or_else(|| {
        Error::unsupported(
            opened.path(),
            format!(
                "{} holds optimizer state in a layout trim-vocab does not trim yet (it trims the optimizer state of a Hugging Face Trainer folder, a torch training file, a ZeRO 1/2/3 save root and a DCP folder); trim the model's weights (a model folder or weight file) and start the optimizer afresh",
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
    execute(ckpt, plan, None, out, opts)
}

/// What the refusals say the job does ("no vocabulary matrix to trim").
const WHAT: &str = "trim";
