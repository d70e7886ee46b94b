//! extend-embeddings on a GGUF file: the flags that apply checked, the output's place checked,
//! then planned and written by `rows::layout::gguf::extend` (the merged tokenizer's new tokens
//! appended to the header's tokenizer arrays, rows to `token_embd.weight` and `output.weight` in
//! their own ggml type); the report's Plan and rendering are here.

use super::{Options, Target};
use crate::error::{Error, Result};
use crate::plan::{Edit, Plan, RowSource};
use crate::rows::layout::gguf::extend::{grow, GgufAt, GrowTo};
pub use crate::rows::layout::gguf::extend::{GgufReport, GrownTable};
use crate::rows::Method;
use std::path::Path;

/// Refuse the flags that do not apply to a GGUF file, naming the first.
fn refuse_flags(opts: &Options) -> Result<()> {
    let bad = [
        (!opts.tensors.is_empty(), "--tensor"),
        (opts.pad_to_multiple_of.is_some(), "--pad-to-multiple-of"),
        (!matches!(opts.method, Method::Mean), "--init"),
        (opts.base_tokenizer.is_some(), "--base-tokenizer"),
        (opts.config.is_some(), "--config"),
        (opts.allow_shrink, "--allow-shrink"),
        (opts.segments != 1, "--segments"),
        (opts.donor.is_some(), "--donor"),
    ];
    match bad.iter().find(|(set, _)| *set) {
        Some((_, flag)) => Err(Error::arg(
            flag,
            format!("{flag} is not supported for a GGUF file (its new rows are the mean of the old, in the table's own ggml type)"),
        )),
        None => Ok(()),
    }
}

/// Grow the GGUF file `formats::open` found (`g`) into `out` (or plan it, `--dry-run`); the
/// caller refused an `out` that overlaps the inputs.
pub fn run(g: &GgufAt, out: &Path, opts: &Options) -> Result<GgufReport> {
    refuse_flags(opts)?;
    let inputs = opts.input_paths(g.path());
    crate::output::folder::file_destination(out, &inputs, "GGUF", &["gguf"], opts.overwrite)?;
    let to = match &opts.target {
        Target::Tokenizer(path) => GrowTo::Tokenizer(path.clone()),
        Target::Rows(n) => GrowTo::Rows(*n),
    };
    grow(g, out, &to, opts.dry_run)
}

/// The run's [`Plan`]: each table grown by the init (the head, when the file has its own, as
/// the embedding); the header keys it sets are the report's `keys`.
pub fn to_plan(r: &GgufReport, input: &Path, output: &Path) -> Plan {
    let mut plan = Plan::new("extend-embeddings", input, output, r.format, r);
    plan.edits = r
        .tables
        .iter()
        .map(|t| {
            let grown = RowSource::Grown {
                init: r.init.to_string(),
            };
            Edit::resize(&t.name, t.role, &t.old_shape, &t.new_shape, grown)
        })
        .collect();
    plan
}

/// The human report.
pub fn render(r: &GgufReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}): {} tokens -> {} ({} merges added){}",
        r.input.display(),
        r.format,
        r.old_tokens,
        r.new_tokens,
        r.merges_added,
        if r.tied { "; tied head" } else { "" }
    );
    for t in &r.tables {
        let _ = writeln!(
            s,
            "  {} {} {:?} -> {:?}: rows {}..{} = mean of the old rows, quantized as {}",
            t.name,
            t.ggml_type,
            t.old_shape,
            t.new_shape,
            t.init_rows[0],
            t.init_rows[1],
            t.ggml_type
        );
    }
    if !r.keys.is_empty() {
        let _ = writeln!(s, "  keys: {}", r.keys.join(", "));
    }
    match (&r.written, r.nothing_to_do, r.dry_run) {
        (_, true, _) => s.push_str(
            "nothing to do: the file already has these tokens and rows; nothing written\n",
        ),
        (_, _, true) => s.push_str("dry run: nothing written\n"),
        (Some(w), _, _) => {
            let _ = writeln!(
                s,
                "wrote {} ({} bytes: {} copied, {} new)",
                w.path.display(),
                w.bytes,
                w.copied,
                w.new
            );
        }
        _ => {}
    }
    s
}
