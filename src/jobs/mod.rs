//! The jobs, one folder per tool, named as the tool is (`bin/extend-embeddings.rs` →
//! `cli::extend_embeddings` → `jobs::extend_embeddings`): each plans against the formats'
//! interface and the knowledge floor (vocabulary, ties, rows, tokenizer forms, optimizer layouts),
//! and no job imports another (tests/architecture.rs).

pub mod check_vocab;
pub mod extend_embeddings;
pub mod inspect_checkpoint;
pub mod merge_tokenizers;
pub mod sanitize_checkpoint;
pub mod transplant_tokenizer;
pub mod trim_vocab;
pub mod vocab_blocks;
