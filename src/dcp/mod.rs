//! The DCP side of sanitize-checkpoint (check-vocab's is `doctor::dcp`); what a DCP's flattened
//! keys mean (model weights, their optimizer moments, the vocabulary) is in [`crate::model::dcp`].

pub mod sanitize;

// The keys' meaning is knowledge inspect shares: it lives a floor down, in `model::dcp`.
pub use crate::model::dcp::{is_optimizer, moments_of, shape, state_of, vocabulary, weight_of};
