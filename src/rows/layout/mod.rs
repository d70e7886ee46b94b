//! Checkpoints written in their own layout once sanitize-checkpoint has planned their rows, so
//! the job names none of the layouts: a DCP folder ([`dcp`]), a DeepSpeed ZeRO save root
//! ([`zero`]) and a Trainer folder of a DeepSpeed run ([`zero_beside`]), each at `--vocab-rows N`
//! planned against the layout's entries (`formats::<layout>::keys::entries`, the row-surgery
//! interface) and written by the layout's own writer; a torch training checkpoint file
//! ([`torch_file`]) and a Hugging Face Trainer folder ([`trainer`]) written as the job's plan
//! laid them out (the torch optimizer's planning is still the job's); a Megatron-Core
//! `torch_dist` save ([`megatron`]) and Megatron-LM's legacy per-rank save ([`megatron_legacy`])
//! at a true vocabulary of N tokens by the run's padding rule, planned and written here.

pub mod dcp;
pub mod megatron;
pub mod megatron_legacy;
pub mod torch_file;
pub mod trainer;
pub mod zero;
pub mod zero_beside;
