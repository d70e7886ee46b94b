//! Optimizer layouts: how torch stores optimizer state ([`state`]) and which state index is
//! which model parameter ([`matching`]). Knowledge sanitize-checkpoint, vocab-blocks and the
//! doctor's readers share (no job imports another).

pub(crate) mod matching;
pub(crate) mod state;
