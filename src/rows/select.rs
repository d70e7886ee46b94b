//! How many rows a tokenizer needs. (Which tensors hold the vocabulary rows is the formats'
//! answer: `formats::vocabulary::select`.)

use crate::error::Result;
use crate::tokenizer::base::load_tokenizer;
use std::path::Path;

/// Rows a tokenizer needs: its largest id + 1.
pub fn tokenizer_rows(path: &Path) -> Result<u64> {
    Ok(load_tokenizer(path)?.size())
}
