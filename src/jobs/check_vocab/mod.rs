//! The `check-vocab` job: does the tokenizer, config, weights, special-token ids, optimizer and
//! data agree on the vocabulary — before CUDA finds out with `device-side assert triggered`?
//! Each check is a small function returning findings; each finding carries the numbers and, where
//! one exists, the fix as a value ([`Fix`]: a tool run or JSON key edits) and as the command line
//! it prints, offered only when following it makes the finding pass and discards nothing a
//! smaller fix keeps (see [`Finding`]). What the doctor needs of other jobs (sanitize-checkpoint's
//! reading of an optimizer, the config keys extend-embeddings sets) is handed in by the layer
//! above as [`Jobs`]: the doctor imports no other job, and `check-vocab --fix` (in the cli) runs
//! the fixes through the tools' own planners.

use crate::error::{Error, Result};
use crate::formats::{Checkpoint, OpenOptions, Tensors};
use crate::tokenizer::base::load_tokenizer;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

mod batch;
mod checks;
mod data;
pub mod dcp;
mod fix;
mod model;
mod optimizer;
mod specials;
mod zero;
pub use crate::plan::{KeyEdit as Edit, Plan, Request as Fix};
pub use data::{id_tensors, max_token_id, IdTensor};
use fix::fixed_path;
pub use optimizer::{OptimizerState, Refusal};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

/// A finding. `fix` is offered only when carrying it out turns this finding into a pass and it
/// discards nothing a smaller fix would keep (moments, rows, config keys): a [`Plan`] whose
/// request is a tool run, JSON key edits or a change by hand. `--json` gives it as `fix` (the
/// command line, rendered from the plan), `edits` (a JSON fix's keys) and `action` (the request,
/// which `check-vocab --fix` carries out). `alternatives` are the other explanations, less
/// likely, each with what following it costs.
#[derive(Debug, Clone)]
pub struct Finding {
    pub severity: Severity,
    pub check: &'static str,
    pub message: String,
    pub numbers: Value,
    pub fix: Option<Plan>,
    pub alternatives: Vec<String>,
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("severity", &self.severity)?;
        m.serialize_entry("check", self.check)?;
        m.serialize_entry("message", &self.message)?;
        m.serialize_entry("numbers", &self.numbers)?;
        if let Some(command) = self.command() {
            m.serialize_entry("fix", &command)?;
        }
        if let Some(Fix::EditJson { edits }) = self.request() {
            m.serialize_entry("edits", edits)?;
        }
        if !self.alternatives.is_empty() {
            m.serialize_entry("alternatives", &self.alternatives)?;
        }
        if let Some(r) = self.request() {
            m.serialize_entry("action", r)?;
        }
        m.end()
    }
}

fn finding(
    severity: Severity,
    check: &'static str,
    message: String,
    numbers: Value,
    fix: Option<Fix>,
) -> Finding {
    Finding {
        severity,
        check,
        message,
        numbers,
        fix: fix.map(Plan::of_request),
        alternatives: Vec::new(),
    }
}

impl Finding {
    /// What the fix asks for (the tool, its input and target; or the JSON edits).
    pub fn request(&self) -> Option<&Fix> {
        self.fix.as_ref().and_then(|p| p.request.as_ref())
    }

    /// The fix's command line, rendered from its plan.
    pub fn command(&self) -> Option<String> {
        self.fix.as_ref().map(Plan::command)
    }

    /// The fix is these JSON edits.
    fn edits(mut self, edits: Vec<Edit>) -> Self {
        if !edits.is_empty() {
            self.fix = Some(Plan::of_request(Fix::EditJson { edits }));
        }
        self
    }

    fn alternatives(mut self, alternatives: Vec<String>) -> Self {
        self.alternatives = alternatives;
        self
    }
}

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub checkpoint: PathBuf,
    pub tokenizers: Vec<PathBuf>,
    pub config: Option<PathBuf>,
    pub freeze_until: Option<u64>,
    pub base_tokenizer: Option<PathBuf>,
    pub training_checkpoint: Option<PathBuf>,
    pub token_ids: Option<PathBuf>,
    /// u16, u32, i32 or i64 for raw token-id files.
    pub token_ids_dtype: Option<String>,
    /// Multi-codebook data: ids in each row of a [C, T] tensor must be below this.
    pub codebook_size: Option<u64>,
    pub open: OpenOptions,
}

/// What the layer above opened for the doctor, which opens nothing itself: the checkpoint
/// (None for a saved batch checked on its own), the training checkpoint given apart, the
/// token-id data.
#[derive(Debug, Default)]
pub struct Opened {
    pub checkpoint: Option<Checkpoint>,
    pub training: Option<Checkpoint>,
    pub token_ids: Option<TokenIds>,
    /// The answer to [`optimizer_question`], when there was one.
    pub optimizer: Option<OptimizerAnswer>,
}

/// Token-id data as read: a saved batch (a torch or safetensors file, opened), or the bytes of
/// a `.npy` or raw ids file.
#[derive(Debug)]
pub enum TokenIds {
    Batch(Tensors),
    Bytes(Vec<u8>),
}

/// The one question the doctor asks about a training checkpoint's optimizer: which file, and
/// the rows its moments should have. The layer above answers it with sanitize-checkpoint's own
/// reading and hands the answer in as [`Opened::optimizer`] (the doctor imports no other job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimizerQuestion {
    pub training_checkpoint: PathBuf,
    pub target_rows: u64,
}

/// The answer: the moments that do not fit and the tensors holding NaN/Inf, or why
/// sanitize-checkpoint refuses to read the optimizer.
pub type OptimizerAnswer = std::result::Result<OptimizerState, Refusal>;

/// The question [`run`] will ask of the training checkpoint's optimizer, if any (a training
/// checkpoint given or found, and a target row count known).
pub fn optimizer_question(inp: &Inputs, opened: &Opened) -> Result<Option<OptimizerQuestion>> {
    match &opened.checkpoint {
        Some(Checkpoint::Zero { .. } | Checkpoint::Dcp(_)) | None => Ok(None),
        Some(ckpt) => model::optimizer_question(inp, ckpt, opened),
    }
}

/// Does this opened checkpoint hold optimizer state (a training file)? The knowledge
/// sanitize-checkpoint reads it with.
pub(super) fn has_optimizer(c: &Tensors) -> bool {
    c.torch
        .first()
        .is_some_and(|t| crate::formats::torch::optimizer::state::has_optimizer(&t.pickle))
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checkpoint: PathBuf,
    pub rows: u64,
    pub files: BTreeMap<String, Vec<PathBuf>>,
    pub findings: Vec<Finding>,
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
}

/// The report of a run: the findings, counted by severity.
fn summarize(
    checkpoint: PathBuf,
    rows: u64,
    files: BTreeMap<String, Vec<PathBuf>>,
    findings: Vec<Finding>,
) -> Report {
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    Report {
        checkpoint,
        rows,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        files,
        findings,
    }
}

/// A loaded tokenizer: its path, the ids it needs, token → id.
struct Tok {
    path: PathBuf,
    needed: u64,
    ids: HashMap<String, u32>,
}

fn load_tok(path: &Path) -> Result<Tok> {
    let base = load_tokenizer(path)?;
    let needed = base.size();
    let ids = base
        .ids()
        .into_iter()
        .map(|(t, id)| (t.to_string(), id))
        .collect();
    Ok(Tok {
        path: path.to_path_buf(),
        needed,
        ids,
    })
}

fn dir_of(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.to_path_buf()
    } else {
        p.parent().map_or(PathBuf::from("."), Path::to_path_buf)
    }
}

/// The `--allow-global` names the user gave (sorted), for fix commands that open the same torch
/// files.
fn allowed_globals(open: &OpenOptions) -> Vec<String> {
    let mut g: Vec<String> = open.globals.extra.iter().cloned().collect();
    g.sort();
    g
}

/// A tokenizer file, or the tokenizer of a model folder (tokenizer.json, else tokenizer.model).
fn tokenizer_in(p: &Path) -> Result<PathBuf> {
    if !p.is_dir() {
        return Ok(p.to_path_buf());
    }
    ["tokenizer.json", "tokenizer.model"]
        .iter()
        .map(|n| p.join(n))
        .find(|f| f.is_file())
        .ok_or_else(|| Error::format(p, "a folder with no tokenizer.json or tokenizer.model"))
}

fn read_json(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(p, format!("not valid JSON: {e}")))
}

/// Rows past a tokenizer's ids that look like padding: transformers and training scripts pad
/// the table to a multiple of 8 or more (Gemma: 262144 ids, 262208 rows).
fn looks_padded(rows: u64) -> bool {
    rows.is_multiple_of(8)
}

/// The rows the weights should have, and why: the tokenizer's need when the table is too small
/// for it, or when the rows past it are not padding (not a multiple of 8, and config.json does
/// not say that many: rows of an older tokenizer, seed 001's 24001 for 24000 ids); otherwise the
/// rows the weights have (the weights are the evidence; padding rows are normal).
fn target_rows(rows: u64, needed: Option<u64>, config_rows: Option<u64>) -> u64 {
    match needed {
        Some(n) if n > rows => n,
        Some(n) if n < rows && !looks_padded(rows) && config_rows != Some(rows) => n,
        _ => rows,
    }
}

/// Run every check that the inputs allow, on what the layer above opened.
pub fn run(inp: &Inputs, opened: &Opened) -> Result<Report> {
    match &opened.checkpoint {
        None => batch::run_batch_only(inp, opened.token_ids.as_ref()),
        Some(Checkpoint::Zero { zero: z, .. }) => zero::run(inp, z),
        Some(Checkpoint::Dcp(d)) => dcp::run(d, &inp.tokenizers),
        Some(ckpt) => model::run(inp, ckpt, opened),
    }
}

/// The human report.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if r.checkpoint.as_os_str().is_empty() {
        let data: Vec<String> = r
            .files
            .get("token_ids")
            .map(|v| v.iter().map(|p| p.display().to_string()).collect())
            .unwrap_or_default();
        let _ = writeln!(s, "{}: a batch on its own", data.join(", "));
    } else {
        let _ = writeln!(s, "{}: embedding {} rows", r.checkpoint.display(), r.rows);
    }
    // One command often fixes several findings (the table grows, and every id past it fits):
    // it is printed once, and the findings it also fixes point to it.
    let mut shown: Vec<String> = Vec::new();
    for f in &r.findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = writeln!(s, "{sev} [{}] {}", f.check, f.message);
        match f.command() {
            Some(fix) if shown.contains(&fix) => {
                let n = shown.iter().position(|x| *x == fix).map_or(1, |i| i + 1);
                let _ = writeln!(s, "  fix: the same command as fix {n} above");
            }
            Some(fix) => {
                let _ = writeln!(s, "  fix {}: {fix}", shown.len() + 1);
                shown.push(fix);
            }
            None => {}
        }
        for a in &f.alternatives {
            let _ = writeln!(s, "  or: {a}");
        }
    }
    let _ = writeln!(
        s,
        "{} errors, {} warnings, {} infos",
        r.errors, r.warnings, r.infos
    );
    s
}
