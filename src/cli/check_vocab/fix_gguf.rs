//! `check-vocab FILE.gguf --fix --output OUT`: the report's fixes (or the edits the command line
//! names: `--special`, `--token-type`, `--chat-template`, `--vocab-size`, `--remove-key`)
//! carried out: a table grown by extend-embeddings' GGUF job, then the metadata edits made in one
//! write of the GGUF writer, tensor bytes copied; then OUT checked.

use super::fix::{
    executed, inputs_of_output, number, refuse_input, select, skip, Executed, FixRun, Numbered,
    Request, Skipped,
};
use crate::error::Result;
use crate::formats::gguf::{edit, write, Gguf};
use crate::jobs::check_vocab::{self, Fix, Inputs, Opened};
use crate::jobs::extend_embeddings::{self, gguf as grow, Target};
use crate::plan::GgufEdit;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The fixes to carry out: the named edits (every report fix then left out), or the report's.
fn choose(
    inp: &Inputs,
    req: &Request,
    before: &check_vocab::Report,
    named: &[GgufEdit],
    ckpt: &crate::formats::Checkpoint,
) -> Result<(Vec<Numbered>, Vec<Skipped>)> {
    let numbered = number(before);
    if named.is_empty() {
        return select(&numbered, req.only, ckpt);
    }
    let action = Fix::EditGguf {
        input: inp.checkpoint.clone(),
        output: req.output.clone(),
        edits: named.to_vec(),
    };
    let mine = Numbered {
        fix: 0,
        text: action.text(),
        action,
        error: true,
    };
    let skipped = numbered
        .iter()
        .map(|n| {
            skip(
                n,
                "the edits named on the command line are carried out instead".into(),
            )
        })
        .collect();
    Ok((vec![mine], skipped))
}

/// The edits of the chosen fixes, in order; an edit that sets what an earlier one set to
/// something else is left out, with its fix (noted).
fn merged(chosen: &[Numbered], notes: &mut Vec<String>) -> (Vec<GgufEdit>, Vec<Numbered>) {
    let (mut edits, mut kept): (Vec<GgufEdit>, Vec<Numbered>) = (Vec::new(), Vec::new());
    for n in chosen {
        let Fix::EditGguf { edits: mine, .. } = &n.action else {
            continue;
        };
        let clash = mine
            .iter()
            .find(|e| edits.iter().any(|o| same_target(o, e) && o != *e));
        if let Some(e) = clash {
            notes.push(format!(
                "left fix {} out: {} disagrees with an edit carried out",
                n.fix,
                e.flag()
            ));
            continue;
        }
        edits.extend(
            mine.iter()
                .filter(|e| !edits.contains(e))
                .cloned()
                .collect::<Vec<_>>(),
        );
        kept.push(n.clone());
    }
    (edits, kept)
}

/// Where a grown table waits for the edits that follow: beside OUT, hidden.
fn stage_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!(".{name}.ckpt-surgery-grow.tmp"))
}

/// Run a grow fix (extend-embeddings' GGUF job) into `to`.
fn grow_to(w: &Numbered, input: &Path, to: &Path, dry_run: bool) -> Result<grow::GgufReport> {
    let Fix::Extend {
        rows, tokenizer, ..
    } = &w.action
    else {
        return Err(crate::error::Error::arg("--fix", "not a grow"));
    };
    let opts = extend_embeddings::Options {
        target: match tokenizer {
            Some(t) => Target::Tokenizer(t.clone()),
            None => Target::Rows(*rows),
        },
        dry_run,
        ..Default::default()
    };
    // The input is a GGUF file (this one, or the fixes' edit of it), so the outcome is GGUF's.
    match extend_embeddings::run_any(input, to, &opts)? {
        extend_embeddings::Outcome::Gguf(r) => Ok(*r),
        extend_embeddings::Outcome::Tensors(_) => Err(crate::error::Error::unsupported(
            input,
            "not a GGUF file: the grow fix is for GGUF files",
        )),
    }
}

/// Do two edits set the same thing?
fn same_target(a: &GgufEdit, b: &GgufEdit) -> bool {
    use GgufEdit::*;
    match (a, b) {
        (Special { role: x, .. }, Special { role: y, .. }) => x == y,
        (TokenType { token: x, .. }, TokenType { token: y, .. }) => x == y,
        (ChatTemplate { .. }, ChatTemplate { .. }) | (VocabSize { .. }, VocabSize { .. }) => true,
        (Remove { key: x }, Remove { key: y }) => x == y,
        (PadTokens, PadTokens) => true,
        _ => false,
    }
}

/// check-vocab on the GGUF file `g`, its fixes (or `named`) written to `req.output`, and the
/// output checked.
pub(super) fn run(
    inp: &Inputs,
    opened: &Opened,
    g: &Gguf,
    req: &Request,
    named: &[GgufEdit],
) -> Result<FixRun> {
    refuse_input(&req.output, &inp.checkpoint)?;
    crate::output::folder::file_destination(
        &req.output,
        &[&inp.checkpoint],
        "GGUF",
        &["gguf"],
        false,
    )?;
    let before = check_vocab::run(inp, opened)?;
    let ckpt = opened
        .checkpoint
        .as_ref()
        .ok_or_else(|| crate::error::Error::arg("--fix", "--fix repairs a checkpoint"))?;
    let (chosen, skipped) = choose(inp, req, &before, named, ckpt)?;
    let mut notes = Vec::new();
    let (edits, kept) = merged(&chosen, &mut notes);
    let weights = chosen
        .iter()
        .find(|n| matches!(n.action, Fix::Extend { .. }));
    let mut done: Vec<Executed> = Vec::new();
    // A grown table first (into OUT, or beside it when edits follow), then the edits on it.
    let stage = stage_path(&req.output);
    let grown = match weights {
        Some(w) => {
            let to = if edits.is_empty() {
                &req.output
            } else {
                &stage
            };
            let r = grow_to(w, &inp.checkpoint, to, req.dry_run)?;
            let report = serde_json::to_value(&r).unwrap_or(Value::Null);
            done.push(executed(
                w,
                w.action.writing_to(&req.output),
                report,
                grow::render(&r),
            ));
            r.written.is_some().then(|| to.clone())
        }
        None => None,
    };
    if !edits.is_empty() {
        let staged = grown.as_ref().map(|p| Gguf::open(p)).transpose()?;
        let base = staged.as_ref().unwrap_or(g);
        let carried = Fix::EditGguf {
            input: inp.checkpoint.clone(),
            output: req.output.clone(),
            edits: edits.clone(),
        };
        let report = if req.dry_run {
            serde_json::to_value(&edits).unwrap_or(Value::Null)
        } else {
            let w =
                edit::apply(base, &edits).and_then(|plan| write::write_gguf(&plan, &req.output));
            // The staged grow is gone whether or not the edits were written.
            if grown.is_some() {
                let _ = std::fs::remove_file(&stage);
            }
            serde_json::to_value(w?).unwrap_or(Value::Null)
        };
        let text: String = edits.iter().map(|e| format!("  {}\n", e.flag())).collect();
        for n in &kept {
            done.push(executed(n, carried.clone(), report.clone(), text.clone()));
        }
    }
    let after = if req.dry_run || done.is_empty() {
        None
    } else {
        Some(super::open::check(&inputs_of_output(
            inp,
            &req.output,
            false,
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
        executed: done,
        skipped,
        notes,
        after,
    })
}
