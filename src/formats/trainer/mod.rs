//! A Hugging Face Trainer checkpoint folder (`checkpoint-N/`): the model (model.safetensors,
//! sharded, or pytorch_model.bin, picked as in a model folder) beside `optimizer.pt` (a bare
//! optimizer state dict), `scheduler.pt`, `rng_state*.pth`, `trainer_state.json`,
//! `training_args.bin` and config.json. Reading only: what the files mean is sanitize's.

use super::store::Tensors;
use super::torch::TorchFile;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The optimizer file of a Trainer checkpoint folder.
pub const OPTIMIZER: &str = "optimizer.pt";
/// The LR scheduler file of a Trainer checkpoint folder.
pub const SCHEDULER: &str = "scheduler.pt";

/// An open Trainer checkpoint folder: its model and its optimizer.pt, memory-mapped and
/// validated (both opened by `formats::open`).
#[derive(Debug)]
pub struct Trainer {
    pub dir: PathBuf,
    pub model: Tensors,
    /// optimizer.pt as opened.
    pub optim: Tensors,
}

/// Is `dir` a Trainer checkpoint folder (it holds optimizer.pt)? Only `formats::open` asks.
pub(super) fn is_trainer(dir: &Path) -> bool {
    dir.join(OPTIMIZER).is_file()
}

impl Trainer {
    /// optimizer.pt's path.
    pub fn optimizer_path(&self) -> PathBuf {
        self.dir.join(OPTIMIZER)
    }

    /// optimizer.pt's torch file.
    pub fn optimizer(&self) -> Result<&TorchFile> {
        self.optim
            .torch
            .first()
            .ok_or_else(|| Error::format(self.optimizer_path(), "not a torch file"))
    }

    /// The folder's config.json, when it has one.
    pub fn config_path(&self) -> Option<PathBuf> {
        Some(self.dir.join("config.json")).filter(|c| c.is_file())
    }
}
