//! The `check-vocab` job: does the tokenizer, config, weights, special-token ids, optimizer and
//! data agree on the vocabulary — before CUDA finds out with `device-side assert triggered`?
//! Each check is a small function returning findings; each finding carries the numbers and, where
//! one exists, the fix: a command or JSON key edits, offered only when following it makes the
//! finding pass and discards nothing a smaller fix keeps (see [`Finding`]). Optimizers, ties and
//! training layouts are read by sanitize-checkpoint's own code.

use crate::embeddings;
use crate::error::{Error, Result};
use crate::formats::{self, Checkpoint, OpenOptions};
use crate::optimizer::sanitize::{self, OptimizerAction, RowsFrom, SchedulerAction};
use crate::tokenizer::base::load_tokenizer;
use crate::vocab;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

mod data;
mod specials;
mod zero;
pub use data::{id_tensors, max_token_id, IdTensor};
use specials::check_specials;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

/// A finding. `fix` is offered only when running it turns this finding into a pass and it
/// discards nothing a smaller fix would keep (moments, rows, config keys): a command, or JSON key
/// edits (`edits`, also spelled out in `fix`). `alternatives` are the other explanations, less
/// likely, each with what following it costs.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub check: &'static str,
    pub message: String,
    pub numbers: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<Edit>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<String>,
}

/// Set one key of a JSON file (`text_config.vocab_size`: a key inside `text_config`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edit {
    pub file: PathBuf,
    pub key: String,
    pub value: Value,
}

impl Edit {
    fn describe(&self) -> String {
        format!(
            "set \"{}\": {} in {}",
            self.key,
            self.value,
            self.file.display()
        )
    }
}

fn finding(
    severity: Severity,
    check: &'static str,
    message: String,
    numbers: Value,
    fix: Option<String>,
) -> Finding {
    Finding {
        severity,
        check,
        message,
        numbers,
        fix,
        edits: Vec::new(),
        alternatives: Vec::new(),
    }
}

impl Finding {
    /// The fix is these JSON edits.
    fn edits(mut self, edits: Vec<Edit>) -> Self {
        if !edits.is_empty() {
            let text: Vec<String> = edits.iter().map(Edit::describe).collect();
            self.fix = Some(text.join("; "));
        }
        self.edits = edits;
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

/// `--allow-global` flags the user gave, for fix commands that open the same torch files.
fn globals_flags(open: &OpenOptions) -> String {
    let mut g: Vec<&String> = open.globals.extra.iter().collect();
    g.sort();
    g.iter().map(|x| format!(" --allow-global {x}")).collect()
}

/// Where a fix command should write: beside the input, never over it; a folder for a folder
/// (the output rule: a model folder comes out as a complete folder).
fn fixed_path(ckpt: &Path) -> String {
    if ckpt.is_dir() {
        return format!("{}-fixed", ckpt.display());
    }
    let stem = ckpt
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = ckpt
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    dir_of(ckpt)
        .join(format!("{stem}-fixed{ext}"))
        .display()
        .to_string()
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

/// Checks of a saved batch's integer tensors (torch or safetensors): each row of a [C, T]
/// tensor against the codebook size, every id against the rows, and two tensors whose widths
/// differ by exactly C − 1 (a delay pattern applied to one of them: seed 004).
fn check_batch(
    p: &Path,
    tensors: &[IdTensor],
    rows: Option<u64>,
    codebook: Option<u64>,
    findings: &mut Vec<Finding>,
) {
    for t in tensors {
        if let (Some(s), [.., c, _]) = (codebook, &t.shape[..]) {
            let bad: Vec<(usize, u64)> = t
                .row_max
                .iter()
                .enumerate()
                .filter_map(|(i, m)| m.filter(|&m| m >= s).map(|m| (i, m)))
                .collect();
            if let Some(&(i, m)) = bad.first() {
                findings.push(finding(
                    Severity::Error,
                    "codebook-ids",
                    format!("{}: {} {:?}: codebook {i} holds id {m}, not below the codebook size {s} ({} of {c} codebooks out of range): the codebook's embedding lookup will index past its rows", p.display(), t.name, t.shape, bad.len()),
                    json!({"tensor": t.name, "codebook": i, "id": m, "codebook_size": s}),
                    None,
                ));
            }
        } else if let (Some(r), Some(m)) = (rows, t.max) {
            if m >= r {
                findings.push(finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: {} holds id {m} but the embedding has {r} rows: indexing it is the device-side assert", p.display(), t.name),
                    json!({"tensor": t.name, "max_id": m, "embedding_rows": r}),
                    None,
                ));
            }
        }
    }
    for (i, a) in tensors.iter().enumerate() {
        for b in &tensors[i + 1..] {
            // [C, T] or [B…, C, T], the leading (batch) axes equal.
            let ([lead_a @ .., ca, ta], [lead_b @ .., cb, tb]) = (&a.shape[..], &b.shape[..])
            else {
                continue;
            };
            if lead_a != lead_b || ca != cb || *ca < 2 || ta.abs_diff(*tb) != ca - 1 {
                continue;
            }
            let (narrow, wide) = if ta < tb { (a, b) } else { (b, a) };
            let c = *ca;
            findings.push(finding(
                Severity::Error,
                "delay-pattern",
                format!(
                    "{}: {} {:?} and {} {:?}: {} is {} columns wider, what a delay pattern over {c} codebooks adds (T + C − 1 = {} + {c} − 1): it was applied to {} and not to {}; for teacher forcing both must have one shape — apply the delay pattern in the model (or to both), not to the labels alone",
                    p.display(),
                    narrow.name,
                    narrow.shape,
                    wide.name,
                    wide.shape,
                    wide.name,
                    c - 1,
                    narrow.shape[narrow.shape.len() - 1],
                    wide.name,
                    narrow.name
                ),
                json!({"narrow": narrow.name, "wide": wide.name, "codebooks": c, "widths": [narrow.shape[narrow.shape.len() - 1], wide.shape[wide.shape.len() - 1]]}),
                None,
            ));
        }
    }
}

/// Only a batch to check (no checkpoint): the codebook and delay-pattern checks.
fn run_batch_only(inp: &Inputs) -> Result<Report> {
    let Some(p) = &inp.token_ids else {
        return Err(Error::Usage(
            "give the checkpoint (a file or model folder): check-vocab CHECKPOINT".into(),
        ));
    };
    if !data::is_tensor_file(p)? {
        return Err(Error::Usage(format!(
            "{}: without a checkpoint, --token-ids must be a saved batch (torch or safetensors) checked with --codebook-size",
            p.display()
        )));
    }
    let tensors = id_tensors(p, &inp.open)?;
    let mut findings = Vec::new();
    check_batch(p, &tensors, None, inp.codebook_size, &mut findings);
    let mut files = BTreeMap::new();
    files.insert("token_ids".to_string(), vec![p.clone()]);
    let count = |s| {
        findings
            .iter()
            .filter(|f: &&Finding| f.severity == s)
            .count()
    };
    Ok(Report {
        checkpoint: PathBuf::new(),
        rows: 0,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        files,
        findings,
    })
}

/// Run every check that the inputs allow.
/// The optimizer file of a Hugging Face Trainer checkpoint folder.
const TRAINER_OPTIMIZER: &str = "optimizer.pt";

pub fn run(inp: &Inputs) -> Result<Report> {
    if inp.checkpoint.as_os_str().is_empty() {
        return run_batch_only(inp);
    }
    if formats::zero::locate(&inp.checkpoint).is_some() {
        return zero::run(inp);
    }
    let ckpt = formats::open_with(&inp.checkpoint, &inp.open)?;
    let ck_dir = dir_of(&inp.checkpoint);
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut findings = Vec::new();

    // Files beside the checkpoint when not given; a model folder given for --tokenizer or
    // --config means its tokenizer / config.json, as from_pretrained reads a folder.
    let mut tok_paths = inp
        .tokenizers
        .iter()
        .map(|p| tokenizer_in(p))
        .collect::<Result<Vec<_>>>()?;
    if tok_paths.is_empty() {
        for n in ["tokenizer.json", "tokenizer.model"] {
            let p = ck_dir.join(n);
            if p.is_file() {
                tok_paths.push(p);
                break;
            }
        }
    }
    let config_path = match &inp.config {
        Some(c) if c.is_dir() => {
            let f = c.join("config.json");
            if !f.is_file() {
                return Err(Error::format(c, "a folder with no config.json"));
            }
            Some(f)
        }
        Some(c) => Some(c.clone()),
        None => Some(ck_dir.join("config.json")).filter(|p| p.is_file()),
    };
    let toks: Vec<Tok> = tok_paths
        .iter()
        .map(|p| load_tok(p))
        .collect::<Result<_>>()?;
    files.insert("checkpoint".into(), vec![ckpt.path.clone()]);
    files.insert("tokenizers".into(), tok_paths.clone());
    if let Some(c) = &config_path {
        files.insert("config".into(), vec![c.clone()]);
    }
    let config = config_path.as_ref().map(|p| read_json(p)).transpose()?;
    // A training checkpoint given apart is read now: unreadable input is exit 2, never a finding.
    let training_path: Option<PathBuf> = match &inp.training_checkpoint {
        Some(tp) => {
            formats::open_with(tp, &inp.open)?;
            Some(tp.clone())
        }
        // A training file holding an optimizer, or a Trainer folder with its optimizer.pt: the
        // optimizer is checked with the weights, and a fix keeps it (sanitize, not extend).
        None => (ckpt
            .torch
            .first()
            .is_some_and(|t| sanitize::has_optimizer(&t.pickle))
            || inp.checkpoint.join(TRAINER_OPTIMIZER).is_file())
        .then(|| inp.checkpoint.clone()),
    };
    let is_training = training_path.as_deref() == Some(inp.checkpoint.as_path());
    let folder_input = inp.checkpoint.is_dir();

    // 4. Embedding vs head vs bias (and the rows everything else is checked against).
    let rows = embedding_rows(&ckpt, &mut findings)?;
    let needed = toks.iter().map(|t| t.needed).max();
    let config_keys = config.as_ref().map(config_vocab).unwrap_or_default();
    let config_rows = config_keys.first().map(|(_, v)| *v);
    let target = target_rows(rows, needed, config_rows);
    let fix_rows = |to: u64| -> String {
        let out = fixed_path(&inp.checkpoint);
        let globals = globals_flags(&inp.open);
        // The tokenizer that says `to` goes with the fix (a folder gets it in place).
        let tok = toks.iter().find(|t| t.needed == to);
        if is_training {
            // A Trainer folder takes the tokenizer into the output folder.
            let how = match tok.filter(|_| folder_input) {
                Some(t) => format!("--tokenizer {}", t.path.display()),
                None => format!("--vocab-rows {to}"),
            };
            return format!(
                "sanitize-checkpoint {} --output {out} {how}{globals}",
                inp.checkpoint.display()
            );
        }
        let how = match tok {
            Some(t) => format!("--tokenizer {}", t.path.display()),
            None => format!("--new-rows {to}"),
        };
        let shrink = if to < rows { " --allow-shrink" } else { "" };
        // A folder comes out complete, its config.json updated (another config named with
        // --config is used instead); a file output is that one file.
        let cfg = config_path
            .as_ref()
            .filter(|c| folder_input && **c != ck_dir.join("config.json"))
            .map(|c| format!(" --config {}", c.display()))
            .unwrap_or_default();
        format!(
            "extend-embeddings {} --output {out} {how}{shrink}{cfg}{globals}",
            inp.checkpoint.display()
        )
    };

    // 1. Tokenizer ids vs rows.
    for t in &toks {
        check_tokenizer(t, rows, target, &fix_rows, &mut findings);
    }
    // 2. Special-token ids.
    let mut special_files: Vec<PathBuf> = Vec::new();
    for d in tok_paths.iter().map(|p| dir_of(p)).chain([ck_dir.clone()]) {
        for n in [
            "tokenizer_config.json",
            "special_tokens_map.json",
            "generation_config.json",
        ] {
            let p = d.join(n);
            if p.is_file() && !special_files.contains(&p) {
                special_files.push(p);
            }
        }
    }
    files.insert("special_tokens".into(), special_files.clone());
    check_specials(
        &toks,
        &config_path,
        config.as_ref(),
        &special_files,
        rows,
        target,
        &fix_rows,
        &mut findings,
    )?;
    // 3. Config vocab keys vs rows. When the weights change (to the tokenizer's rows) and the
    // config already says that many, the weights' fix is the config's; otherwise the config
    // key is what is wrong, and the fix sets it.
    if let Some(p) = &config_path {
        for (key, v) in &config_keys {
            if *v == rows {
                continue;
            }
            let why = needed
                .map(|n| format!(" and the tokenizer uses {n} ids"))
                .unwrap_or_default();
            let msg = format!("{}: {key} = {v} but the embedding has {rows} rows{why}: a model built from this config would not load the weights", p.display());
            let numbers = json!({"config_key": key, "config_value": v, "embedding_rows": rows, "target_rows": target});
            // The weights' fix is the config's too when it brings the weights to the config's
            // value, or writes a new config.json (a folder comes out complete).
            let f = if target != rows && (*v == target || (folder_input && !is_training)) {
                finding(
                    Severity::Error,
                    "config-vs-embedding",
                    format!("{msg}; the weights are what is wrong: they should have {target} rows"),
                    numbers,
                    Some(fix_rows(target)),
                )
            } else {
                let edit = Edit {
                    file: p.clone(),
                    key: key.clone(),
                    value: json!(target),
                };
                let mut alt = Vec::new();
                if *v > rows && target == rows && !is_training {
                    alt.push(format!(
                        "if the model should have {v} rows (the tokenizer grew and the weights did not), grow the weights instead: {}",
                        fix_rows(*v)
                    ));
                }
                finding(
                    Severity::Error,
                    "config-vs-embedding",
                    format!("{msg}; {key} is what is wrong: it should be {target}"),
                    numbers,
                    None,
                )
                .edits(vec![edit])
                .alternatives(alt)
            };
            findings.push(f);
        }
    }
    // 5. freeze_until_index.
    if let Some(n) = inp.freeze_until {
        let base = inp
            .base_tokenizer
            .as_ref()
            .map(|p| load_tok(p))
            .transpose()?
            .map(|t| t.needed);
        check_freeze(n, rows, base, &mut findings);
    }
    // 6. Optimizer moments vs weights, read by sanitize-checkpoint's own code.
    if let Some(tp) = &training_path {
        files.insert("training_checkpoint".into(), vec![tp.clone()]);
        // Sure of the target unless it rests only on the rows past the tokenizer not looking
        // like padding (config.json, when it agrees, makes it sure).
        let sure = target >= rows || config_rows == Some(target);
        let fix = (is_training && folder_input).then(|| fix_rows(target));
        check_optimizer(tp, target, sure, &inp.open, fix, &mut findings)?;
    }
    // 7. Two tokenizers agree on shared tokens.
    for (i, a) in toks.iter().enumerate() {
        for b in &toks[i + 1..] {
            check_pair(a, b, &mut findings);
        }
    }
    // 8. Token ids of an already-tokenised dataset.
    if let Some(p) = inp
        .token_ids
        .as_ref()
        .filter(|p| data::is_tensor_file(p).unwrap_or(false))
    {
        files.insert("token_ids".into(), vec![p.clone()]);
        let tensors = id_tensors(p, &inp.open)?;
        check_batch(p, &tensors, Some(rows), inp.codebook_size, &mut findings);
    } else if let Some(p) = &inp.token_ids {
        files.insert("token_ids".into(), vec![p.clone()]);
        let max = max_token_id(p, inp.token_ids_dtype.as_deref())?;
        if let Some(m) = max.filter(|&m| m >= rows) {
            let numbers = json!({"max_id": m, "embedding_rows": rows, "tokenizer_ids": needed});
            let grow = fix_rows(target.max(m + 1));
            let f = match (needed, toks.iter().max_by_key(|t| t.needed)) {
                (Some(n), Some(t)) if m >= n => finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: the largest token id is {m}, past the embedding's {rows} rows and past the {n} ids of {} too: the data was most likely tokenised with another tokenizer; re-tokenise it with {}", p.display(), t.path.display(), t.path.display()),
                    numbers,
                    None,
                )
                .alternatives(vec![
                    format!("if the data's tokenizer is another one, check against it: check-vocab {} --tokenizer DATA_TOKENIZER --token-ids {}", inp.checkpoint.display(), p.display()),
                    format!("if the ids are right and both the tokenizer and the table are behind, grow the table (the tokenizer stays wrong): {grow}"),
                ]),
                (Some(_), _) => finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: the largest token id is {m} but the embedding has {rows} rows: the tokenizer has that id, the table is too small (indexing it is the device-side assert)", p.display()),
                    numbers,
                    Some(fix_rows(target)),
                ),
                _ => finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: the largest token id is {m} but the embedding has {rows} rows (indexing it is the device-side assert): either the data was tokenised with another tokenizer, or the table is too small; give --tokenizer to tell which", p.display()),
                    numbers,
                    None,
                )
                .alternatives(vec![format!("if the table is too small, grow it: {grow}")]),
            };
            findings.push(f);
        }
    }
    // When only a fresh optimizer gets sanitize past its refusal, every sanitize fix needs it:
    // a fix must work when run.
    if let Some(tp) = &training_path {
        drop_everywhere(tp, &mut findings);
    }
    findings.sort_by_key(|f| f.severity);
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    Ok(Report {
        checkpoint: ckpt.path.clone(),
        rows,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        files,
        findings,
    })
}

fn embedding_rows(ckpt: &Checkpoint, findings: &mut Vec<Finding>) -> Result<u64> {
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    if let Some(v) = det.vocabulary {
        return Ok(v.rows);
    }
    if det.ambiguous.is_empty() {
        return Err(Error::format(
            &ckpt.path,
            "no embedding matrix found: nothing to check the vocabulary against",
        ));
    }
    let emb = det
        .ambiguous
        .iter()
        .find(|g| g.tensors.iter().any(|t| t.role == vocab::Role::Embedding))
        .unwrap_or(&det.ambiguous[0]);
    let all: Vec<String> = det
        .ambiguous
        .iter()
        .flat_map(|g| {
            g.tensors
                .iter()
                .map(|t| format!("{} {:?}", t.name, t.shape))
        })
        .collect();
    let max = det
        .ambiguous
        .iter()
        .map(|g| g.rows)
        .max()
        .unwrap_or(emb.rows);
    let smaller: Vec<String> = det
        .ambiguous
        .iter()
        .filter(|g| g.rows < max)
        .flat_map(|g| g.tensors.iter().map(|t| format!(" --tensor {}", t.name)))
        .collect();
    findings.push(finding(
        Severity::Error,
        "embedding-vs-head",
        format!(
            "the vocabulary matrices disagree on rows: {}",
            all.join(", ")
        ),
        json!({"rows": det.ambiguous.iter().map(|g| g.rows).collect::<Vec<_>>()}),
        Some(format!(
            "extend-embeddings {} --output {} --new-rows {max}{}",
            ckpt.path.display(),
            fixed_path(&ckpt.path),
            smaller.concat()
        )),
    ));
    Ok(emb.rows)
}

fn check_tokenizer(
    t: &Tok,
    rows: u64,
    target: u64,
    fix_rows: &dyn Fn(u64) -> String,
    findings: &mut Vec<Finding>,
) {
    if t.needed > rows {
        let mut past: Vec<(&String, &u32)> = t
            .ids
            .iter()
            .filter(|(_, &i)| u64::from(i) >= rows)
            .collect();
        past.sort_by_key(|(_, i)| **i);
        let shown: Vec<String> = past
            .iter()
            .take(5)
            .map(|(k, i)| format!("'{k}'={i}"))
            .collect();
        findings.push(finding(
            Severity::Error,
            "tokenizer-vs-embedding",
            format!(
                "{} uses ids up to {} but the embedding has {rows} rows: {} tokens ({}{}) would index past the table (CUDA: device-side assert triggered)",
                t.path.display(),
                t.needed - 1,
                past.len(),
                shown.join(", "),
                if past.len() > 5 { ", …" } else { "" }
            ),
            json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "highest_id": t.needed - 1, "tokens_past_end": past.len()}),
            Some(fix_rows(target)),
        ));
    } else if t.needed < rows && target == t.needed {
        let extra = rows - t.needed;
        findings.push(
            finding(
                Severity::Warning,
                "tokenizer-vs-embedding",
                format!(
                    "{} uses {} ids; the embedding has {rows} rows: {extra} rows past its ids that are not padding (padding rounds the rows to a multiple of 8, and no config.json says {rows}): rows of an older tokenizer? A model sized by this tokenizer will not load them, nor their optimizer state (seed 001)",
                    t.path.display(),
                    t.needed,
                ),
                json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "extra_rows": extra}),
                Some(fix_rows(target)),
            )
            .alternatives(vec![format!(
                "if the model is sized {rows} rows on purpose, keep them: nothing to do, or say so with vocab_size {rows} in config.json"
            )]),
        );
    } else if t.needed < rows {
        findings.push(finding(
            Severity::Info,
            "tokenizer-vs-embedding",
            format!(
                "{} uses {} ids; the embedding has {rows} rows: {} padding rows, which is normal (e.g. 262144 ids, 262208 rows)",
                t.path.display(),
                t.needed,
                rows - t.needed
            ),
            json!({"tokenizer_ids": t.needed, "embedding_rows": rows, "padding_rows": rows - t.needed}),
            None,
        ));
    }
}

/// Vocabulary-size keys of a config, top level and under text_config.
fn config_vocab(c: &Value) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (prefix, obj) in [("", Some(c)), ("text_config.", c.get("text_config"))] {
        for k in embeddings::CONFIG_KEYS {
            if let Some(v) = obj.and_then(|o| o.get(k)).and_then(Value::as_u64) {
                out.push((format!("{prefix}{k}"), v));
            }
        }
    }
    out
}

fn check_freeze(n: u64, rows: u64, base: Option<u64>, findings: &mut Vec<Finding>) {
    let suggest = base.unwrap_or(rows);
    if n == 0 || n > rows {
        findings.push(finding(
            Severity::Error,
            "freeze-until-index",
            format!("freeze_until_index {n} is outside 1..={rows} (the embedding's rows)"),
            json!({"freeze_until_index": n, "embedding_rows": rows}),
            Some(match base {
                Some(b) => format!("set freeze_until_index to {b} (the base vocabulary) in the training config"),
                None => format!("set freeze_until_index to the base vocabulary size (at most {suggest}) in the training config, or pass --base-tokenizer to check it"),
            }),
        ));
    } else if let Some(b) = base {
        if n > b {
            findings.push(finding(
                Severity::Error,
                "freeze-until-index",
                format!("freeze_until_index {n} is above the base vocabulary {b}: new rows {b}..{n} would stay frozen and never learn"),
                json!({"freeze_until_index": n, "base_vocabulary": b}),
                Some(format!("set freeze_until_index to {b} in the training config")),
            ));
        } else if n < b {
            findings.push(finding(
                Severity::Warning,
                "freeze-until-index",
                format!("freeze_until_index {n} is below the base vocabulary {b}: pretrained rows {n}..{b} will be trained too"),
                json!({"freeze_until_index": n, "base_vocabulary": b}),
                Some(format!("set freeze_until_index to {b} if the pretrained rows should stay frozen")),
            ));
        }
    }
}

/// The optimizer's state against the target rows, through sanitize-checkpoint's own reading
/// (ties, every optimizer, every layout): one answer to "which state belongs to which parameter".
fn check_optimizer(
    tp: &Path,
    target: u64,
    sure: bool,
    open: &OpenOptions,
    fix: Option<String>,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    let opts = sanitize::Options {
        target: RowsFrom::Rows(target),
        optimizer: OptimizerAction::Repair,
        scheduler: SchedulerAction::Keep,
        method: embeddings::Method::Mean,
        seed: 0,
        fail_on_nonfinite: false,
        dry_run: true,
        open: open.clone(),
        keep: Vec::new(),
        overwrite: false,
        tensors: Vec::new(),
        segments: 1,
        optimizer_params: Vec::new(),
    };
    let globals = globals_flags(open);
    let fix = fix.unwrap_or_else(|| {
        format!(
            "sanitize-checkpoint {} --output {} --vocab-rows {target}{globals}",
            tp.display(),
            fixed_path(tp)
        )
    });
    match crate::optimizer::run(tp, Path::new("unused"), &opts) {
        Ok(r) => {
            let bad: Vec<&sanitize::Finding> = r
                .inconsistent_before
                .iter()
                .filter(|f| f.optimizer_state)
                .collect();
            if !bad.is_empty() {
                let list: Vec<String> = bad
                    .iter()
                    .take(4)
                    .map(|f| format!("{} {:?}", f.tensor, f.found_shape))
                    .collect();
                // When only the rows past the tokenizer (not padding) say the model is smaller,
                // the moments are as wrong as that guess: a warning.
                findings.push(finding(
                    if sure { Severity::Error } else { Severity::Warning },
                    "optimizer-vs-weights",
                    format!(
                        "{}: {} optimizer moments do not have {target} rows ({}{}): torch loads them without a word into a model of {target} rows and training stops learning (seed 001)",
                        tp.display(),
                        bad.len(),
                        list.join(", "),
                        if bad.len() > 4 { ", …" } else { "" }
                    ),
                    json!({"target_rows": target, "moments": bad.iter().map(|f| json!({"tensor": f.tensor, "shape": f.found_shape})).collect::<Vec<_>>()}),
                    Some(fix),
                ));
            }
            for n in &r.nonfinite {
                findings.push(finding(
                    Severity::Warning,
                    "optimizer-vs-weights",
                    format!(
                        "{}: {} holds {} NaN and {} Inf",
                        tp.display(),
                        n.tensor,
                        n.nan,
                        n.inf
                    ),
                    json!({"tensor": n.tensor, "nan": n.nan, "inf": n.inf}),
                    None,
                ));
            }
        }
        // The file was read: what is left is sanitize refusing to guess. Only when nothing but a
        // fresh optimizer gets past the refusal is dropping the optimizer offered.
        Err(e) => {
            let why = e.to_string();
            let drop = why
                .ends_with(sanitize::DROP_REMEDY)
                .then(|| format!("{fix} --optimizer drop"));
            // Naming the index keeps the optimizer: the smaller fix, when the user knows it.
            let named: Vec<String> = pin_asked(&why)
                .map(|pin| {
                    vec![format!(
                        "if you know which optimizer index holds it (one of the candidates above), keep the optimizer: {fix} --optimizer-param {pin}"
                    )]
                })
                .unwrap_or_default();
            findings.push(
                finding(
                    Severity::Error,
                    "optimizer-vs-weights",
                    format!("cannot check the optimizer: {why}"),
                    json!({"target_rows": target}),
                    drop,
                )
                .alternatives(named),
            );
        }
    }
    Ok(())
}

/// The `NAME=INDEX` sanitize's refusal asks for, if it names one.
fn pin_asked(message: &str) -> Option<String> {
    let rest = message.split("--optimizer-param ").nth(1)?;
    Some(
        rest.split_whitespace()
            .next()?
            .trim_end_matches(',')
            .to_string(),
    )
}

/// After the optimizer check: if sanitize refuses the training checkpoint unless the optimizer is
/// dropped, the other fixes that run sanitize on it drop it too (a fix must work when run), each
/// with the index-naming way that keeps the optimizer as an alternative.
fn drop_everywhere(tp: &Path, findings: &mut [Finding]) {
    let Some(refused) = findings.iter().find(|f| {
        f.check == "optimizer-vs-weights"
            && f.fix
                .as_deref()
                .is_some_and(|x| x.contains("--optimizer drop"))
    }) else {
        return;
    };
    let pin = pin_asked(&refused.message);
    let ours = format!("sanitize-checkpoint {} ", tp.display());
    for f in findings.iter_mut() {
        let Some(fix) = f.fix.as_mut() else { continue };
        if !fix.starts_with(&ours) || fix.contains("--optimizer drop") {
            continue;
        }
        if let Some(pin) = &pin {
            f.alternatives.push(format!(
                "if you know which optimizer index holds it (see the optimizer finding's candidates), keep the optimizer: {fix} --optimizer-param {pin}"
            ));
        }
        fix.push_str(" --optimizer drop");
    }
}

fn check_pair(a: &Tok, b: &Tok, findings: &mut Vec<Finding>) {
    let mut diff: Vec<(&String, u32, u32)> = a
        .ids
        .iter()
        .filter_map(|(t, &i)| b.ids.get(t).filter(|&&j| j != i).map(|&j| (t, i, j)))
        .collect();
    diff.sort_by_key(|d| d.1);
    if !diff.is_empty() {
        let shown: Vec<String> = diff
            .iter()
            .take(5)
            .map(|(t, i, j)| format!("'{t}' {i} vs {j}"))
            .collect();
        findings.push(
            finding(
            Severity::Error,
            "tokenizers-agree",
            format!(
                "{} and {} give {} shared tokens different ids ({}): data tokenised with one is garbage to a model trained with the other",
                a.path.display(),
                b.path.display(),
                diff.len(),
                shown.join(", ")
            ),
            json!({"conflicts": diff.len()}),
            None,
        )
        .alternatives(vec![format!(
            "use one tokenizer for the data and the model; if both are meant together, merge them (merge-tokenizers --base {} --add {} --output merged.json: the base keeps its ids, the other's tokens get new ones), then tokenise the data and size the model with merged.json",
            a.path.display(),
            b.path.display()
        )]));
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
    let mut shown: Vec<&str> = Vec::new();
    for f in &r.findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = writeln!(s, "{sev} [{}] {}", f.check, f.message);
        match f.fix.as_deref() {
            Some(fix) if shown.contains(&fix) => {
                let n = shown.iter().position(|x| *x == fix).map_or(1, |i| i + 1);
                let _ = writeln!(s, "  fix: the same command as fix {n} above");
            }
            Some(fix) => {
                shown.push(fix);
                let _ = writeln!(s, "  fix {}: {fix}", shown.len());
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
