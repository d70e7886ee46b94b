//! What check-vocab opens for the doctor, which opens nothing itself: the checkpoint, the
//! training checkpoint, the token-id data, and sanitize-checkpoint's reading of the optimizer
//! when the doctor asks for it. [`check`] is the doctor on what it opened (`--fix` checks its
//! output with it).

use crate::error::Result;
use crate::formats::torch::optimizer::state::DROP_REMEDY;
use crate::formats::{self, Checkpoint, OpenOptions};
use crate::jobs::check_vocab::{self, Inputs, Opened, OptimizerState, Refusal, TokenIds};
use crate::jobs::sanitize_checkpoint::{self as sanitize, RowsFrom};
use std::path::Path;

/// sanitize-checkpoint's dry run on the training checkpoint (as opened above), to `target` rows,
/// repairing: which moments do not fit, which tensors hold NaN/Inf, or why it refuses.
fn read_optimizer(
    training: &Checkpoint,
    target: u64,
    open: &OpenOptions,
) -> std::result::Result<OptimizerState, Refusal> {
    // A dry run reading what sanitize meets at `target`; whether the weights may be cut there is
    // the fix's to say (it carries --allow-shrink), not this reading's. Its output is never
    // written: a path outside every input.
    let opts = sanitize::Options {
        dry_run: true,
        allow_shrink: true,
        ..sanitize::Options::new(RowsFrom::Rows(target), open.clone())
    };
    let unused = std::env::temp_dir().join(".ckpt-surgery-dry-run-output");
    let read = crate::jobs::sanitize_checkpoint::run(training, &unused, &opts);
    match read {
        Ok(r) => Ok(OptimizerState {
            misfit: r
                .inconsistent_before
                .iter()
                .filter(|f| f.optimizer_state)
                .map(|f| (f.tensor.clone(), f.found_shape.clone()))
                .collect(),
            nonfinite: r
                .nonfinite
                .iter()
                .map(|n| (n.tensor.clone(), n.nan, n.inf))
                .collect(),
        }),
        Err(e) => {
            let message = e.to_string();
            Err(Refusal {
                drop_helps: message.ends_with(DROP_REMEDY),
                message,
            })
        }
    }
}

/// Open what check-vocab reads, for the doctor, which opens nothing itself: the checkpoint
/// (none for a saved batch checked on its own), the training checkpoint given apart, the
/// token-id data.
pub(super) fn open(inp: &Inputs) -> Result<Opened> {
    let checkpoint = Some(&inp.checkpoint)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| formats::open(p, &inp.open))
        .transpose()?;
    let training = inp
        .training_checkpoint
        .as_ref()
        .map(|p| formats::open(p, &inp.open))
        .transpose()?;
    let token_ids = inp
        .token_ids
        .as_ref()
        .map(|p| token_ids(p, &inp.open))
        .transpose()?;
    let mut opened = Opened {
        checkpoint,
        training,
        token_ids,
        optimizer: None,
    };
    if let Some(q) = check_vocab::optimizer_question(inp, &opened)? {
        // The question's training checkpoint is the one given apart, else the checkpoint itself
        // (a training file or Trainer folder): both already opened here.
        let training = opened.training.as_ref().or(opened.checkpoint.as_ref());
        let answer = training.map(|t| read_optimizer(t, q.target_rows, &inp.open));
        opened.optimizer = answer;
    }
    Ok(opened)
}

/// Token-id data: a saved batch (torch or safetensors) opened, else the file's bytes.
fn token_ids(p: &Path, open: &OpenOptions) -> Result<TokenIds> {
    Ok(match formats::open_data(p, open)? {
        formats::Data::Tensors(t) => TokenIds::Batch(t),
        formats::Data::Bytes(b) => TokenIds::Bytes(b),
    })
}

/// check-vocab on `inp`: [`open`], then the doctor.
pub(super) fn check(inp: &Inputs) -> Result<check_vocab::Report> {
    check_vocab::run(inp, &open(inp)?)
}
