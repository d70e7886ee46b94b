//! The `check-vocab` job: does the tokenizer, config, weights, special-token ids, optimizer and
//! data agree on the vocabulary — before CUDA finds out with `device-side assert triggered`?
//! Each check is a small function returning findings; each finding carries the numbers and, where
//! one exists, the fix as a `Plan` (a tool run or JSON key edits, rendered as the command line it
//! prints), offered only when following it makes the finding pass and discards nothing a
//! smaller fix keeps (see [`Finding`]). The doctor opens no checkpoint and imports no other job:
//! the layer above opens what it checks ([`Opened`]) and answers its one question of another job
//! ([`optimizer_question`]: sanitize-checkpoint's reading of the training checkpoint's optimizer)
//! as data; `check-vocab --fix` (in the cli) runs the fixes through the tools' own planners.

use crate::error::Result;
use crate::formats::Checkpoint;

mod batch;
mod checks;
mod data;
pub mod dcp;
mod finding;
mod fix;
mod gguf;
mod inputs;
mod megatron;
pub mod megatron_legacy;
mod model;
mod optimizer;
mod read;
mod specials;
mod zero;
pub use crate::plan::{KeyEdit as Edit, Plan, Request as Fix};
pub use data::{id_tensors, max_token_id, IdTensor};
pub use finding::{Finding, Report, Severity};
pub use inputs::{
    Inputs, Opened, OptimizerAnswer, OptimizerQuestion, OptimizerState, Refusal, TokenIds,
};

/// The question [`run`] will ask of the training checkpoint's optimizer, if any (a training
/// checkpoint given or found, and a target row count known).
pub fn optimizer_question(inp: &Inputs, opened: &Opened) -> Result<Option<OptimizerQuestion>> {
    match &opened.checkpoint {
        Some(
            Checkpoint::Zero { .. }
            | Checkpoint::Dcp(_)
            | Checkpoint::Gguf(_)
            | Checkpoint::Megatron(_)
            | Checkpoint::MegatronLegacy(_),
        )
        | None => Ok(None),
        Some(ckpt) => model::optimizer_question(inp, ckpt, opened),
    }
}

/// Run every check that the inputs allow, on what the layer above opened.
pub fn run(inp: &Inputs, opened: &Opened) -> Result<Report> {
    match &opened.checkpoint {
        None => batch::run_batch_only(inp, opened.token_ids.as_ref()),
        Some(Checkpoint::Zero { zero: z, .. }) => zero::run(inp, z.get()?),
        Some(Checkpoint::Dcp(d)) => dcp::run(d, &inp.tokenizers),
        Some(Checkpoint::Gguf(g)) => gguf::run(inp, g.get()?),
        Some(Checkpoint::Megatron(m)) => megatron::run(m, inp),
        Some(Checkpoint::MegatronLegacy(l)) => megatron_legacy::run(l, inp),
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
