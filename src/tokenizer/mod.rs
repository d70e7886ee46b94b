//! Tokenizers: Hugging Face `tokenizer.json` ([`hf`]), SentencePiece `.model` ([`sentencepiece`]),
//! and the id-stable merge of a base with additions ([`merge`]).

pub mod hf;
pub mod merge;
pub mod sentencepiece;
pub mod surface;
