//! The K-quants a vocabulary table is grown in (Q4_K, Q5_K, Q6_K): super-blocks of 256, the
//! reference quantizers of ggml-quants.c (`quantize_row_q{4,5,6}_K_ref`, what llama.cpp's
//! `llama_model_quantize` runs when it has no importance matrix) and their dequantizers. Every
//! sum is taken in the order ggml takes it, in f32, so the bytes come out as ggml's.
//!
//! Layouts: Q4_K `d, dmin` (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles;
//! Q5_K the same with 32 bytes of fifth bits before the nibbles; Q6_K 128 bytes of low nibbles,
//! 64 of high pairs, 16 signed 8-bit scales, then `d`.

use half::f16;

const QK_K: usize = 256;
/// Below this, a group is all zeros (ggml's GROUP_MAX_EPS).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, as ggml does it (|x| < 2^22): by adding 1.5 · 2^23.
fn nearest_int(x: f32) -> i32 {
    let bits = (x + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and min of group `j` from the 12 packed bytes.
fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// ggml's `make_qkx2_quants`: a scale and a min for `x` (levels 0..=nmax) by weighted least
/// squares over a few trial scales. Returns (scale, -min) and fills `l`.
fn make_qkx2(
    nmax: i32,
    x: &[f32],
    w: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..x.len() {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|v| *v = 0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for i in 0..x.len() {
        l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        let diff = scale * f32::from(l[i]) + min - x[i];
        best += w[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..x.len() {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let q = q as f32;
            sum_l += w[i] * q;
            sum_l2 += w[i] * q * q;
            sum_xl += w[i] * q * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur = 0f32;
            for i in 0..x.len() {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                cur += w[i] * (diff * diff);
            }
            if cur < best {
                l.copy_from_slice(&aux[..x.len()]);
                best = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The shared half of Q4_K and Q5_K: eight groups of 32, each a 6-bit scale and min under the
/// block's `d` and `dmin`. Returns (d, dmin, packed scales, levels 0..=nmax).
fn k_scales(x: &[f32], nmax: i32, rmin: f32, nstep: i32) -> (u16, u16, [u8; 12], [u8; QK_K]) {
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let g = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for v in g {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let w: Vec<f32> = g.iter().map(|v| av_x + v.abs()).collect();
        let (s, m) = make_qkx2(nmax, g, &w, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..8 {
        let (sc, m) = scale_min(j, &packed);
        let dj = d.to_f32() * f32::from(sc);
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    (d.to_bits(), dmin.to_bits(), packed, l)
}

pub(super) fn quantize_q4_k(x: &[f32], out: &mut Vec<u8>) {
    let (d, dmin, scales, l) = k_scales(x, 15, -1.0, 20);
    out.extend(d.to_le_bytes());
    out.extend(dmin.to_le_bytes());
    out.extend(scales);
    for j in (0..QK_K).step_by(64) {
        out.extend((0..32).map(|i| l[j + i] | (l[j + i + 32] << 4)));
    }
}

pub(super) fn quantize_q5_k(x: &[f32], out: &mut Vec<u8>) {
    let (d, dmin, scales, l) = k_scales(x, 31, -0.5, 15);
    out.extend(d.to_le_bytes());
    out.extend(dmin.to_le_bytes());
    out.extend(scales);
    let (mut qh, mut ql) = ([0u8; 32], [0u8; 128]);
    let (mut m1, mut m2) = (1u8, 2u8);
    for (k, n) in (0..QK_K).step_by(64).enumerate() {
        for j in 0..32 {
            let (mut l1, mut l2) = (l[n + j], l[n + j + 32]);
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[32 * k + j] = l1 | (l2 << 4);
        }
        m1 <<= 2;
        m2 <<= 2;
    }
    out.extend(qh);
    out.extend(ql);
}

/// ggml's `make_qx_quants` with rmse_type 1 and no importance weights (Q6_K's groups of 16):
/// a signed scale; levels `l + nmax` in 0..2·nmax.
fn make_qx(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let q = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (li, &v) in l.iter_mut().zip(x) {
        *li = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

pub(super) fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs) = (0f32, 0f32);
    for ib in 0..16 {
        let s = make_qx(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        scales[ib] = s;
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = s;
        }
    }
    if max_abs < GROUP_MAX_EPS {
        out.extend([0u8; 128 + 64 + 16 + 2]);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    let sc: Vec<i8> = scales
        .iter()
        .map(|s| nearest_int(iscale * s).min(127) as i8)
        .collect();
    for j in 0..16 {
        let dj = d.to_f32() * f32::from(sc[j]);
        if dj == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / dj).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (k, j) in (0..QK_K).step_by(128).enumerate() {
        let q = |i: usize| l[j + i] as u8;
        for i in 0..32 {
            ql[64 * k + i] = (q(i) & 0xf) | ((q(i + 64) & 0xf) << 4);
            ql[64 * k + i + 32] = (q(i + 32) & 0xf) | ((q(i + 96) & 0xf) << 4);
            qh[32 * k + i] = (q(i) >> 4)
                | ((q(i + 32) >> 4) << 2)
                | ((q(i + 64) >> 4) << 4)
                | ((q(i + 96) >> 4) << 6);
        }
    }
    out.extend(ql);
    out.extend(qh);
    out.extend(sc.iter().map(|s| *s as u8));
    out.extend(d.to_bits().to_le_bytes());
}

pub(super) fn dequantize_q4_k(b: &[u8], y: &mut [f32]) {
    dequantize_k::<false>(b, y);
}

pub(super) fn dequantize_q5_k(b: &[u8], y: &mut [f32]) {
    dequantize_k::<true>(b, y);
}

/// Q4_K / Q5_K (`five`: with the fifth bits before the nibbles), as ggml's loop reads: what
/// [`dequantize_k`] must equal bit for bit.
#[cfg(test)]
fn dequantize_k_plain(b: &[u8], y: &mut [f32], five: bool) {
    let (d, min) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let (qh, ql) = if five {
        (&b[16..48], &b[48..176])
    } else {
        (&b[0..0], &b[16..144])
    };
    for (k, j) in (0..QK_K).step_by(64).enumerate() {
        let (sc1, m1) = scale_min(2 * k, scales);
        let (sc2, m2) = scale_min(2 * k + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let q = &ql[32 * k..32 * k + 32];
        let (u1, u2) = (1u8 << (2 * k), 2u8 << (2 * k));
        for l in 0..32 {
            let (h1, h2) = if five {
                (
                    if qh[l] & u1 != 0 { 16 } else { 0 },
                    if qh[l] & u2 != 0 { 16 } else { 0 },
                )
            } else {
                (0, 0)
            };
            y[j + l] = d1 * f32::from((q[l] & 0xf) + h1) - m1;
            y[j + l + 32] = d2 * f32::from((q[l] >> 4) + h2) - m2;
        }
    }
}

/// Q6_K as ggml's loop reads: what [`dequantize_q6_k`] must equal bit for bit.
#[cfg(test)]
fn dequantize_q6_k_plain(b: &[u8], y: &mut [f32]) {
    let d = half(b, 208);
    for (k, n) in (0..QK_K).step_by(128).enumerate() {
        let ql = &b[64 * k..64 * k + 64];
        let qh = &b[128 + 32 * k..128 + 32 * k + 32];
        let sc = &b[192 + 8 * k..192 + 8 * k + 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            let s = |i: usize| f32::from(sc[is + i] as i8);
            y[n + l] = d * s(0) * f32::from(q1);
            y[n + l + 32] = d * s(2) * f32::from(q2);
            y[n + l + 64] = d * s(4) * f32::from(q3);
            y[n + l + 96] = d * s(6) * f32::from(q4);
        }
    }
}

/// Q4_K / Q5_K (`FIVE`: with the fifth bits before the nibbles), one super-block: ggml's
/// arithmetic, in its order, on fixed-size arrays the compiler can vectorize (about twice as fast
/// as indexing the slices: the mean over a 262144-row table is a second of one core).
fn dequantize_k<const FIVE: bool>(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let (qh, ql) = if FIVE {
        (&b[16..48], &b[48..176])
    } else {
        (&b[0..0], &b[16..144])
    };
    let (ql, _) = ql.as_chunks::<32>();
    let qh: &[u8; 32] = qh.first_chunk().unwrap_or(&[0; 32]);
    let (y, _) = y.as_chunks_mut::<64>();
    for (k, (q, y)) in ql.iter().zip(y.iter_mut()).enumerate() {
        let (sc1, m1) = scale_min(2 * k, scales);
        let (sc2, m2) = scale_min(2 * k + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (u1, u2) = (1u8 << (2 * k), 2u8 << (2 * k));
        let (lo, hi) = y.split_at_mut(32);
        for l in 0..32 {
            let (h1, h2) = if FIVE {
                (
                    if qh[l] & u1 != 0 { 16 } else { 0 },
                    if qh[l] & u2 != 0 { 16 } else { 0 },
                )
            } else {
                (0, 0)
            };
            lo[l] = d1 * f32::from((q[l] & 0xf) + h1) - m1;
            hi[l] = d2 * f32::from((q[l] >> 4) + h2) - m2;
        }
    }
}

/// Q6_K, one super-block: ggml's arithmetic (`d · scale` first, then times the quant) on
/// fixed-size arrays the compiler can vectorize.
pub(super) fn dequantize_q6_k(b: &[u8], y: &mut [f32]) {
    let d = half(b, 208);
    let (ql, rest) = b.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let (ql, _) = ql.as_chunks::<64>();
    let (qh, _) = qh.as_chunks::<32>();
    let (sc, _) = rest[..16].as_chunks::<8>();
    let (y, _) = y.as_chunks_mut::<128>();
    for (((ql, qh), sc), y) in ql.iter().zip(qh).zip(sc).zip(y.iter_mut()) {
        let ds: [f32; 8] = std::array::from_fn(|i| d * f32::from(sc[i] as i8));
        let (y01, y23) = y.split_at_mut(64);
        let (y0, y1) = y01.split_at_mut(32);
        let (y2, y3) = y23.split_at_mut(32);
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            y0[l] = ds[is] * f32::from(q1);
            y1[l] = ds[is + 2] * f32::from(q2);
            y2[l] = ds[is + 4] * f32::from(q3);
            y3[l] = ds[is + 6] * f32::from(q4);
        }
    }
}

#[cfg(test)]
mod dequantize_tests {
    use super::*;

    #[test]
    fn vectorizable_dequantizers_equal_ggml_s_loops_bit_for_bit_on_any_block() {
        // Random bytes: every scale, quant and f16 (NaN and infinity too).
        let mut seed = 48u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        };
        for _ in 0..20000 {
            let b: Vec<u8> = (0..210).map(|_| next()).collect();
            let (mut a, mut f) = ([0f32; 256], [0f32; 256]);
            for five in [false, true] {
                dequantize_k_plain(&b, &mut a, five);
                if five {
                    dequantize_k::<true>(&b, &mut f);
                } else {
                    dequantize_k::<false>(&b, &mut f);
                }
                assert!(a.iter().zip(&f).all(|(x, y)| x.to_bits() == y.to_bits()));
            }
            dequantize_q6_k_plain(&b, &mut a);
            dequantize_q6_k(&b, &mut f);
            assert!(a.iter().zip(&f).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
}
