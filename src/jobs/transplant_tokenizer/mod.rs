//! The `transplant-tokenizer` job: give a model another tokenizer's vocabulary, ids and all. Each
//! new id takes the base's row of the same token (by text, whatever each tokenizer's form), or
//! of the same special role, bit for bit; the rest are made by the init; base tokens the new
//! tokenizer lacks are dropped (`--allow-shrink`). Every vocabulary matrix and bias (tied or
//! not), config.json and generation_config.json (sizes, special ids found again by their text)
//! and the tokenizer files follow; every other tensor and file is copied untouched.
//!
//! One step per module: `options` (what it is asked), `roles` (special roles each side names),
//! `matching` (the row map), `init` (how made rows are made), `config` (config files),
//! `tokenizer_files` (the output's tokenizer), `plan` (the whole decision), `execute` (through
//! the format's writer), `report`. Gathering rows by a map and writing them is knowledge shared
//! with the other jobs: [`crate::rows`], [`crate::rowmap`].

mod config;
mod execute;
mod init;
mod matching;
mod options;
mod plan;
mod report;
mod roles;
mod to_plan;
mod tokenizer_files;

pub use execute::execute;
pub use matching::{Matching, RoleMatch, Token};
pub use options::{Donor, Options};
pub use plan::{plan, Planned};
pub use report::{render, Changed, Report};
pub use to_plan::to_plan;

use crate::error::{Error, Result};
use crate::formats;
use std::path::Path;

/// Transplant `opts.tokenizer` onto `input`, into `out`: [`plan`], then [`execute`].
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &opts.input_paths(input))?;
    let opened = formats::open(input, &opts.open)?;
    let ckpt = opened.weights_only().ok_or_else(|| {
        Error::unsupported(
            opened.path(),
            format!(
                "{} holds optimizer state: transplant-tokenizer does not move a training checkpoint's optimizer moments yet; transplant the model's weights (a model folder or weight file) and start the optimizer afresh",
                opened.layout()
            ),
        )
    })?;
    let mut plan = plan(ckpt, input, opts)?;
    plan.report.layout = (
        opened.layout(),
        !matches!(opened, formats::Checkpoint::File(_)),
    );
    execute(ckpt, plan, out, opts)
}
