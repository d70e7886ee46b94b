//! What a pruning gives: the pruned file, the old → new id map, and why tokens beyond the asked
//! set were kept.

/// The pruned tokenizer in the base's own form.
#[derive(Debug, Clone, PartialEq)]
pub enum PrunedFile {
    /// A tokenizer.json's text.
    Json(String),
    /// A SentencePiece `.model`'s bytes.
    Sp(Vec<u8>),
}

/// A pruned tokenizer and how its ids relate to the base's.
#[derive(Debug, Clone)]
pub struct Pruned {
    /// The pruned tokenizer in the base's own form: tokenizer.json text, or a SentencePiece .model's bytes.
    pub file: PrunedFile,
    /// old id → new id (None: dropped); new ids dense, in the old order.
    pub map: Vec<Option<u32>>,
    /// Tokens kept beyond the asked set (old ids), and why: one of [`super::reason`]'s words.
    pub added: Vec<(u32, &'static str)>,
}

/// Why a token was kept beyond the asked set.
pub mod reason {
    /// An added or special token, a control or user-defined piece, the unknown token, or an id
    /// the post-processor or padding names.
    pub const SPECIAL: &str = "special";
    /// One of the 256 byte symbols of a byte-level BPE.
    pub const BYTE_ALPHABET: &str = "byte alphabet";
    /// A `<0xNN>` byte-fallback piece.
    pub const BYTE_FALLBACK: &str = "byte fallback";
    /// A one-character token of a model without byte fallback: text outside the kept set still
    /// tokenizes (to characters) rather than to the unknown token.
    pub const ALPHABET: &str = "alphabet";
    /// A WordPiece `##` + one character: words still split inside rather than to `[UNK]`.
    pub const CONTINUATION: &str = "## form";
    /// A symbol BPE makes on the way to a kept token (an intermediate, or a starting symbol).
    pub const MERGE_CLOSURE: &str = "merge closure";
    /// A unigram model's lowest-scoring piece: the unknown token's score is set from it.
    pub const LOWEST_SCORE: &str = "lowest score";
    /// A SentencePiece UNUSED piece (BPE joins it, then splits it again).
    pub const UNUSED: &str = "unused piece";
}
