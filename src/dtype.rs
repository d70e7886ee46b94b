//! Element types that safetensors and torch write, their sizes, and row conversion to and from f32/f64.
//!
//! Rounding on the way down is round-to-nearest-even. `half`'s slice conversions are used for
//! f32 → f16/bf16; f64 → f16/bf16 goes through f32 with round-to-odd first, because rounding twice
//! to nearest can be wrong near ties and `half`'s direct f64 → bf16 ignores the low 32 mantissa bits.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use serde::{Serialize, Serializer};

/// Every element type the readers accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F16,
    BF16,
    F32,
    F64,
    F8E4M3,
    F8E5M2,
    F8E8M0,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    F6E2M3,
    F6E3M2,
    F4,
    /// torch.complex32 (two f16).
    C32,
    /// torch.complex64 / safetensors C64 (two f32).
    C64,
    /// torch.complex128 (two f64).
    C128,
    /// torch quantised integer types (raw bytes; scale and zero point live elsewhere).
    QI8,
    QU8,
    QI32,
}

use DType::*;

/// Every variant, for tables and tests.
pub const ALL: [DType; 27] = [
    Bool, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8E4M3, F8E5M2, F8E8M0,
    F8E4M3Fnuz, F8E5M2Fnuz, F6E2M3, F6E3M2, F4, C32, C64, C128, QI8, QU8, QI32,
];

impl DType {
    /// Size of one element in bits (sub-byte types exist: F4, F6_*).
    pub fn bits(self) -> u64 {
        match self {
            F4 => 4,
            F6E2M3 | F6E3M2 => 6,
            Bool | U8 | I8 | F8E4M3 | F8E5M2 | F8E8M0 | F8E4M3Fnuz | F8E5M2Fnuz | QI8 | QU8 => 8,
            I16 | U16 | F16 | BF16 => 16,
            I32 | U32 | F32 | C32 | QI32 => 32,
            I64 | U64 | F64 | C64 => 64,
            C128 => 128,
        }
    }

    /// Bytes taken by `elements` elements, or None on overflow or when sub-byte elements do not
    /// fill whole bytes.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let bits = elements.checked_mul(self.bits())?;
        if bits % 8 != 0 {
            return None;
        }
        Some(bits / 8)
    }

    /// The name safetensors writes in its header, if the format has one for this type.
    pub fn safetensors_name(self) -> Option<&'static str> {
        Some(match self {
            Bool => "BOOL",
            U8 => "U8",
            I8 => "I8",
            I16 => "I16",
            U16 => "U16",
            I32 => "I32",
            U32 => "U32",
            I64 => "I64",
            U64 => "U64",
            F16 => "F16",
            BF16 => "BF16",
            F32 => "F32",
            F64 => "F64",
            F8E4M3 => "F8_E4M3",
            F8E5M2 => "F8_E5M2",
            F8E8M0 => "F8_E8M0",
            F6E2M3 => "F6_E2M3",
            F6E3M2 => "F6_E3M2",
            F4 => "F4",
            C64 => "C64",
            F8E4M3Fnuz | F8E5M2Fnuz | C32 | C128 | QI8 | QU8 | QI32 => return None,
        })
    }

    /// Parse a safetensors header dtype name.
    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        ALL.into_iter().find(|d| d.safetensors_name() == Some(name))
    }

    /// The torch name (`torch.float32` → "float32").
    pub fn torch_name(self) -> &'static str {
        match self {
            Bool => "bool",
            U8 => "uint8",
            I8 => "int8",
            I16 => "int16",
            U16 => "uint16",
            I32 => "int32",
            U32 => "uint32",
            I64 => "int64",
            U64 => "uint64",
            F16 => "float16",
            BF16 => "bfloat16",
            F32 => "float32",
            F64 => "float64",
            F8E4M3 => "float8_e4m3fn",
            F8E5M2 => "float8_e5m2",
            F8E8M0 => "float8_e8m0fnu",
            F8E4M3Fnuz => "float8_e4m3fnuz",
            F8E5M2Fnuz => "float8_e5m2fnuz",
            F6E2M3 => "float6_e2m3",
            F6E3M2 => "float6_e3m2",
            F4 => "float4_e2m1fn_x2",
            C32 => "complex32",
            C64 => "complex64",
            C128 => "complex128",
            QI8 => "qint8",
            QU8 => "quint8",
            QI32 => "qint32",
        }
    }

    /// The name reports use: the safetensors name when there is one, the torch name otherwise.
    pub fn name(self) -> &'static str {
        self.safetensors_name().unwrap_or_else(|| self.torch_name())
    }

    /// torch's quantized element types (read only inside quantized tensors, which are refused).
    pub fn is_quantized(self) -> bool {
        matches!(self, QI8 | QU8 | QI32)
    }

    /// Floating and complex types: the ones torch lets require gradients.
    pub fn can_require_grad(self) -> bool {
        !matches!(
            self,
            Bool | U8 | I8 | I16 | U16 | I32 | U32 | I64 | U64 | QI8 | QU8 | QI32
        )
    }

    /// Floating types whose rows this module converts to and from f32/f64.
    pub fn is_convertible_float(self) -> bool {
        matches!(self, F16 | BF16 | F32 | F64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for DType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A row could not be converted: the dtype is not one of F16/BF16/F32/F64, or the byte and
/// element counts disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("dtype {0} has no float conversion (only F16, BF16, F32 and F64 rows are converted)")]
    NotFloat(DType),
    #[error("{bytes} bytes of {dtype} do not hold {elements} elements")]
    Length {
        dtype: DType,
        bytes: usize,
        elements: usize,
    },
}

fn check_len(dtype: DType, bytes: usize, elements: usize) -> Result<(), ConvertError> {
    if !dtype.is_convertible_float() {
        return Err(ConvertError::NotFloat(dtype));
    }
    if (elements as u64).checked_mul(dtype.bits() / 8) != Some(bytes as u64) {
        return Err(ConvertError::Length {
            dtype,
            bytes,
            elements,
        });
    }
    Ok(())
}

/// Little-endian 16-bit words of `bytes`, a bounded block at a time (no allocation per row).
fn for_words16(bytes: &[u8], mut f: impl FnMut(usize, &[u16])) {
    const BLOCK: usize = 256;
    let mut words = [0u16; BLOCK];
    for (b, chunk) in bytes.chunks(2 * BLOCK).enumerate() {
        let n = chunk.len() / 2;
        for (w, c) in words.iter_mut().zip(chunk.chunks_exact(2)) {
            *w = u16::from_le_bytes([c[0], c[1]]);
        }
        f(b * BLOCK, &words[..n]);
    }
}

/// A bf16 value's f32 (exact): its bits are the f32's upper half.
#[inline]
fn bf16_bits_to_f32(lo: u8, hi: u8) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([lo, hi])) << 16)
}

/// Decode a little-endian row of F16/BF16/F32/F64 into f32 (exact except F64, which rounds).
#[inline]
pub fn decode_row_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), ConvertError> {
    check_len(dtype, bytes.len(), out.len())?;
    match dtype {
        F16 => for_words16(bytes, |at, w| {
            w.reinterpret_cast::<f16>()
                .convert_to_f32_slice(&mut out[at..at + w.len()])
        }),
        BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16_bits_to_f32(c[0], c[1]);
            }
        }
        F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32;
            }
        }
    }
    Ok(())
}

/// `bytes` (values of `from`) encoded in `to` through f64, as [`decode_row_f64`] then
/// [`encode_row_f64`] do; the same bytes when the dtypes agree.
pub fn recode(bytes: &[u8], from: DType, to: DType) -> Result<Vec<u8>, ConvertError> {
    if from == to {
        return Ok(bytes.to_vec());
    }
    let mut v = vec![0f64; bytes.len() / (from.bits() / 8).max(1) as usize];
    decode_row_f64(from, bytes, &mut v)?;
    let mut out = vec![0u8; v.len() * (to.bits() / 8) as usize];
    encode_row_f64(to, &v, &mut out)?;
    Ok(out)
}

/// Decode a little-endian row of F16/BF16/F32/F64 into f64 (always exact). Inlined so that
/// callers compiled for wider vector units decode with them too.
#[inline(always)]
pub fn decode_row_f64(dtype: DType, bytes: &[u8], out: &mut [f64]) -> Result<(), ConvertError> {
    check_len(dtype, bytes.len(), out.len())?;
    match dtype {
        F16 => for_words16(bytes, |at, w| {
            w.reinterpret_cast::<f16>()
                .convert_to_f64_slice(&mut out[at..at + w.len()])
        }),
        BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f64::from(bf16_bits_to_f32(c[0], c[1]));
            }
        }
        F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64;
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = f64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            }
        }
    }
    Ok(())
}

fn put16(out: &mut [u8], words: impl Iterator<Item = u16>) {
    for (o, w) in out.chunks_exact_mut(2).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
}

/// Encode f32 values as a little-endian row of `dtype`, rounding to nearest even.
pub fn encode_row_f32(dtype: DType, values: &[f32], out: &mut [u8]) -> Result<(), ConvertError> {
    check_len(dtype, out.len(), values.len())?;
    match dtype {
        F16 => {
            let mut h = vec![f16::ZERO; values.len()];
            h.convert_from_f32_slice(values);
            put16(out, h.iter().map(|x| x.to_bits()));
        }
        BF16 => {
            let mut h = vec![bf16::ZERO; values.len()];
            h.convert_from_f32_slice(values);
            put16(out, h.iter().map(|x| x.to_bits()));
        }
        F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(values) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => {
            for (o, v) in out.chunks_exact_mut(8).zip(values) {
                o.copy_from_slice(&(*v as f64).to_le_bytes());
            }
        }
    }
    Ok(())
}

/// f64 → f32 rounding to odd: truncate toward zero, then set the last bit when inexact. Rounding
/// that result to nearest-even at 16 bits equals rounding the f64 directly (f32 keeps ≥ 2 more bits).
pub fn f64_to_f32_round_odd(x: f64) -> f32 {
    let nearest = x as f32;
    if x.is_nan() || nearest as f64 == x {
        return nearest;
    }
    let mut bits = nearest.to_bits();
    // `nearest` is inexact: step back toward zero if rounding went away from zero.
    if (nearest as f64).abs() > x.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// Encode f64 values as a little-endian row of `dtype`, rounding to nearest even (once).
pub fn encode_row_f64(dtype: DType, values: &[f64], out: &mut [u8]) -> Result<(), ConvertError> {
    check_len(dtype, out.len(), values.len())?;
    match dtype {
        F16 | BF16 => {
            let odd: Vec<f32> = values.iter().map(|&x| f64_to_f32_round_odd(x)).collect();
            encode_row_f32(dtype, &odd, out)?;
        }
        F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(values) {
                o.copy_from_slice(&(*v as f32).to_le_bytes());
            }
        }
        _ => {
            for (o, v) in out.chunks_exact_mut(8).zip(values) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's seeded generator (xoshiro256++), so tests need no extra crate.
    struct Rng(crate::rng::Rng);
    impl Rng {
        fn new(seed: u64) -> Self {
            Rng(crate::rng::Rng::new(seed, 0))
        }
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
    }

    #[test]
    fn safetensors_names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for d in ALL {
            if let Some(n) = d.safetensors_name() {
                assert!(seen.insert(n), "duplicate name {n}");
                assert_eq!(DType::from_safetensors_name(n), Some(d));
            }
        }
        assert_eq!(seen.len(), 20);
        assert_eq!(DType::from_safetensors_name("F8_E4M3"), Some(F8E4M3));
        assert_eq!(DType::from_safetensors_name("f32"), None);
    }

    #[test]
    fn sizes_follow_bits_and_refuse_partial_bytes() {
        assert_eq!(F32.bytes_for(3), Some(12));
        assert_eq!(BF16.bytes_for(5), Some(10));
        assert_eq!(C64.bytes_for(2), Some(16));
        assert_eq!(F4.bytes_for(4), Some(2));
        assert_eq!(F4.bytes_for(3), None);
        assert_eq!(F6E2M3.bytes_for(4), Some(3));
        assert_eq!(F64.bytes_for(u64::MAX / 4), None);
    }

    #[test]
    fn decode_then_encode_is_bit_identical_for_every_float_dtype() {
        let mut rng = Rng::new(7);
        for dtype in [F16, BF16, F32, F64] {
            let width = (dtype.bits() / 8) as usize;
            let n = 257;
            let mut bytes: Vec<u8> = (0..n * width).map(|_| rng.next() as u8).collect();
            // NaN payloads are not promised to survive; replace NaN patterns with zero.
            let mut f = vec![0f64; n];
            decode_row_f64(dtype, &bytes, &mut f).unwrap();
            for (i, v) in f.iter().enumerate() {
                if v.is_nan() {
                    bytes[i * width..(i + 1) * width].fill(0);
                }
            }
            decode_row_f64(dtype, &bytes, &mut f).unwrap();
            let mut back = vec![0u8; bytes.len()];
            encode_row_f64(dtype, &f, &mut back).unwrap();
            assert_eq!(back, bytes, "{dtype} via f64");
            if dtype != F64 {
                let mut g = vec![0f32; n];
                decode_row_f32(dtype, &bytes, &mut g).unwrap();
                encode_row_f32(dtype, &g, &mut back).unwrap();
                assert_eq!(back, bytes, "{dtype} via f32");
            }
        }
    }

    #[test]
    fn sixteen_bit_decoding_agrees_with_half_for_every_bit_pattern() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|w| w.to_le_bytes()).collect();
        let (mut f, mut g) = (vec![0f64; 1 << 16], vec![0f32; 1 << 16]);
        for dtype in [F16, BF16] {
            decode_row_f64(dtype, &bytes, &mut f).unwrap();
            decode_row_f32(dtype, &bytes, &mut g).unwrap();
            for w in 0..=u16::MAX {
                let want = match dtype {
                    F16 => f16::from_bits(w).to_f64(),
                    _ => bf16::from_bits(w).to_f64(),
                };
                let (a, b) = (f[w as usize], f64::from(g[w as usize]));
                let same = |v: f64| v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan());
                assert!(
                    same(a) && same(b),
                    "{dtype} {w:#06x}: {a} / {b}, half says {want}"
                );
            }
        }
    }

    /// Checks `r` (the encoded 16-bit value) is the nearest representable value to `x`, ties to even,
    /// by comparing with both neighbours in exact f64 arithmetic (16-bit values and the
    /// differences involved are exact in f64 for the ranges used here).
    fn assert_nearest_even(dtype: DType, x: f64, r: u16) {
        let val = |bits: u16| -> f64 {
            let mut out = [0f64];
            decode_row_f64(dtype, &bits.to_le_bytes(), &mut out).unwrap();
            out[0]
        };
        let rv = val(r);
        let d = (x - rv).abs();
        for nb in [r.wrapping_sub(1), r.wrapping_add(1)] {
            let nv = val(nb);
            if nv.is_nan() || nv.is_infinite() || (nv < 0.0) != (rv < 0.0) {
                continue;
            }
            let dn = (x - nv).abs();
            assert!(
                d < dn || (d == dn && r & 1 == 0),
                "{dtype}: {x:e} → {rv:e} but {nv:e} is nearer (or the even tie)"
            );
        }
    }

    #[test]
    fn f64_to_16_bit_rounds_once_to_nearest_even() {
        let mut rng = Rng::new(11);
        for dtype in [F16, BF16] {
            let mant_bits = if dtype == F16 { 10 } else { 7 };
            for _ in 0..20_000 {
                // A 16-bit value, then a perturbation below its half-ulp, exactly at it, or just past
                // it in the low 32 bits of the f64 mantissa: the cases double rounding gets wrong.
                let base: u16 = if dtype == F16 {
                    (rng.next() as u16) & 0x3BFF // |x| < 1, normal or subnormal
                } else {
                    0x3800 | ((rng.next() as u16) & 0x07FF)
                };
                let mut b = [0f64];
                decode_row_f64(dtype, &base.to_le_bytes(), &mut b).unwrap();
                let x = b[0];
                if x == 0.0 || !x.is_normal() {
                    continue;
                }
                let ulp = 2f64.powi(x.abs().log2().floor() as i32 - mant_bits);
                let tiny = ulp * 2f64.powi(-40) * ((rng.next() % 7) as f64);
                let t = match rng.next() % 3 {
                    0 => x + ulp / 2.0 + tiny,
                    1 => x + ulp / 2.0,
                    _ => x + ulp / 2.0 - tiny,
                };
                let mut out = [0u8; 2];
                encode_row_f64(dtype, &[t], &mut out).unwrap();
                assert_nearest_even(dtype, t, u16::from_le_bytes(out));
            }
        }
    }

    #[test]
    fn round_odd_keeps_exact_values_and_marks_inexact_ones() {
        assert_eq!(f64_to_f32_round_odd(1.5), 1.5f32);
        let x = 1.0 + 2f64.powi(-30);
        let r = f64_to_f32_round_odd(x);
        assert_eq!(r.to_bits() & 1, 1);
        assert!((r as f64) > 1.0 && (r as f64) < 1.0 + 2f64.powi(-22));
        assert_eq!(f64_to_f32_round_odd(1e300), f32::MAX);
        assert!(f64_to_f32_round_odd(f64::NAN).is_nan());
    }

    #[test]
    fn conversions_refuse_wrong_lengths_and_non_float_types() {
        let mut out = [0f32; 2];
        assert_eq!(
            decode_row_f32(I32, &[0; 8], &mut out),
            Err(ConvertError::NotFloat(I32))
        );
        assert!(matches!(
            decode_row_f32(F16, &[0; 3], &mut out),
            Err(ConvertError::Length { .. })
        ));
    }
}
