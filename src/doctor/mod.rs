//! The `check-vocab` job: does the tokenizer, config, weights, special-token ids, optimizer and
//! data agree on the vocabulary — before CUDA finds out with `device-side assert triggered`?
//! Each check is a small function returning findings; each finding carries the numbers and, where
//! one exists, the command that fixes it.

use crate::embeddings;
use crate::error::{Error, Result};
use crate::formats::{self, Checkpoint, OpenOptions};
use crate::optimizer::sanitize::{self, OptimizerAction, RowsFrom, SchedulerAction};
use crate::tokenizer::merge::load_base;
use crate::vocab;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub check: &'static str,
    pub message: String,
    pub numbers: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
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
    let base = load_base(path)?;
    let (needed, ids) = (base.size(), base.ids());
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

/// Where a fix command should write: beside the input, never over it.
fn fixed_path(ckpt: &Path) -> String {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if ckpt.is_dir() {
        match formats::resolve_folder(ckpt) {
            Ok(f) if !name(&f).ends_with(".index.json") => {
                format!("{}-fixed/{}", ckpt.display(), name(&f))
            }
            _ => format!("{}-fixed", ckpt.display()),
        }
    } else {
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
}

fn read_json(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(p, format!("not valid JSON: {e}")))
}

/// Run every check that the inputs allow.
pub fn run(inp: &Inputs) -> Result<Report> {
    let ckpt = formats::open_with(&inp.checkpoint, &inp.open)?;
    let ck_dir = dir_of(&inp.checkpoint);
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut findings = Vec::new();

    // Files beside the checkpoint when not given.
    let mut tok_paths = inp.tokenizers.clone();
    if tok_paths.is_empty() {
        for n in ["tokenizer.json", "tokenizer.model"] {
            let p = ck_dir.join(n);
            if p.is_file() {
                tok_paths.push(p);
                break;
            }
        }
    }
    let config_path = inp
        .config
        .clone()
        .or_else(|| Some(ck_dir.join("config.json")).filter(|p| p.is_file()));
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

    // 4. Embedding vs head vs bias (and the rows everything else is checked against).
    let rows = embedding_rows(&ckpt, &mut findings)?;
    let needed = toks.iter().map(|t| t.needed).max();
    let is_training = ckpt
        .torch
        .first()
        .is_some_and(|t| t.pickle.get(t.pickle.root, "optimizer").is_some());
    // The rows the model should have: the tokenizer's need, else the config's vocab size, else rows.
    let config_rows = config
        .as_ref()
        .and_then(|c| config_vocab(c).first().map(|(_, v)| *v));
    let target = needed.or(config_rows).unwrap_or(rows);
    let fix_rows = |to: u64| -> String {
        let out = fixed_path(&inp.checkpoint);
        let globals = globals_flags(&inp.open);
        if is_training {
            return format!(
                "sanitize-checkpoint {} --output {out} --vocab-rows {to}{globals}",
                inp.checkpoint.display()
            );
        }
        let how = match toks.iter().find(|t| t.needed == to) {
            Some(t) => format!("--tokenizer {}", t.path.display()),
            None => format!("--new-rows {to}"),
        };
        let shrink = if to < rows { " --allow-shrink" } else { "" };
        let cfg = config_path
            .as_ref()
            .map(|c| format!(" --config {}", c.display()))
            .unwrap_or_default();
        format!(
            "extend-embeddings {} --output {out} {how}{shrink}{cfg}{globals}",
            inp.checkpoint.display()
        )
    };

    // 1. Tokenizer ids vs rows.
    for t in &toks {
        check_tokenizer(t, rows, &fix_rows, &mut findings);
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
    // 3. Config vocab keys vs rows.
    if let (Some(c), Some(p)) = (&config, &config_path) {
        for (key, v) in config_vocab(c) {
            if v != rows {
                findings.push(finding(
                    Severity::Error,
                    "config-vs-embedding",
                    format!("{}: {key} = {v} but the checkpoint's embedding has {rows} rows: the model built from this config will not fit the weights", p.display()),
                    json!({"config_key": key, "config_value": v, "embedding_rows": rows}),
                    Some(fix_rows(target)),
                ));
            }
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
    // 6. Optimizer moments vs weights.
    let training: Option<PathBuf> = inp
        .training_checkpoint
        .clone()
        .or_else(|| is_training.then(|| inp.checkpoint.clone()));
    if let Some(tp) = &training {
        files.insert("training_checkpoint".into(), vec![tp.clone()]);
        check_optimizer(tp, target, &inp.open, &mut findings);
    }
    // 7. Two tokenizers agree on shared tokens.
    for (i, a) in toks.iter().enumerate() {
        for b in &toks[i + 1..] {
            check_pair(a, b, &mut findings);
        }
    }
    // 8. Token ids of an already-tokenised dataset.
    if let Some(p) = &inp.token_ids {
        files.insert("token_ids".into(), vec![p.clone()]);
        let max = max_token_id(p, inp.token_ids_dtype.as_deref())?;
        if let Some(m) = max {
            if m >= rows {
                findings.push(finding(
                    Severity::Error,
                    "data-vs-embedding",
                    format!("{}: the largest token id is {m} but the embedding has {rows} rows: indexing it is the device-side assert", p.display()),
                    json!({"max_id": m, "embedding_rows": rows}),
                    Some(fix_rows(target.max(m + 1))),
                ));
            }
        }
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
            Some(fix_rows(t.needed)),
        ));
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

const ROLES: [&str; 8] = [
    "bos",
    "eos",
    "pad",
    "unk",
    "mask",
    "sep",
    "cls",
    "decoder_start",
];

/// (file, role, ids) for every `<role>_token_id` key of a config-like object.
fn ids_named(file: &Path, obj: &Value) -> Vec<(String, String, Vec<u64>)> {
    let mut out = Vec::new();
    for r in ROLES {
        let ids: Vec<u64> = match obj.get(format!("{r}_token_id")) {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).collect(),
            Some(v) => v.as_u64().into_iter().collect(),
            None => continue,
        };
        if !ids.is_empty() {
            out.push((file.display().to_string(), r.to_string(), ids));
        }
    }
    out
}

/// Special-token ids named by the config, generation config, tokenizer config and special tokens
/// map: each below the rows, and the same role naming the same id everywhere.
#[allow(clippy::too_many_arguments)]
fn check_specials(
    toks: &[Tok],
    config_path: &Option<PathBuf>,
    config: Option<&Value>,
    special_files: &[PathBuf],
    rows: u64,
    target: u64,
    fix_rows: &dyn Fn(u64) -> String,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    let ids_of = |s: &str| toks.iter().find_map(|t| t.ids.get(s).copied());
    let mut named: Vec<(String, String, Vec<u64>)> = Vec::new();
    let roles = ROLES;
    if let (Some(c), Some(p)) = (config, config_path) {
        named.extend(ids_named(p, c));
        if let Some(tc) = c.get("text_config") {
            named.extend(ids_named(p, tc));
        }
    }
    for f in special_files {
        let v = read_json(f)?;
        if f.ends_with("generation_config.json") {
            named.extend(ids_named(f, &v));
            continue;
        }
        for r in roles {
            let s = match v.get(format!("{r}_token")) {
                Some(Value::String(s)) => s.clone(),
                Some(o) => match o.get("content").and_then(Value::as_str) {
                    Some(s) => s.to_string(),
                    None => continue,
                },
                None => continue,
            };
            if let Some(id) = ids_of(&s) {
                named.push((f.display().to_string(), r.to_string(), vec![u64::from(id)]));
            }
        }
    }
    for (file, role, ids) in &named {
        for &id in ids {
            if id >= rows {
                findings.push(finding(
                    Severity::Error,
                    "special-token-ids",
                    format!("{file}: {role} token id {id} is not below the embedding's {rows} rows: generation or the loss will index past the table"),
                    json!({"file": file, "role": role, "id": id, "embedding_rows": rows}),
                    Some(fix_rows(target.max(id + 1))),
                ));
            }
        }
    }
    // The same role must name overlapping ids everywhere.
    for r in roles {
        let sets: Vec<&(String, String, Vec<u64>)> =
            named.iter().filter(|(_, role, _)| role == r).collect();
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                if !a.2.iter().any(|x| b.2.contains(x)) {
                    findings.push(finding(
                        Severity::Error,
                        "special-token-ids",
                        format!("{r} token: {:?} in {} but {:?} in {}", a.2, a.0, b.2, b.0),
                        json!({"role": r, "a": {"file": a.0, "ids": a.2}, "b": {"file": b.0, "ids": b.2}}),
                        Some(format!("make {r}_token_id agree in {} and {} (the tokenizer's is the truth)", a.0, b.0)),
                    ));
                }
            }
        }
    }
    Ok(())
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

fn check_optimizer(tp: &Path, target: u64, open: &OpenOptions, findings: &mut Vec<Finding>) {
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
    };
    let globals = globals_flags(open);
    let fix = format!(
        "sanitize-checkpoint {} --output {} --vocab-rows {target}{globals}",
        tp.display(),
        fixed_path(tp)
    );
    match sanitize::run(tp, Path::new("unused"), &opts) {
        Ok(r) => {
            let bad: Vec<&sanitize::Finding> = r.inconsistent_before.iter().filter(|f| f.tensor.contains(".state.")).collect();
            if !bad.is_empty() {
                let list: Vec<String> = bad.iter().take(4).map(|f| format!("{} {:?}", f.tensor, f.found_shape)).collect();
                findings.push(finding(
                    Severity::Error,
                    "optimizer-vs-weights",
                    format!(
                        "{}: {} optimizer moments do not have {target} rows ({}{}): torch loads them without a word and training stops learning (seed 001)",
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
                    format!("{}: {} holds {} NaN and {} Inf", tp.display(), n.tensor, n.nan, n.inf),
                    json!({"tensor": n.tensor, "nan": n.nan, "inf": n.inf}),
                    None,
                ));
            }
        }
        Err(e) => findings.push(finding(
            Severity::Error,
            "optimizer-vs-weights",
            format!("cannot check the optimizer: {e}"),
            json!({}),
            Some(format!("sanitize-checkpoint {} --output {} --vocab-rows {target} --optimizer drop{globals}", tp.display(), fixed_path(tp))),
        )),
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
        findings.push(finding(
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
            Some(format!(
                "merge-tokenizers --base {} --add {} --output merged.json, then tokenise the data and size the model with merged.json",
                a.path.display(),
                b.path.display()
            )),
        ));
    }
}

/// Largest id in a `.npy` of integers, or a raw little-endian file of `dtype`.
pub fn max_token_id(p: &Path, dtype: Option<&str>) -> Result<Option<u64>> {
    let bytes = std::fs::read(p).map_err(|e| Error::io(p, "read", e))?;
    let (descr, data): (String, &[u8]) = if bytes.starts_with(b"\x93NUMPY") {
        let major = bytes.get(6).copied().unwrap_or(0);
        let (hlen, start) = match major {
            1 => (
                bytes
                    .get(8..10)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize),
                10,
            ),
            _ => (
                bytes
                    .get(8..12)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
                12,
            ),
        };
        let hlen = hlen.ok_or_else(|| Error::format(p, "truncated .npy header"))?;
        let header = bytes
            .get(start..start + hlen)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(|| Error::format(p, "bad .npy header"))?;
        if header.contains("'fortran_order': True") {
            // Order does not change the maximum.
        }
        let descr = header
            .split("'descr':")
            .nth(1)
            .and_then(|r| r.split('\'').nth(1))
            .ok_or_else(|| Error::format(p, ".npy header has no descr"))?;
        (descr.to_string(), &bytes[start + hlen..])
    } else {
        let d = dtype.ok_or_else(|| {
            Error::Usage(format!(
                "{}: not a .npy file: give --token-ids-dtype u16|u32|i32|i64",
                p.display()
            ))
        })?;
        let descr = match d {
            "u16" => "<u2",
            "u32" => "<u4",
            "i32" => "<i4",
            "i64" => "<i8",
            other => {
                return Err(Error::Usage(format!(
                    "--token-ids-dtype {other}: expected u16, u32, i32 or i64"
                )))
            }
        };
        (descr.to_string(), &bytes[..])
    };
    let (size, signed) = match descr.trim_start_matches(['<', '|', '=']) {
        "u1" => (1, false),
        "u2" => (2, false),
        "u4" => (4, false),
        "u8" => (8, false),
        "i1" => (1, true),
        "i2" => (2, true),
        "i4" => (4, true),
        "i8" => (8, true),
        other => {
            return Err(Error::format(
                p,
                format!("token ids of dtype '{other}' (little-endian integers only)"),
            ))
        }
    };
    if data.len() % size != 0 {
        return Err(Error::format(
            p,
            format!(
                "{} bytes is not a whole number of {size}-byte ids",
                data.len()
            ),
        ));
    }
    let mut max: Option<u64> = None;
    for c in data.chunks_exact(size) {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(c);
        if signed && c[size - 1] & 0x80 != 0 {
            return Err(Error::format(p, "a negative token id"));
        }
        let v = u64::from_le_bytes(b);
        max = Some(max.map_or(v, |m| m.max(v)));
    }
    Ok(max)
}

/// The human report.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "{}: embedding {} rows", r.checkpoint.display(), r.rows);
    for f in &r.findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = writeln!(s, "{sev} [{}] {}", f.check, f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(s, "  fix: {fix}");
        }
    }
    let _ = writeln!(
        s,
        "{} errors, {} warnings, {} infos",
        r.errors, r.warnings, r.infos
    );
    s
}
