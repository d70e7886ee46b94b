//! Every vocabulary matrix of a checkpoint, and its optimizer moments, brought to one row count
//! (`--vocab-rows N`) and written in the checkpoint's own layout: what sanitize-checkpoint asks
//! of a DCP folder ([`dcp`]), a DeepSpeed ZeRO save root ([`zero`]) and a Trainer folder of a
//! DeepSpeed run ([`zero_beside`]). Each plans against the layout's entries
//! (`formats::<layout>::keys::entries`, the row-surgery interface) and writes through the
//! layout's own writer, so the job names none of them.

pub mod dcp;
pub mod zero;
pub mod zero_beside;
