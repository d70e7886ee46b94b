//! inspect-checkpoint's human report: the same facts as the JSON, as text.

use super::report::{Report, TreeSummary};
use super::text::{human_bytes, shape_str};
use crate::{ties, vocab};
use std::fmt::Write as _;

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
