//! ggml's row codecs for the types a vocabulary table is grown in: a row of f32 from a row of
//! blocks (dequantize) and back (the reference quantizers of ggml-quants.c, `quantize_row_*_ref`,
//! which gguf-py's `gguf.quants` restates bit for bit where it has them). Our own code from those
//! facts: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 here; the K-quants in `kquant`.

use super::GgmlType;
use half::f16;

mod kquant;

/// The ggml types a table may be grown in (by number), and their names for refusals.
pub const GROWABLE: [(u32, &str); 11] = [
    (0, "F32"),
    (1, "F16"),
    (30, "BF16"),
    (8, "Q8_0"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (6, "Q5_0"),
    (7, "Q5_1"),
    (12, "Q4_K"),
    (13, "Q5_K"),
    (14, "Q6_K"),
];

/// Can rows of type `t` be dequantized and quantized here?
pub fn growable(t: &GgmlType) -> bool {
    GROWABLE.iter().any(|(id, _)| *id == t.id)
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

fn put_half(out: &mut Vec<u8>, x: f32) {
    out.extend(f16::from_f32(x).to_bits().to_le_bytes());
}

/// f32 to bf16 as ggml rounds (nearest even; a NaN made quiet).
fn bf16_bits(x: f32) -> u16 {
    let n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 64) as u16;
    }
    ((u64::from(n) + 0x7fff + u64::from((n >> 16) & 1)) >> 16) as u16
}

/// Dequantize one row: `bytes` holds `out.len()` elements of type `t` (whole blocks; the
/// caller checked the sizes). False when the type is not one of [`GROWABLE`].
pub fn dequantize_row(t: &GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    let (block, size) = (t.block as usize, t.bytes as usize);
    let blocks = bytes.chunks_exact(size).zip(out.chunks_exact_mut(block));
    match t.id {
        0 => {
            for (x, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        1 => {
            for (i, x) in out.iter_mut().enumerate() {
                *x = half(bytes, 2 * i);
            }
        }
        30 => {
            for (x, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *x = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
        }
        8 => blocks.for_each(|(b, y)| {
            let d = half(b, 0);
            for (v, q) in y.iter_mut().zip(&b[2..]) {
                *v = f32::from(*q as i8) * d;
            }
        }),
        2 | 3 | 6 | 7 => blocks.for_each(|(b, y)| legacy_block(t.id, b, y)),
        12 => blocks.for_each(|(b, y)| kquant::dequantize_q4_k(b, y)),
        13 => blocks.for_each(|(b, y)| kquant::dequantize_q5_k(b, y)),
        14 => blocks.for_each(|(b, y)| kquant::dequantize_q6_k(b, y)),
        _ => return false,
    }
    true
}

/// One block of Q4_0 / Q4_1 / Q5_0 / Q5_1: `d`, then `m` (the _1 types), then the fifth bits
/// (`qh`, the Q5 types), then 16 bytes of nibbles (element j low, j + 16 high).
fn legacy_block(id: u32, b: &[u8], y: &mut [f32]) {
    let d = half(b, 0);
    let with_min = id == 3 || id == 7;
    let m = if with_min { half(b, 2) } else { 0.0 };
    let at = if with_min { 4 } else { 2 };
    let five = id == 6 || id == 7;
    let qh = if five {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    } else {
        0
    };
    let qs = &b[at + if five { 4 } else { 0 }..];
    let offset = match id {
        2 => 8,
        6 => 16,
        _ => 0,
    };
    for j in 0..16 {
        let hi0 = ((qh >> j) & 1) << 4;
        let hi1 = ((qh >> (j + 16)) & 1) << 4;
        let x0 = (u32::from(qs[j] & 0x0f) | hi0) as i32 - offset;
        let x1 = (u32::from(qs[j] >> 4) | hi1) as i32 - offset;
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

/// Quantize one row of `x` (whole blocks of type `t`) onto `out`, as ggml's reference
/// quantizer does. False when the type is not one of [`GROWABLE`].
pub fn quantize_row(t: &GgmlType, x: &[f32], out: &mut Vec<u8>) -> bool {
    let block = t.block as usize;
    match t.id {
        0 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        1 => x.iter().for_each(|v| put_half(out, *v)),
        30 => x
            .iter()
            .for_each(|v| out.extend(bf16_bits(*v).to_le_bytes())),
        8 => x.chunks_exact(block).for_each(|b| q8_0(b, out)),
        2 | 6 => x.chunks_exact(block).for_each(|b| q_0(t.id, b, out)),
        3 | 7 => x.chunks_exact(block).for_each(|b| q_1(t.id, b, out)),
        12 => x
            .chunks_exact(block)
            .for_each(|b| kquant::quantize_q4_k(b, out)),
        13 => x
            .chunks_exact(block)
            .for_each(|b| kquant::quantize_q5_k(b, out)),
        14 => x
            .chunks_exact(block)
            .for_each(|b| kquant::quantize_q6_k(b, out)),
        _ => return false,
    }
    true
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_half(out, d);
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// The fifth bits of 32 quants, bit j for element j.
fn high_bits(q: &[u8; 32]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, v) in q.iter().enumerate() {
        qh |= u32::from((v >> 4) & 1) << j;
    }
    qh.to_le_bytes()
}

/// The nibbles of 32 quants: element j low, element j + 16 high.
fn nibbles(q: &[u8; 32], out: &mut Vec<u8>) {
    out.extend((0..16).map(|j| (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4)));
}

/// Q4_0 / Q5_0: a signed scale from the element of largest magnitude (the first, if tied).
fn q_0(id: u32, x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let (levels, top): (f32, i8) = if id == 2 { (-8.0, 15) } else { (-16.0, 31) };
    let d = max / levels;
    let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (qi, v) in q.iter_mut().zip(x) {
        // x / d + 8.5 (or 16.5) in one f32 addition, as ggml rounds it.
        let t = (v * inv + (0.5 - levels)) as i8;
        *qi = t.clamp(0, top) as u8;
    }
    put_half(out, d);
    if id == 6 {
        out.extend(high_bits(&q));
    }
    nibbles(&q, out);
}

/// Q4_1 / Q5_1: a scale and a minimum.
fn q_1(id: u32, x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::INFINITY, |a, &v| a.min(v));
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let top = if id == 3 { 15u8 } else { 31 };
    let d = (max - min) / f32::from(top);
    let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (qi, v) in q.iter_mut().zip(x) {
        *qi = (((v - min) * inv + 0.5) as u8).min(top);
    }
    put_half(out, d);
    put_half(out, min);
    if id == 7 {
        out.extend(high_bits(&q));
    }
    nibbles(&q, out);
}
