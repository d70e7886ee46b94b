//! The per-format planning and writing the jobs hand off, so that no writing job names a format.
//! sanitize-checkpoint's: a DCP folder ([`dcp`]), a DeepSpeed ZeRO save root ([`zero`]) and a
//! Trainer folder of a DeepSpeed run ([`zero_beside`]), each at `--vocab-rows N` planned against
//! the layout's entries (`formats::<layout>::keys::entries`, the row-surgery interface) and
//! written by the layout's own writer; a torch training checkpoint file ([`torch_file`]) and a
//! Hugging Face Trainer folder ([`trainer`]), planned with the torch optimizer's matching
//! (`torch_optimizer`: which index holds which weight needs `--optimizer-param` pins, the model's
//! ties and the moments' evidence) as [`options`] ask and [`report`] answers; a Megatron-Core
//! `torch_dist` save ([`megatron`]) and Megatron-LM's legacy per-rank save
//! ([`megatron_legacy`]) at a true vocabulary of N tokens by the run's padding rule. A GGUF file
//! grown or trimmed ([`gguf`]); vocab-blocks' split and join ([`blocks`]).

pub mod blocks;
pub mod dcp;
pub mod gguf;
pub mod megatron;
pub mod megatron_legacy;
pub mod options;
pub mod report;
pub mod torch_file;
mod torch_optimizer;
pub mod trainer;
pub mod zero;
pub mod zero_beside;
