//! The constants the scalar generator and its AVX-512 path share (one place, one value).

/// [`super::counter_bits`]' constants.
pub(super) const COUNTER_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
pub(super) const MIX_1: u64 = 0xBF58_476D_1CE4_E5B9;
pub(super) const MIX_2: u64 = 0x94D0_49BB_1331_11EB;

/// What attempt `a` XORs into [`super::counter_bits`]' state.
#[inline(always)]
pub(super) fn attempt_key(a: u64) -> u64 {
    a.wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(17)
}

/// ln 2 split in two (fdlibm's ln2_hi, ln2_lo): e·LN2_HI is exact.
pub(super) const LN2_HI: u64 = 0x3FE6_2E42_FEE0_0000;
pub(super) const LN2_LO: u64 = 0x3DEA_39EF_3579_3C76;
/// [`super::det_ln`]'s series: 1/23, then ·s² + 1/d for each d.
pub(super) const SERIES_FIRST: f64 = 1.0 / 23.0;
pub(super) const SERIES: [f64; 11] = [21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0];
