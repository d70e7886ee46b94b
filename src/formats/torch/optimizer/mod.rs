//! How torch stores optimizer state (`state`: `optimizer.state_dict()` in a training
//! checkpoint or a Trainer's `optimizer.pt`), which state index is which model parameter
//! (`matching`), what the moments themselves say about it (`evidence`) and moving them with their
//! tokens by a row map (`gather`): what a torch
//! training checkpoint's optimizer entries mean, as `formats::dcp::keys` is for DCP.

pub(crate) mod evidence;
pub(crate) mod gather;
pub(crate) mod matching;
pub(crate) mod state;
