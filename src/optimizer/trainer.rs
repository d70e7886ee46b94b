//! sanitize-checkpoint on a Hugging Face Trainer checkpoint folder (`checkpoint-N/`): the model
//! (model.safetensors, sharded, or pytorch_model.bin) grown as extend-embeddings grows it, the
//! optimizer (optimizer.pt, a bare optimizer state dict) repaired for the grown parameters,
//! config.json updated, the merged tokenizer put in place, and scheduler.pt, rng_state*.pth,
//! trainer_state.json, training_args.bin (a pickle: its bytes are copied, never read) carried.
//!
//! Trainer numbers the optimizer's parameters group by group (weight decay first, then biases
//! and norms), not in the weights file's order: parameters are matched by shape and ties only,
//! and refused when two candidates remain.

use super::matching::{match_params, ModelParams};
use super::sanitize::{
    coverage, kept_on_purpose, misfits, model_findings, optimizer_report, other_misfits, repair,
    scan_nonfinite, target_rows, Finding, OptimizerAction, Options, Parameters, Report, Resized,
    RowsFrom, SchedulerAction,
};
use super::state::{is_optimizer, FoundOpt};
use crate::embeddings::{self, init::Init, Resize, Target};
use crate::error::{Error, Result};
use crate::formats::torch::writer::TorchPlan;
use crate::formats::{self, Checkpoint};
use crate::output::folder::AtomicFolder;
use crate::output::later::Later;
use crate::output::model_folder as folder;
use crate::output::torch::write_torch;
use crate::ties;
use crate::vocab::{self, Role};
use serde_json::Value;
use std::path::{Path, PathBuf};

const OPTIMIZER: &str = "optimizer.pt";
const SCHEDULER: &str = "scheduler.pt";

/// Refuse what this job cannot repair, saying what to do instead.
fn refuse_unsupported(dir: &Path) -> Result<()> {
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

/// Sanitize the Trainer checkpoint folder `dir` into the folder `out`.
pub(super) fn run(dir: &Path, out: &Path, opts: &Options) -> Result<Report> {
    refuse_unsupported(dir)?;
    let model: Checkpoint = formats::open_with(dir, &opts.open)?;
    let opt_path = dir.join(OPTIMIZER);
    let optim: Checkpoint = formats::open_with(&opt_path, &opts.open)?;
    let t = optim
        .torch
        .first()
        .ok_or_else(|| Error::format(&opt_path, "not a torch file"))?;
    let p = &t.pickle;
    if !is_optimizer(p, p.root) {
        return Err(Error::format(
            &opt_path,
            "not an optimizer state dict ({\"state\": …, \"param_groups\": […]})",
        ));
    }
    let config_path = Some(dir.join("config.json")).filter(|c| c.is_file());
    let config: Option<Value> = match &config_path {
        Some(c) => Some(
            serde_json::from_str(&std::fs::read_to_string(c).map_err(|e| Error::io(c, "read", e))?)
                .map_err(|e| Error::format(c, format!("not valid JSON: {e}")))?,
        ),
        None => None,
    };

    // The model's parameters as the optimizer sees them: a tie is one parameter.
    let model_all: Vec<(String, Vec<u64>)> = model
        .tensors()
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let det = vocab::detect(model_all.iter().map(|(n, s)| (n.as_str(), s.as_slice())));
    let Some(vocabulary) = det.vocabulary else {
        return Err(Error::format(
            &model.path,
            "the model's vocabulary matrices are not found or ambiguous (see inspect-checkpoint)",
        ));
    };
    let model_ties = ties::find(&model, Some(&vocabulary), config.as_ref());
    let vocab_names: Vec<String> = vocabulary.tensors.iter().map(|x| x.name.clone()).collect();
    let parameters = Parameters::new(&model_all, &vocab_names, &model_ties);
    let (params, vocab_reps) = (&parameters.list, &parameters.vocab);
    let old_rows = vocabulary.rows;
    let param_shape = |name: &str| parameters.shape(name);

    let mut inputs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, "list", e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let target = target_rows(opts, &mut inputs)?;
    let row_counts = [old_rows, target];
    let mut inconsistent: Vec<Finding> = model_findings(&model_all, &vocab_names, target);

    let found = FoundOpt::new(p, p.root, String::new(), (p.root, String::new()));
    let found = [found];
    let (mappings, how, all) = if opts.optimizer == OptimizerAction::Drop {
        (
            vec![Vec::new()],
            "not needed (dropped)".to_string(),
            Vec::new(),
        )
    } else {
        // Trainer's groups do not follow the weights file's order: no positional rule.
        let m = ModelParams {
            list: params,
            vocab: vocab_reps,
            prefix: "",
        };
        let r = match_params(&opt_path, p, &found, &m, false, &opts.optimizer_params)?;
        (r.mappings, r.how, r.all)
    };
    other_misfits(&opt_path, p, &found, &all, vocab_reps, &param_shape)?;
    let mapping = &mappings[0];
    inconsistent.extend(
        misfits(p, &found[0], mapping, &param_shape, &row_counts, target)
            .into_iter()
            .map(|mut f| {
                f.tensor = format!("{OPTIMIZER}: {}", f.tensor);
                f
            }),
    );
    let mut rep = optimizer_report(p, &found[0], mapping, opts.optimizer, &how);
    rep.key = OPTIMIZER.into();

    let nonfinite_found = scan_nonfinite(model.tensors().chain(optim.tensors()))?;

    // The optimizer plan, and the coverage rule over it.
    let mut plan = TorchPlan::identity(t);
    match opts.optimizer {
        OptimizerAction::Repair => repair(
            &opt_path,
            (p, t, &optim),
            &found[0],
            mapping,
            &param_shape,
            &row_counts,
            target,
            1,
            &mut plan,
            &mut rep,
        )?,
        OptimizerAction::Drop => rep.kept_state_entries = 0,
        OptimizerAction::Keep => {
            if let Some(f) = inconsistent
                .iter()
                .find(|f| f.tensor.starts_with(OPTIMIZER))
            {
                return Err(Error::Usage(format!(
                    "--optimizer keep: {} has shape {:?} but the target is {target} rows; use --optimizer repair or drop",
                    f.tensor, f.found_shape
                )));
            }
        }
    }
    if opts.optimizer == OptimizerAction::Repair {
        let keep = kept_on_purpose(p, &found, &all, &model_all, &opts.keep);
        coverage(
            &opt_path,
            &plan,
            old_rows,
            target,
            &vocab_names,
            &model,
            &keep,
        )?;
    }

    // The model's new rows (the same init options as extend-embeddings).
    let eopts = embeddings::Options {
        method: opts.method.clone(),
        seed: opts.seed,
        target: match &opts.target {
            RowsFrom::Tokenizer(tk) => Target::Tokenizer(tk.clone()),
            _ => Target::Rows(target),
        },
        open: opts.open.clone(),
        ..Default::default()
    };
    let mut fallbacks = Vec::new();
    let init: Init =
        embeddings::resolve_init(&eopts, old_rows, target, &mut inputs, &mut fallbacks)?;
    let mut model_changed = Vec::new();
    let mut resizes = Vec::new();
    for name in vocab_reps {
        let Some(x) = model.tensor(name) else {
            continue;
        };
        if x.shape[0] == target {
            continue;
        }
        let role = vocabulary
            .tensors
            .iter()
            .find(|v| &v.name == name)
            .map_or(Role::Embedding, |v| v.role);
        resizes.push(Resize::new(x, role, x.shape[0], target)?);
        let followers: Vec<&String> = model_ties
            .iter()
            .filter(|t| t.first() == name)
            .flat_map(|t| t.names[1..].iter())
            .collect();
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

    let failed = opts.fail_on_nonfinite && !nonfinite_found.is_empty();
    let mut report = Report {
        input: dir.to_path_buf(),
        format: model.format,
        output: None,
        model_key: embeddings::file_name(&model.path),
        ties: model_ties.clone(),
        old_rows,
        target_rows: target,
        freeze_until_index: old_rows.min(target),
        inconsistent_before: inconsistent,
        model_changed,
        optimizers: vec![rep],
        scheduler: dir.join(SCHEDULER).is_file().then(|| {
            (
                SCHEDULER.to_string(),
                if opts.optimizer == OptimizerAction::Drop {
                    SchedulerAction::Drop
                } else {
                    opts.scheduler
                },
            )
        }),
        nonfinite: nonfinite_found,
        warnings: Vec::new(),
        dry_run: opts.dry_run,
        failed,
        carried: Vec::new(),
        left_out: Vec::new(),
        tensors: Vec::new(),
        manifest: Vec::new(),
    };
    if opts.dry_run || failed {
        return Ok(report);
    }

    // Everything is planned: now the folder.
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    crate::output::folder::folder_destination_name(out)?;
    let out_folder = AtomicFolder::create(out, &protected, opts.overwrite)?;
    let tails: Vec<Later> = resizes
        .iter()
        .map(|r| {
            r.compute(&init, &embeddings::device::Device::cpu(None))
                .map(|(b, _)| Later::ready(b))
        })
        .collect::<Result<_>>()?;
    let new_bytes = embeddings::grown_map(&resizes, &tails, &model_ties);
    let weights_dest = match model.index {
        None => out_folder.join(&embeddings::file_name(&model.path)),
        Some(_) => out_folder.path().to_path_buf(),
    };
    let mut manifest =
        embeddings::write(&model, &weights_dest, new_bytes, target, &eopts, &protected)
            .map_err(|e| out_folder.about(e))?;
    let mut written: Vec<String> = manifest
        .iter()
        .map(|m| embeddings::file_name(&m.path))
        .collect();
    if model.index.is_some() {
        written.push(embeddings::file_name(&model.path));
    }
    let mut stale: Vec<(String, String)> = Vec::new();
    match opts.optimizer {
        OptimizerAction::Drop => {
            stale.push((
                OPTIMIZER.into(),
                "dropped (--optimizer drop): Trainer starts a fresh optimizer when there is none"
                    .into(),
            ));
            stale.push((
                SCHEDULER.into(),
                "dropped with the optimizer: its learning-rate state belongs to it".into(),
            ));
        }
        _ => {
            let dest = out_folder.join(OPTIMIZER);
            manifest.push(
                write_torch(&plan, &dest, &protected, &opts.open.globals)
                    .map_err(|e| out_folder.about(e))?,
            );
            written.push(OPTIMIZER.into());
        }
    }
    if report
        .scheduler
        .as_ref()
        .is_some_and(|s| s.1 == SchedulerAction::Drop)
        && opts.optimizer != OptimizerAction::Drop
    {
        stale.push((SCHEDULER.into(), "dropped (--scheduler drop)".into()));
    }
    let config_text = match config {
        Some(mut c) => {
            embeddings::update_config(&mut c, target);
            let mut text =
                serde_json::to_string_pretty(&c).map_err(|e| Error::format(dir, e.to_string()))?;
            text.push('\n');
            Some(text)
        }
        None => None,
    };
    for (n, why) in stale {
        if dir.join(&n).exists() {
            written.push(n.clone());
            report
                .left_out
                .push(crate::output::folder::Left { name: n, why });
        }
    }
    let merged = match &opts.target {
        RowsFrom::Tokenizer(tk) => Some(crate::tokenizer::base::folder_file(tk)?),
        _ => None,
    };
    let done = folder::finish(
        &out_folder,
        dir,
        &mut written,
        config_text.as_deref(),
        merged.as_ref(),
        &protected,
        false,
    )?;
    report.carried = done.carried;
    report.left_out.extend(done.left_out);
    let tmp = out_folder.path().to_path_buf();
    out_folder.commit()?;
    for m in &mut manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    report.manifest = manifest;
    report.output = Some(out.to_path_buf());
    Ok(report)
}
