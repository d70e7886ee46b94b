//! `check-vocab --fix --output OUT`: the doctor's fixes carried out by the tools' own planners
//! and executors (`extend_embeddings::run` = plan → execute, `sanitize_checkpoint::run`, `sanitize_checkpoint::zero::run`,
//! exactly as extend-embeddings and sanitize-checkpoint call them), JSON edits written into the
//! output folder, and the output checked again. This is the layer above the jobs: the only place
//! that calls the doctor and the tools together.

use crate::error::{Error, Result};
use crate::formats::{Checkpoint, OpenOptions};
use crate::jobs::check_vocab::{self, Edit, Finding, Fix, Inputs, Opened, Severity};
use crate::jobs::extend_embeddings::{self, Target};
use crate::jobs::sanitize_checkpoint;
use crate::output::folder::AtomicFolder;
use crate::output::json_text::{self, EditedFile, JsonChange};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What the command line asked for.
pub(super) struct Request {
    pub output: PathBuf,
    /// `--fix-only N`.
    pub only: Option<usize>,
    pub dry_run: bool,
}

/// One fix as the report numbers it ("fix 1", "fix 2": each command once, in report order).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Numbered {
    pub fix: usize,
    pub text: String,
    pub action: Fix,
    /// It fixes at least one error (not only warnings).
    #[serde(skip)]
    pub error: bool,
}

/// A fix carried out (or planned, with `--dry-run`): the tool's own report (its plan for a dry
/// run), or the JSON edits as written in the output.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Executed {
    #[serde(flatten)]
    pub numbered: Numbered,
    /// The fix as carried out: its command writing to OUT, or the edits as written in OUT.
    pub carried_out: String,
    pub report: Value,
    /// The JSON files of OUT it wrote as edits, and what changed in each (every other value is
    /// as it was).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<EditedFile>,
    #[serde(skip)]
    text: String,
}

/// A fix left out, and why.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Skipped {
    pub fix: usize,
    pub text: String,
    pub why: String,
}

/// The report of `check-vocab --fix`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct FixRun {
    pub checkpoint: PathBuf,
    pub output: PathBuf,
    pub dry_run: bool,
    /// The check of the input (its findings carry the fixes, `action`, numbered as `fix`).
    pub before: check_vocab::Report,
    /// What was carried out, in order (with `--dry-run`: the plans, nothing written).
    pub executed: Vec<Executed>,
    pub skipped: Vec<Skipped>,
    /// What else the run says (a subfolder of the input not carried into the output).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// check-vocab on the output; none when nothing was written.
    pub after: Option<check_vocab::Report>,
    /// The findings left: the output's (the input's when nothing was written).
    pub findings: Vec<Finding>,
    pub errors: usize,
}

impl FixRun {
    /// 0 when the output (or, with nothing to write, the input) has no error, else 1; a dry run
    /// that planned is 0.
    pub(super) fn exit_code(&self) -> u8 {
        u8::from(!self.dry_run && self.errors > 0)
    }
}

/// The fixes of a report, numbered as `check_vocab::render` prints them.
pub(super) fn number(r: &check_vocab::Report) -> Vec<Numbered> {
    let mut out: Vec<Numbered> = Vec::new();
    for f in &r.findings {
        let (Some(text), Some(action)) = (f.command(), f.request()) else {
            continue;
        };
        let error = f.severity == Severity::Error;
        match out.iter_mut().find(|n| n.text == text) {
            Some(n) => n.error |= error,
            None => out.push(Numbered {
                fix: out.len() + 1,
                text,
                action: action.clone(),
                error,
            }),
        }
    }
    out
}

/// Why `fix` cannot be carried out into an output of `opened`, if it cannot.
fn not_executable(fix: &Fix, opened: &Checkpoint) -> Option<String> {
    let ckpt = opened.path();
    match fix {
        Fix::Manual { .. } => Some("a change outside the checkpoint, made by hand".into()),
        Fix::Extend { input, .. } | Fix::Sanitize { input, .. } | Fix::EditGguf { input, .. }
            if input != ckpt =>
        {
            Some(format!(
            "it rewrites {}, not {}: run it yourself",
            input.display(),
            ckpt.display()
        ))
        }
        Fix::EditJson { .. } if matches!(opened, Checkpoint::File(_)) => Some(
            "a file input gives a file output, which holds no JSON files: apply the edits by hand, or give the model folder".into(),
        ),
        Fix::EditJson { edits } => edits
            .iter()
            .find(|e| !beside(&e.file, ckpt))
            .map(|e| {
                format!(
                    "{} is not in {}: --fix writes only the output folder; apply it by hand",
                    e.file.display(),
                    ckpt.display()
                )
            }),
        _ => None,
    }
}

/// Is `file` directly in the folder `dir`?
fn beside(file: &Path, dir: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    match (file.parent().and_then(canon), canon(dir)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Do an edit and the weights' new row count disagree (a vocabulary-size key set to other rows)?
fn edit_disagrees(e: &Edit, rows: Option<u64>) -> bool {
    let key = e.key.rsplit('.').next().unwrap_or(&e.key);
    rows.is_some_and(|r| {
        crate::model::config::CONFIG_KEYS.contains(&key) && e.value.as_u64() != Some(r)
    })
}

pub(super) fn skip(n: &Numbered, why: String) -> Skipped {
    Skipped {
        fix: n.fix,
        text: n.text.clone(),
        why,
    }
}

/// `--fix-only k`: fix k alone (refused when the report has no fix k, or --fix cannot carry it
/// out); the others are listed as not named.
fn select_only(
    numbered: &[Numbered],
    k: usize,
    ckpt: &Checkpoint,
) -> Result<(Vec<Numbered>, Vec<Skipped>)> {
    let n = numbered.iter().find(|n| n.fix == k).ok_or_else(|| {
        Error::arg(
            "--fix-only",
            format!(
                "--fix-only {k}: the report numbers {} fixes{}",
                numbered.len(),
                if numbered.is_empty() {
                    String::new()
                } else {
                    format!(" (1 to {})", numbered.len())
                }
            ),
        )
    })?;
    if let Some(why) = not_executable(&n.action, ckpt) {
        return Err(Error::arg(
            "--fix-only",
            format!(
                "--fix-only {k}: fix {k} ({}) is not carried out by --fix: {why}",
                n.text
            ),
        ));
    }
    let skipped = numbered
        .iter()
        .filter(|m| m.fix != k)
        .map(|m| skip(m, format!("not named (--fix-only {k})")))
        .collect();
    Ok((vec![n.clone()], skipped))
}

/// Why fix `n` (executable, an error's) disagrees with what is carried out: the weights' fix
/// `weights` and the edits chosen so far.
fn disagrees(n: &Numbered, weights: Option<&Numbered>, edits: &[&Edit]) -> Option<String> {
    let rows = weights.and_then(|w| w.action.rows());
    match &n.action {
        Fix::EditJson { edits: mine } => mine.iter().find_map(|e| {
            if edit_disagrees(e, rows) {
                return Some(format!(
                    "sets {} to {}, but the weights get {} rows",
                    e.key,
                    e.value,
                    rows.unwrap_or_default()
                ));
            }
            edits
                .iter()
                .find(|o| o.file == e.file && o.key == e.key && o.value != e.value)
                .map(|o| format!("sets {} to {}, another fix to {}", e.key, e.value, o.value))
        }),
        w if w.rows().is_some() => weights.filter(|c| c.fix != n.fix).map(|c| {
            format!(
                "another change of the weights than fix {}, which is carried out: name one with --fix-only",
                c.fix
            )
        }),
        _ => None,
    }
}

/// The fixes to carry out: the one `--fix-only` names, or every error's fix that agrees with the
/// first (one change of the weights; edits of different keys, and none setting a vocabulary key
/// to other rows than the weights get). The others are listed with why.
pub(super) fn select(
    numbered: &[Numbered],
    only: Option<usize>,
    ckpt: &Checkpoint,
) -> Result<(Vec<Numbered>, Vec<Skipped>)> {
    if let Some(k) = only {
        return select_only(numbered, k, ckpt);
    }
    let (mut chosen, mut skipped): (Vec<Numbered>, Vec<Skipped>) = (Vec::new(), Vec::new());
    let weights = numbered.iter().find(|n| {
        n.error
            && n.action.rows().is_some()
            && !n.action.cuts_weights()
            && not_executable(&n.action, ckpt).is_none()
    });
    let mut edits: Vec<&Edit> = Vec::new();
    for n in numbered {
        let why = if n.action.cuts_weights() {
            Some("cuts trained rows of the weights (--allow-shrink): name it with --fix-only to carry it out".into())
        } else if n.error {
            not_executable(&n.action, ckpt).or_else(|| disagrees(n, weights, &edits))
        } else {
            Some("a warning's fix: name it with --fix-only to carry it out".into())
        };
        if let Some(why) = why {
            skipped.push(skip(n, why));
            continue;
        }
        if let Fix::EditJson { edits: mine } = &n.action {
            edits.extend(mine.iter());
        }
        chosen.push(n.clone());
    }
    Ok((chosen, skipped))
}

/// Run a fix's tool, as its command line would: its report as JSON, and as text.
fn run_tool(fix: &Fix, out: &Path, dry_run: bool, open: &OpenOptions) -> Result<(Value, String)> {
    match fix {
        Fix::Extend {
            input,
            rows,
            tokenizer,
            allow_shrink,
            config,
            tensors,
            ..
        } => {
            let opts = extend_embeddings::Options {
                target: match tokenizer {
                    Some(t) => Target::Tokenizer(t.clone()),
                    None => Target::Rows(*rows),
                },
                tensors: tensors.clone(),
                config: config.clone(),
                allow_shrink: *allow_shrink,
                dry_run,
                open: open.clone(),
                ..Default::default()
            };
            let r = extend_embeddings::run(input, out, &opts)?;
            let plan = |r: &_| extend_embeddings::to_plan(r, input, out, &opts);
            Ok(answer(&r, dry_run, plan, extend_embeddings::render(&r)))
        }
        Fix::Sanitize {
            input,
            vocab_rows,
            tokenizer,
            drop_optimizer,
            allow_shrink,
            ..
        } => {
            let ckpt = crate::formats::open(input, open)?;
            if let Checkpoint::Zero { zero: z, .. } = &ckpt {
                let z = z.get()?;
                let opts = sanitize_checkpoint::zero::Options {
                    vocab_rows: *vocab_rows,
                    tensors: Vec::new(),
                    init: crate::rows::init::Init::Mean,
                    overwrite: false,
                    dry_run,
                    allow_shrink: *allow_shrink,
                };
                let side = crate::rows::layout::zero_beside::beside(&ckpt, tokenizer.as_deref());
                let r = sanitize_checkpoint::zero::run(z, side.as_ref(), out, &opts)?;
                let plan = |r: &_| sanitize_checkpoint::to_plan::zero_plan(r, out);
                let text = sanitize_checkpoint::zero::render(&r);
                return Ok(answer(&r, dry_run, plan, text));
            }
            let run = sanitize_checkpoint::megatron::Run {
                dry_run,
                overwrite: false,
                allow_shrink: *allow_shrink,
                drop_optimizer: *drop_optimizer,
                fail_on_nonfinite: false,
            };
            if let Some(done) = run_folder_job(&ckpt, (input, out), *vocab_rows, run, open) {
                return done;
            }
            let target = match tokenizer {
                Some(t) => sanitize_checkpoint::RowsFrom::Tokenizer(t.clone()),
                None => sanitize_checkpoint::RowsFrom::Rows(*vocab_rows),
            };
            let opts = sanitize_checkpoint::Options {
                optimizer: if *drop_optimizer {
                    sanitize_checkpoint::OptimizerAction::Drop
                } else {
                    sanitize_checkpoint::OptimizerAction::Repair
                },
                dry_run,
                allow_shrink: *allow_shrink,
                ..sanitize_checkpoint::Options::new(target, open.clone())
            };
            let r = sanitize_checkpoint::run(&ckpt, out, &opts)?;
            let plan = |r: &_| sanitize_checkpoint::to_plan::to_plan(r, &ckpt, out, &opts);
            Ok(answer(&r, dry_run, plan, sanitize_checkpoint::render(&r)))
        }
        Fix::EditJson { .. } | Fix::EditGguf { .. } | Fix::Manual { .. } => {
            Ok((Value::Null, String::new()))
        }
    }
}

/// The fix of a folder sanitize-checkpoint resizes with a job of its own, as it runs it, new rows
/// by the mean: a Megatron save resized for `n` true tokens (the padded size by the run's
/// rule), a DCP folder to `n` rows; None for any other checkpoint.
fn run_folder_job(
    ckpt: &Checkpoint,
    (input, out): (&Path, &Path),
    n: u64,
    run: sanitize_checkpoint::megatron::Run,
    open: &OpenOptions,
) -> Option<Result<(Value, String)>> {
    use super::super::sanitize_checkpoint::{megatron_dist_plan, megatron_legacy_plan};
    use sanitize_checkpoint::{megatron, megatron_legacy, to_plan};
    let init = crate::rows::init::Init::Mean;
    let policy = &open.globals;
    Some(match ckpt {
        Checkpoint::Megatron(m) => megatron::run(m, out, n, &init, run, policy).map(|r| {
            let plan = |r: &_| megatron_dist_plan(r, m, (input, out), init.name());
            answer(&r, run.dry_run, plan, megatron::render(&r))
        }),
        Checkpoint::MegatronLegacy(l) => {
            megatron_legacy::run(l, out, n, &init, run, policy).map(|r| {
                let plan = |r: &_| megatron_legacy_plan(r, (input, out), init.name());
                answer(&r, run.dry_run, plan, megatron_legacy::render(&r))
            })
        }
        Checkpoint::Dcp(d) => {
            let r = sanitize_checkpoint::dcp::Run {
                dry_run: run.dry_run,
                overwrite: false,
                allow_shrink: run.allow_shrink,
            };
            sanitize_checkpoint::dcp::run(d, out, n, &init, r).map(|r| {
                let plan = |r: &_| to_plan::dcp_plan(r, out);
                answer(&r, run.dry_run, plan, sanitize_checkpoint::dcp::render(&r))
            })
        }
        _ => return None,
    })
}

/// A tool's answer: its plan (`plan` of its report) in a dry run, else its report, as JSON; and
/// its text.
fn answer<R: Serialize, P: Serialize>(
    r: &R,
    dry_run: bool,
    plan: impl FnOnce(&R) -> P,
    text: String,
) -> (Value, String) {
    let value = if dry_run { json(&plan(r)) } else { json(r) };
    (value, text)
}

/// A tool's report as JSON.
fn json<T: Serialize>(r: &T) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// Set `key` (dotted: `text_config.vocab_size`) of the JSON file `path` to `value`, every other
/// byte of the file kept ([`json_text`]), and read it back: the value must be there. What
/// changed.
fn write_edit(path: &Path, key: &str, value: &Value) -> Result<Vec<JsonChange>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
    let mut doc: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(path, format!("not valid JSON: {e}")))?;
    let parts: Vec<&str> = key.split('.').collect();
    let mut at = &mut doc;
    for p in &parts[..parts.len() - 1] {
        at = at
            .get_mut(*p)
            .ok_or_else(|| Error::format(path, format!("no key {p} (for {key})")))?;
    }
    let Some(obj) = at.as_object_mut() else {
        return Err(Error::format(path, format!("{key}: not inside an object")));
    };
    obj.insert(parts[parts.len() - 1].to_string(), value.clone());
    let edit = json_text::rewrite(&text, &doc).map_err(|e| Error::format(path, e))?;
    std::fs::write(path, &edit.text).map_err(|e| Error::io(path, "write", e))?;
    let back: Value = serde_json::from_str(
        &std::fs::read_to_string(path).map_err(|e| Error::io(path, "read back", e))?,
    )
    .map_err(|e| Error::Verify {
        path: path.to_path_buf(),
        problem: format!("not valid JSON when read back: {e}"),
    })?;
    if back != doc {
        return Err(Error::Verify {
            path: path.to_path_buf(),
            problem: format!("{key} did not read back as written"),
        });
    }
    Ok(edit.changes)
}

/// A folder output holding edits: built in one temp folder (the weights' fix written into it by
/// its tool, or every file of the input carried over), the edits written, then renamed into
/// place, so the folder appears complete or not at all.
fn write_folder(
    input: &Path,
    out: &Path,
    weights: Option<&Numbered>,
    edits: &[&Numbered],
    open: &OpenOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<Executed>> {
    let folder = AtomicFolder::create(out, &[input], false)?;
    let mut done = Vec::new();
    match weights {
        Some(w) => {
            let stage = folder.join(".check-vocab-fix");
            let (report, text) = run_tool(&w.action, &stage, false, open)?;
            let (report, text) = untemp((report, text), &stage, out);
            move_up(&stage, folder.path())?;
            done.push(executed(w, w.action.writing_to(out), report, text));
        }
        None => {
            let mut names: Vec<PathBuf> = read_dir(input)?;
            names.sort();
            for p in &names {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if name.contains(".ckpt-surgery-") && name.ends_with(".tmp") {
                    continue;
                }
                if !p.is_file() {
                    notes.push(format!(
                        "left out of {}: {name}: a folder (only the files of the input folder are carried)",
                        out.display()
                    ));
                    continue;
                }
                folder.carry(p, &name, false).map_err(|e| folder.about(e))?;
            }
        }
    }
    for n in edits {
        let carried_out = n.action.writing_to(out);
        let Fix::EditJson { edits: written } = &carried_out else {
            continue;
        };
        let mut files: Vec<EditedFile> = Vec::new();
        for e in written {
            let name = e.file.file_name().unwrap_or_default().to_string_lossy();
            let changes =
                write_edit(&folder.join(&name), &e.key, &e.value).map_err(|e| folder.about(e))?;
            match files.iter_mut().find(|f| f.file == e.file) {
                Some(f) => f.changes.extend(changes),
                None => files.push(EditedFile {
                    file: e.file.clone(),
                    changes,
                }),
            }
        }
        let text: String = written
            .iter()
            .map(|e| format!("  {}\n", e.describe()))
            .collect();
        let value = serde_json::to_value(written).unwrap_or(Value::Null);
        let mut x = executed(n, carried_out, value, text);
        x.edited = files;
        done.push(x);
    }
    folder.commit()?;
    Ok(done)
}

/// A fix carried out, with the JSON edits its tool's report lists (a dry run's plan: none).
pub(super) fn executed(n: &Numbered, carried_out: Fix, report: Value, text: String) -> Executed {
    let edited = serde_json::from_value(report["edited"].clone()).unwrap_or_default();
    Executed {
        numbered: n.clone(),
        carried_out: carried_out.text(),
        report,
        edited,
        text,
    }
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, "list", e))?
        .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(dir, "list", e)))
        .collect()
}

/// Move the files the tool wrote into `stage` up into the output folder.
fn move_up(stage: &Path, to: &Path) -> Result<()> {
    for p in read_dir(stage)? {
        let Some(name) = p.file_name() else { continue };
        std::fs::rename(&p, to.join(name))
            .map_err(|e| Error::io(&p, "move into the output folder", e))?;
    }
    std::fs::remove_dir(stage).map_err(|e| Error::io(stage, "remove", e))
}

/// A tool's report with the stage folder's path written as the output's.
fn untemp((report, text): (Value, String), stage: &Path, out: &Path) -> (Value, String) {
    let (from, to) = (stage.to_string_lossy(), out.to_string_lossy());
    let json = serde_json::to_string(&report)
        .unwrap_or_default()
        .replace(&*from, &to);
    (
        serde_json::from_str(&json).unwrap_or(report),
        text.replace(&*from, &to),
    )
}

/// Refuse an output that is the input, or inside the input folder.
pub(super) fn refuse_input(out: &Path, input: &Path) -> Result<()> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dest = canon(parent).zip(out.file_name()).map(|(p, n)| p.join(n));
    if let (Some(d), Some(i)) = (dest, canon(input)) {
        if d == i || d.starts_with(&i) {
            return Err(Error::arg(
                "--output",
                format!(
                    "{}: is the input {} (or inside it): --fix never writes over its input; give a new path",
                    out.display(),
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The inputs of the check of the output: paths inside the input folder (its tokenizer,
/// config) become the output's (`folder`: the input is a folder).
pub(super) fn inputs_of_output(inp: &Inputs, out: &Path, folder: bool) -> Inputs {
    let mut a = inp.clone();
    let remap = |p: &PathBuf| -> PathBuf {
        if p == &inp.checkpoint {
            return out.to_path_buf();
        }
        match p.strip_prefix(&inp.checkpoint) {
            Ok(rel) if folder && out.join(rel).exists() => out.join(rel),
            _ => p.clone(),
        }
    };
    a.checkpoint = out.to_path_buf();
    a.tokenizers = inp.tokenizers.iter().map(remap).collect();
    a.config = inp.config.as_ref().map(remap);
    a.training_checkpoint = inp.training_checkpoint.as_ref().map(remap);
    a
}

/// Carry out the selected fixes into `out` (or plan them, `dry_run`).
fn execute(
    inp: &Inputs,
    req: &Request,
    chosen: &[Numbered],
    notes: &mut Vec<String>,
) -> Result<Vec<Executed>> {
    let weights = chosen.iter().find(|n| n.action.rows().is_some());
    let edits: Vec<&Numbered> = chosen
        .iter()
        .filter(|n| matches!(n.action, Fix::EditJson { .. }))
        .collect();
    if req.dry_run {
        let mut done = Vec::new();
        if let Some(w) = weights {
            let (report, text) = run_tool(&w.action, &req.output, true, &inp.open)?;
            done.push(executed(w, w.action.writing_to(&req.output), report, text));
        }
        for n in edits {
            let text = format!("  {}\n", n.text);
            done.push(executed(
                n,
                n.action.writing_to(&req.output),
                Value::Null,
                text,
            ));
        }
        return Ok(done);
    }
    if edits.is_empty() {
        let Some(w) = weights else {
            return Ok(Vec::new());
        };
        let (report, text) = run_tool(&w.action, &req.output, false, &inp.open)?;
        let carried_out = w.action.writing_to(&req.output);
        return Ok(vec![executed(w, carried_out, report, text)]);
    }
    write_folder(
        &inp.checkpoint,
        &req.output,
        weights,
        &edits,
        &inp.open,
        notes,
    )
}

/// check-vocab, then its fixes carried out into `req.output`, then check-vocab on the output.
pub(super) fn run(inp: &Inputs, opened: &Opened, req: &Request) -> Result<FixRun> {
    let Some(ckpt) = &opened.checkpoint else {
        return Err(Error::arg("--fix", "--fix repairs a checkpoint: give CHECKPOINT (a batch on its own has no fix to carry out)"));
    };
    refuse_input(&req.output, &inp.checkpoint)?;
    let before = check_vocab::run(inp, opened)?;
    let numbered = number(&before);
    let (chosen, skipped) = select(&numbered, req.only, ckpt)?;
    let mut notes = Vec::new();
    let executed = execute(inp, req, &chosen, &mut notes)?;
    let after = if req.dry_run || executed.is_empty() {
        None
    } else {
        let folder = !matches!(ckpt, Checkpoint::File(_));
        Some(super::open::check(&inputs_of_output(
            inp,
            &req.output,
            folder,
        ))?)
    };
    let last = after.as_ref().unwrap_or(&before);
    Ok(FixRun {
        checkpoint: inp.checkpoint.clone(),
        output: req.output.clone(),
        dry_run: req.dry_run,
        findings: last.findings.clone(),
        errors: last.errors,
        before,
        executed,
        skipped,
        notes,
        after,
    })
}

/// The human report of a fix run.
pub(super) fn render(r: &FixRun) -> String {
    use std::fmt::Write as _;
    let mut s = check_vocab::render(&r.before);
    let verb = if r.dry_run {
        "would carry out"
    } else {
        "carried out"
    };
    if r.executed.is_empty() {
        let why = if r.before.errors == 0 {
            "nothing to fix: no errors"
        } else {
            "no fix to carry out"
        };
        let _ = writeln!(
            s,
            "\n--fix: {why}; nothing written to {}",
            r.output.display()
        );
    }
    for e in &r.executed {
        let _ = writeln!(
            s,
            "\n--fix: {verb} fix {} into {}: {}",
            e.numbered.fix,
            r.output.display(),
            e.carried_out
        );
        if r.dry_run {
            s.push_str(&e.text);
        }
        for line in json_text::render(&e.edited).lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    for k in &r.skipped {
        let _ = writeln!(s, "--fix: left fix {} out: {}", k.fix, k.why);
    }
    for n in &r.notes {
        let _ = writeln!(s, "--fix: {n}");
    }
    match &r.after {
        Some(a) => {
            let _ = writeln!(s, "\ncheck of the output:");
            s.push_str(&check_vocab::render(a));
        }
        None if r.dry_run && !s.ends_with("dry run: nothing written\n") => {
            let _ = writeln!(s, "dry run: nothing written");
        }
        None => {}
    }
    s
}
