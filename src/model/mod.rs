//! Model knowledge shared by the jobs (no job imports another: what two need lives here):
//! [`dcp`], what a torch Distributed Checkpoint's keys mean; [`config`], config.json's
//! vocabulary-size keys; `optimizer`, how torch stores optimizer state and which index is which
//! parameter.

pub mod config;
pub(crate) mod optimizer;
