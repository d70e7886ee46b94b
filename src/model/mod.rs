//! Model knowledge shared by the jobs (no job imports another: what two need lives here):
//! [`dcp`], what a torch Distributed Checkpoint's keys mean.

pub mod dcp;
