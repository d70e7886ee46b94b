//! ggml's tensor types: each type's number, name, block size (elements per block) and bytes per
//! block. Our own table, taken from ggml's `type_traits` (ggml/src/ggml.c) as gguf-py 0.19.0's
//! `GGML_QUANT_SIZES` restates it; `tests/gguf.rs` compares it with that table. Numbers ggml
//! has removed (4, 5: Q4_2 / Q4_3; 31–33, 36–38: the repacked Q4_0_4_4… and IQ4_NL_4_4… types)
//! are unknown here, as they are to llama.cpp.

/// One ggml tensor type: a row of `ne[0]` elements is `ne[0] / block` blocks of `bytes` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub bytes: u64,
}

/// Elements per block of the K-quants (and the IQ/TQ types built on them).
const QK_K: u64 = 256;

const fn t(id: u32, name: &'static str, block: u64, bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block,
        bytes,
    }
}

/// Every ggml type a GGUF file may hold, by number.
pub const TYPES: [GgmlType; 34] = [
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 2 + 16),
    t(3, "Q4_1", 32, 2 + 2 + 16),
    t(6, "Q5_0", 32, 2 + 4 + 16),
    t(7, "Q5_1", 32, 2 + 2 + 4 + 16),
    t(8, "Q8_0", 32, 2 + 32),
    t(9, "Q8_1", 32, 4 + 4 + 32),
    t(10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
    t(11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    t(12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12),
    t(13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
    t(14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
    t(15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8),
    t(16, "IQ2_XXS", QK_K, 2 + QK_K / 4),
    t(17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
    t(18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8),
    t(19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    t(20, "IQ4_NL", 32, 2 + 16),
    t(21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    t(22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    t(23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", QK_K, 2 + 4 * 13),
    t(35, "TQ2_0", QK_K, 2 + 64),
    t(39, "MXFP4", 32, 1 + 16),
    t(40, "NVFP4", 64, 4 + 32),
    t(41, "Q1_0", 128, 2 + 16),
];

/// The type numbered `id`, if ggml has it.
pub fn of(id: u32) -> Option<&'static GgmlType> {
    TYPES.iter().find(|t| t.id == id)
}

impl GgmlType {
    /// Bytes of `elements` elements in whole blocks; None when `elements` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(&self, elements: u64) -> Option<u64> {
        elements
            .is_multiple_of(self.block)
            .then(|| (elements / self.block).checked_mul(self.bytes))
            .flatten()
    }
}
