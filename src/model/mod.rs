//! Model knowledge shared by the jobs (no job imports another: what two need lives here):
//! [`config`], config.json's vocabulary-size and special-token keys. (What a format's names mean
//! lives with the format: `formats::dcp::keys`, `formats::torch::optimizer`.)

pub mod config;
