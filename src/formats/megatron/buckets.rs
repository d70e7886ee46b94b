//! The distributed optimizer's `dp_reshardable` buckets: which chunk of a bucket is which
//! parameter. Nothing in the checkpoint names it; it follows from the model's parameter order
//! and megatron-core 0.16.1's `_ParamAndGradBuffer` rule (parameters in reverse order, each start
//! rounded up to 64 elements, one chunk per parameter and per alignment gap). With pipeline
//! stages, group `pp x TP + tp` holds stage `pp`'s parameters: the embedding on the first, the
//! final norm and output layer on the last, and a run of layers each (how many is read off the
//! chunks); a group's buffers are its model chunks' (virtual pipeline stages) in turn, one per
//! parameter dtype each. [`buckets`] derives that layout (`rule`) and proves it (`prove`) against
//! EVERY chunk of every state of every bucket and against the saved `per_bucket_numel_unpadded`
//! (`saved`); anything it cannot prove is refused by name.

use crate::dtype::DType;
use crate::error::Result;
use crate::formats::dcp::Dcp;

mod parameters;
mod prove;
mod rule;
mod saved;
pub use parameters::{params, EMBEDDING, OUTPUT};
pub use prove::{Bucket, STATES};
pub use rule::{
    all, by_first_seen, first_mismatch, group_layout, lay_out, split, split_buckets, BucketLayout,
    Param, Rule, Segment, ALIGN,
};
pub use saved::{key, numel_lists, object_pickle, per_buffer_numel, set_numels, BufferSizes};

/// Whether fp32 main params (the `param` state) (`main`) rounded to `dtype` (to nearest, ties to even, as torch
/// copies them into the model) are the weight's bytes `weight`; float32: bit for bit.
pub fn rounds_to(main: &[u8], weight: &[u8], dtype: DType) -> bool {
    crate::dtype::recode(main, DType::F32, dtype).is_ok_and(|r| r == weight)
}

/// A resized vocabulary matrix: its item, old and new (padded, global) rows, width, and its new
/// rows' main params: rows `old_rows..rows` as float32 (a bf16 weight's converted, exactly;
/// none when it shrinks).
#[derive(Debug, Clone, Copy)]
pub struct NewVocab<'a> {
    pub fqn: &'a str,
    pub old_rows: u64,
    pub rows: u64,
    pub cols: u64,
    pub new_rows: &'a [u8],
}

/// Every `dp_reshardable` bucket of `dcp`, its chunks proven to be [`lay_out`] of the
/// parameters `rule` puts in it ([`split_buckets`] of its buffer's share of its stage's
/// [`params`]), [`split`] at the data-parallel shards' ends (the saved `per_bucket_numel` over
/// `rule.shards`), for all three states, its length the saved `per_bucket_numel_unpadded`. The
/// groups must be `0..TP x PP`; each group's buffers its model chunks' (`rule.chunks`, virtual
/// pipeline stages) in turn, each chunk's one per parameter dtype.
pub fn buckets(dcp: &Dcp, rule: Rule) -> Result<Vec<Bucket>> {
    prove::Model::read(dcp, rule)?.buckets()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_params_prove_a_bf16_weight_by_rounding_to_it_and_a_f32_one_bit_for_bit() {
        let f = |xs: &[f32]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let bf = |xs: &[u16]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // 1 + 2^-8 lies halfway between bf16 1.0 (0x3F80) and 1.0078125 (0x3F81): to even.
        let tie = f32::from_bits(0x3F80_8000);
        let above = f32::from_bits(0x3F80_8001);
        assert!(rounds_to(
            &f(&[tie, 2.0]),
            &bf(&[0x3F80, 0x4000]),
            DType::BF16
        ));
        assert!(rounds_to(&f(&[above]), &bf(&[0x3F81]), DType::BF16));
        assert!(!rounds_to(&f(&[above]), &bf(&[0x3F80]), DType::BF16));
        // Truncating would pass this one: 1.0078125 - 2^-16 rounds up to 0x3F81.
        let below = f32::from_bits(0x3F81_0000 - 1);
        assert!(rounds_to(&f(&[below]), &bf(&[0x3F81]), DType::BF16));
        assert!(!rounds_to(&f(&[below]), &bf(&[0x3F80]), DType::BF16));
        assert!(rounds_to(&f(&[tie]), &f(&[tie]), DType::F32));
        assert!(!rounds_to(&f(&[tie]), &f(&[1.0]), DType::F32));
        assert!(!rounds_to(&f(&[1.0, 2.0]), &bf(&[0x3F80]), DType::BF16));
    }
}
