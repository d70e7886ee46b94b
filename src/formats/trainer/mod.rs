//! A Hugging Face Trainer checkpoint folder (`checkpoint-N/`): the model (model.safetensors,
//! sharded, or pytorch_model.bin, picked as in a model folder) beside `optimizer.pt` (a bare
//! optimizer state dict), `scheduler.pt`, `rng_state*.pth`, `trainer_state.json`,
//! `training_args.bin` and config.json. Reading only: what the files mean is sanitize's.

use super::store::Tensors;
use super::torch::pickle::GlobalPolicy;
use std::path::{Path, PathBuf};

/// The optimizer file of a Trainer checkpoint folder.
pub const OPTIMIZER: &str = "optimizer.pt";
/// The LR scheduler file of a Trainer checkpoint folder.
pub const SCHEDULER: &str = "scheduler.pt";

/// An open Trainer checkpoint folder: its model, memory-mapped and validated by
/// `formats::open`, and its optimizer.pt, opened the first time a tool asks for it
/// (`Trainer::optim`): a tool that reads the model only neither pays for nor fails on it.
#[derive(Debug)]
pub struct Trainer {
    pub dir: PathBuf,
    pub model: Tensors,
    /// optimizer.pt's path (an input, whether opened or not).
    pub optim_path: PathBuf,
    /// The pickle globals `formats::open` was asked to trust (optimizer.pt is opened with them).
    pub(super) globals: GlobalPolicy,
    /// optimizer.pt, once opened.
    pub(super) optim: std::sync::OnceLock<Tensors>,
}

/// Is `dir` a Trainer checkpoint folder (it holds optimizer.pt)? Only `formats::open` asks.
pub(super) fn is_trainer(dir: &Path) -> bool {
    dir.join(OPTIMIZER).is_file()
}

impl Trainer {
    /// optimizer.pt's path.
    pub fn optimizer_path(&self) -> PathBuf {
        self.optim_path.clone()
    }

    /// optimizer.pt's file name in the folder.
    pub fn optimizer_name(&self) -> &'static str {
        OPTIMIZER
    }

    /// The folder's config.json, when it has one.
    pub fn config_path(&self) -> Option<PathBuf> {
        Some(self.dir.join("config.json")).filter(|c| c.is_file())
    }
}
