//! What sanitize-checkpoint is asked to do on a torch training checkpoint file or a Trainer
//! folder: the target rows, and what happens to the optimizer and the scheduler.

use crate::formats::OpenOptions;
use crate::rows::Method;
use serde::Serialize;
use std::path::PathBuf;

/// What to do with the optimizer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerAction {
    /// Resize the moments of the resized parameters; keep everything else.
    Repair,
    /// Remove optimizer and scheduler (a fresh optimizer, as seed 001 ended up doing).
    Drop,
    /// Leave them (refused unless they already fit).
    Keep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerAction {
    Keep,
    Drop,
}

/// Where the target rows come from.
#[derive(Debug, Clone)]
pub enum RowsFrom {
    Rows(u64),
    Tokenizer(PathBuf),
    /// A checkpoint of the new model: its vocabulary rows.
    Model(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub target: RowsFrom,
    pub optimizer: OptimizerAction,
    pub scheduler: SchedulerAction,
    pub method: Method,
    pub seed: u64,
    pub fail_on_nonfinite: bool,
    pub dry_run: bool,
    pub open: OpenOptions,
    /// Tensors that may keep the old vocabulary rows on purpose (the coverage rule skips them).
    pub keep: Vec<String>,
    /// Replace an existing output file or non-empty output folder.
    pub overwrite: bool,
    /// The vocabulary tensors by name (dotted paths), instead of the detected ones.
    pub tensors: Vec<String>,
    /// The vocabulary matrices are this many equal segments (codebooks), each grown at its end.
    pub segments: u64,
    /// Optimizer parameter indices named by the user (`--optimizer-param NAME=INDEX`), for a
    /// checkpoint that does not say which index holds which vocabulary matrix.
    pub optimizer_params: Vec<(String, u64)>,
    /// Let a target below the weights' rows drop trained rows (`--allow-shrink`).
    pub allow_shrink: bool,
}

impl Options {
    /// Sanitize to `target`, repairing the optimizer state, keeping the scheduler, new rows by
    /// the mean; nothing else asked (what the command line gives without flags).
    pub fn new(target: RowsFrom, open: OpenOptions) -> Options {
        Options {
            target,
            optimizer: OptimizerAction::Repair,
            scheduler: SchedulerAction::Keep,
            method: Method::Mean,
            seed: 0,
            fail_on_nonfinite: false,
            dry_run: false,
            open,
            keep: Vec::new(),
            overwrite: false,
            tensors: Vec::new(),
            segments: 1,
            optimizer_params: Vec::new(),
            allow_shrink: false,
        }
    }

    /// The scheduler's fate: dropped with the optimizer, else as `--scheduler` says.
    pub fn scheduler_action(&self) -> SchedulerAction {
        if self.optimizer == OptimizerAction::Drop {
            SchedulerAction::Drop
        } else {
            self.scheduler
        }
    }
}
