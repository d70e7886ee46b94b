//! sanitize-checkpoint's planning and writing for a torch training checkpoint file. torch's
//! `Optimizer.load_state_dict` checks only group and parameter counts, never shapes, so moments
//! sized for the old vocabulary load silently and break at `step()` or learn nothing (seed 001).
//! The plan brings the model's vocabulary matrices and the matching moments to the target rows
//! (or drops the optimizer), keeping every other byte, and scans for NaN/Inf:
//! [`plan_file`] decides, [`execute_file`] writes ([`write_file`]: the file as the plan laid it
//! out, grown weights and moments inside it, its NaN/Inf counted as it is copied).

use super::options::{OptimizerAction, Options, SchedulerAction};
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
use crate::formats::torch::optimizer::state::{find_optimizers, FoundOpt, Mapping, MODEL_KEYS};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Pickle};
use crate::formats::torch::write::write_torch_scanning;
pub use crate::formats::torch::write::TorchWritten;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::torch::TorchFile;
use crate::formats::vocabulary::select;
use crate::formats::{Format, Tensors};
use crate::plan::Edit;
use crate::rows;
use crate::rows::init::Init;
use crate::rows::resize::resized_rows;
use crate::ties::{self, Tie};
use crate::vocab::{self, Role};
use std::path::{Path, PathBuf};

fn first_key(p: &Pickle, root: Id, keys: &[&str]) -> Option<(String, Id)> {
    keys.iter()
        .find_map(|k| p.get(root, k).map(|id| (k.to_string(), id)))
}

/// What sanitize-checkpoint will do to a torch training checkpoint file, decided before anything
/// is written ([`plan_file`] only reads): the report as the run gives it and the writer's plan.
pub struct PlannedFile<'c> {
    pub report: Report,
    torch: TorchLayout<'c>,
    /// Every file read: none of them may be the output.
    inputs: Vec<PathBuf>,
    /// The NaN/Inf scan is left to the writer (`torch.scan`), which counts as it copies.
    scan_in_write: bool,
}

/// A torch training checkpoint file: [`plan_file`], then [`execute_file`] (a Trainer folder goes
/// to [`super::trainer`]; the job, `jobs::sanitize_checkpoint::run`, sends each).
pub fn run_file(ckpt: &Tensors, out: &Path, opts: &Options) -> Result<Report> {
    let plan = plan_file(ckpt, &ckpt.path, opts)?;
    execute_file(plan, out, opts)
}

/// Write the planned file (nothing for `--dry-run` or when `--fail-on-nonfinite` failed).
pub fn execute_file(plan: PlannedFile<'_>, out: &Path, opts: &Options) -> Result<Report> {
    let PlannedFile {
        mut report,
        torch,
        inputs,
        scan_in_write,
    } = plan;
    if opts.dry_run || report.failed {
        return Ok(report);
    }
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let written = write_file(&torch, out, &protected, &opts.open.globals, opts.overwrite)?;
    if scan_in_write {
        report.nonfinite = found_nonfinite(written.nonfinite);
    }
    report.manifest = vec![written.manifest];
    report.output = Some(out.to_path_buf());
    Ok(report)
}

/// The model's key in the checkpoint and its tensors (name, shape).
#[allow(clippy::type_complexity)]
fn model_of(ckpt: &Tensors, input: &Path) -> Result<(String, Vec<(String, Vec<u64>)>)> {
    if !matches!(ckpt.format, Format::TorchZip | Format::TorchLegacy) {
        return Err(Error::unsupported(
            input,
            format!(
                "sanitize-checkpoint reads a torch training checkpoint (.pt/.pth/.ckpt), not {}",
                ckpt.format.name()
            ),
        ));
    }
    let p = &ckpt.torch[0].pickle;
    let Some((model_key, _)) = first_key(p, p.root, &MODEL_KEYS) else {
        return Err(Error::format(input, "no model weights under 'model', 'state_dict', 'module' or 'model_state_dict': not a training checkpoint"));
    };
    let prefix = format!("{model_key}.");
    let model_all = ckpt
        .tensors()
        .filter(|x| x.name.starts_with(&prefix))
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    Ok((model_key, model_all))
}

/// The vocabulary matrices: detected, or named with `--tensor` (all of the model, one row count).
fn file_vocabulary(
    ckpt: &Tensors,
    input: &Path,
    opts: &Options,
    model_all: &[(String, Vec<u64>)],
    model_key: &str,
) -> Result<vocab::Vocabulary> {
    if opts.tensors.is_empty() {
        let det = vocab::detect(model_all.iter().map(|(n, s)| (n.as_str(), s.as_slice())));
        if let Some(v) = &det.vocabulary {
            crate::formats::vocabulary::refuse_per_token_elsewhere(ckpt, v.rows)?;
        }
        return det.vocabulary.ok_or_else(|| {
            Error::format(
                input,
                "the model's vocabulary matrices are not found or ambiguous (see inspect-checkpoint; name them with --tensor)",
            )
        });
    }
    let prefix = format!("{model_key}.");
    let mut tensors = Vec::new();
    for (n, role) in select(ckpt, &opts.tensors)? {
        let Some(t) = ckpt.tensor(&n).filter(|_| n.starts_with(&prefix)) else {
            return Err(Error::arg(
                "--tensor",
                format!("--tensor {n}: not a tensor of the model under '{model_key}'"),
            ));
        };
        let shape = t.shape.to_vec();
        tensors.push(vocab::VocabTensor {
            name: n,
            role,
            shape,
        });
    }
    let rows = tensors.first().map_or(0, |t| t.shape[0]);
    if let Some(t) = tensors.iter().find(|t| t.shape[0] != rows) {
        return Err(Error::arg(
            "--tensor",
            format!(
                "--tensor {}: {} rows, but {} has {rows}: name tensors of one vocabulary",
                t.name, t.shape[0], tensors[0].name
            ),
        ));
    }
    Ok(vocab::Vocabulary { rows, tensors })
}

/// Ties: names viewing one storage the same way are one parameter (the optimizer holds it once,
/// under its first name); the others follow it.
fn model_ties(ckpt: &Tensors, prefix: &str) -> Vec<Tie> {
    ties::same_storage(ckpt)
        .into_iter()
        .filter_map(|mut t| {
            t.names.retain(|n| n.starts_with(prefix));
            (t.names.len() > 1).then_some(t)
        })
        .collect()
}

/// What the model's vocabulary plan needs to know.
struct ModelRows<'a> {
    input: &'a Path,
    prefix: &'a str,
    vocabulary: &'a vocab::Vocabulary,
    model_all: &'a [(String, Vec<u64>)],
    found: &'a [FoundOpt],
    target: u64,
    segments: u64,
}

/// Grow or cut every vocabulary parameter in the plan, and every other copy of the model (an
/// EMA, shadow weights: the same names under another key), with the same new rows.
fn plan_model_rows<'c>(
    ckpt: &'c Tensors,
    m: &ModelRows<'_>,
    vocab_reps: &[String],
    init: &Init,
    plan: &mut TorchLayout<'c>,
) -> Result<Vec<Resized>> {
    let t = &ckpt.torch[0];
    let model_tensors: Vec<&str> = m.model_all.iter().map(|(n, _)| n.as_str()).collect();
    let opt_prefixes: Vec<String> = m.found.iter().map(|o| format!("{}.", o.key)).collect();
    let mut changed = Vec::new();
    for name in vocab_reps {
        let Some(x) = ckpt.tensor(name) else { continue };
        if x.shape[0] == m.target {
            continue;
        }
        let role = m
            .vocabulary
            .tensors
            .iter()
            .find(|v| &v.name == name)
            .map_or(Role::Embedding, |v| v.role);
        let rows = resized_rows(x, role, x.shape[0], m.target, init, m.segments)?;
        let rel = &name[m.prefix.len()..];
        let copies: Vec<String> = ckpt
            .tensors()
            .filter(|c| {
                !model_tensors.contains(&c.name)
                    && !opt_prefixes.iter().any(|o| c.name.starts_with(o.as_str()))
                    && c.name.ends_with(&format!(".{rel}"))
                    && c.shape == x.shape
                    && c.dtype == x.dtype
            })
            .map(|c| c.name.to_string())
            .collect();
        // Each copy keeps its own old rows and takes the model's new rows (an EMA of a new
        // parameter starts as the parameter). Same shape and dtype as the model's tensor, so
        // the shorter of the two byte runs is exactly the rows both keep.
        for c in &copies {
            let Some(ct) = ckpt.tensor(c) else { continue };
            plan.replace_rows(t, c, m.target, rows.payload(&ct)?)
                .map_err(|e| Error::format(m.input, e))?;
        }
        let tied = plan
            .replace_rows(t, name, m.target, rows.payload(&x)?)
            .map_err(|e| Error::format(m.input, e))?;
        for n in std::iter::once(name).chain(&copies).chain(tied.iter()) {
            let mut new_shape = x.shape.to_vec();
            new_shape[0] = m.target;
            changed.push(Resized {
                tensor: n.clone(),
                old_shape: x.shape.to_vec(),
                new_shape,
                fill: None,
            });
        }
    }
    Ok(changed)
}

/// Each optimizer repaired, dropped or kept as `--optimizer` says.
#[allow(clippy::too_many_arguments)]
fn plan_optimizers<'c>(
    ckpt: &'c Tensors,
    m: &ModelRows<'_>,
    mappings: &[Mapping],
    params: &Parameters,
    row_counts: &[u64],
    inconsistent: &[Finding],
    opts: &Options,
    plan: &mut TorchLayout<'c>,
    reports: &mut [OptimizerReport],
) -> Result<()> {
    let (t, input) = (&ckpt.torch[0], m.input);
    let p = &t.pickle;
    let param_shape = |name: &str| params.shape(name);
    let mut dropped: Vec<(Id, String)> = Vec::new();
    for ((o, mapping), rep) in m.found.iter().zip(mappings).zip(reports.iter_mut()) {
        match opts.optimizer {
            OptimizerAction::Repair => {
                let file = (p, t, ckpt);
                let (rows, target) = (row_counts, m.target);
                repair(
                    input,
                    file,
                    o,
                    mapping,
                    &param_shape,
                    rows,
                    target,
                    m.segments,
                    plan,
                    rep,
                )?;
            }
            OptimizerAction::Drop => {
                if !dropped.contains(&o.drop) {
                    plan.pickle.remove_key(o.drop.0, &o.drop.1);
                    dropped.push(o.drop.clone());
                }
                rep.kept_state_entries = 0;
            }
            OptimizerAction::Keep => refuse_keep(inconsistent, &format!("{}.", o.key), m.target)?,
        }
    }
    Ok(())
}

/// The scheduler: dropped with the optimizer or by `--scheduler drop`; its report line.
fn plan_scheduler(
    sched: Option<(String, Id)>,
    opts: &Options,
    plan: &mut TorchLayout<'_>,
) -> Option<(String, SchedulerAction)> {
    let (key, _) = sched?;
    let action = opts.scheduler_action();
    if action == SchedulerAction::Drop {
        plan.pickle.remove_key(plan.pickle.root, &key);
    }
    Some((key, action))
}

/// The model inside the file, as the plan sees it.
struct FileModel {
    /// Where the model is in the file (`model`, `state_dict`, …).
    key: String,
    /// Every model tensor (name, shape), in the file's order.
    all: Vec<(String, Vec<u64>)>,
    vocabulary: vocab::Vocabulary,
    vocab_names: Vec<String>,
    ties: Vec<Tie>,
    params: Parameters,
}

fn file_model(ckpt: &Tensors, input: &Path, opts: &Options) -> Result<FileModel> {
    let (key, all) = model_of(ckpt, input)?;
    let vocabulary = file_vocabulary(ckpt, input, opts, &all, &key)?;
    let vocab_names: Vec<String> = vocabulary.tensors.iter().map(|x| x.name.clone()).collect();
    let ties = model_ties(ckpt, &format!("{key}."));
    let params = Parameters::new(&all, &vocab_names, &ties);
    Ok(FileModel {
        key,
        all,
        vocabulary,
        vocab_names,
        ties,
        params,
    })
}

/// Decide everything for a torch training checkpoint file: reads, writes nothing.
pub fn plan_file<'c>(ckpt: &'c Tensors, input: &Path, opts: &Options) -> Result<PlannedFile<'c>> {
    let model = file_model(ckpt, input, opts)?;
    let t: &TorchFile = &ckpt.torch[0];
    let p = &t.pickle;
    let prefix = format!("{}.", model.key);
    let old_rows = model.vocabulary.rows;
    let mut inputs: Vec<PathBuf> = vec![input.to_path_buf()];
    let target = target_rows(opts, &mut inputs)?;
    refuse_cut(input, &model.vocabulary, target, opts)?;
    let row_counts = [old_rows, target];
    let mut inconsistent = model_findings(&model.all, &model.vocab_names, target);
    let sched = first_key(p, p.root, &["scheduler", "lr_scheduler", "lr_schedulers"]);
    let opt = file_optimizers(input, t, &model, target, opts, &mut inconsistent)?;
    let (found, m, mut opt_reports) = (opt.found, opt.matched, opt.reports);
    // NaN/Inf in every floating tensor, weights and moments: counted now when the run decides
    // on them before writing (a dry run, --fail-on-nonfinite), otherwise by the writer as it
    // copies (one read of each input byte).
    let scan_in_write = !(opts.dry_run || opts.fail_on_nonfinite);
    let nonfinite = if scan_in_write {
        Vec::new()
    } else {
        scan_nonfinite(ckpt.tensors())?
    };

    // The plan: model rows, then moments, then what to drop.
    let mut plan = TorchLayout::try_identity(t)?;
    if scan_in_write {
        plan.scan = ckpt.tensors().collect();
    }
    let eopts = init_options(opts);
    let mut fallbacks = Vec::new();
    let init: Init = rows::resolve_init(&eopts, old_rows, target, &mut inputs, &mut fallbacks)?;
    let rows = ModelRows {
        input,
        prefix: &prefix,
        vocabulary: &model.vocabulary,
        model_all: &model.all,
        found: &found,
        target,
        segments: opts.segments,
    };
    let model_changed = plan_model_rows(ckpt, &rows, &model.params.vocab, &init, &mut plan)?;
    let reports = &mut opt_reports;
    let (mappings, params) = (&m.mappings, &model.params);
    plan_optimizers(
        ckpt,
        &rows,
        mappings,
        params,
        &row_counts,
        &inconsistent,
        opts,
        &mut plan,
        reports,
    )?;
    let scheduler = plan_scheduler(sched, opts, &mut plan);
    let mut warnings = Vec::new();
    if found.is_empty() {
        warnings.push("no optimizer state found: only the model weights were checked".into());
    }
    if opts.optimizer != OptimizerAction::Keep {
        let keep = kept_on_purpose(p, &found, &m.all, &model.all, &opts.keep);
        let names = &model.vocab_names;
        coverage(input, &plan, old_rows, target, names, ckpt, &keep)?;
    }
    let mut report = Report {
        input: input.to_path_buf(),
        format: ckpt.format,
        output: None,
        model_key: model.key,
        ties: model.ties,
        old_rows,
        target_rows: target,
        freeze_until_index: old_rows.min(target),
        inconsistent_before: inconsistent,
        model_changed,
        optimizers: opt_reports,
        scheduler,
        failed: opts.fail_on_nonfinite && !nonfinite.is_empty(),
        nonfinite,
        warnings,
        dry_run: opts.dry_run,
        carried: Vec::new(),
        left_out: Vec::new(),
        edited: Vec::new(),
        tensors: planned_tensors(input, &plan)?,
        manifest: Vec::new(),
        removed: Vec::new(),
    };
    report.removed = left_out_tensors(ckpt, &report.tensors, &found);
    Ok(PlannedFile {
        report,
        torch: plan,
        inputs,
        scan_in_write,
    })
}

/// The file's tensors the plan leaves out (a dropped optimizer's state, a dropped scheduler's
/// tensors), each as a `removed` edit with its role by [`dropped_role`].
fn left_out_tensors(ckpt: &Tensors, planned: &[PlannedTensor], found: &[FoundOpt]) -> Vec<Edit> {
    let kept: std::collections::HashSet<&str> = planned.iter().map(|t| t.name.as_str()).collect();
    let of_optimizer = |n: &str| found.iter().any(|o| n.starts_with(&format!("{}.", o.key)));
    ckpt.tensors()
        .filter(|x| !kept.contains(x.name))
        .map(|x| {
            let role = dropped_role(x.name, x.shape, of_optimizer(x.name));
            Edit::removed(x.name, role, x.shape)
        })
        .collect()
}

/// The file's optimizers (wherever they are outside the model: one, or several as in GAN
/// vocoders), matched to the model's parameters, each with its report; what of their state does
/// not fit is added to `inconsistent`.
struct FileOptimizers {
    found: Vec<FoundOpt>,
    matched: Matched,
    reports: Vec<OptimizerReport>,
}

fn file_optimizers(
    input: &Path,
    t: &TorchFile,
    model: &FileModel,
    target: u64,
    opts: &Options,
    inconsistent: &mut Vec<Finding>,
) -> Result<FileOptimizers> {
    let p = &t.pickle;
    let found = find_optimizers(p, p.get(p.root, &model.key));
    let prefix = format!("{}.", model.key);
    let m = matched(input, t, &found, &model.params, &prefix, true, opts)?;
    let param_shape = |name: &str| model.params.shape(name);
    other_misfits(input, p, &found, &m.all, &model.params.vocab, &param_shape)?;
    let mut reports = Vec::new();
    let row_counts = [model.vocabulary.rows, target];
    for (k, o) in found.iter().enumerate() {
        let mapping = (&m.mappings[k], &m.same_shape[k][..]);
        inconsistent.extend(misfits(p, o, mapping, &param_shape, &row_counts, target));
        reports.push(optimizer_report(p, (k, o), &m, opts.optimizer));
    }
    Ok(FileOptimizers {
        found,
        matched: m,
        reports,
    })
}

/// Write `torch` to the file `out` (a torch file's name, as the input is; replaced only with
/// `overwrite`), none of `protected` being it.
pub fn write_file(
    torch: &TorchLayout<'_>,
    out: &Path,
    protected: &[&Path],
    globals: &GlobalPolicy,
    overwrite: bool,
) -> Result<TorchWritten> {
    crate::output::folder::file_destination(
        out,
        protected,
        "a torch file, as the input is",
        &["pt", "pth", "ckpt", "bin", "tar"],
        overwrite,
    )?;
    write_torch_scanning(torch, out, protected, globals)
}
