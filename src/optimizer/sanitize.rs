//! The `sanitize-checkpoint` job. torch's `Optimizer.load_state_dict` checks only group and
//! parameter counts, never shapes, so moments sized for the old vocabulary load silently and
//! break at `step()` or learn nothing (seed 001). This job brings the model's vocabulary matrices
//! and the matching moments to the target rows (or drops the optimizer), keeping every other
//! byte, and scans for NaN/Inf.

use super::matching::{match_params, ModelParams};
use super::state::*;
pub use super::state::{has_optimizer, DROP_REMEDY};
use crate::dtype;
use crate::embeddings::{self, init::Init, Method, Target};
use crate::error::{Error, Result};
use crate::formats::torch::value::{Id, Pickle};
use crate::formats::torch::writer::TorchPlan;
use crate::formats::torch::TorchFile;
use crate::formats::{self, Checkpoint, Format, OpenOptions, TensorRef};
use crate::output::folder::{Carried, Left};
use crate::output::manifest::FileManifest;
use crate::output::torch::write_torch;
use crate::ties::{self, Tie};
use crate::vocab::{self, Role};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to do with the optimizer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerAction {
    /// Resize the moments of the resized parameters; keep everything else.
    Repair,
    /// Remove optimizer and scheduler (a fresh optimizer, as seed 001 ended up doing).
    Drop,
    /// Leave them (refused unless they already fit).
    Keep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerAction {
    Keep,
    Drop,
}

/// Where the target rows come from.
#[derive(Debug, Clone)]
pub enum RowsFrom {
    Rows(u64),
    Tokenizer(PathBuf),
    /// A checkpoint of the new model: its vocabulary rows.
    Model(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub target: RowsFrom,
    pub optimizer: OptimizerAction,
    pub scheduler: SchedulerAction,
    pub method: Method,
    pub seed: u64,
    pub fail_on_nonfinite: bool,
    pub dry_run: bool,
    pub open: OpenOptions,
    /// Tensors that may keep the old vocabulary rows on purpose (the coverage rule skips them).
    pub keep: Vec<String>,
    /// Replace an existing output file or non-empty output folder.
    pub overwrite: bool,
    /// The vocabulary tensors by name (dotted paths), instead of the detected ones.
    pub tensors: Vec<String>,
    /// The vocabulary matrices are this many equal segments (codebooks), each grown at its end.
    pub segments: u64,
    /// Optimizer parameter indices named by the user (`--optimizer-param NAME=INDEX`), for a
    /// checkpoint that does not say which index holds which vocabulary matrix.
    pub optimizer_params: Vec<(String, u64)>,
}

/// A shape found where another was expected.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub tensor: String,
    pub expected_rows: u64,
    pub found_shape: Vec<u64>,
    /// Optimizer state (a moment), not a model weight.
    pub optimizer_state: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub tensor: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// Optimizer state: the value its new rows got (0; Adagrad's `sum`: its group's
    /// `initial_accumulator_value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NonFinite {
    pub tensor: String,
    pub nan: u64,
    pub inf: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OptimizerReport {
    pub key: String,
    pub action: OptimizerAction,
    pub param_groups: usize,
    pub params: usize,
    /// Optimizer parameter index → model tensor, for the vocabulary parameters.
    pub vocabulary_params: Vec<(u64, String)>,
    /// How the indices were matched: `position` (counts and shapes line up) or `shape`.
    pub matched_by: String,
    pub repaired: Vec<Resized>,
    /// Per-parameter state entries left byte-identical.
    pub kept_state_entries: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    pub model_key: String,
    /// The model's tied names (one storage): one parameter for the optimizer, grown once.
    pub ties: Vec<Tie>,
    pub old_rows: u64,
    pub target_rows: u64,
    pub freeze_until_index: u64,
    /// What did not fit before: each tensor, the rows expected, the shape found.
    pub inconsistent_before: Vec<Finding>,
    pub model_changed: Vec<Resized>,
    /// Every optimizer found (Lightning's `optimizer_states` may hold several).
    pub optimizers: Vec<OptimizerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<(String, SchedulerAction)>,
    pub nonfinite: Vec<NonFinite>,
    pub warnings: Vec<String>,
    pub dry_run: bool,
    /// True when --fail-on-nonfinite found NaN/Inf: nothing was written, exit 1.
    pub failed: bool,
    /// A checkpoint folder's files carried into the output folder, and how.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// Files of the checkpoint folder not carried, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    /// Every tensor of the output file with its dtype and shape, from the plan (`--dry-run
    /// --json` prints it before anything is written). Files only: empty for a Trainer folder.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<PlannedTensor>,
    pub manifest: Vec<FileManifest>,
}

fn first_key(p: &Pickle, root: Id, keys: &[&str]) -> Option<(String, Id)> {
    keys.iter()
        .find_map(|k| p.get(root, k).map(|id| (k.to_string(), id)))
}

fn rows_of(path: &Path, open: &OpenOptions) -> Result<u64> {
    let ckpt = formats::open_with(path, open)?;
    let sel = embeddings::select(&ckpt, &[])?;
    sel.first()
        .and_then(|(n, _)| ckpt.tensor(n))
        .map(|t| t.shape[0])
        .ok_or_else(|| Error::format(path, "no vocabulary matrix found in the new model"))
}

/// Count NaN and Inf in a floating tensor (streamed, not through the map).
fn nonfinite(t: &TensorRef<'_>) -> Result<(u64, u64)> {
    if !t.dtype.is_convertible_float() {
        return Ok((0, 0));
    }
    let esize = (t.dtype.bits() / 8) as usize;
    let (mut nan, mut inf) = (0u64, 0u64);
    let mut count = |chunk: &[u8]| {
        let mut v = vec![0f32; chunk.len() / esize];
        if dtype::decode_row_f32(t.dtype, &chunk[..v.len() * esize], &mut v).is_ok() {
            nan += v.iter().filter(|x| x.is_nan()).count() as u64;
            inf += v.iter().filter(|x| x.is_infinite()).count() as u64;
        }
    };
    match t.contiguous_range() {
        // 8 MiB chunks are whole elements for every float size.
        Some((start, len)) => t.map.stream(start, len, &mut count)?,
        None => count(&t.bytes()),
    }
    Ok((nan, inf))
}

/// The coverage rule, checked on the plan before anything is written: no tensor anywhere in the
/// output still has the old vocabulary rows along a vocabulary axis (shaped like a vocabulary
/// matrix, a head bias, or a row factor), unless the user kept it on purpose (`--keep NAME`).
/// This is what stops a checkpoint that cannot resume from being written with exit 0: a copy of
/// the model we did not recognise, an optimizer whose state we did not match.
pub(super) fn coverage(
    input: &Path,
    plan: &TorchPlan<'_>,
    old_rows: u64,
    target: u64,
    vocab_names: &[String],
    ckpt: &Checkpoint,
    keep: &[String],
) -> Result<()> {
    if old_rows == target {
        return Ok(());
    }
    let trailing: Vec<Vec<u64>> = vocab_names
        .iter()
        .filter_map(|n| ckpt.tensor(n))
        .map(|x| x.shape[1..].to_vec())
        .collect();
    let tensors =
        crate::formats::torch::tensor_paths(&plan.pickle).map_err(|e| Error::format(input, e))?;
    let mut left = Vec::new();
    for tt in &tensors {
        let Some(n) = plan.pickle.tensor_of(tt.node) else {
            continue;
        };
        let s = &n.shape;
        let along = s.first() == Some(&old_rows)
            && (s.len() == 1
                || trailing.iter().any(|t| t[..] == s[1..])
                || s[1..].iter().all(|&d| d == 1));
        if along && !keep.contains(&tt.path) {
            left.push(format!("{} {:?}", tt.path, s));
        }
    }
    if left.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = left.iter().take(10).map(String::as_str).collect();
    Err(Error::format(
        input,
        format!(
            "{} tensor(s) would keep the old {old_rows} vocabulary rows while the model gets {target}, so the checkpoint could not resume: {}{}; nothing written (if one is meant to keep its rows, pass --keep NAME; to start a fresh optimizer, --optimizer drop)",
            left.len(),
            shown.join(", "),
            if left.len() > shown.len() { ", …" } else { "" }
        ),
    ))
}

/// What may keep the old rows besides `--keep`: positional tables (never the vocabulary, even
/// with as many rows as it) and, when the checkpoint says which index is which (`all`), their
/// optimizer state.
pub(super) fn kept_on_purpose(
    p: &Pickle,
    found: &[FoundOpt],
    all: &[Mapping],
    model: &[(String, Vec<u64>)],
    keep: &[String],
) -> Vec<String> {
    let positional: Vec<&String> = model
        .iter()
        .map(|(n, _)| n)
        .filter(|n| vocab::is_positional(n))
        .collect();
    let mut out: Vec<String> = keep.to_vec();
    out.extend(positional.iter().map(|n| n.to_string()));
    for (o, m) in found.iter().zip(all) {
        for (i, _) in m.iter().filter(|(_, n)| positional.contains(&n)) {
            for (sname, _) in state_tensors(p, o.id, *i) {
                out.push(state_path(&o.key, *i, &sname));
            }
        }
    }
    out
}

/// The model's tensors as an optimizer holds them: a tie is one parameter, under its first name.
pub(super) struct Parameters {
    /// (name, shape) of each parameter, in the weights' order.
    pub list: Vec<(String, Vec<u64>)>,
    /// The vocabulary tensors' parameters, each once (a tied head is its embedding's).
    pub vocab: Vec<String>,
}

impl Parameters {
    pub fn new(model: &[(String, Vec<u64>)], vocab_names: &[String], ties: &[Tie]) -> Self {
        let tied_to = ties::followers(ties);
        let list = model
            .iter()
            .filter(|(n, _)| !tied_to.contains_key(n))
            .cloned()
            .collect();
        let mut vocab: Vec<String> = Vec::new();
        for n in vocab_names {
            let r = tied_to.get(n).unwrap_or(n);
            if !vocab.contains(r) {
                vocab.push(r.clone());
            }
        }
        Parameters { list, vocab }
    }

    /// A parameter's shape (empty when it is none of them).
    pub fn shape(&self, name: &str) -> Vec<u64> {
        self.list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
}

/// Every floating tensor holding NaN or Inf, with the counts.
pub(super) fn scan_nonfinite<'t>(
    tensors: impl Iterator<Item = TensorRef<'t>>,
) -> Result<Vec<NonFinite>> {
    let mut out = Vec::new();
    for x in tensors {
        let (nan, inf) = nonfinite(&x)?;
        if nan + inf > 0 {
            out.push(NonFinite {
                tensor: x.name.to_string(),
                nan,
                inf,
            });
        }
    }
    Ok(out)
}

/// The target rows (`--vocab-rows`, a tokenizer's, or a new model's), adding what is read to
/// `inputs` (outputs never overwrite them).
pub(super) fn target_rows(opts: &Options, inputs: &mut Vec<PathBuf>) -> Result<u64> {
    let target = match &opts.target {
        RowsFrom::Rows(n) => *n,
        RowsFrom::Tokenizer(tk) => {
            inputs.push(tk.clone());
            embeddings::tokenizer_rows(tk)?
        }
        RowsFrom::Model(m) => {
            inputs.push(m.clone());
            rows_of(m, &opts.open)?
        }
    };
    if target == 0 {
        return Err(Error::Usage("target of 0 rows".into()));
    }
    Ok(target)
}

/// The dotted path of a state tensor: `optimizer.state.0.exp_avg`, or `state.0.exp_avg` in a
/// file that is the optimizer (a Trainer checkpoint's optimizer.pt).
pub(super) fn state_path(key: &str, idx: u64, name: &str) -> String {
    if key.is_empty() {
        format!("state.{idx}.{name}")
    } else {
        format!("{key}.state.{idx}.{name}")
    }
}

/// State tensors of the matched vocabulary parameters that do not have the target rows.
pub(super) fn misfits(
    p: &Pickle,
    o: &FoundOpt,
    mapping: &Mapping,
    param_shape: &dyn Fn(&str) -> Vec<u64>,
    row_counts: &[u64],
    target: u64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (idx, name) in mapping {
        let ps = param_shape(name);
        for (sname, shape) in state_tensors(p, o.id, *idx) {
            let f = follows(&shape, &ps, row_counts);
            if matches!(f, Follows::Rows | Follows::FactoredRows) && shape[0] != target {
                out.push(Finding {
                    tensor: format!("{} (of {name})", state_path(&o.key, *idx, &sname)),
                    expected_rows: target,
                    found_shape: shape,
                    optimizer_state: true,
                });
            }
        }
    }
    out
}

/// The other parameters, when the checkpoint says which index is which (`all`): a state tensor
/// shaped like its parameter but for the rows (a position table resized, its moments not) is
/// refused: only vocabulary matrices are resized here, and torch would load it silently.
pub(super) fn other_misfits(
    input: &Path,
    p: &Pickle,
    found: &[FoundOpt],
    all: &[Mapping],
    vocab: &[String],
    param_shape: &dyn Fn(&str) -> Vec<u64>,
) -> Result<()> {
    for (o, m) in found.iter().zip(all) {
        for (idx, name) in m.iter().filter(|(_, n)| !vocab.contains(n)) {
            let ps = param_shape(name);
            if ps.is_empty() {
                continue;
            }
            for (sname, shape) in state_tensors(p, o.id, *idx) {
                if shape != ps && follows(&shape, &ps, &ps[..1]) == Follows::Rows {
                    return Err(Error::tensor(
                        input,
                        &state_path(&o.key, *idx, &sname),
                        format!(
                            "optimizer state of {name} has shape {shape:?} but the parameter is {ps:?}: torch loads it without a word and fails at step(); {name} is not a vocabulary matrix, which is all this tool resizes; {DROP_REMEDY}"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

pub(super) fn optimizer_report(
    p: &Pickle,
    o: &FoundOpt,
    mapping: &Mapping,
    action: OptimizerAction,
    how: &str,
) -> OptimizerReport {
    OptimizerReport {
        key: o.key.clone(),
        action,
        param_groups: o.groups.len(),
        params: o.params.len(),
        vocabulary_params: mapping.clone(),
        matched_by: how.to_string(),
        repaired: Vec::new(),
        kept_state_entries: p
            .get(o.id, "state")
            .and_then(|s| p.dict_entries(s))
            .map_or(0, |e| e.len()),
    }
}

/// Grow (or truncate) every state tensor of the matched vocabulary parameters in the plan: new
/// rows at the optimizer's initial value; a state that holds the vocabulary size some other way
/// is refused by name. `file`: the pickle, the torch file and the checkpoint holding the state.
#[allow(clippy::too_many_arguments)]
pub(super) fn repair<'a>(
    input: &Path,
    file: (&Pickle, &TorchFile, &'a Checkpoint),
    o: &FoundOpt,
    mapping: &Mapping,
    param_shape: &dyn Fn(&str) -> Vec<u64>,
    row_counts: &[u64],
    target: u64,
    segments: u64,
    plan: &mut TorchPlan<'a>,
    rep: &mut OptimizerReport,
) -> Result<()> {
    let (p, t, ckpt) = file;
    for (idx, name) in mapping {
        let ps = param_shape(name);
        let fill_sum = initial_accumulator(p, o.id, *idx);
        for (mname, shape) in state_tensors(p, o.id, *idx) {
            let path = state_path(&o.key, *idx, &mname);
            match follows(&shape, &ps, row_counts) {
                Follows::No => continue,
                Follows::Unknown => {
                    return Err(Error::tensor(
                        input,
                        &path,
                        format!(
                            "optimizer state of {name} {ps:?} has shape {shape:?}, which holds the vocabulary size in a way this tool does not know how to grow (please report the optimizer); {DROP_REMEDY}"
                        ),
                    ))
                }
                Follows::Rows | Follows::FactoredRows => {}
            }
            let Some(x) = ckpt.tensor(&path) else {
                continue;
            };
            if x.shape.first() == Some(&target) {
                continue;
            }
            let fill = if mname == "sum" { fill_sum } else { 0.0 };
            let payload = resize_filled_segments(&x, target, fill, segments)?;
            plan.replace_rows(t, &path, target, payload)
                .map_err(|e| Error::format(input, e))?;
            let mut new_shape = x.shape.to_vec();
            new_shape[0] = target;
            rep.repaired.push(Resized {
                tensor: path,
                old_shape: x.shape.to_vec(),
                new_shape,
                fill: Some(fill),
            });
        }
        rep.kept_state_entries = rep.kept_state_entries.saturating_sub(1);
    }
    Ok(())
}

/// Sanitize `input` into `out`.
/// One tensor of the planned output.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: crate::dtype::DType,
    pub shape: Vec<u64>,
}

/// The tensors a torch plan will write, by their dotted paths.
fn planned_tensors(input: &Path, plan: &TorchPlan<'_>) -> Result<Vec<PlannedTensor>> {
    let p = &plan.pickle;
    let paths = formats::torch::tensor_paths(p).map_err(|e| Error::format(input, e))?;
    Ok(paths
        .into_iter()
        .filter_map(|t| {
            p.tensor_of(t.node).map(|n| PlannedTensor {
                name: t.path,
                dtype: n.storage.dtype,
                shape: n.shape.clone(),
            })
        })
        .collect())
}

/// What sanitize-checkpoint will do to a torch training checkpoint file, decided before anything
/// is written ([`plan_file`] only reads): the report as the run gives it and the writer's plan.
pub struct FilePlan<'c> {
    pub report: Report,
    torch: TorchPlan<'c>,
    /// Every file read: none of them may be the output.
    inputs: Vec<PathBuf>,
}

/// A torch training checkpoint file: [`plan_file`], then [`execute_file`] (a Trainer folder goes
/// to the Trainer job: [`super::run`]).
pub fn run_file(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let ckpt: Checkpoint = formats::open_with(input, &opts.open)?;
    let plan = plan_file(&ckpt, input, opts)?;
    execute_file(plan, out, opts)
}

/// Write the planned file (nothing for `--dry-run` or when `--fail-on-nonfinite` failed).
pub fn execute_file(plan: FilePlan<'_>, out: &Path, opts: &Options) -> Result<Report> {
    let FilePlan {
        mut report,
        torch,
        inputs,
    } = plan;
    if opts.dry_run || report.failed {
        return Ok(report);
    }
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    crate::output::folder::file_destination(
        out,
        &protected,
        "a torch file, as the input is",
        &["pt", "pth", "ckpt", "bin", "tar"],
        opts.overwrite,
    )?;
    report.manifest = vec![write_torch(&torch, out, &protected, &opts.open.globals)?];
    report.output = Some(out.to_path_buf());
    Ok(report)
}

/// The model's key in the checkpoint and its tensors (name, shape).
#[allow(clippy::type_complexity)]
fn model_of(ckpt: &Checkpoint, input: &Path) -> Result<(String, Vec<(String, Vec<u64>)>)> {
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
    ckpt: &Checkpoint,
    input: &Path,
    opts: &Options,
    model_all: &[(String, Vec<u64>)],
    model_key: &str,
) -> Result<vocab::Vocabulary> {
    if opts.tensors.is_empty() {
        let det = vocab::detect(model_all.iter().map(|(n, s)| (n.as_str(), s.as_slice())));
        return det.vocabulary.ok_or_else(|| {
            Error::format(
                input,
                "the model's vocabulary matrices are not found or ambiguous (see inspect-checkpoint; name them with --tensor)",
            )
        });
    }
    let prefix = format!("{model_key}.");
    let mut tensors = Vec::new();
    for (n, role) in embeddings::select(ckpt, &opts.tensors)? {
        let Some(t) = ckpt.tensor(&n).filter(|_| n.starts_with(&prefix)) else {
            return Err(Error::Usage(format!(
                "--tensor {n}: not a tensor of the model under '{model_key}'"
            )));
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
        return Err(Error::Usage(format!(
            "--tensor {}: {} rows, but {} has {rows}: name tensors of one vocabulary",
            t.name, t.shape[0], tensors[0].name
        )));
    }
    Ok(vocab::Vocabulary { rows, tensors })
}

/// Ties: names viewing one storage the same way are one parameter (the optimizer holds it once,
/// under its first name); the others follow it.
fn model_ties(ckpt: &Checkpoint, prefix: &str) -> Vec<Tie> {
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
    ckpt: &'c Checkpoint,
    m: &ModelRows<'_>,
    vocab_reps: &[String],
    init: &Init,
    plan: &mut TorchPlan<'c>,
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
        let rows = embeddings::resized_rows(x, role, x.shape[0], m.target, init, m.segments)?;
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
            plan.replace_rows(t, c, m.target, rows.payload(&ct))
                .map_err(|e| Error::format(m.input, e))?;
        }
        let tied = plan
            .replace_rows(t, name, m.target, rows.payload(&x))
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
    ckpt: &'c Checkpoint,
    m: &ModelRows<'_>,
    mappings: &[Mapping],
    params: &Parameters,
    row_counts: &[u64],
    inconsistent: &[Finding],
    opts: &Options,
    plan: &mut TorchPlan<'c>,
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
            OptimizerAction::Keep => {
                let key = format!("{}.", o.key);
                if let Some(f) = inconsistent.iter().find(|f| f.tensor.starts_with(&key)) {
                    return Err(Error::Usage(format!(
                        "--optimizer keep: {} has shape {:?} but the target is {} rows; use --optimizer repair or drop",
                        f.tensor, f.found_shape, m.target
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The scheduler: dropped with the optimizer or by `--scheduler drop`; its report line.
fn plan_scheduler(
    sched: Option<(String, Id)>,
    opts: &Options,
    plan: &mut TorchPlan<'_>,
) -> Option<(String, SchedulerAction)> {
    let (key, _) = sched?;
    let action = if opts.optimizer == OptimizerAction::Drop {
        SchedulerAction::Drop
    } else {
        opts.scheduler
    };
    if action == SchedulerAction::Drop {
        plan.pickle.remove_key(plan.pickle.root, &key);
    }
    Some((key, action))
}

/// The model's vocabulary tensors whose rows are not the target's.
pub(super) fn model_findings(
    model_all: &[(String, Vec<u64>)],
    vocab_names: &[String],
    target: u64,
) -> Vec<Finding> {
    model_all
        .iter()
        .filter(|(n, s)| vocab_names.contains(n) && s[0] != target)
        .map(|(n, s)| Finding {
            tensor: n.clone(),
            expected_rows: target,
            found_shape: s.clone(),
            optimizer_state: false,
        })
        .collect()
}

/// Decide everything for a torch training checkpoint file: reads, writes nothing.
pub fn plan_file<'c>(ckpt: &'c Checkpoint, input: &Path, opts: &Options) -> Result<FilePlan<'c>> {
    let (model_key, model_all) = model_of(ckpt, input)?;
    let t: &TorchFile = &ckpt.torch[0];
    let p = &t.pickle;
    let prefix = format!("{model_key}.");
    let vocabulary = file_vocabulary(ckpt, input, opts, &model_all, &model_key)?;
    let vocab_names: Vec<String> = vocabulary.tensors.iter().map(|x| x.name.clone()).collect();
    let old_rows = vocabulary.rows;
    let ties = model_ties(ckpt, &prefix);
    let params = Parameters::new(&model_all, &vocab_names, &ties);
    let param_shape = |name: &str| params.shape(name);
    let mut inputs: Vec<PathBuf> = vec![input.to_path_buf()];
    let target = target_rows(opts, &mut inputs)?;
    let row_counts = [old_rows, target];
    let mut inconsistent = model_findings(&model_all, &vocab_names, target);

    // Optimizers: wherever they are outside the model (one, or several as in GAN vocoders).
    let found = find_optimizers(p, p.get(p.root, &model_key));
    let sched = first_key(p, p.root, &["scheduler", "lr_scheduler", "lr_schedulers"]);
    // Dropping needs no matching (and must work when matching would be ambiguous).
    let (mappings, how, all) = if opts.optimizer == OptimizerAction::Drop || found.is_empty() {
        let none = "not needed (dropped)".to_string();
        (vec![Vec::new(); found.len()], none, Vec::new())
    } else {
        let m = ModelParams {
            list: &params.list,
            vocab: &params.vocab,
            prefix: &prefix,
        };
        let r = match_params(input, p, &found, &m, true, &opts.optimizer_params)?;
        (r.mappings, r.how, r.all)
    };
    other_misfits(input, p, &found, &all, &params.vocab, &param_shape)?;
    let mut opt_reports = Vec::new();
    for (o, m) in found.iter().zip(&mappings) {
        inconsistent.extend(misfits(p, o, m, &param_shape, &row_counts, target));
        opt_reports.push(optimizer_report(p, o, m, opts.optimizer, &how));
    }
    // NaN/Inf in every floating tensor, weights and moments.
    let nonfinite = scan_nonfinite(ckpt.tensors())?;

    // The plan: model rows, then moments, then what to drop.
    let mut plan = TorchPlan::identity(t);
    let eopts = embeddings::Options {
        method: opts.method.clone(),
        seed: opts.seed,
        target: match &opts.target {
            RowsFrom::Tokenizer(tk) => Target::Tokenizer(tk.clone()),
            _ => Target::Rows(target),
        },
        ..Default::default()
    };
    let mut fallbacks = Vec::new();
    let init: Init =
        embeddings::resolve_init(&eopts, old_rows, target, &mut inputs, &mut fallbacks)?;
    let m = ModelRows {
        input,
        prefix: &prefix,
        vocabulary: &vocabulary,
        model_all: &model_all,
        found: &found,
        target,
        segments: opts.segments,
    };
    let model_changed = plan_model_rows(ckpt, &m, &params.vocab, &init, &mut plan)?;
    let (rows, reports) = (&row_counts, &mut opt_reports);
    plan_optimizers(
        ckpt,
        &m,
        &mappings,
        &params,
        rows,
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
        let keep = kept_on_purpose(p, &found, &all, &model_all, &opts.keep);
        coverage(input, &plan, old_rows, target, &vocab_names, ckpt, &keep)?;
    }
    let failed = opts.fail_on_nonfinite && !nonfinite.is_empty();
    let tensors = planned_tensors(input, &plan)?;
    let report = Report {
        input: input.to_path_buf(),
        format: ckpt.format,
        output: None,
        model_key,
        ties,
        old_rows,
        target_rows: target,
        freeze_until_index: old_rows.min(target),
        inconsistent_before: inconsistent,
        model_changed,
        optimizers: opt_reports,
        scheduler,
        nonfinite,
        warnings,
        dry_run: opts.dry_run,
        failed,
        carried: Vec::new(),
        left_out: Vec::new(),
        tensors,
        manifest: Vec::new(),
    };
    Ok(FilePlan {
        report,
        torch: plan,
        inputs,
    })
}

/// The human report.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, model under '{}', vocabulary {} rows → target {}",
        r.input.display(),
        r.format.name(),
        r.model_key,
        r.old_rows,
        r.target_rows
    );
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
    if r.inconsistent_before.is_empty() {
        let _ = writeln!(s, "before: consistent with the target");
    } else {
        let _ = writeln!(
            s,
            "before: {} tensors do not fit {} rows:",
            r.inconsistent_before.len(),
            r.target_rows
        );
        for f in &r.inconsistent_before {
            let _ = writeln!(s, "  {} {:?}", f.tensor, f.found_shape);
        }
    }
    for c in &r.model_changed {
        let _ = writeln!(
            s,
            "model: {} {:?} → {:?}",
            c.tensor, c.old_shape, c.new_shape
        );
    }
    for o in &r.optimizers {
        let map: Vec<String> = o
            .vocabulary_params
            .iter()
            .map(|(i, n)| format!("param {i} = {n}"))
            .collect();
        let map = if map.is_empty() {
            "no vocabulary parameter".to_string()
        } else {
            map.join(", ")
        };
        // A dropped optimizer is not matched: nothing to say about its parameters.
        let how = if o.action == OptimizerAction::Drop {
            String::new()
        } else {
            format!("; {map} (matched by {})", o.matched_by)
        };
        let _ = writeln!(
            s,
            "optimizer '{}': {} groups, {} params{how}",
            o.key, o.param_groups, o.params
        );
        match o.action {
            OptimizerAction::Repair => {
                for c in &o.repaired {
                    let rows = |v: &[u64]| v.first().copied().unwrap_or(0);
                    let what = if rows(&c.new_shape) < rows(&c.old_shape) {
                        "rows past the target cut".to_string()
                    } else {
                        match c.fill {
                            Some(f) if f != 0.0 => {
                                format!("new rows at {f}, its group's initial_accumulator_value")
                            }
                            _ => "new rows at 0".to_string(),
                        }
                    };
                    let _ = writeln!(
                        s,
                        "  repaired {} {:?} → {:?} ({what})",
                        c.tensor, c.old_shape, c.new_shape
                    );
                }
                let _ = writeln!(s, "  kept byte-identical: the state of {} other parameters, step counts, param_groups", o.kept_state_entries);
            }
            OptimizerAction::Drop => {
                let _ = writeln!(
                    s,
                    "  dropped (with the scheduler): the training script starts a fresh optimizer"
                );
            }
            OptimizerAction::Keep => {
                let _ = writeln!(s, "  kept as it was");
            }
        }
    }
    if let Some((k, a)) = &r.scheduler {
        let _ = writeln!(
            s,
            "scheduler '{k}': {}",
            if *a == SchedulerAction::Drop {
                "dropped"
            } else {
                "kept"
            }
        );
    }
    for n in &r.nonfinite {
        let _ = writeln!(
            s,
            "non-finite: {} has {} NaN, {} Inf",
            n.tensor, n.nan, n.inf
        );
    }
    let _ = writeln!(s, "freeze_until_index: {}", r.freeze_until_index);
    s.push_str(&crate::output::folder::render_carried(
        &r.carried,
        &r.left_out,
    ));
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    if r.failed {
        let _ = writeln!(
            s,
            "failed: non-finite values found (--fail-on-nonfinite); nothing written"
        );
    } else if r.dry_run {
        let _ = writeln!(s, "dry run: nothing written");
    }
    for m in &r.manifest {
        let _ = writeln!(s, "{}", m.wrote());
    }
    s
}
