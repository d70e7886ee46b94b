//! Optimizer state: making a training checkpoint safe to resume after a vocabulary change.

pub mod sanitize;
pub(crate) mod state;
mod trainer;
