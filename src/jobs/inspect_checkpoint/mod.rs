//! The `inspect-checkpoint` job: what is in a checkpoint, as a report (human table or JSON).

mod gguf;
mod megatron;
pub mod megatron_legacy;
mod text;
mod zero;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind};
use crate::formats::torch::value::{Node, Pickle};
use crate::formats::torch::{self as torchfmt, TorchFile};
use crate::formats::{self, Checkpoint, Format, OpenOptions, TensorRef, Tensors};
use crate::output::manifest::{self, HashAlg};
use crate::output::progress::Progress;
use crate::ties::{self, How, Tie};
use crate::vocab::{self, Detection};
use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
pub use text::human_bytes;
use text::shape_str;

/// What to include.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// The digest of every listed tensor (parallel), with the manifests' algorithm.
    pub hash: bool,
    /// Only tensors whose name matches.
    pub filter: Option<Regex>,
    /// How to open (pickle globals the user trusts).
    pub open: OpenOptions,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: DType,
    /// torch's name for the dtype (`float32`, `uint16`, `float8_e4m3fn`), for torch files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<&'static str>,
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// The shard holding it (sharded checkpoints only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// With `--hash`: the digest of its bytes (the report's `hash` names the algorithm).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A DCP tensor's chunks: its box in the global tensor and where it is stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<ChunkEntry>>,
}

/// One chunk of a DCP tensor.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkEntry {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
    pub file: String,
    /// Where the chunk's `torch.save` archive is in `file`.
    pub offset: u64,
    pub length: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DTypeTotal {
    pub tensors: u64,
    pub parameters: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Names listed (a tied pair is two).
    pub tensors: u64,
    /// Elements and bytes, a storage shared by tied names counted once.
    pub parameters: u64,
    pub bytes: u64,
    pub by_dtype: BTreeMap<String, DTypeTotal>,
}

impl Totals {
    /// One listed tensor: into the totals and its dtype's line.
    fn count(&mut self, dtype: &str, parameters: u64, bytes: u64) {
        self.tensors += 1;
        self.parameters += parameters;
        self.bytes += bytes;
        let d = self.by_dtype.entry(dtype.to_string()).or_default();
        d.tensors += 1;
        d.parameters += parameters;
        d.bytes += bytes;
    }
}

/// The whole report for one checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: Format,
    pub files: Vec<FileEntry>,
    pub file_bytes: u64,
    /// `__metadata__` of a single file, or the index's `metadata` of a sharded set.
    pub metadata: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// With `--hash`: the algorithm of the tensors' digests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<HashAlg>,
    pub tensors: Vec<TensorEntry>,
    /// Totals over the listed tensors.
    pub totals: Totals,
    /// Vocabulary matrices, over all tensors (the filter does not apply).
    pub vocabulary: Detection,
    /// Names that are one parameter (see [`crate::ties`]).
    pub ties: Vec<Tie>,
    /// The non-tensor tree of a torch file, summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeSummary>,
    /// A DCP folder's non-tensor items (pickled values such as `optim.param_groups.….lr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_items: Option<Vec<String>>,
}

/// One top-level entry of a torch file's tree.
#[derive(Debug, Clone, Serialize)]
pub struct TreeEntry {
    pub key: String,
    pub kind: String,
    /// Tensors at or under this key.
    pub tensors: usize,
    /// The value, for scalars (`step: 3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// An optimizer state dict found in the tree (`{"state": …, "param_groups": […]}`).
#[derive(Debug, Clone, Serialize)]
pub struct OptimizerSummary {
    pub path: String,
    pub param_groups: usize,
    pub params: usize,
    /// Parameters that have per-parameter state.
    pub state_entries: usize,
    /// Names found in the per-parameter state (`exp_avg`, `exp_avg_sq`, `step`, …).
    pub moments: Vec<String>,
}

/// A scheduler state dict found in the tree (has `last_epoch` or `base_lrs`).
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerSummary {
    pub path: String,
    pub keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_epoch: Option<String>,
}

/// What a torch file holds besides tensors.
#[derive(Debug, Clone, Serialize)]
pub struct TreeSummary {
    pub root: String,
    pub entries: Vec<TreeEntry>,
    pub optimizers: Vec<OptimizerSummary>,
    pub schedulers: Vec<SchedulerSummary>,
}

/// Build the report for an open checkpoint (a ZeRO checkpoint has its own: [`zero`]).
pub fn report(ckpt: &Checkpoint, opts: &Options) -> Result<Report> {
    match ckpt {
        Checkpoint::Dcp(d) => dcp_report(d, opts),
        Checkpoint::Gguf(g) => Err(Error::unsupported(
            g.path(),
            "a GGUF file has a report of its own (inspect_checkpoint::gguf)",
        )),
        _ => tensors_report(
            ckpt.tensors_for("inspect-checkpoint", "inspect-checkpoint's ZeRO report")?,
            opts,
        ),
    }
}

/// The report of a tensor store.
fn tensors_report(ckpt: &Tensors, opts: &Options) -> Result<Report> {
    let listed: Vec<_> = ckpt
        .tensors()
        .filter(|t| opts.filter.as_ref().is_none_or(|re| re.is_match(t.name())))
        .collect();
    let hashes = if opts.hash {
        hash_listed(ckpt, &listed)?
    } else {
        vec![None; listed.len()]
    };
    let vocabulary = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    let config = formats::config_beside(&ckpt.path)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok());
    let ties = ties::find(ckpt, vocabulary.vocabulary.as_ref(), config.as_ref());
    let (tensors, totals) = tensor_entries(ckpt, &listed, hashes, &ties);
    Ok(Report {
        hash: opts.hash.then(manifest::algorithm),
        path: ckpt.path.clone(),
        format: ckpt.format,
        files: ckpt
            .files
            .iter()
            .map(|f| &f.map)
            .chain(ckpt.torch.iter().map(|t| &t.map))
            .map(|m| FileEntry {
                path: m.path.clone(),
                bytes: m.len,
            })
            .collect(),
        file_bytes: ckpt.file_bytes(),
        metadata: metadata(ckpt),
        filter: opts.filter.as_ref().map(|r| r.as_str().to_string()),
        tensors,
        totals,
        vocabulary,
        ties,
        // One torch file: its tree. Shards of a state dict have no tree worth summarising.
        tree: match &ckpt.torch[..] {
            [one] if ckpt.index.is_none() => Some(tree_summary(one)),
            _ => None,
        },
        bytes_items: None,
    })
}

/// `--hash`: every listed tensor's digest, in parallel (and the zip CRCs of torch storages,
/// since every byte is read anyway).
fn hash_listed(ckpt: &Tensors, listed: &[TensorRef<'_>]) -> Result<Vec<Option<String>>> {
    for t in &ckpt.torch {
        t.verify_crcs()?;
    }
    let total = listed.iter().map(|t| t.nbytes()).sum();
    let progress = Progress::bytes(total, "hashing");
    let shared = progress.shared();
    let v = listed
        .par_iter()
        .map(|t| t.digest_with(|n| shared.inc(n)).map(Some))
        .collect::<Result<Vec<_>>>()?;
    progress.finish();
    Ok(v)
}

/// The listed tensors' rows and their totals (a tied name's storage counted once, under the
/// first name of its tie).
fn tensor_entries(
    ckpt: &Tensors,
    listed: &[TensorRef<'_>],
    hashes: Vec<Option<String>>,
    ties: &[Tie],
) -> (Vec<TensorEntry>, Totals) {
    let sharded = ckpt.index.is_some();
    let shared: Vec<&str> = ties
        .iter()
        .filter(|t| t.how == How::SameStorage)
        .flat_map(|t| t.names[1..].iter().map(String::as_str))
        .collect();
    let mut totals = Totals::default();
    let mut tensors = Vec::with_capacity(listed.len());
    let torch_names = !ckpt.torch.is_empty();
    let dtype_name = |d: DType| {
        if torch_names {
            d.torch_name()
        } else {
            d.name()
        }
    };
    for (t, digest) in listed.iter().zip(hashes) {
        let once = !shared.contains(&t.name);
        let (params, bytes) = if once {
            (t.elements(), t.nbytes())
        } else {
            (0, 0)
        };
        totals.count(dtype_name(t.dtype), params, bytes);
        tensors.push(TensorEntry {
            name: t.name.to_string(),
            dtype: t.dtype,
            torch_dtype: torch_names.then(|| t.dtype.torch_name()),
            shape: t.shape.to_vec(),
            bytes: t.nbytes(),
            shard: sharded.then(|| file_name(&t.map.path)),
            digest,
            chunks: None,
        });
    }
    (tensors, totals)
}

/// The metadata: a sharded set's index metadata, or a safetensors header's `__metadata__`.
fn metadata(ckpt: &Tensors) -> serde_json::Value {
    match (&ckpt.index, ckpt.files.first()) {
        (Some(index), _) => index
            .metadata
            .clone()
            .map(serde_json::Value::Object)
            .unwrap_or(serde_json::Value::Null),
        (None, Some(f)) => match &f.header.metadata {
            Some(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            ),
            None => serde_json::Value::Null,
        },
        (None, None) => serde_json::Value::Null,
    }
}

/// The report of a DCP folder: every tensor key with its global shape and chunks, the
/// vocabulary among the model's keys, and the names of the pickled values.
fn dcp_report(d: &Dcp, opts: &Options) -> Result<Report> {
    if opts.hash {
        // Hashing reads every byte anyway: check the chunks' zip CRCs too.
        d.verify_crcs()?;
    }
    let mut tensors = Vec::new();
    let mut totals = Totals::default();
    let mut bytes_items = Vec::new();
    for it in &d.items {
        if opts.filter.as_ref().is_some_and(|re| !re.is_match(&it.fqn)) {
            continue;
        }
        let ItemKind::Tensor {
            dtype,
            shape,
            chunks,
        } = &it.kind
        else {
            bytes_items.push(it.fqn.clone());
            continue;
        };
        let elements: u64 = shape.iter().product();
        let bytes = dtype.bytes_for(elements).unwrap_or(0);
        let digest = if opts.hash {
            Some(manifest::digest(&d.tensor_bytes(it)?))
        } else {
            None
        };
        totals.count(dtype.torch_name(), elements, bytes);
        tensors.push(TensorEntry {
            name: it.fqn.clone(),
            dtype: *dtype,
            torch_dtype: Some(dtype.torch_name()),
            shape: shape.clone(),
            bytes,
            shard: None,
            digest,
            chunks: Some(
                chunks
                    .iter()
                    .map(|c| ChunkEntry {
                        offsets: c.offsets.clone(),
                        sizes: c.sizes.clone(),
                        file: c.stored.file.clone(),
                        offset: c.stored.offset,
                        length: c.stored.length,
                    })
                    .collect(),
            ),
        });
    }
    Ok(Report {
        hash: opts.hash.then(manifest::algorithm),
        path: d.dir.clone(),
        format: Format::TorchDcp,
        files: d
            .files
            .values()
            .map(|m| FileEntry {
                path: m.path.clone(),
                bytes: m.len,
            })
            .collect(),
        file_bytes: d.files.values().map(|m| m.len).sum(),
        metadata: serde_json::json!({ "version": d.version }),
        filter: opts.filter.as_ref().map(|r| r.as_str().to_string()),
        tensors,
        totals,
        vocabulary: crate::formats::dcp::keys::vocabulary(d),
        ties: Vec::new(),
        tree: None,
        bytes_items: Some(bytes_items),
    })
}

/// A one-line description of a node.
pub fn describe(p: &Pickle, id: u32) -> String {
    if let Some(t) = p.tensor_of(id) {
        let kind = if matches!(p.node(id), Node::Tensor(_)) {
            "tensor"
        } else {
            "parameter"
        };
        return format!(
            "{kind} {} {}",
            t.storage.dtype.torch_name(),
            shape_str(&t.shape)
        );
    }
    match p.node(id) {
        Node::None => "None".into(),
        Node::Bool(_) => "bool".into(),
        Node::Int(_) | Node::BigInt(_) => "int".into(),
        Node::Float(_) => "float".into(),
        Node::Str(_) => "str".into(),
        Node::Bytes(b) | Node::ByteArray(b) => format!("bytes ({})", b.len()),
        Node::List(v) => format!("list ({})", v.len()),
        Node::Tuple(v) => format!("tuple ({})", v.len()),
        Node::Set(v) | Node::FrozenSet(v) => format!("set ({})", v.len()),
        Node::Dict(e) => format!("dict ({} entries)", e.len()),
        Node::Object { dict_items, .. } if p.is_ordered_dict(id) => {
            format!("OrderedDict ({} entries)", dict_items.len())
        }
        Node::Object { callable, .. } => {
            format!("object {}", p.global_name(*callable).unwrap_or_default())
        }
        Node::Global { .. } => format!("global {}", p.global_name(id).unwrap_or_default()),
        Node::PersistentId(_) => "persistent id".into(),
        Node::Tensor(_) => "tensor".into(),
    }
}

/// The value of a scalar node, shortened.
fn scalar(p: &Pickle, id: u32) -> Option<String> {
    let s = match p.node(id) {
        Node::None => "None".to_string(),
        Node::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Node::Int(i) => i.to_string(),
        Node::BigInt(b) => format!("<{}-byte int>", b.len()),
        Node::Float(f) => f.to_string(),
        Node::Str(s) if s.chars().count() > 60 => {
            format!("{:?}…", s.chars().take(60).collect::<String>())
        }
        Node::Str(s) => format!("{s:?}"),
        _ => return None,
    };
    Some(s)
}

/// Summarise a torch file's tree: top-level keys, optimizers and schedulers anywhere in it.
pub fn tree_summary(t: &TorchFile) -> TreeSummary {
    let p = &t.pickle;
    let entries = torchfmt::children(p, p.root)
        .into_iter()
        .map(|(key, id)| {
            let prefix = format!("{key}.");
            TreeEntry {
                tensors: t
                    .tensors
                    .iter()
                    .filter(|x| x.path == key || x.path.starts_with(&prefix))
                    .count(),
                kind: describe(p, id),
                value: scalar(p, id),
                key,
            }
        })
        .collect();
    let mut optimizers = Vec::new();
    let mut schedulers = Vec::new();
    // The tree was walked when the file was opened, so this walk is within bounds.
    let _ = torchfmt::walk(p, torchfmt::MAX_WALK, &mut |path, id| {
        if p.tensor_of(id).is_some() {
            return false;
        }
        let Some(entries) = p.dict_entries(id) else {
            return true;
        };
        let keys: Vec<String> = entries
            .iter()
            .map(|&(k, _)| torchfmt::key_text(p, k))
            .collect();
        if let (Some(state), Some(groups)) = (p.get(id, "state"), p.get(id, "param_groups")) {
            let groups: Vec<u32> = match p.node(groups) {
                Node::List(v) => v.clone(),
                _ => Vec::new(),
            };
            let params = groups
                .iter()
                .filter_map(|&g| p.get(g, "params"))
                .map(|l| match p.node(l) {
                    Node::List(v) => v.len(),
                    _ => 0,
                })
                .sum();
            let per_param = p.dict_entries(state).unwrap_or(&[]);
            let mut moments: Vec<String> = Vec::new();
            for &(_, s) in per_param {
                for &(k, _) in p.dict_entries(s).unwrap_or(&[]) {
                    let name = torchfmt::key_text(p, k);
                    if !moments.contains(&name) {
                        moments.push(name);
                    }
                }
            }
            optimizers.push(OptimizerSummary {
                path: path.to_string(),
                param_groups: groups.len(),
                params,
                state_entries: per_param.len(),
                moments,
            });
            return false;
        }
        if keys.iter().any(|k| k == "last_epoch" || k == "base_lrs") {
            schedulers.push(SchedulerSummary {
                path: path.to_string(),
                last_epoch: p.get(id, "last_epoch").and_then(|v| scalar(p, v)),
                keys,
            });
            return false;
        }
        true
    });
    TreeSummary {
        root: describe(p, p.root),
        entries,
        optimizers,
        schedulers,
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Parse a `--filter` pattern.
pub fn parse_filter(pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| Error::arg("--filter", format!("--filter '{pattern}': {e}")))
}

/// The human report: the same facts as the JSON, as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    render_head(&mut s, r);
    render_table(&mut s, r);
    render_totals(&mut s, r);
    render_vocabulary(&mut s, r);
    if let Some(b) = r.bytes_items.as_ref().filter(|b| !b.is_empty()) {
        let _ = writeln!(s, "pickled values: {} ({})", b.len(), b.join(", "));
    }
    if let Some(t) = &r.tree {
        render_tree(&mut s, t);
    }
    s
}

/// The first line, the shards, the metadata and the filter.
fn render_head(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "{}: {}, {} ({} bytes) in {} file{}",
        r.path.display(),
        r.format.name(),
        human_bytes(r.file_bytes),
        r.file_bytes,
        r.files.len(),
        if r.files.len() == 1 { "" } else { "s" }
    );
    if r.files.len() > 1 {
        for f in &r.files {
            let _ = writeln!(s, "  shard {} ({} bytes)", f.path.display(), f.bytes);
        }
    }
    if let serde_json::Value::Object(m) = &r.metadata {
        let parts: Vec<String> = m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(x) => format!("{k}={x}"),
                other => format!("{k}={other}"),
            })
            .collect();
        let _ = writeln!(s, "metadata: {}", parts.join(", "));
    }
    if let Some(f) = &r.filter {
        let _ = writeln!(s, "filter: {f}");
    }
}

/// The tensor table (name, dtype, shape, bytes, digest with --hash), a DCP tensor's chunks
/// under it when there are several.
fn render_table(s: &mut String, r: &Report) {
    let rows: Vec<[String; 5]> = r
        .tensors
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.torch_dtype
                    .map_or_else(|| t.dtype.to_string(), str::to_string),
                shape_str(&t.shape),
                t.bytes.to_string(),
                t.digest.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let head = [
        "name",
        "dtype",
        "shape",
        "bytes",
        r.hash.unwrap_or_default().name(),
    ];
    let cols = if r.tensors.iter().any(|t| t.digest.is_some()) {
        5
    } else {
        4
    };
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .map(|row| row[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| -> String {
        let mut l = String::from(" ");
        for (i, c) in cells.iter().enumerate().take(cols) {
            if i == 3 {
                let _ = write!(l, " {c:>w$}", w = widths[i]);
            } else {
                let _ = write!(l, " {c:<w$}", w = widths[i]);
            }
        }
        l.trim_end().to_string()
    };
    let _ = writeln!(s, "{}", line(&head));
    for (row, t) in rows.iter().zip(&r.tensors) {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        let _ = writeln!(s, "{}", line(&cells));
        for c in t
            .chunks
            .iter()
            .flatten()
            .filter(|_| t.chunks.as_ref().is_some_and(|v| v.len() > 1))
        {
            let _ = writeln!(
                s,
                "      chunk at {} size {} in {} (bytes {}..+{})",
                shape_str(&c.offsets),
                shape_str(&c.sizes),
                c.file,
                c.offset,
                c.length
            );
        }
    }
}

/// The totals line (by dtype) and the ties.
fn render_totals(s: &mut String, r: &Report) {
    let by: Vec<String> = r
        .totals
        .by_dtype
        .iter()
        .map(|(d, t)| format!("{d}: {} tensors, {} bytes", t.tensors, t.bytes))
        .collect();
    let _ = writeln!(
        s,
        "total: {} tensors, {} parameters, {} ({} bytes); {}",
        r.totals.tensors,
        r.totals.parameters,
        human_bytes(r.totals.bytes),
        r.totals.bytes,
        by.join("; ")
    );
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
}

/// The vocabulary found (or the candidates, or none) and the look-alikes that are not.
fn render_vocabulary(s: &mut String, r: &Report) {
    let describe = |v: &vocab::Vocabulary| -> String {
        let parts: Vec<String> = v
            .tensors
            .iter()
            .map(|t| format!("{} {} ({})", t.name, shape_str(&t.shape), role_word(t.role)))
            .collect();
        format!("{} rows: {}", v.rows, parts.join(", "))
    };
    match (&r.vocabulary.vocabulary, r.vocabulary.ambiguous.is_empty()) {
        (Some(v), _) => {
            let _ = writeln!(s, "vocabulary: {}", describe(v));
        }
        (None, false) => {
            let _ = writeln!(s, "vocabulary: ambiguous, candidate groups differ in rows:");
            for v in &r.vocabulary.ambiguous {
                let _ = writeln!(s, "  {}", describe(v));
            }
        }
        (None, true) => {
            let _ = writeln!(s, "vocabulary: no embedding or head matrix found");
        }
    }
    for l in &r.vocabulary.lookalikes {
        let _ = writeln!(
            s,
            "not vocabulary: {} {}: {}",
            l.name,
            shape_str(&l.shape),
            l.reason
        );
    }
}

/// A torch file's tree: its entries, optimizers and schedulers.
fn render_tree(s: &mut String, t: &TreeSummary) {
    let _ = writeln!(s, "tree: {}", t.root);
    for e in &t.entries {
        let mut line = format!("  {}: {}", e.key, e.kind);
        if let Some(v) = &e.value {
            let _ = write!(line, " = {v}");
        }
        if e.tensors > 0 && !e.kind.starts_with("tensor") && !e.kind.starts_with("parameter") {
            let _ = write!(line, ", {} tensors", e.tensors);
        }
        let _ = writeln!(s, "{line}");
    }
    for o in &t.optimizers {
        let _ = writeln!(
            s,
            "optimizer at '{}': {} param group{}, {} params, state for {}, per-parameter state: {}",
            o.path,
            o.param_groups,
            if o.param_groups == 1 { "" } else { "s" },
            o.params,
            o.state_entries,
            o.moments.join(", ")
        );
    }
    for c in &t.schedulers {
        let _ = writeln!(
            s,
            "scheduler at '{}': last_epoch {}; keys {}",
            c.path,
            c.last_epoch.as_deref().unwrap_or("?"),
            c.keys.join(", ")
        );
    }
}

fn role_word(r: vocab::Role) -> &'static str {
    match r {
        vocab::Role::Embedding => "embedding",
        vocab::Role::Head => "head",
        vocab::Role::HeadBias => "head bias",
    }
}

/// inspect-checkpoint on a ZeRO folder: the JSON value and the text. `--filter` selects
/// parameters; `--hash` is refused (the parameters are spread over the ranks' flat tensors).
pub fn zero(z: &crate::formats::zero::Zero, opts: &Options) -> Result<(serde_json::Value, String)> {
    let path = z.path();
    if opts.hash {
        return Err(Error::arg(
            "--hash",
            format!(
                "{}: --hash is not supported for a DeepSpeed ZeRO checkpoint (hash its files instead)",
                path.display()
            ),
        ));
    }
    let mut r = zero::report(z, path);
    if let Some(f) = &opts.filter {
        r.params.retain(|p| f.is_match(&p.name));
    }
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        zero::render(&r),
    ))
}

/// inspect-checkpoint on a GGUF file: the JSON value and the text. `--filter` selects tensors;
/// `--hash` digests each tensor's data bytes.
pub fn gguf(g: &crate::formats::gguf::Gguf, opts: &Options) -> Result<(serde_json::Value, String)> {
    let r = gguf::report(g, opts.filter.as_ref(), opts.hash)?;
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        gguf::render(&r),
    ))
}

/// A Megatron-Core `torch_dist` checkpoint's report: its iteration, parallel layout, vocabulary
/// and optimizer layout, then the DCP folder's tensors. JSON and the human text.
pub fn megatron(
    m: &crate::formats::megatron::Megatron,
    opts: &Options,
) -> Result<(serde_json::Value, String)> {
    let dcp = dcp_report(&m.dcp, opts)?;
    let tensors = (serde_json::to_value(&dcp).unwrap_or_default(), render(&dcp));
    let r = megatron::report(m, tensors);
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        megatron::render(&r),
    ))
}
