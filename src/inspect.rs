//! The `inspect-checkpoint` job: what is in a checkpoint, as a report (human table or JSON).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::{self, Checkpoint, Format};
use crate::output::manifest::sha256_with;
use crate::output::progress::Progress;
use crate::vocab::{self, Detection};
use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What to include.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// sha256 of every listed tensor (parallel).
    pub hash: bool,
    /// Only tensors whose name matches.
    pub filter: Option<Regex>,
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
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// The shard holding it (sharded checkpoints only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DTypeTotal {
    pub tensors: u64,
    pub parameters: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub tensors: u64,
    pub parameters: u64,
    pub bytes: u64,
    pub by_dtype: BTreeMap<String, DTypeTotal>,
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
    pub tensors: Vec<TensorEntry>,
    /// Totals over the listed tensors.
    pub totals: Totals,
    /// Vocabulary matrices, over all tensors (the filter does not apply).
    pub vocabulary: Detection,
}

/// Open `path` and build its report.
pub fn inspect(path: &Path, opts: &Options) -> Result<Report> {
    let ckpt = formats::open(path)?;
    report(&ckpt, opts)
}

/// Build the report for an open checkpoint.
pub fn report(ckpt: &Checkpoint, opts: &Options) -> Result<Report> {
    let sharded = ckpt.format == Format::ShardedSafetensors;
    let listed: Vec<_> = ckpt
        .tensors()
        .filter(|t| opts.filter.as_ref().is_none_or(|re| re.is_match(t.name())))
        .collect();
    let hashes: Vec<Option<String>> = if opts.hash {
        let total = listed.iter().map(|t| t.nbytes()).sum();
        let progress = Progress::bytes(total, "hashing");
        let shared = progress.shared();
        let v = listed
            .par_iter()
            .map(|t| Some(sha256_with(&t.bytes(), |n| shared.inc(n))))
            .collect();
        progress.finish();
        v
    } else {
        vec![None; listed.len()]
    };
    let mut totals = Totals::default();
    let mut tensors = Vec::with_capacity(listed.len());
    for (t, sha256) in listed.iter().zip(hashes) {
        let params = t.elements();
        totals.tensors += 1;
        totals.parameters += params;
        totals.bytes += t.nbytes();
        let d = totals
            .by_dtype
            .entry(t.dtype.name().to_string())
            .or_default();
        d.tensors += 1;
        d.parameters += params;
        d.bytes += t.nbytes();
        tensors.push(TensorEntry {
            name: t.name.to_string(),
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            bytes: t.nbytes(),
            shard: sharded.then(|| file_name(&t.map.path)),
            sha256,
        });
    }
    let metadata = match (&ckpt.index, ckpt.files.first()) {
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
    };
    Ok(Report {
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
        metadata,
        filter: opts.filter.as_ref().map(|r| r.as_str().to_string()),
        tensors,
        totals,
        vocabulary: vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape))),
    })
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Parse a `--filter` pattern.
pub fn parse_filter(pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| Error::Usage(format!("--filter '{pattern}': {e}")))
}

/// `1234567` → `1.2 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn shape_str(shape: &[u64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The human report: the same facts as the JSON, as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
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
    let rows: Vec<[String; 5]> = r
        .tensors
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.dtype.to_string(),
                shape_str(&t.shape),
                t.bytes.to_string(),
                t.sha256.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let head = ["name", "dtype", "shape", "bytes", "sha256"];
    let cols = if r.tensors.iter().any(|t| t.sha256.is_some()) {
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
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        let _ = writeln!(s, "{}", line(&cells));
    }
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
    s
}

fn role_word(r: vocab::Role) -> &'static str {
    match r {
        vocab::Role::Embedding => "embedding",
        vocab::Role::Head => "head",
        vocab::Role::HeadBias => "head bias",
    }
}
