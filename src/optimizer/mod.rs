//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.

mod matching;
pub mod sanitize;
pub(crate) mod state;
mod trainer;
pub mod zero;
