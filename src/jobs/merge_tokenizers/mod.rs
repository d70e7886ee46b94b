//! The `merge-tokenizers` job: every id of BASE unchanged; new tokens take the first free ids
//! above every id BASE uses, in the order the additions list them; duplicates are skipped and
//! listed. [`plan()`] decides and verifies (in the `tokenizers` crate for HF, by re-parsing the
//! model for SentencePiece) and writes nothing; [`execute`] writes the planned bytes.
//!
//! Modules: `addition` (reading additions), `trained` (`--train`), `assign` (ids, skips),
//! `bpe` (merges and pieces so the model produces new tokens), `build` and `verify` (the merged
//! tokenizer in memory and its checks), `merged` (a BPE merge in `tokenizers` without parsing it
//! again), `plan`, `report`.

mod addition;
mod assign;
mod bpe;
mod build;
mod merged;
mod options;
mod plan;
mod report;
mod trained;
mod verify;

pub use self::addition::{load_addition, Addition, Candidate};
pub use self::assign::{Assigned, Place, Skipped};
pub use self::options::Options;
pub use self::plan::{plan, PlannedMerge};
pub use self::report::{render, Report};
pub use self::trained::Trained;
use crate::error::Result;
use crate::output;
pub use crate::tokenizer::base::{load_base, load_tokenizer, Base};
use std::path::{Path, PathBuf};

/// Merge `base_path` with `add_paths` into `out`: [`plan()`], then (unless `--dry-run`)
/// [`execute`].
pub fn run(base_path: &Path, add_paths: &[PathBuf], out: &Path, opts: &Options) -> Result<Report> {
    let plan = plan(base_path, add_paths, out, opts)?;
    if opts.dry_run {
        return Ok(plan.report);
    }
    execute(&plan)
}

/// Write the planned tokenizer: beside the destination, read back and compared with the planned
/// bytes, renamed into place; the report with the output and its sha256.
pub fn execute(plan: &PlannedMerge) -> Result<Report> {
    if plan.report.dry_run {
        // A plan made for a dry run did not check the destination (a run's plan did, first).
        plan.destination.check(&plan.out, &plan.inputs)?;
    }
    let inputs: Vec<&Path> = plan.inputs.iter().map(PathBuf::as_path).collect();
    // write_bytes reads the file back and compares it with these bytes, which loaded in
    // `tokenizers` (or parsed as a model) and were verified by the plan: equal bytes load the
    // same, so a second load (half a second for a 262k-token file) proves nothing more.
    let sha = output::write_bytes(&plan.out, &inputs, &plan.bytes, |_| Ok(()))?;
    let mut report = plan.report.clone();
    report.dry_run = false;
    report.output = Some(plan.out.clone());
    report.output_sha256 = Some(sha);
    Ok(report)
}
