//! The `extend-embeddings` job: grow (or, when asked, shrink) the vocabulary matrices of a
//! checkpoint to a target row count, initialising new rows, in the checkpoint's own format.
//! Old rows are copied bit for bit; every other tensor is copied untouched.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod donor;
pub mod init;
pub(crate) mod resize;
/// The generator moved down a floor (dtype tests use it too); its old path keeps working.
pub use crate::rng;
pub(crate) use resize::{grown_map, resized_rows, Grown, Resize, RowNorms};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::torch::writer::TorchPlan;
use crate::formats::torch::TorchFile;
use crate::formats::{self, Checkpoint, Format, OpenOptions};
use crate::output::folder::{AtomicFolder, Carried, Left};
use crate::output::later::{FailUnset, Later};
use crate::output::manifest::FileManifest;
use crate::output::{self, Payload, SafetensorsPlan, ShardOut};
use crate::ties::{self, Tie};
use crate::tokenizer::base::load_tokenizer;
use crate::tokenizer::form::Form;
use crate::vocab::{self, Role};
use device::Device;
use init::Init;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the target row count comes from.
#[derive(Debug, Clone)]
pub enum Target {
    Rows(u64),
    Tokenizer(PathBuf),
}

/// `--init`, as the user named it.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    Mean,
    Hewitt,
    Zeros,
    Normal,
    SubwordMean,
    /// `copy:TOKEN` (a token string, or an id).
    Copy(String),
    /// Orthogonal matching pursuit over a donor model's rows (`--donor`).
    Omp,
}

impl Method {
    pub fn parse(s: &str) -> std::result::Result<Method, String> {
        Ok(match s {
            "mean" => Method::Mean,
            "hewitt" => Method::Hewitt,
            "zeros" => Method::Zeros,
            "normal" => Method::Normal,
            "subword-mean" => Method::SubwordMean,
            "omp" => Method::Omp,
            _ => match s.strip_prefix("copy:") {
                Some(t) if !t.is_empty() => Method::Copy(t.to_string()),
                _ => {
                    return Err(format!(
                    "unknown --init '{s}': mean, hewitt, zeros, normal, subword-mean, omp or copy:TOKEN"
                ))
                }
            },
        })
    }

    fn name(&self) -> String {
        match self {
            Method::Mean => "mean".into(),
            Method::Hewitt => "hewitt".into(),
            Method::Zeros => "zeros".into(),
            Method::Normal => "normal".into(),
            Method::SubwordMean => "subword-mean".into(),
            Method::Copy(t) => format!("copy:{t}"),
            Method::Omp => "omp".into(),
        }
    }
}

/// Options of the job.
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    pub pad_to_multiple_of: Option<u64>,
    /// Tensors to change, by name; empty: detect the vocabulary matrices.
    pub tensors: Vec<String>,
    pub method: Method,
    /// ε of `hewitt` (transformers uses 1e-9).
    pub epsilon: f64,
    /// Standard deviation of `normal`.
    pub std: f64,
    pub seed: u64,
    pub base_tokenizer: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub allow_shrink: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    pub link: bool,
    /// Also hash each written file whole (tensors are always hashed).
    pub file_sha256: bool,
    pub dry_run: bool,
    /// Replace an existing output file, or a non-empty output folder.
    pub overwrite: bool,
    /// Where the new rows are computed.
    pub device: device::Request,
    /// The matrices are this many equal segments (codebooks), each grown at its end.
    pub segments: u64,
    pub open: OpenOptions,
    /// `--init omp`: the donor model, its tokenizer and k.
    pub donor: Option<donor::Donor>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            target: Target::Rows(0),
            pad_to_multiple_of: None,
            tensors: Vec::new(),
            method: Method::Mean,
            epsilon: 1e-9,
            std: 0.02,
            seed: 0,
            base_tokenizer: None,
            config: None,
            allow_shrink: false,
            link: false,
            file_sha256: false,
            dry_run: false,
            overwrite: false,
            device: device::Request::Auto,
            segments: 1,
            open: OpenOptions::default(),
            donor: None,
        }
    }
}

/// One changed tensor.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub name: String,
    pub role: Role,
    pub dtype: DType,
    pub old_shape: Vec<u64>,
    pub new_shape: Vec<u64>,
    /// Mean L2 norm of the old rows and of the new rows (2-D tensors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_mean_row_norm: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_mean_row_norm: Option<f64>,
    /// The names tied to it (same storage, or same bytes): they get the same new rows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
}

/// One segment (codebook) of a segmented matrix: its old rows, where they are now, and its new
/// rows, as half-open ranges.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentMap {
    pub segment: u64,
    pub old: [u64; 2],
    pub now: [u64; 2],
    pub new_rows: [u64; 2],
}

fn segment_map(n: u64, old_rows: u64, new_rows: u64) -> Vec<SegmentMap> {
    if n <= 1 || !old_rows.is_multiple_of(n) || !new_rows.is_multiple_of(n) {
        return Vec::new();
    }
    let (s, s2) = (old_rows / n, new_rows / n);
    (0..n)
        .map(|c| SegmentMap {
            segment: c,
            old: [c * s, (c + 1) * s],
            now: [c * s2, c * s2 + s],
            new_rows: [c * s2 + s, (c + 1) * s2],
        })
        .collect()
}

/// A config.json key changed.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigChange {
    pub key: String,
    pub old: Value,
    pub new: u64,
}

use serde_json::Value;

/// What the job did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    pub old_rows: u64,
    pub new_rows: u64,
    /// Rows 0..freeze_until_index are the old ones: what a training script freezes (without
    /// --segments; with them, see `segments`).
    pub freeze_until_index: u64,
    /// --segments: where each segment's rows went (`old_id = c·S + j` → `c·S' + j`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<SegmentMap>,
    pub init: String,
    /// Where the new rows were computed (`cpu`, `cuda (sm_90)`), and why when not as asked.
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_note: Option<String>,
    pub changed: Vec<Changed>,
    /// Ties among the changed tensors (see [`crate::ties`]): the names after the first follow it.
    pub ties: Vec<Tie>,
    pub untouched_tensors: usize,
    /// New tokens whose subword-mean fell back to the column mean.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// `--init omp`: the donor, the shared tokens, the pursuits and the tokens the donor lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub donor: Option<donor::DonorReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    pub config_changes: Vec<ConfigChange>,
    /// The merged tokenizer written into the output folder (`--tokenizer`, folder inputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// Files of the input folder carried into the output folder, and how.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// Files of the input folder not carried, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Left>,
    pub warnings: Vec<String>,
    /// What was chosen for the user (a folder's own tokenizer as the base's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The checkpoint already has the target rows: nothing was written.
    pub nothing_to_do: bool,
    pub dry_run: bool,
    /// Every tensor of the output, in the input's order, and what the run does to it: the plan
    /// (`--dry-run --json` prints it before anything is written).
    pub tensors: Vec<PlannedTensor>,
    pub manifest: Vec<FileManifest>,
}

/// One tensor of the output and how it is made.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// `copy` (bytes as they are), `grow` (old rows kept, new rows by the init) or `tied` (the
    /// same new rows as `follows`).
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follows: Option<String>,
}

/// Every tensor of the checkpoint with its action and output shape.
fn planned_tensors(
    ckpt: &Checkpoint,
    ties: &[Tie],
    changed: &[Changed],
    new_rows: u64,
) -> Vec<PlannedTensor> {
    let followers = ties::followers(ties);
    ckpt.tensors()
        .map(|t| {
            let name = t.name().to_string();
            let grown = changed.iter().any(|c| c.name == name);
            let follows = followers.get(&name).map(|f| f.to_string());
            let mut shape = t.shape.to_vec();
            if grown || follows.is_some() {
                shape[0] = new_rows;
            }
            let action = match (&follows, grown) {
                (Some(_), _) => "tied",
                (None, true) => "grow",
                (None, false) => "copy",
            };
            PlannedTensor {
                name,
                dtype: t.dtype,
                shape,
                action,
                follows,
            }
        })
        .collect()
}

/// Rows a tokenizer needs: its largest id + 1.
pub fn tokenizer_rows(path: &Path) -> Result<u64> {
    Ok(load_tokenizer(path)?.size())
}

/// Pick the tensors to change: the named ones, or the detected vocabulary.
pub(crate) fn select(ckpt: &Checkpoint, named: &[String]) -> Result<Vec<(String, Role)>> {
    if !named.is_empty() {
        let mut out = Vec::new();
        for n in named {
            let t = ckpt.tensor(n).ok_or_else(|| {
                Error::Usage(format!("{}: no tensor named '{n}'", ckpt.path.display()))
            })?;
            let role = match t.shape.len() {
                1 => Role::HeadBias,
                2 if n.contains("head") || n.contains("output") => Role::Head,
                2 => Role::Embedding,
                _ => {
                    return Err(Error::tensor(
                        &ckpt.path,
                        n,
                        format!("shape {:?} is not a vocabulary matrix or bias", t.shape),
                    ))
                }
            };
            out.push((n.clone(), role));
        }
        return Ok(out);
    }
    let det = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    if let Some(v) = det.vocabulary {
        return Ok(v.tensors.into_iter().map(|t| (t.name, t.role)).collect());
    }
    let list = |groups: &[vocab::Vocabulary]| -> String {
        groups
            .iter()
            .flat_map(|g| {
                g.tensors
                    .iter()
                    .map(|t| format!("{} {:?}", t.name, t.shape))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !det.ambiguous.is_empty() {
        return Err(Error::format(
            &ckpt.path,
            format!(
                "which tensors are the vocabulary is ambiguous (candidates: {}): name them with --tensor",
                list(&det.ambiguous)
            ),
        ));
    }
    Err(Error::format(
        &ckpt.path,
        "no embedding or head matrix found: name the tensors with --tensor",
    ))
}

/// Token id for `copy:TOKEN`: a number, or a token of the base / merged tokenizer.
fn donor_id(token: &str, tokenizers: &[&Path]) -> Result<usize> {
    if let Ok(i) = token.parse::<usize>() {
        return Ok(i);
    }
    for p in tokenizers {
        if let Some(id) = load_tokenizer(p)
            .ok()
            .and_then(|b| b.ids().get(token).copied())
        {
            return Ok(id as usize);
        }
    }
    Err(Error::Usage(format!(
        "--init copy:{token}: not an id, and no given tokenizer has that token"
    )))
}

/// For subword-mean: for each new id, the base tokenizer's ids of its text (None: fall back).
fn subword_lists(
    merged: &Path,
    base: &Path,
    old_rows: u64,
    new_rows: u64,
    fallbacks: &mut Vec<String>,
) -> Result<Vec<Option<Vec<usize>>>> {
    let load = |p: &Path| {
        tokenizers::Tokenizer::from_file(p)
            .map_err(|e| Error::format(p, format!("subword-mean needs a tokenizer.json: {e}")))
    };
    let (m, b) = (load(merged)?, load(base)?);
    let unk: Option<u32> = ["[UNK]", "<unk>", "<|unk|>"]
        .iter()
        .find_map(|u| b.token_to_id(u));
    // A byte-level or ▁ token is written in the model's own symbols: BASE's model splits those
    // (its text, encoded again, would be the symbols' bytes). Plain tokens are text.
    let pipeline = serde_json::json!({
        "pre_tokenizer": serde_json::to_value(b.get_pre_tokenizer()).unwrap_or_default(),
        "normalizer": serde_json::to_value(b.get_normalizer()).unwrap_or_default(),
    });
    let symbols = Form::of_tokenizer_json(&pipeline) != Form::Plain;
    let mut out = Vec::new();
    for id in old_rows..new_rows {
        let text = u32::try_from(id).ok().and_then(|i| m.id_to_token(i));
        let added = text.as_ref().is_some_and(|t| {
            m.get_added_tokens_decoder()
                .get(&(id as u32))
                .is_some_and(|a| &a.content == t)
        });
        let ids = text.as_ref().and_then(|t| {
            if symbols && !added {
                use tokenizers::Model;
                b.get_model()
                    .tokenize(t)
                    .ok()
                    .map(|v| v.iter().map(|t| t.id).collect::<Vec<u32>>())
            } else {
                b.encode(t.as_str(), false)
                    .ok()
                    .map(|e| e.get_ids().to_vec())
            }
        });
        match ids {
            Some(v)
                if !v.is_empty()
                    && v.iter().all(|&i| Some(i) != unk && u64::from(i) < old_rows) =>
            {
                out.push(Some(v.into_iter().map(|i| i as usize).collect()))
            }
            _ => {
                fallbacks.push(text.unwrap_or_else(|| format!("<id {id}>")));
                out.push(None);
            }
        }
    }
    Ok(out)
}

/// Config keys that hold the vocabulary size, top level and under `text_config`.
pub const CONFIG_KEYS: [&str; 4] = [
    "vocab_size",
    "n_vocab",
    "text_tokens_dict_size",
    "padded_vocab_size",
];

pub(crate) fn update_config(cfg: &mut Value, new_rows: u64) -> Vec<ConfigChange> {
    let mut changes = Vec::new();
    let mut set = |obj: &mut serde_json::Map<String, Value>, prefix: &str| {
        for k in CONFIG_KEYS {
            if let Some(v) = obj.get_mut(k).filter(|v| v.is_u64()) {
                changes.push(ConfigChange {
                    key: format!("{prefix}{k}"),
                    old: v.clone(),
                    new: new_rows,
                });
                *v = Value::from(new_rows);
            }
        }
    };
    if let Some(obj) = cfg.as_object_mut() {
        set(obj, "");
        if let Some(Value::Object(tc)) = obj.get_mut("text_config") {
            set(tc, "text_config.");
        }
    }
    changes
}

/// The init method, resolved against the tokenizers it needs (added to `inputs`, which outputs
/// must never overwrite).
pub(crate) fn resolve_init(
    opts: &Options,
    old_rows: u64,
    new_rows: u64,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<Init> {
    Ok(match &opts.method {
        Method::Mean => Init::Mean,
        Method::Hewitt => Init::Hewitt {
            epsilon: opts.epsilon,
            seed: opts.seed,
        },
        Method::Zeros => Init::Zeros,
        Method::Normal => Init::Normal {
            std: opts.std,
            seed: opts.seed,
        },
        Method::Copy(tok) => {
            let mut ts: Vec<&Path> = opts.base_tokenizer.iter().map(PathBuf::as_path).collect();
            if let Target::Tokenizer(p) = &opts.target {
                ts.push(p);
            }
            let id = donor_id(tok, &ts)?;
            if id as u64 >= old_rows {
                return Err(Error::Usage(format!(
                    "--init copy:{tok}: id {id} is not an old row (< {old_rows})"
                )));
            }
            Init::Copy(id)
        }
        Method::SubwordMean => {
            let (Target::Tokenizer(merged), Some(base)) = (&opts.target, &opts.base_tokenizer)
            else {
                return Err(Error::Usage(
                    "--init subword-mean needs --tokenizer MERGED and --base-tokenizer BASE".into(),
                ));
            };
            inputs.push(base.clone());
            Init::SubwordMean(subword_lists(merged, base, old_rows, new_rows, fallbacks)?)
        }
        Method::Omp => {
            return Err(Error::Usage(
                "--init omp takes a donor model: it is an extend-embeddings init (--donor)".into(),
            ))
        }
    })
}

/// A folder's own tokenizer stands for `--base-tokenizer` when an init needs the base's
/// tokenizer and none was given; the note says so.
fn with_own_tokenizer(input: &Path, opts: &Options) -> (Option<Options>, Option<String>) {
    let needs = matches!(opts.method, Method::SubwordMean | Method::Copy(_));
    if !needs || opts.base_tokenizer.is_some() || !input.is_dir() {
        return (None, None);
    }
    let Some(own) = donor::folder_tokenizer(input) else {
        return (None, None);
    };
    let note = format!(
        "base tokenizer: {} (the folder's own; --base-tokenizer names another)",
        own.display()
    );
    let mut o = opts.clone();
    o.base_tokenizer = Some(own);
    (Some(o), Some(note))
}

/// What extend-embeddings will do, decided before anything is written ([`plan`] only reads):
/// the report as the run will give it (`--dry-run --json` prints it), every tensor of the output
/// with what happens to it, and what the writer needs.
pub struct Plan<'c> {
    pub report: Report,
    resizes: Vec<Resize<'c>>,
    init: Init,
    device: Device,
    /// config.json's new text, for a folder output.
    config_text: Option<String>,
    /// The input folder, when the output is a folder.
    folder_in: Option<PathBuf>,
    /// Every file read: none of them may be the output.
    inputs: Vec<PathBuf>,
}

/// Rows after the change: the target, rounded up to `--pad-to-multiple-of`; flags that do not go
/// together are refused here.
fn target_rows(opts: &Options, inputs: &mut Vec<PathBuf>) -> Result<u64> {
    let target = match &opts.target {
        Target::Rows(n) => *n,
        Target::Tokenizer(p) => {
            inputs.push(p.clone());
            tokenizer_rows(p)?
        }
    };
    let new_rows = match opts.pad_to_multiple_of {
        Some(0) => {
            return Err(Error::Usage(
                "--pad-to-multiple-of must be at least 1".into(),
            ))
        }
        Some(m) => target.div_ceil(m) * m,
        None => target,
    };
    if opts.segments > 1 {
        if !matches!(opts.target, Target::Rows(_)) || opts.pad_to_multiple_of.is_some() {
            return Err(Error::Usage(
                "--segments takes --new-rows N (all rows: segments × the new segment size), not --tokenizer or --pad-to-multiple-of".into(),
            ));
        }
        if matches!(opts.method, Method::Copy(_) | Method::SubwordMean) || opts.allow_shrink {
            return Err(Error::Usage(
                "--segments grows each segment with mean, hewitt, zeros or normal (copy:, subword-mean and --allow-shrink name rows of one vocabulary)".into(),
            ));
        }
    }
    Ok(new_rows)
}

/// The rows every selected tensor has (they must agree), checked against the target.
fn old_rows(
    ckpt: &Checkpoint,
    selected: &[(String, Role)],
    new_rows: u64,
    opts: &Options,
) -> Result<u64> {
    let rows: Vec<(String, u64)> = selected
        .iter()
        .filter_map(|(n, _)| ckpt.tensor(n).map(|t| (n.clone(), t.shape[0])))
        .collect();
    let first = rows.first().map_or(0, |r| r.1);
    if rows.iter().any(|r| r.1 != first) {
        let list: Vec<String> = rows.iter().map(|(n, r)| format!("{n}: {r}")).collect();
        return Err(Error::format(
            &ckpt.path,
            format!(
                "the selected tensors disagree on rows ({}): name the ones to change with --tensor",
                list.join(", ")
            ),
        ));
    }
    if new_rows < first && !opts.allow_shrink {
        return Err(Error::Usage(format!(
            "{}: target {new_rows} rows is fewer than the checkpoint's {first}: rows {new_rows}..{first} would be dropped; pass --allow-shrink if that is meant",
            ckpt.path.display()
        )));
    }
    if new_rows == 0 {
        return Err(Error::Usage(
            "target of 0 rows: give --new-rows N or a --tokenizer".into(),
        ));
    }
    Ok(first)
}

/// config.json: `--config`, or the one beside the input (read first: it says what is tied).
fn read_config(
    input: &Path,
    opts: &Options,
    inputs: &mut Vec<PathBuf>,
) -> Result<Option<(PathBuf, Value)>> {
    let Some(cin) = opts
        .config
        .clone()
        .or_else(|| formats::config_beside(input))
    else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&cin).map_err(|e| Error::io(&cin, "read", e))?;
    let cfg: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(&cin, format!("not valid JSON: {e}")))?;
    inputs.push(cin.clone());
    Ok(Some((cin, cfg)))
}

/// Ties among the selected tensors: a name that follows another is computed once, under the
/// first name.
fn selected_ties(
    ckpt: &Checkpoint,
    selected: &[(String, Role)],
    old_rows: u64,
    config: Option<&Value>,
) -> Vec<Tie> {
    let vocabulary = vocab::Vocabulary {
        rows: old_rows,
        tensors: selected
            .iter()
            .filter_map(|(n, role)| {
                ckpt.tensor(n).map(|t| vocab::VocabTensor {
                    name: n.clone(),
                    role: *role,
                    shape: t.shape.to_vec(),
                })
            })
            .collect(),
    };
    ties::find(ckpt, Some(&vocabulary), config)
        .into_iter()
        .filter(|t| t.names.iter().any(|n| selected.iter().any(|(s, _)| s == n)))
        .collect()
}

/// How the new rows are made: the init, the donor's report for omp, and the tokens that fell
/// back to the mean.
#[allow(clippy::type_complexity)]
fn choose_init(
    input: &Path,
    opts: &Options,
    rows: (u64, u64),
    untied: bool,
    inputs: &mut Vec<PathBuf>,
) -> Result<(Init, Option<donor::DonorReport>, Vec<String>)> {
    let mut fallbacks = Vec::new();
    let (init, donor_report) = match opts.method {
        // A tied base's head is its embedding: one pursuit, the bias by its coefficients.
        Method::Omp => {
            let (i, r) = donor::plan(input, opts, rows, untied, inputs, &mut fallbacks)?;
            (i, Some(r))
        }
        _ if opts.donor.is_some() => {
            return Err(Error::Usage(
                "--donor is for --init omp: add --init omp, or leave --donor out".into(),
            ))
        }
        _ => (
            resolve_init(opts, rows.0, rows.1, inputs, &mut fallbacks)?,
            None,
        ),
    };
    Ok((init, donor_report, fallbacks))
}

/// Each changed tensor's layout (its new rows are computed while the writer copies) and its
/// line in the report.
fn changes<'c>(
    ckpt: &'c Checkpoint,
    selected: &[(String, Role)],
    ties: &[Tie],
    rows: (u64, u64),
    segments: u64,
) -> Result<(Vec<Resize<'c>>, Vec<Changed>)> {
    let followers = ties::followers(ties);
    let (mut resizes, mut changed) = (Vec::new(), Vec::new());
    for (name, role) in selected {
        if followers.contains_key(name) {
            continue;
        }
        let Some(t) = ckpt.tensor(name) else { continue };
        resizes.push(Resize::new(t, *role, rows.0, rows.1)?.segmented(segments)?);
        let mut new_shape = t.shape.to_vec();
        new_shape[0] = rows.1;
        changed.push(Changed {
            name: name.clone(),
            role: *role,
            dtype: t.dtype,
            old_shape: t.shape.to_vec(),
            new_shape,
            old_mean_row_norm: None,
            new_mean_row_norm: None,
            tied: ties
                .iter()
                .filter(|x| x.first() == name)
                .flat_map(|x| x.names[1..].iter().cloned())
                .collect(),
        });
    }
    Ok((resizes, changed))
}

/// Warnings about what the checkpoint holds beside the vocabulary.
fn content_warnings(ckpt: &Checkpoint, selected: &[(String, Role)], ties: &[Tie]) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(t) = ckpt.torch.first() {
        if t.pickle.get(t.pickle.root, "optimizer").is_some() {
            warnings.push("the checkpoint holds optimizer state sized for the old rows: run sanitize-checkpoint before resuming training from it".into());
        }
    }
    let has_head = selected.iter().any(|(_, r)| *r == Role::Head);
    if !has_head && !ties.iter().any(|t| t.how == ties::How::Config) {
        warnings.push("no output head is stored and config.json says tie_word_embeddings: false: the model has no head here (a base model), or it lives in another file".into());
    }
    warnings
}

/// config.json's changes, and its new text when the output is a folder (a file output is that
/// one file: the changes become a warning).
fn config_output(
    config: Option<(PathBuf, Value)>,
    new_rows: u64,
    opts: &Options,
    folder: bool,
    warnings: &mut Vec<String>,
) -> Result<(Vec<ConfigChange>, Option<String>)> {
    let Some((cin, mut cfg)) = config else {
        return Ok((Vec::new(), None));
    };
    // Segments are codebooks: the text vocabulary keys of config.json do not count them.
    if opts.segments > 1 {
        warnings.push("config.json not changed: --segments grows codebooks, and their size key (codebook_size, audio_num_codebook_tokens, …) is model-specific: set it to the new segment size yourself".into());
        return Ok((Vec::new(), None));
    }
    let changes = update_config(&mut cfg, new_rows);
    let mut t =
        serde_json::to_string_pretty(&cfg).map_err(|e| Error::format(&cin, e.to_string()))?;
    t.push('\n');
    if folder {
        return Ok((changes, Some(t)));
    }
    if !changes.is_empty() {
        let keys: Vec<String> = changes
            .iter()
            .map(|c| format!("{} to {}", c.key, c.new))
            .collect();
        warnings.push(format!(
            "{} not written: a file output is that one file; set {} in it, or give the model folder for a complete output folder",
            cin.display(),
            keys.join(", ")
        ));
    }
    Ok((changes, None))
}

/// Decide everything: reads the checkpoint, the tokenizers and config.json, writes nothing.
pub fn plan<'c>(ckpt: &'c Checkpoint, input: &Path, opts: &Options) -> Result<Plan<'c>> {
    let mut inputs: Vec<PathBuf> = ckpt.input_paths().iter().map(|p| p.to_path_buf()).collect();
    let new_rows = target_rows(opts, &mut inputs)?;
    let selected = select(ckpt, &opts.tensors)?;
    let old_rows = old_rows(ckpt, &selected, new_rows, opts)?;
    let config = read_config(input, opts, &mut inputs)?;
    let ties = selected_ties(ckpt, &selected, old_rows, config.as_ref().map(|c| &c.1));
    let followers = ties::followers(&ties);
    let untied = selected
        .iter()
        .any(|(n, r)| *r == Role::Head && !followers.contains_key(n));
    let (init, donor, fallbacks) =
        choose_init(input, opts, (old_rows, new_rows), untied, &mut inputs)?;
    let (resizes, changed) = changes(ckpt, &selected, &ties, (old_rows, new_rows), opts.segments)?;
    let largest = resizes.iter().map(|r| r.keep).max().unwrap_or(0);
    let device = Device::select(opts.device, largest)?;
    let mut warnings = content_warnings(ckpt, &selected, &ties);
    // The output rule (output/folder.rs): a folder (or a sharded set) gives a folder, complete;
    // a file gives a file, and nothing beside it.
    let folder_in = output::model_folder::input_folder(input, ckpt.index.is_some());
    let (config_changes, config_text) =
        config_output(config, new_rows, opts, folder_in.is_some(), &mut warnings)?;
    let config_unchanged = config_changes.iter().all(|c| c.old == c.new);
    let tensors = planned_tensors(ckpt, &ties, &changed, new_rows);
    let report = Report {
        input: ckpt.path.clone(),
        format: ckpt.format,
        output: None,
        old_rows,
        new_rows,
        freeze_until_index: old_rows.min(new_rows),
        segments: segment_map(opts.segments, old_rows, new_rows),
        init: opts.method.name(),
        device: device.name.clone(),
        device_note: device.note.clone(),
        changed,
        ties,
        untouched_tensors: ckpt.tensors().count() - selected.len(),
        fallbacks,
        donor,
        config: None,
        config_changes,
        tokenizer: None,
        carried: Vec::new(),
        left_out: Vec::new(),
        warnings,
        notes: Vec::new(),
        // A folder still changes when its tokenizer is replaced (new ids that fit padding rows)
        // or its config.json's size is set.
        nothing_to_do: new_rows == old_rows
            && config_unchanged
            && !(folder_in.is_some() && matches!(opts.target, Target::Tokenizer(_))),
        dry_run: opts.dry_run,
        tensors,
        manifest: Vec::new(),
    };
    Ok(Plan {
        report,
        resizes,
        init,
        device,
        config_text,
        folder_in,
        inputs,
    })
}

/// Extend `input` into `out`: [`plan`], then [`execute`] (or, for `--dry-run` and when nothing
/// would change, the plan's report with the new rows' norms computed and nothing written).
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    let (own, note) = with_own_tokenizer(input, opts);
    let opts = own.as_ref().unwrap_or(opts);
    let ckpt = formats::open_with(input, &opts.open)?;
    ckpt.refuse_dcp(
        "extend-embeddings",
        "sanitize-checkpoint DIR --vocab-rows N --output OUT (or --tokenizer TOK)",
    )?;
    let mut plan = plan(&ckpt, input, opts)?;
    plan.report.notes.extend(note);
    execute(&ckpt, plan, out, opts)
}

/// Carry a plan out: the destination checked, the new rows computed while the writer copies the
/// old ones, the folder completed and renamed into place. Writes nothing for a dry run or when
/// there is nothing to do.
pub fn execute(ckpt: &Checkpoint, plan: Plan<'_>, out: &Path, opts: &Options) -> Result<Report> {
    let Plan {
        mut report,
        resizes,
        init,
        device,
        config_text,
        folder_in,
        inputs,
    } = plan;
    // Already at the target: nothing is written (a copy would be the input again).
    let dry = opts.dry_run || report.nothing_to_do;
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let tails: Vec<Later> = resizes.iter().map(|r| Later::new(r.tail_len)).collect();
    let compute = || -> Result<Vec<Option<RowNorms>>> {
        let _unset = FailUnset(&tails);
        resizes
            .iter()
            .zip(&tails)
            .map(|(r, tail)| {
                let (bytes, norms) = r.compute(&init, &device)?;
                tail.set(bytes);
                Ok(norms)
            })
            .collect()
    };
    if dry {
        let norms = compute()?;
        set_norms(&mut report, norms);
        return Ok(report);
    }
    // The destination is checked before anything is computed.
    let folder = destination(ckpt, folder_in.is_some(), out, &protected, opts)?;
    // Weights go into the temp folder under the input's own file names.
    let weights_dest = match &folder {
        Some(f) if ckpt.index.is_none() => f.join(&file_name(&ckpt.path)),
        Some(f) => f.path().to_path_buf(),
        None => out.to_path_buf(),
    };
    let new_bytes = resize::grown_map(&resizes, &tails, &report.ties);
    // The writer starts copying at once: the disk is busy while the new rows are computed
    // (on threads that yield the CPU to it), and whoever reaches them waits.
    let (norms, written) = std::thread::scope(|s| {
        let computing = s.spawn(|| output::priority::in_background(compute));
        let written = write(
            ckpt,
            &weights_dest,
            new_bytes,
            report.new_rows,
            opts,
            &protected,
        );
        let norms = computing.join().unwrap_or_else(|_| {
            Err(Error::Usage(
                "computing the new rows failed (a thread panicked)".into(),
            ))
        });
        (norms, written)
    });
    // The computation's own error says more than the writer's wait for it.
    let norms = norms?;
    report.manifest = match &folder {
        Some(f) => written.map_err(|e| f.about(e))?,
        None => written?,
    };
    set_norms(&mut report, norms);
    match (folder, &folder_in) {
        (Some(folder), Some(dir)) => {
            let done = FolderDone {
                folder,
                dir,
                config_text: config_text.as_deref(),
                protected: &protected,
            };
            finish_folder(ckpt, done, &mut report, out, opts)?;
        }
        _ => report.output = Some(out.to_path_buf()),
    }
    Ok(report)
}

fn set_norms(report: &mut Report, norms: Vec<Option<RowNorms>>) {
    for (c, n) in report.changed.iter_mut().zip(norms) {
        c.old_mean_row_norm = n.as_ref().map(|n| n.old);
        c.new_mean_row_norm = n.as_ref().map(|n| n.new);
    }
}

/// The output's place, checked before anything is computed: a temp folder beside `out` for a
/// folder output; for a file, that `out` may be written.
fn destination(
    ckpt: &Checkpoint,
    folder: bool,
    out: &Path,
    protected: &[&Path],
    opts: &Options,
) -> Result<Option<AtomicFolder>> {
    if folder {
        output::folder::folder_destination_name(out)?;
        return Ok(Some(AtomicFolder::create(out, protected, opts.overwrite)?));
    }
    let ext: &[&str] = match ckpt.format {
        Format::Safetensors => &["safetensors"],
        _ => &["pt", "pth", "bin", "ckpt"],
    };
    output::folder::file_destination(out, protected, ckpt.format.name(), ext, opts.overwrite)?;
    Ok(None)
}

/// What completing the output folder needs.
struct FolderDone<'a> {
    folder: AtomicFolder,
    dir: &'a Path,
    config_text: Option<&'a str>,
    protected: &'a [&'a Path],
}

/// The rest of the folder: config.json updated, the merged tokenizer in place of the old one,
/// every other file carried over; then the whole folder is renamed into place.
fn finish_folder(
    ckpt: &Checkpoint,
    done: FolderDone<'_>,
    report: &mut Report,
    out: &Path,
    opts: &Options,
) -> Result<()> {
    let mut written: Vec<String> = report.manifest.iter().map(|m| file_name(&m.path)).collect();
    if ckpt.index.is_some() {
        written.push(file_name(&ckpt.path));
    }
    let merged = match &opts.target {
        Target::Tokenizer(m) => Some(crate::tokenizer::base::folder_file(m)?),
        Target::Rows(_) => None,
    };
    let folder = done.folder;
    let finished = output::model_folder::finish(
        &folder,
        done.dir,
        &mut written,
        done.config_text,
        merged.as_ref(),
        done.protected,
        opts.link,
    )?;
    report.config = finished.config.map(|n| out.join(n));
    report.tokenizer = finished.tokenizer.map(|n| out.join(n));
    report.carried = finished.carried;
    report.left_out = finished.left_out;
    let tmp = folder.path().to_path_buf();
    folder.commit()?;
    for m in &mut report.manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    report.output = Some(out.to_path_buf());
    Ok(())
}

pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The plan for one safetensors file; changed tensors' bytes are moved out of `new_bytes` (they
/// are the bulk of the job's memory: never copy them).
fn safetensors_plan<'a>(
    file: &'a formats::safetensors::SafetensorsFile,
    new_bytes: &mut BTreeMap<String, Grown<'a>>,
    new_rows: u64,
    file_sha256: bool,
) -> SafetensorsPlan<'a> {
    let mut plan = SafetensorsPlan::identity(file);
    plan.file_sha256 = file_sha256;
    for t in &mut plan.tensors {
        if let Some(g) = new_bytes.remove(&t.name) {
            t.shape[0] = new_rows;
            if let Payload::Copy(head) = &t.payload {
                // The old rows are copied from the input like any untouched tensor.
                t.payload = match g.parts {
                    Some((parts, old, new)) => Payload::Interleave {
                        head: *head,
                        parts,
                        old,
                        new,
                        tail: g.tail,
                    },
                    None => Payload::Grow {
                        head: *head,
                        keep: g.keep,
                        tail: g.tail,
                    },
                };
            }
        }
    }
    plan
}

/// The torch plan: changed tensors get new storages (names viewing the same storage follow).
fn torch_plan<'a>(
    t: &'a TorchFile,
    new_bytes: &mut BTreeMap<String, Grown<'a>>,
    new_rows: u64,
) -> Result<TorchPlan<'a>> {
    let mut plan = TorchPlan::identity(t);
    for old in t.tensor_refs() {
        let Some(grown) = new_bytes.remove(old.name) else {
            continue;
        };
        let payload = grown.payload(&old)?;
        plan.replace_rows(t, old.name, new_rows, payload)
            .map_err(|e| Error::format(&t.map.path, e))?;
    }
    Ok(plan)
}

pub(crate) fn write<'a>(
    ckpt: &'a Checkpoint,
    out: &Path,
    mut new_bytes: BTreeMap<String, Grown<'a>>,
    new_rows: u64,
    opts: &Options,
    inputs: &[&Path],
) -> Result<Vec<FileManifest>> {
    match ckpt.format {
        Format::Safetensors => Ok(vec![output::write_safetensors(
            &safetensors_plan(&ckpt.files[0], &mut new_bytes, new_rows, opts.file_sha256),
            out,
            inputs,
        )?]),
        Format::TorchZip | Format::TorchLegacy => {
            let t = &ckpt.torch[0];
            let mut plan = torch_plan(t, &mut new_bytes, new_rows)?;
            plan.file_sha256 = opts.file_sha256;
            Ok(vec![output::torch::write_torch(
                &plan,
                out,
                inputs,
                &opts.open.globals,
            )?])
        }
        Format::TorchDcp => Err(Error::format(
            &ckpt.path,
            "extend-embeddings does not write torch Distributed Checkpoint folders: grow them with sanitize-checkpoint DIR --vocab-rows N --output OUT",
        )),
        Format::ShardedSafetensors | Format::ShardedTorch => {
            let index = ckpt
                .index
                .as_ref()
                .ok_or_else(|| Error::format(&ckpt.path, "sharded without an index"))?;
            // total_size: the tensor bytes of the new set (before the plans take the bytes).
            let total: u64 = ckpt
                .tensors()
                .map(|t| match new_bytes.get(t.name) {
                    Some(g) => g.len(),
                    None => t.nbytes(),
                })
                .sum();
            let mut shards: Vec<(String, ShardOut)> = Vec::new();
            let name_of = |p: &Path| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            for f in &ckpt.files {
                let touched = f
                    .header
                    .tensors
                    .iter()
                    .any(|t| new_bytes.contains_key(&t.name));
                let s = if !touched && opts.link {
                    ShardOut::Link(f.path())
                } else {
                    ShardOut::Safetensors(safetensors_plan(
                        f,
                        &mut new_bytes,
                        new_rows,
                        opts.file_sha256,
                    ))
                };
                shards.push((name_of(f.path()), s));
            }
            for t in &ckpt.torch {
                let touched = t.tensors.iter().any(|x| new_bytes.contains_key(&x.path));
                let s = if !touched && opts.link {
                    ShardOut::Link(&t.map.path)
                } else {
                    let mut plan = torch_plan(t, &mut new_bytes, new_rows)?;
                    plan.file_sha256 = opts.file_sha256;
                    ShardOut::Torch(plan, &opts.open.globals)
                };
                shards.push((name_of(&t.map.path), s));
            }

            let mut meta = index.metadata.clone().unwrap_or_default();
            meta.insert("total_size".into(), Value::from(total));
            let index_name = name_of(&ckpt.path);
            let m = output::write_sharded(
                out,
                &index_name,
                Some(&meta),
                &shards,
                &index.weight_map,
                inputs,
                opts.file_sha256,
            )?;
            Ok(m.shards)
        }
    }
}

/// The human report.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, {} → {} rows, init {}",
        r.input.display(),
        r.format.name(),
        r.old_rows,
        r.new_rows,
        r.init
    );
    if let Some(n) = &r.device_note {
        let _ = writeln!(s, "info: device {}: {n}", r.device);
    } else if r.device != "cpu" {
        let _ = writeln!(s, "device: {}", r.device);
    }
    for c in &r.changed {
        let norms = match (c.old_mean_row_norm, c.new_mean_row_norm) {
            (Some(a), Some(b)) => format!("; mean row norm old {a:.4}, new {b:.4}"),
            _ => String::new(),
        };
        let tied = if c.tied.is_empty() {
            String::new()
        } else {
            format!(" (tied: {})", c.tied.join(", "))
        };
        let _ = writeln!(
            s,
            "  {} ({:?}) {} {:?} → {:?}{norms}{tied}",
            c.name, c.role, c.dtype, c.old_shape, c.new_shape
        );
    }
    let _ = writeln!(
        s,
        "untouched tensors: {} (copied byte for byte)",
        r.untouched_tensors
    );
    if r.segments.is_empty() {
        let _ = writeln!(s, "freeze_until_index: {}", r.freeze_until_index);
    } else {
        let (s0, s1) = (
            r.segments[0].old[1] - r.segments[0].old[0],
            r.segments[0].new_rows[1] - r.segments[0].now[0],
        );
        let _ = writeln!(
            s,
            "{} segments of {s0} → {s1} rows: old id c·{s0} + j is now c·{s1} + j",
            r.segments.len()
        );
        for m in &r.segments {
            let _ = writeln!(
                s,
                "  segment {}: rows {}..{} → {}..{}, new rows {}..{}",
                m.segment, m.old[0], m.old[1], m.now[0], m.now[1], m.new_rows[0], m.new_rows[1]
            );
        }
    }
    if !r.fallbacks.is_empty() {
        let _ = writeln!(
            s,
            "subword-mean fell back to the mean for {} tokens: {}",
            r.fallbacks.len(),
            r.fallbacks.join(" ")
        );
    }
    if let Some(d) = &r.donor {
        s.push_str(&donor::render(d));
    }
    if let Some(c) = &r.config {
        let ch: Vec<String> = r
            .config_changes
            .iter()
            .map(|c| format!("{} {} → {}", c.key, c.old, c.new))
            .collect();
        let _ = writeln!(
            s,
            "config: {} ({})",
            c.display(),
            if ch.is_empty() {
                "no vocabulary key found".into()
            } else {
                ch.join(", ")
            }
        );
    }
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
    if let Some(t) = &r.tokenizer {
        let _ = writeln!(s, "tokenizer: {}", t.display());
    }
    s.push_str(&output::folder::render_carried(&r.carried, &r.left_out));
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    if r.nothing_to_do {
        let _ = writeln!(
            s,
            "nothing to do: the checkpoint already has {} rows; nothing written",
            r.old_rows
        );
    } else if r.dry_run {
        let _ = writeln!(s, "dry run: nothing written");
    }
    for m in &r.manifest {
        let _ = writeln!(s, "{}", m.wrote());
    }
    s
}
