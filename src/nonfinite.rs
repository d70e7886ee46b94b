//! NaN and Inf counted in a floating tensor's bytes, read from the bit patterns (no conversion),
//! fed in pieces of any size and in order: the same count whether a tensor is scanned alone
//! (`TensorRef::nonfinite`) or as the writer's one pass copies it.

use crate::dtype::DType;

/// The running count of one tensor's NaN and Inf values.
#[derive(Debug, Clone)]
pub struct NonFinite {
    dtype: DType,
    /// Bytes of an element split between two pieces.
    carry: [u8; 8],
    held: usize,
    pub nan: u64,
    pub inf: u64,
}

impl NonFinite {
    /// A count for `dtype`; None when the type has no NaN or Inf to count (integers, bool, FP8,
    /// as the scan has always left them).
    pub fn new(dtype: DType) -> Option<Self> {
        dtype.is_convertible_float().then_some(NonFinite {
            dtype,
            carry: [0; 8],
            held: 0,
            nan: 0,
            inf: 0,
        })
    }

    /// (NaN, Inf) among whole `bytes` of `dtype`; (0, 0) for a type without them.
    pub fn count(dtype: DType, bytes: &[u8]) -> (u64, u64) {
        NonFinite::new(dtype).map_or((0, 0), |mut c| {
            c.feed(bytes);
            (c.nan, c.inf)
        })
    }

    /// Back to nothing counted.
    pub fn reset(&mut self) {
        (self.held, self.nan, self.inf) = (0, 0, 0);
    }

    fn width(&self) -> usize {
        (self.dtype.bits() / 8) as usize
    }

    /// Count the elements in `bytes`, the next bytes of the tensor (an element split between
    /// calls is counted once it is whole).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        let w = self.width();
        if self.held > 0 {
            let take = (w - self.held).min(bytes.len());
            self.carry[self.held..self.held + take].copy_from_slice(&bytes[..take]);
            self.held += take;
            bytes = &bytes[take..];
            if self.held < w {
                return;
            }
            let one = self.carry;
            self.whole(&one[..w]);
            self.held = 0;
        }
        let whole = bytes.len() / w * w;
        self.whole(&bytes[..whole]);
        let rest = &bytes[whole..];
        self.carry[..rest.len()].copy_from_slice(rest);
        self.held = rest.len();
    }

    /// Count whole elements.
    fn whole(&mut self, bytes: &[u8]) {
        let (nan, inf) = match self.dtype {
            DType::F16 => count16(bytes, 0x7C00, 0x03FF),
            DType::BF16 => count16(bytes, 0x7F80, 0x007F),
            DType::F32 => count32(bytes, 0x7F80_0000, 0x007F_FFFF),
            _ => count64(bytes, 0x7FF0_0000_0000_0000, 0x000F_FFFF_FFFF_FFFF),
        };
        self.nan += nan;
        self.inf += inf;
    }
}

/// Elements per block: a block with no NaN or Inf (the usual case) costs one vectorised
/// compare-and-or per element; only a block holding one is counted exactly.
const BLOCK: usize = 4096;

/// `count16`, `count32`, `count64`: NaN and Inf among little-endian elements of one width:
/// exponent bits all set, mantissa non-zero (NaN) or zero (Inf).
macro_rules! counter {
    ($name:ident, $word:ty, $n:expr) => {
        fn $name(bytes: &[u8], exp: $word, mantissa: $word) -> (u64, u64) {
            let word = |c: &[u8]| <$word>::from_le_bytes(c.try_into().unwrap_or([0; $n]));
            let (mut nan, mut inf) = (0u64, 0u64);
            for block in bytes.chunks($n * BLOCK) {
                let special = block
                    .chunks_exact($n)
                    .fold(0, |any, c| any | <$word>::from((word(c) & exp) == exp));
                if special == 0 {
                    continue;
                }
                for v in block.chunks_exact($n).map(word) {
                    if v & exp == exp {
                        if v & mantissa == 0 {
                            inf += 1;
                        } else {
                            nan += 1;
                        }
                    }
                }
            }
            (nan, inf)
        }
    };
}
counter!(count16, u16, 2);
counter!(count32, u32, 4);
counter!(count64, u64, 8);

#[cfg(test)]
mod tests {
    use super::*;

    fn le<T: Copy>(v: &[T], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    #[test]
    fn every_float_type_counts_nan_and_inf_from_its_bits_in_pieces_of_any_size() {
        let f32s = [
            1.0f32,
            f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
            -0.0,
            f32::MAX,
        ];
        let cases: Vec<(DType, Vec<u8>)> = vec![
            (DType::F32, le(&f32s, |x| x.to_le_bytes().to_vec())),
            (
                DType::F64,
                le(&f32s, |x| f64::from(x).to_le_bytes().to_vec()),
            ),
            (
                DType::F16,
                le(&f32s, |x| half::f16::from_f32(x).to_le_bytes().to_vec()),
            ),
            (
                DType::BF16,
                le(&f32s, |x| half::bf16::from_f32(x).to_le_bytes().to_vec()),
            ),
        ];
        for (dtype, bytes) in cases {
            // f32::MAX rounds to Inf in the 16-bit types.
            let inf = if dtype.bits() == 16 { 3 } else { 2 };
            for piece in [1, 3, 5, 7, bytes.len()] {
                let mut c = NonFinite::new(dtype).unwrap();
                bytes.chunks(piece).for_each(|p| c.feed(p));
                assert_eq!((c.nan, c.inf), (1, inf), "{dtype} in pieces of {piece}");
            }
        }
        assert!(NonFinite::new(DType::I64).is_none());
    }

    #[test]
    fn a_finite_f64_beyond_f32s_range_is_not_counted_as_inf() {
        // The scan once converted to f32 first, and called 1e300 infinite.
        let mut c = NonFinite::new(DType::F64).unwrap();
        c.feed(
            &[1e300f64, -1e300, f64::MIN_POSITIVE]
                .map(f64::to_le_bytes)
                .concat(),
        );
        assert_eq!((c.nan, c.inf), (0, 0));
    }
}
