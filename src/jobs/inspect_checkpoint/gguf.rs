//! inspect-checkpoint on a GGUF file: the header's key/values (long arrays summarised), the
//! tensors (ggml type, shape rows first, bytes, where their data lies), the vocabulary matrices
//! and the tokenizer the header describes.

use super::text::{human_bytes, shape_str};
use crate::error::Result;
use crate::formats::gguf::{keys, Gguf, KeyValue, TensorInfo, Value};
use crate::output::manifest::{self, HashAlg, Hasher};
use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arrays longer than this are summarised by their length and first items.
const SHOWN: usize = 8;

/// The inspect report of a GGUF file.
#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: &'static str,
    pub version: u32,
    pub file_bytes: u64,
    pub alignment: u64,
    /// Where the data section starts (the header's end, aligned).
    pub data_start: u64,
    pub architecture: Option<String>,
    /// The key/values in file order.
    pub metadata: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<HashAlg>,
    /// Shapes are rows first (row-major, as for every other format): GGUF's `ne[]` reversed.
    pub shape_order: &'static str,
    pub tensors: Vec<TensorEntry>,
    pub totals: Totals,
    pub vocabulary: Vocabulary,
    pub tokenizer: keys::Tokenizer,
}

#[derive(Debug, Serialize)]
pub struct TensorEntry {
    pub name: String,
    pub ggml_type: &'static str,
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// Where its data starts in the file.
    pub offset: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub tensors: u64,
    pub parameters: u64,
    pub bytes: u64,
    /// Per ggml type: tensors, parameters, bytes.
    pub by_type: BTreeMap<String, (u64, u64, u64)>,
}

/// The vocabulary matrices: `token_embd.weight` and `output.weight` (absent: tied).
#[derive(Debug, Serialize)]
pub struct Vocabulary {
    pub embedding: Option<Matrix>,
    pub head: Option<Matrix>,
    pub tied: bool,
}

#[derive(Debug, Serialize)]
pub struct Matrix {
    pub name: &'static str,
    pub ggml_type: &'static str,
    pub shape: Vec<u64>,
    pub rows: u64,
}

/// A key/value for the report: long arrays by their length and first items.
fn metadata(kv: &KeyValue) -> serde_json::Value {
    match &kv.value {
        Value::Array(t, items) if items.len() > SHOWN => json!({
            "key": kv.key, "type": "array", "element": t.name(), "length": items.len(),
            "first": items.iter().take(SHOWN).map(Value::to_json).collect::<Vec<_>>(),
        }),
        Value::Array(t, items) => json!({
            "key": kv.key, "type": "array", "element": t.name(), "length": items.len(),
            "value": kv.value.to_json(),
        }),
        v => json!({"key": kv.key, "type": v.kind().name(), "value": v.to_json()}),
    }
}

fn matrix(g: &Gguf, name: &'static str) -> Option<Matrix> {
    g.tensor(name).map(|t| Matrix {
        name,
        ggml_type: t.ggml.name,
        shape: t.shape(),
        rows: t.rows(),
    })
}

/// The digest of a tensor's data, streamed through the map.
fn digest(g: &Gguf, t: &TensorInfo) -> Result<String> {
    let mut h = Hasher::default();
    g.map.stream(t.start, t.bytes, |c| h.update(c))?;
    Ok(h.finish())
}

/// Describe an open GGUF file.
pub fn report(g: &Gguf, filter: Option<&Regex>, hash: bool) -> Result<Report> {
    let listed: Vec<&TensorInfo> = g
        .tensors
        .iter()
        .filter(|t| filter.is_none_or(|re| re.is_match(&t.name)))
        .collect();
    let digests: Vec<Option<String>> = if hash {
        listed
            .par_iter()
            .map(|t| digest(g, t).map(Some))
            .collect::<Result<_>>()?
    } else {
        vec![None; listed.len()]
    };
    let mut totals = Totals::default();
    let tensors = listed
        .iter()
        .zip(digests)
        .map(|(t, digest)| {
            let n = t.elements();
            totals.tensors += 1;
            totals.parameters += n;
            totals.bytes += t.bytes;
            let e = totals.by_type.entry(t.ggml.name.to_string()).or_default();
            *e = (e.0 + 1, e.1 + n, e.2 + t.bytes);
            TensorEntry {
                name: t.name.clone(),
                ggml_type: t.ggml.name,
                shape: t.shape(),
                bytes: t.bytes,
                offset: t.start,
                digest,
            }
        })
        .collect();
    let head = matrix(g, keys::HEAD);
    Ok(Report {
        path: g.path().to_path_buf(),
        format: "gguf",
        version: g.version,
        file_bytes: g.map.len,
        alignment: g.alignment,
        data_start: g.data_start,
        architecture: g
            .get(keys::ARCHITECTURE)
            .and_then(Value::as_str)
            .map(str::to_string),
        metadata: g.kv.iter().map(metadata).collect(),
        filter: filter.map(|r| r.as_str().to_string()),
        hash: hash.then(manifest::algorithm),
        shape_order: "rows first (GGUF's ne[] reversed)",
        tensors,
        totals,
        vocabulary: Vocabulary {
            embedding: matrix(g, keys::EMBEDDING),
            tied: head.is_none() && g.tensor(keys::EMBEDDING).is_some(),
            head,
        },
        tokenizer: keys::tokenizer(g),
    })
}

/// A metadata value in one line: strings quoted and cut at 60 characters, arrays by length
/// and first items.
fn value_text(v: &serde_json::Value) -> String {
    let one = |x: &serde_json::Value| match x.as_str() {
        Some(s) if s.chars().count() > 60 => {
            format!(
                "{:?}… ({} chars)",
                s.chars().take(60).collect::<String>(),
                s.chars().count()
            )
        }
        Some(s) => format!("{s:?}"),
        None => x.to_string(),
    };
    if let Some(first) = v.get("first").and_then(|f| f.as_array()) {
        let items: Vec<String> = first.iter().map(one).collect();
        return format!("{} items: {}, …", v["length"], items.join(", "));
    }
    match v.get("value") {
        Some(serde_json::Value::Array(items)) => {
            let items: Vec<String> = items.iter().map(one).collect();
            format!("[{}]", items.join(", "))
        }
        Some(x) => one(x),
        None => String::new(),
    }
}

/// The human rendering of [`Report`].
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: GGUF v{}, {}, {} tensors, {} (alignment {}, data at byte {})",
        r.path.display(),
        r.version,
        r.architecture
            .as_deref()
            .unwrap_or("no general.architecture"),
        r.tensors.len(),
        human_bytes(r.file_bytes),
        r.alignment,
        r.data_start
    );
    let _ = writeln!(s, "metadata ({} keys):", r.metadata.len());
    for m in &r.metadata {
        let kind = match m.get("element").and_then(|e| e.as_str()) {
            Some(e) => format!("array[{e}]"),
            None => m["type"].as_str().unwrap_or_default().to_string(),
        };
        let key = m["key"].as_str().unwrap_or_default();
        let _ = writeln!(s, "  {key:<44} {kind:<14} {}", value_text(m));
    }
    let _ = writeln!(s, "tensors (shape rows first; GGUF's ne[] is the reverse):");
    for t in &r.tensors {
        let _ = write!(
            s,
            "  {:<32} {:<8} {:<16} {:>10}",
            t.name,
            t.ggml_type,
            shape_str(&t.shape),
            human_bytes(t.bytes)
        );
        if let Some(d) = &t.digest {
            let _ = write!(s, "  {d}");
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "total: {} tensors, {} parameters, {}",
        r.totals.tensors,
        r.totals.parameters,
        human_bytes(r.totals.bytes)
    );
    render_vocabulary(&mut s, r);
    s
}

/// The vocabulary matrices and the tokenizer, in words.
fn render_vocabulary(s: &mut String, r: &Report) {
    let m = |x: &Option<Matrix>| match x {
        Some(m) => format!("{} {} {}", m.name, m.ggml_type, shape_str(&m.shape)),
        None => "none".to_string(),
    };
    let head = if r.vocabulary.tied {
        "tied to the embedding (no output.weight)".to_string()
    } else {
        m(&r.vocabulary.head)
    };
    let _ = writeln!(
        s,
        "vocabulary: embedding {}; head {head}",
        m(&r.vocabulary.embedding)
    );
    let t = &r.tokenizer;
    let types: Vec<String> = t
        .token_types
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let ids: Vec<String> = t
        .special_ids
        .iter()
        .map(|(k, v)| format!("{k} {}", v.map_or("invalid".to_string(), |v| v.to_string())))
        .collect();
    let count = |n: Option<u64>| n.map_or("none".to_string(), |n| n.to_string());
    let _ = writeln!(
        s,
        "tokenizer: model {}, pre {}, {} tokens (types: {}), scores {}, {} merges",
        t.model.as_deref().unwrap_or("none"),
        t.pre.as_deref().unwrap_or("none"),
        count(t.tokens),
        if types.is_empty() {
            "none".to_string()
        } else {
            types.join(", ")
        },
        if t.scores { "present" } else { "absent" },
        count(t.merges),
    );
    let _ = writeln!(
        s,
        "  special ids: {}; chat template {}",
        if ids.is_empty() {
            "none".to_string()
        } else {
            ids.join(", ")
        },
        if t.chat_templates.is_empty() {
            "absent".to_string()
        } else {
            format!("present ({})", t.chat_templates.join(", "))
        }
    );
}
