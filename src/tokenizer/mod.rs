//! Tokenizers: Hugging Face `tokenizer.json` ([`hf`]), SentencePiece `.model` ([`sentencepiece`]),
//! the forms their vocabularies write text in ([`form`]: byte-level, `▁`, plain; BPE as applied),
//! a tokenizer as the jobs read it ([`base`]), what training new tokens takes ([`train`]), and a
//! tokenizer pruned to a keep set, every family, with the check that text still splits the same
//! ([`trim`]), and a chat template's literal text ([`chat_template`]).
//! The id-stable merge of a base with additions is the merge-tokenizers job
//! (`jobs::merge_tokenizers`); every job reads tokenizers through [`base`].

pub mod base;
pub mod chat_template;
pub mod form;
pub mod fxhash;
pub mod hf;
pub mod library;
pub mod sample;
pub mod sentencepiece;
pub mod surface;
pub mod train;
pub mod trim;
pub mod wordpiece;
