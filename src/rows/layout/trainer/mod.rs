//! sanitize-checkpoint on a Hugging Face Trainer checkpoint folder (`checkpoint-N/`): the model
//! (model.safetensors, sharded, or pytorch_model.bin) grown as extend-embeddings grows it, the
//! optimizer (optimizer.pt, a bare optimizer state dict) repaired for the grown parameters,
//! config.json updated, the merged tokenizer put in place, and scheduler.pt, rng_state*.pth,
//! trainer_state.json, training_args.bin (a pickle: its bytes are copied, never read) carried.
//! [`plan`] reads and decides, [`execute`] writes (through [`mod@write`]).
//!
//! Trainer numbers the optimizer's parameters group by group (weight decay first, then biases
//! and norms, each in module order), not in the weights file's order (sorted): parameters are
//! matched by shape and ties, an untied embedding and head by what their moments say (see
//! `formats::torch::optimizer::evidence`), and refused when two candidates needing different edits remain.

use super::options::{OptimizerAction, Options, RowsFrom, SchedulerAction};
use super::report::{Finding, OptimizerReport, PlannedTensor, Report, Resized};
use super::torch_optimizer::checks::{
    coverage, found_nonfinite, kept_on_purpose, misfits, model_findings, other_misfits,
    refuse_keep, scan_nonfinite,
};
use super::torch_optimizer::{
    dropped_role, init_options, matched, optimizer_report, planned_tensors, refuse_cut, repair,
    target_rows, Parameters,
};
use crate::error::{Error, Result};
use crate::formats::torch::optimizer::matching::Matched;
use crate::formats::torch::optimizer::state::{is_optimizer, FoundOpt};
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::formats::Tensors;
use crate::model::config::{resize_config_in, token_ids};
use crate::output::folder::Left;
use crate::output::json_text::JsonEdit;
use crate::plan::Edit;
use crate::rows;
use crate::rows::init::Init;
use crate::rows::resize::Resize;
use crate::rows::write::{file_name, WriteOptions};
use crate::ties::{self, Tie};
use crate::vocab::{self, Role};
use serde_json::Value;
use std::path::{Path, PathBuf};
use write::{write_folder, FolderWrite};

use crate::formats::trainer::{Trainer, OPTIMIZER, SCHEDULER};

mod write;

/// Sanitize the Trainer checkpoint folder `t` into the folder `out`: [`open`], [`plan`],
/// [`execute`].
pub fn run(t: &Trainer, out: &Path, opts: &Options) -> Result<Report> {
    let opened = open(t)?;
    let plan = plan(&opened, opts)?;
    execute(plan, out, opts)
}

/// Refuse a folder this job cannot repair (a model folder, or a ZeRO folder `formats::open`
/// could not place), saying what to do instead.
pub fn refuse_unsupported(dir: &Path) -> Result<()> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, "list", e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names
        .iter()
        .any(|n| n.starts_with("global_step") || n == "zero_to_fp32.py" || n == "latest")
    {
        return Err(Error::format(
            dir,
            "a DeepSpeed ZeRO checkpoint: the optimizer state is partitioned in global_step*/, which this tool does not read; consolidate the weights first (python zero_to_fp32.py CHECKPOINT OUT, shipped in the folder), grow them with extend-embeddings, and resume with a fresh optimizer",
        ));
    }
    if !names.iter().any(|n| n == OPTIMIZER) {
        return Err(Error::format(
            dir,
            format!("no {OPTIMIZER}: not a Trainer checkpoint folder (for a model folder, use extend-embeddings)"),
        ));
    }
    Ok(())
}

/// A Trainer checkpoint folder as read: the model and optimizer.pt (opened by `formats::open`)
/// and config.json.
pub struct Opened<'t> {
    dir: &'t Path,
    model: &'t Tensors,
    optim: &'t Tensors,
    trainer: &'t Trainer,
    opt_path: PathBuf,
    config: Option<Value>,
}

impl Opened<'_> {
    /// optimizer.pt's torch file.
    fn optimizer(&self) -> Result<&TorchFile> {
        self.trainer.optimizer()
    }
}

/// Check that optimizer.pt is an optimizer state dict and read config.json.
pub fn open(t: &Trainer) -> Result<Opened<'_>> {
    refuse_unsupported(&t.dir)?;
    let mut opened = Opened {
        dir: &t.dir,
        model: &t.model,
        optim: t.optim()?,
        trainer: t,
        opt_path: t.optimizer_path(),
        config: None,
    };
    let p = &opened.optimizer()?.pickle;
    if !is_optimizer(p, p.root) {
        return Err(Error::format(
            &opened.opt_path,
            "not an optimizer state dict ({\"state\": …, \"param_groups\": […]})",
        ));
    }
    if let Some(c) = t.config_path() {
        let text = std::fs::read_to_string(&c).map_err(|e| Error::io(&c, "read", e))?;
        let value = serde_json::from_str(&text)
            .map_err(|e| Error::format(&c, format!("not valid JSON: {e}")))?;
        opened.config = Some(value);
    }
    Ok(opened)
}

/// The model's vocabulary and parameters as the optimizer sees them: a tie is one parameter.
struct FolderModel {
    /// Every weight (name, shape), in the weights' order.
    all: Vec<(String, Vec<u64>)>,
    vocabulary: vocab::Vocabulary,
    vocab_names: Vec<String>,
    /// A logits bias [1, V] (BART's `final_logits_bias`): a buffer, resized with the rows along
    /// its second dimension; no optimizer state.
    logits_bias: Option<String>,
    ties: Vec<Tie>,
    params: Parameters,
}

fn folder_model(o: &Opened<'_>) -> Result<FolderModel> {
    let all: Vec<(String, Vec<u64>)> = o
        .model
        .tensors()
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let det = vocab::detect(all.iter().map(|(n, s)| (n.as_str(), s.as_slice())));
    let Some(vocabulary) = det.vocabulary else {
        return Err(Error::format(
            &o.model.path,
            "the model's vocabulary matrices are not found or ambiguous (see inspect-checkpoint)",
        ));
    };
    let logits_bias = vocab::per_token_elsewhere(
        all.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
        vocabulary.rows,
    )
    .map(|(n, _)| n.to_string());
    let ties = ties::find(o.model, Some(&vocabulary), o.config.as_ref());
    let vocab_names: Vec<String> = vocabulary.tensors.iter().map(|x| x.name.clone()).collect();
    let params = Parameters::new(&all, &vocab_names, &ties);
    Ok(FolderModel {
        all,
        vocabulary,
        vocab_names,
        logits_bias,
        ties,
        params,
    })
}

/// What sanitize-checkpoint will do to a Trainer checkpoint folder, decided before anything is
/// written ([`plan`] only reads): the report as the run gives it and what the writers need.
pub struct PlannedFolder<'c> {
    pub report: Report,
    opened: &'c Opened<'c>,
    /// The vocabulary matrices to grow or cut (their ties follow), and their new rows' init.
    resizes: Vec<Resize<'c>>,
    init: Init,
    /// How the weights are written (the globals they were opened with).
    write: WriteOptions,
    ties: Vec<Tie>,
    target: u64,
    /// optimizer.pt as it will be written; none when it is dropped.
    optimizer: Option<TorchLayout<'c>>,
    /// config.json's edit (its vocabulary size set to the target, every other byte kept), when
    /// there is one.
    config: Option<JsonEdit>,
    /// Every file read (the folder's and the target's): none of them may be the output.
    inputs: Vec<PathBuf>,
}

/// Decide everything for a Trainer checkpoint folder: reads, writes nothing.
pub fn plan<'c>(o: &'c Opened<'c>, opts: &Options) -> Result<PlannedFolder<'c>> {
    let model = folder_model(o)?;
    let (p, opt_path) = (&o.optimizer()?.pickle, o.opt_path.as_path());
    let param_shape = |name: &str| model.params.shape(name);
    let old_rows = model.vocabulary.rows;
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(o.dir)
        .map_err(|e| Error::io(o.dir, "list", e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let target = target_rows(opts, &mut inputs)?;
    refuse_cut(o.dir, &model.vocabulary, target, opts)?;
    let row_counts = [old_rows, target];
    let mut inconsistent: Vec<Finding> = model_findings(&model.all, &model.vocab_names, target);

    let found = [FoundOpt::new(
        p,
        p.root,
        String::new(),
        (p.root, String::new()),
    )];
    // Trainer's groups do not follow the weights file's order: no positional rule.
    let m = matched(
        opt_path,
        o.optimizer()?,
        &found,
        &model.params,
        "",
        false,
        opts,
    )?;
    other_misfits(
        opt_path,
        p,
        &found,
        &m.all,
        &model.params.vocab,
        &param_shape,
    )?;
    let mapping = (&m.mappings[0], &m.same_shape[0][..]);
    let moments = misfits(p, &found[0], mapping, &param_shape, &row_counts, target);
    inconsistent.extend(moments.into_iter().map(|mut f| {
        f.tensor = format!("{OPTIMIZER}: {}", f.tensor);
        f
    }));
    let mut rep = optimizer_report(p, (0, &found[0]), &m, opts.optimizer);
    rep.key = OPTIMIZER.into();
    let sides = (&model, &found[..], &m);
    let mut optimizer = plan_optimizer(o, sides, &inconsistent, target, opts, &mut rep)?;
    let nonfinite = nonfinite_or_in_write(o, optimizer.as_mut(), opts)?;

    // The model's new rows (the same init options as extend-embeddings).
    let mut fallbacks = Vec::new();
    let how = init_options(opts);
    let init = rows::resolve_init(&how, old_rows, target, &mut inputs, &mut fallbacks)?;
    let write = WriteOptions {
        open: opts.open.clone(),
        ..WriteOptions::default()
    };
    let (resizes, model_changed) = plan_model_rows(o.model, &model, target)?;
    let mut tensors = model_tensors(o.model, &model_changed);
    if let Some(plan) = &optimizer {
        tensors.extend(planned_tensors(opt_path, plan)?);
    }
    let mut report = Report {
        input: o.dir.to_path_buf(),
        format: o.model.format,
        output: None,
        model_key: file_name(&o.model.path),
        ties: model.ties.clone(),
        old_rows,
        target_rows: target,
        freeze_until_index: old_rows.min(target),
        inconsistent_before: inconsistent,
        model_changed,
        optimizers: vec![rep],
        scheduler: o
            .dir
            .join(SCHEDULER)
            .is_file()
            .then(|| (SCHEDULER.to_string(), opts.scheduler_action())),
        failed: opts.fail_on_nonfinite && !nonfinite.is_empty(),
        nonfinite,
        warnings: special_ids_past(o.dir, o.config.as_ref(), target),
        dry_run: opts.dry_run,
        carried: Vec::new(),
        left_out: Vec::new(),
        edited: Vec::new(),
        tensors,
        manifest: Vec::new(),
        removed: dropped_state(o, optimizer.is_none()),
    };
    report.left_out = left_out(o.dir, &report, opts);
    Ok(PlannedFolder {
        config: config_text(o, target)?,
        report,
        opened: o,
        resizes,
        init,
        write,
        ties: model.ties,
        target,
        optimizer,
        inputs,
    })
}

/// optimizer.pt's tensors when the optimizer is dropped (the file is left out), each as a
/// `removed` edit named as in the file, its role by [`dropped_role`].
fn dropped_state(o: &Opened<'_>, dropped: bool) -> Vec<Edit> {
    if !dropped {
        return Vec::new();
    }
    o.optim
        .tensors()
        .map(|x| {
            let role = dropped_role(x.name, x.shape, x.name.starts_with("state."));
            Edit::removed(x.name, role, x.shape)
        })
        .collect()
}

/// NaN/Inf in the weights (counted here) and the moments: optimizer.pt's writer counts those as
/// it copies (`optimizer.scan`), unless the run decides before writing (a dry run,
/// `--fail-on-nonfinite`) or the optimizer is dropped.
fn nonfinite_or_in_write<'c>(
    o: &'c Opened<'c>,
    optimizer: Option<&mut TorchLayout<'c>>,
    opts: &Options,
) -> Result<Vec<super::report::NonFinite>> {
    let mut nonfinite = scan_nonfinite(o.model.tensors())?;
    match optimizer {
        Some(plan) if !(opts.dry_run || opts.fail_on_nonfinite) => {
            plan.scan = o.optim.tensors().collect();
        }
        _ => nonfinite.extend(scan_nonfinite(o.optim.tensors())?),
    }
    Ok(nonfinite)
}

/// optimizer.pt's plan: its matched moments repaired (and the coverage rule checked over it),
/// kept as it is (refused when a moment does not fit), or none when dropped.
fn plan_optimizer<'c>(
    o: &'c Opened<'c>,
    (model, found, m): (&FolderModel, &[FoundOpt], &Matched),
    inconsistent: &[Finding],
    target: u64,
    opts: &Options,
    rep: &mut OptimizerReport,
) -> Result<Option<TorchLayout<'c>>> {
    let t = o.optimizer()?;
    let p = &t.pickle;
    let mut plan = TorchLayout::try_identity(t)?;
    match opts.optimizer {
        OptimizerAction::Drop => {
            rep.kept_state_entries = 0;
            return Ok(None);
        }
        OptimizerAction::Keep => {
            refuse_keep(inconsistent, OPTIMIZER, target)?;
            return Ok(Some(plan));
        }
        OptimizerAction::Repair => {}
    }
    let param_shape = |name: &str| model.params.shape(name);
    let row_counts = [model.vocabulary.rows, target];
    let file = (p, t, o.optim);
    let mapping = &m.mappings[0];
    repair(
        &o.opt_path,
        file,
        &found[0],
        mapping,
        &param_shape,
        &row_counts,
        target,
        1,
        &mut plan,
        rep,
    )?;
    let keep = kept_on_purpose(p, found, &m.all, &model.all, &opts.keep);
    let (old_rows, names) = (model.vocabulary.rows, &model.vocab_names);
    coverage(&o.opt_path, &plan, old_rows, target, names, o.model, &keep)?;
    Ok(Some(plan))
}

/// The vocabulary parameters to grow or cut, and every weight that changes with them (ties
/// follow their first name).
fn plan_model_rows<'c>(
    ckpt: &'c Tensors,
    model: &FolderModel,
    target: u64,
) -> Result<(Vec<Resize<'c>>, Vec<Resized>)> {
    let mut model_changed = Vec::new();
    let mut resizes = Vec::new();
    for name in &model.params.vocab {
        let Some(x) = ckpt.tensor(name) else {
            continue;
        };
        if x.shape[0] == target {
            continue;
        }
        let role = model
            .vocabulary
            .tensors
            .iter()
            .find(|v| &v.name == name)
            .map_or(Role::Embedding, |v| v.role);
        resizes.push(Resize::new(x, role, x.shape[0], target)?);
        let followers = model
            .ties
            .iter()
            .filter(|t| t.first() == name)
            .flat_map(|t| t.names[1..].iter());
        for n in std::iter::once(name).chain(followers) {
            let mut new_shape = x.shape.to_vec();
            new_shape[0] = target;
            model_changed.push(Resized {
                tensor: n.clone(),
                old_shape: x.shape.to_vec(),
                new_shape,
                fill: None,
            });
        }
    }
    if let Some(x) = model.logits_bias.as_deref().and_then(|n| ckpt.tensor(n)) {
        let rows = x.rows_view();
        if rows.shape[0] != target {
            resizes.push(Resize::new(rows, Role::HeadBias, rows.shape[0], target)?);
            model_changed.push(Resized {
                tensor: x.name.to_string(),
                old_shape: x.shape.to_vec(),
                new_shape: vocab::with_rows(x.name, x.shape, target),
                fill: None,
            });
        }
    }
    Ok((resizes, model_changed))
}

/// Every weight the model files will hold: the changed ones at their new shapes.
fn model_tensors(ckpt: &Tensors, changed: &[Resized]) -> Vec<PlannedTensor> {
    ckpt.tensors()
        .map(|x| PlannedTensor {
            name: x.name.to_string(),
            dtype: x.dtype,
            shape: changed
                .iter()
                .find(|c| c.tensor == x.name)
                .map_or_else(|| x.shape.to_vec(), |c| c.new_shape.clone()),
        })
        .collect()
}

/// The files left out of the output (those the folder has): the optimizer and scheduler when
/// dropped.
fn left_out(dir: &Path, report: &Report, opts: &Options) -> Vec<Left> {
    let mut stale: Vec<(&str, &str)> = Vec::new();
    if opts.optimizer == OptimizerAction::Drop {
        stale.push((
            OPTIMIZER,
            "dropped (--optimizer drop): Trainer starts a fresh optimizer when there is none",
        ));
        stale.push((
            SCHEDULER,
            "dropped with the optimizer: its learning-rate state belongs to it",
        ));
    } else if report
        .scheduler
        .as_ref()
        .is_some_and(|s| s.1 == SchedulerAction::Drop)
    {
        stale.push((SCHEDULER, "dropped (--scheduler drop)"));
    }
    stale
        .into_iter()
        .filter(|(n, _)| dir.join(n).exists())
        .map(|(n, why)| Left {
            name: n.into(),
            why: why.into(),
        })
        .collect()
}

/// Special-token ids in the folder's config.json (`config`, as read) and generation_config.json
/// at or past `target` (a cut with --allow-shrink can leave them pointing past the table): one
/// warning each.
fn special_ids_past(dir: &Path, config: Option<&Value>, target: u64) -> Vec<String> {
    let generation = std::fs::read(dir.join("generation_config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let files = [
        ("config.json", config),
        ("generation_config.json", generation.as_ref()),
    ];
    let mut out = Vec::new();
    for (file, v) in files {
        for (_, key, ids, _) in v.map(token_ids).unwrap_or_default() {
            for id in ids.into_iter().filter(|&id| id >= target) {
                out.push(format!(
                    "{file}: {key} {id} is past the {target} rows the weights will have: point it at a token the tokenizer has (check-vocab on the output says which)"
                ));
            }
        }
    }
    out
}

/// config.json with its vocabulary size set to the target, every other byte as read (none when
/// the folder has none).
fn config_text(o: &Opened<'_>, target: u64) -> Result<Option<JsonEdit>> {
    if o.config.is_none() {
        return Ok(None);
    }
    resize_config_in(o.dir, target)
}

/// Write the planned folder (nothing for `--dry-run` or when `--fail-on-nonfinite` failed):
/// beside `out`, every file verified, then renamed into place.
pub fn execute(plan: PlannedFolder<'_>, out: &Path, opts: &Options) -> Result<Report> {
    if opts.dry_run || plan.report.failed {
        let mut report = plan.report;
        // The plan's config.json edit, as the run reports it (the file by its path in the output).
        if let Some(c) = plan
            .config
            .filter(|c| opts.dry_run && !c.changes.is_empty())
        {
            report.edited.push(crate::output::json_text::EditedFile {
                file: out.join("config.json"),
                changes: c.changes,
            });
        }
        return Ok(report);
    }
    let protected: Vec<&Path> = plan.inputs.iter().map(PathBuf::as_path).collect();
    let w = FolderWrite {
        dir: plan.opened.dir,
        model: plan.opened.model,
        resizes: &plan.resizes,
        init: &plan.init,
        ties: &plan.ties,
        target: plan.target,
        write: &plan.write,
        optimizer: plan.optimizer.as_ref(),
        globals: &opts.open.globals,
        config: plan.config.as_ref(),
        tokenizer: match &opts.target {
            RowsFrom::Tokenizer(tk) => Some(tk.as_path()),
            _ => None,
        },
        left_names: plan
            .report
            .left_out
            .iter()
            .map(|l| l.name.clone())
            .collect(),
        protected: &protected,
        overwrite: opts.overwrite,
    };
    let written = write_folder(&w, out)?;
    let mut report = plan.report;
    report.nonfinite.extend(found_nonfinite(written.nonfinite));
    report.carried = written.carried;
    report.left_out.extend(written.left_out);
    report.edited = written.edited;
    report.manifest = written.manifest;
    report.output = Some(out.to_path_buf());
    Ok(report)
}
