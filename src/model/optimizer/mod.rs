//! Optimizer layouts: how torch stores optimizer state ([`state`]), which state index is which
//! model parameter ([`matching`]) and what the moments themselves say about it ([`evidence`]).
//! Knowledge sanitize-checkpoint, vocab-blocks and the doctor's readers share (no job imports
//! another).

pub(crate) mod evidence;
pub(crate) mod matching;
pub(crate) mod state;
