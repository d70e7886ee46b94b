//! How torch stores optimizer state (`state`: `optimizer.state_dict()` in a training
//! checkpoint or a Trainer's `optimizer.pt`), which state index is which model parameter
//! (`matching`) and what the moments themselves say about it (`evidence`): what a torch
//! training checkpoint's optimizer entries mean, as `formats::dcp::keys` is for DCP.

pub(crate) mod evidence;
pub(crate) mod matching;
pub(crate) mod state;
