//! The `sanitize-checkpoint` job. torch's `Optimizer.load_state_dict` checks only group and
//! parameter counts, never shapes, so moments sized for the old vocabulary load silently and
//! break at `step()` or learn nothing (seed 001). This job brings the model's vocabulary matrices
//! and the matching moments to the target rows (or drops the optimizer), keeping every other
//! byte, and scans for NaN/Inf.

use crate::dtype;
use crate::embeddings::{self, init::Init, Method, Target};
use crate::error::{Error, Result};
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::writer::TorchPlan;
use crate::formats::torch::TorchFile;
use crate::formats::{self, Checkpoint, Format, OpenOptions, TensorRef};
use crate::output::manifest::FileManifest;
use crate::output::torch::write_torch;
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
}

/// Per-parameter state names that are shaped like the parameter.
pub const MOMENTS: [&str; 6] = [
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "momentum_buffer",
    "exp_avg_sq_row",
    "sum",
];

/// A shape found where another was expected.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub tensor: String,
    pub expected_rows: u64,
    pub found_shape: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Resized {
    pub tensor: String,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
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
    pub old_rows: u64,
    pub target_rows: u64,
    pub freeze_until_index: u64,
    /// What did not fit before: each tensor, the rows expected, the shape found.
    pub inconsistent_before: Vec<Finding>,
    pub model_changed: Vec<Resized>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<(String, SchedulerAction)>,
    pub nonfinite: Vec<NonFinite>,
    pub warnings: Vec<String>,
    pub dry_run: bool,
    /// True when --fail-on-nonfinite found NaN/Inf: nothing was written, exit 1.
    pub failed: bool,
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

/// The per-parameter state of optimizer index `idx`.
fn state_of(p: &Pickle, opt: Id, idx: u64) -> Option<Id> {
    let state = p.get(opt, "state")?;
    p.dict_entries(state)?
        .iter()
        .find(|(k, _)| p.node(*k) == &Node::Int(idx as i64))
        .map(|(_, v)| *v)
}

/// Shape of a parameter's moments (the first moment-named tensor in its state).
fn moment_shape(p: &Pickle, opt: Id, idx: u64) -> Option<Vec<u64>> {
    let s = state_of(p, opt, idx)?;
    MOMENTS
        .iter()
        .find_map(|m| p.get(s, m).and_then(|t| p.tensor_of(t)))
        .map(|t| t.shape.clone())
}

/// Match optimizer parameter indices to model tensors: by position when the counts agree and
/// every known moment shape fits; otherwise by shape, refusing when several candidates remain.
fn match_params(
    path: &Path,
    p: &Pickle,
    opt: Id,
    params: &[u64],
    model: &[(String, Vec<u64>)],
    vocab_names: &[String],
) -> Result<(Vec<(u64, String)>, String)> {
    let fits = |shape: &[u64], m: &[u64], is_vocab: bool| {
        shape.len() == m.len() && shape[1..] == m[1..] && (shape[0] == m[0] || is_vocab)
    };
    if params.len() == model.len()
        && params.iter().zip(model).all(|(&i, (name, shape))| {
            moment_shape(p, opt, i).is_none_or(|ms| fits(&ms, shape, vocab_names.contains(name)))
        })
    {
        let m = params
            .iter()
            .zip(model)
            .filter(|(_, (n, _))| vocab_names.contains(n))
            .map(|(&i, (n, _))| (i, n.clone()))
            .collect();
        return Ok((m, "position".into()));
    }
    let mut out = Vec::new();
    for name in vocab_names {
        let Some((_, shape)) = model.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let cands: Vec<u64> = params
            .iter()
            .copied()
            .filter(|&i| moment_shape(p, opt, i).is_some_and(|ms| &ms == shape))
            .collect();
        let rivals: Vec<&String> = vocab_names
            .iter()
            .filter(|o| model.iter().any(|(n, s)| n == *o && s[1..] == shape[1..]))
            .collect();
        if cands.len() != 1 || rivals.len() > 1 {
            let list: Vec<String> = cands
                .iter()
                .map(|&i| {
                    format!(
                        "param {i} {:?}",
                        moment_shape(p, opt, i).unwrap_or_default()
                    )
                })
                .collect();
            let names: Vec<String> = rivals.iter().map(|r| r.to_string()).collect();
            return Err(Error::format(
                path,
                format!(
                    "cannot tell which optimizer parameter holds the moments of {} (optimizer has {} parameters, the model {} tensors; candidates: {}): refusing to guess; use --optimizer drop",
                    names.join(" / "),
                    params.len(),
                    model.len(),
                    if list.is_empty() { "none".into() } else { list.join(", ") }
                ),
            ));
        }
        out.push((cands[0], name.clone()));
    }
    Ok((out, "shape".into()))
}

/// New bytes of a moment at `rows` rows: old rows kept, new rows zero.
fn resize_zeros(t: &TensorRef<'_>, rows: u64) -> Result<Vec<u8>> {
    let cols: u64 = t.shape.iter().skip(1).product();
    let esize = t.dtype.bits() / 8;
    let want = (rows * cols * esize) as usize;
    let mut v = match t.contiguous_range() {
        Some((start, len)) => t
            .map
            .read_vec(start, len, want.saturating_sub(len as usize))?,
        None => t.bytes().into_owned(),
    };
    v.resize(want, 0);
    Ok(v)
}

/// Sanitize `input` into `out`.
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let ckpt: Checkpoint = formats::open_with(input, &opts.open)?;
    if !matches!(ckpt.format, Format::TorchZip | Format::TorchLegacy) {
        return Err(Error::Usage(format!(
            "{}: sanitize-checkpoint reads a torch training checkpoint (.pt/.pth/.ckpt), not {}",
            input.display(),
            ckpt.format.name()
        )));
    }
    let t: &TorchFile = &ckpt.torch[0];
    let p = &t.pickle;
    let Some((model_key, _)) = first_key(
        p,
        p.root,
        &["model", "state_dict", "module", "model_state_dict"],
    ) else {
        return Err(Error::format(input, "no model weights under 'model', 'state_dict', 'module' or 'model_state_dict': not a training checkpoint"));
    };
    let prefix = format!("{model_key}.");
    let model: Vec<(String, Vec<u64>)> = ckpt
        .tensors()
        .filter(|x| x.name.starts_with(&prefix))
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let det = vocab::detect(model.iter().map(|(n, s)| (n.as_str(), s.as_slice())));
    let Some(vocabulary) = det.vocabulary else {
        return Err(Error::format(
            input,
            "the model's vocabulary matrices are not found or ambiguous (see inspect-checkpoint)",
        ));
    };
    let vocab_names: Vec<String> = vocabulary.tensors.iter().map(|x| x.name.clone()).collect();
    let old_rows = vocabulary.rows;
    let mut inputs: Vec<PathBuf> = vec![input.to_path_buf()];
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

    let mut inconsistent = Vec::new();
    for (n, s) in &model {
        if vocab_names.contains(n) && s[0] != target {
            inconsistent.push(Finding {
                tensor: n.clone(),
                expected_rows: target,
                found_shape: s.clone(),
            });
        }
    }

    // Optimizer: find it, match its vocabulary parameters.
    let opt = first_key(p, p.root, &["optimizer", "optimizer_state_dict", "optim"])
        .filter(|(_, id)| p.get(*id, "state").is_some() && p.get(*id, "param_groups").is_some());
    let sched = first_key(p, p.root, &["scheduler", "lr_scheduler"]);
    let mut opt_report = None;
    let mut mapping = Vec::new();
    if let Some((key, oid)) = &opt {
        let groups: Vec<Id> = match p.get(*oid, "param_groups").map(|g| p.node(g)) {
            Some(Node::List(v)) => v.clone(),
            _ => Vec::new(),
        };
        let params: Vec<u64> = groups
            .iter()
            .filter_map(|&g| p.get(g, "params"))
            .flat_map(|l| match p.node(l) {
                Node::List(v) => v.clone(),
                _ => Vec::new(),
            })
            .filter_map(|i| match p.node(i) {
                Node::Int(i) if *i >= 0 => Some(*i as u64),
                _ => None,
            })
            .collect();
        // Dropping needs no matching (and must work when matching would be ambiguous).
        let (m, how) = if opts.optimizer == OptimizerAction::Drop {
            (Vec::new(), "not needed (dropped)".to_string())
        } else {
            match_params(input, p, *oid, &params, &model, &vocab_names)?
        };
        for (idx, name) in &m {
            if let Some(s) = state_of(p, *oid, *idx) {
                for mname in MOMENTS {
                    if let Some(tt) = p.get(s, mname).and_then(|x| p.tensor_of(x)) {
                        if tt.shape.first() != Some(&target) {
                            inconsistent.push(Finding {
                                tensor: format!("{key}.state.{idx}.{mname} (of {name})"),
                                expected_rows: target,
                                found_shape: tt.shape.clone(),
                            });
                        }
                    }
                }
            }
        }
        let state_entries = p
            .get(*oid, "state")
            .and_then(|s| p.dict_entries(s))
            .map_or(0, |e| e.len());
        opt_report = Some(OptimizerReport {
            key: key.clone(),
            action: opts.optimizer,
            param_groups: groups.len(),
            params: params.len(),
            vocabulary_params: m.clone(),
            matched_by: how,
            repaired: Vec::new(),
            kept_state_entries: state_entries,
        });
        mapping = m;
    }

    // NaN/Inf in every floating tensor, weights and moments.
    let mut nonfinite_found = Vec::new();
    for x in ckpt.tensors() {
        let (nan, inf) = nonfinite(&x)?;
        if nan + inf > 0 {
            nonfinite_found.push(NonFinite {
                tensor: x.name.to_string(),
                nan,
                inf,
            });
        }
    }

    // The plan: model rows, then moments, then what to drop.
    let mut plan = TorchPlan::identity(t);
    let mut model_changed = Vec::new();
    let mut warnings = Vec::new();
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
    for name in &vocab_names {
        let Some(x) = ckpt.tensor(name) else { continue };
        if x.shape[0] == target {
            continue;
        }
        let role = vocabulary
            .tensors
            .iter()
            .find(|v| &v.name == name)
            .map_or(Role::Embedding, |v| v.role);
        let bytes = embeddings::resized_bytes(x, role, x.shape[0], target, &init)?;
        plan.replace_rows(t, name, target, bytes)
            .map_err(|e| Error::format(input, e))?;
        let mut new_shape = x.shape.to_vec();
        new_shape[0] = target;
        model_changed.push(Resized {
            tensor: name.clone(),
            old_shape: x.shape.to_vec(),
            new_shape,
        });
    }
    if let (Some((key, oid)), Some(rep)) = (&opt, opt_report.as_mut()) {
        match opts.optimizer {
            OptimizerAction::Repair => {
                for (idx, name) in &mapping {
                    let Some(s) = state_of(p, *oid, *idx) else {
                        continue;
                    };
                    for mname in MOMENTS {
                        let path = format!("{key}.state.{idx}.{mname}");
                        let Some(x) = ckpt.tensor(&path) else {
                            if p.get(s, mname).is_some() {
                                warnings.push(format!(
                                    "{path} (of {name}) is not a tensor: left as it was"
                                ));
                            }
                            continue;
                        };
                        if x.shape.first() == Some(&target) {
                            continue;
                        }
                        let bytes = resize_zeros(&x, target)?;
                        plan.replace_rows(t, &path, target, bytes)
                            .map_err(|e| Error::format(input, e))?;
                        let mut new_shape = x.shape.to_vec();
                        new_shape[0] = target;
                        rep.repaired.push(Resized {
                            tensor: path,
                            old_shape: x.shape.to_vec(),
                            new_shape,
                        });
                    }
                    rep.kept_state_entries = rep.kept_state_entries.saturating_sub(1);
                }
            }
            OptimizerAction::Drop => {
                plan.pickle.remove_key(plan.pickle.root, key);
                if let Some((skey, _)) = &sched {
                    plan.pickle.remove_key(plan.pickle.root, skey);
                }
                rep.kept_state_entries = 0;
            }
            OptimizerAction::Keep => {
                if let Some(f) = inconsistent
                    .iter()
                    .find(|f| f.tensor.starts_with(&format!("{key}.")))
                {
                    return Err(Error::Usage(format!(
                        "--optimizer keep: {} has shape {:?} but the target is {} rows; use --optimizer repair or drop",
                        f.tensor, f.found_shape, target
                    )));
                }
            }
        }
    }
    let sched_report = sched.as_ref().map(|(k, _)| {
        let action = if opts.optimizer == OptimizerAction::Drop {
            SchedulerAction::Drop
        } else {
            opts.scheduler
        };
        (k.clone(), action)
    });
    if let Some((k, SchedulerAction::Drop)) = &sched_report {
        plan.pickle.remove_key(plan.pickle.root, k);
    }
    if opt.is_none() {
        warnings.push("no optimizer state found: only the model weights were checked".into());
    }

    let failed = opts.fail_on_nonfinite && !nonfinite_found.is_empty();
    let mut report = Report {
        input: input.to_path_buf(),
        format: ckpt.format,
        output: None,
        model_key,
        old_rows,
        target_rows: target,
        freeze_until_index: old_rows.min(target),
        inconsistent_before: inconsistent,
        model_changed,
        optimizer: opt_report,
        scheduler: sched_report,
        nonfinite: nonfinite_found,
        warnings,
        dry_run: opts.dry_run,
        failed,
        manifest: Vec::new(),
    };
    if opts.dry_run || failed {
        return Ok(report);
    }
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    report.manifest = vec![write_torch(&plan, out, &protected, &opts.open.globals)?];
    report.output = Some(out.to_path_buf());
    Ok(report)
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
    if let Some(o) = &r.optimizer {
        let map: Vec<String> = o
            .vocabulary_params
            .iter()
            .map(|(i, n)| format!("param {i} = {n}"))
            .collect();
        let _ = writeln!(
            s,
            "optimizer '{}': {} groups, {} params; {} (matched by {})",
            o.key,
            o.param_groups,
            o.params,
            map.join(", "),
            o.matched_by
        );
        match o.action {
            OptimizerAction::Repair => {
                for c in &o.repaired {
                    let _ = writeln!(
                        s,
                        "  repaired {} {:?} → {:?} (new rows zero)",
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
