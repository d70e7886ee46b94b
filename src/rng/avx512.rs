//! [`super::normals_f32`] with AVX-512: the same IEEE operations as [`super::normal_at`], in the
//! same order (no fused multiply-add), so every normal has the same bits, 8 lanes at a time.
//!
//! Staged so that the CPU overlaps independent lanes instead of waiting on one long chain: for a
//! batch of counters, one loop draws every first attempt's (u, s) and packs the accepted ones;
//! a second turns the packed ones into normals (two divisions and a square root each, the
//! divider's work, spent on accepted attempts only); a third spreads them back to their places.
//! The rejected counters (about one in five) go on to their next attempt the same way.

use super::consts::{attempt_key, COUNTER_MUL, LN2_HI, LN2_LO, MIX_1, MIX_2, SERIES, SERIES_FIRST};
use std::arch::x86_64::*;

/// Counters per batch: its buffers stay in L1 (1024 and 2048 measured the same).
const BATCH: usize = 1024;

/// Whether this CPU runs [`normals_f32`].
pub fn usable() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vl")
}

/// Batch buffers, each with a vector's slack past `BATCH` for full-width stores.
struct Scratch {
    /// Indices (in the batch) of the counters still to draw, and of those rejected this pass.
    list: Vec<u32>,
    next: Vec<u32>,
    /// The accepted attempts' u and s, packed, and their indices (later passes).
    u: Vec<f64>,
    s: Vec<f64>,
    at: Vec<u32>,
    /// First pass: the packed normals and each group of 8's accepted lanes.
    packed: Vec<f32>,
    masks: Vec<u8>,
}

/// `out[j] = normal_at(seed, first + j) as f32` for every j.
///
/// # Safety
/// The CPU must have AVX-512 F, DQ and VL ([`usable`]).
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
pub unsafe fn normals_f32(seed: u64, first: u64, out: &mut [f32]) {
    let mut sc = Scratch {
        list: vec![0; BATCH + 8],
        next: vec![0; BATCH + 8],
        u: vec![0.0; BATCH + 8],
        s: vec![0.0; BATCH + 8],
        at: vec![0; BATCH + 8],
        packed: vec![0.0; BATCH + 8],
        masks: vec![0; BATCH / 8],
    };
    for (c, chunk) in out.chunks_mut(BATCH).enumerate() {
        let f = first.wrapping_add((c * BATCH) as u64);
        // SAFETY: AVX-512 F/DQ/VL (this function's contract); chunk.len() ≤ BATCH.
        let mut n = unsafe { first_pass(seed, f, chunk, &mut sc) };
        let mut a = 1;
        while n > 0 {
            std::mem::swap(&mut sc.list, &mut sc.next);
            // SAFETY: as above; list[..n] holds indices into chunk.
            n = unsafe { later_pass(seed, f, a, n, chunk, &mut sc) };
            a += 1;
        }
    }
}

/// The uniform (u, v) of attempt key `k` (seed ^ attempt_key) for counters with i·COUNTER_MUL
/// = `ic`, and s = u² + v² with the lanes where 0 < s < 1.
#[inline(always)]
unsafe fn attempt(ku: __m512i, kv: __m512i, ic: __m512i) -> (__m512d, __m512d, __mmask8) {
    let u = unit(mix(_mm512_xor_si512(ku, ic)));
    let v = unit(mix(_mm512_xor_si512(kv, ic)));
    let s = _mm512_add_pd(_mm512_mul_pd(u, u), _mm512_mul_pd(v, v));
    let ok = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(s, _mm512_set1_pd(1.0))
        & _mm512_cmp_pd_mask::<_CMP_GT_OQ>(s, _mm512_setzero_pd());
    (u, s, ok)
}

/// [`super::counter_bits`]' finaliser.
#[inline(always)]
unsafe fn mix(z: __m512i) -> __m512i {
    let z = _mm512_xor_si512(z, _mm512_srli_epi64::<30>(z));
    let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(MIX_1 as i64));
    let z = _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z));
    let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(MIX_2 as i64));
    _mm512_xor_si512(z, _mm512_srli_epi64::<31>(z))
}

/// [`super::unit`]: (b >> 11) < 2⁵³ converts exactly; ·2⁻⁵² is the division by 2⁵² exactly.
#[inline(always)]
unsafe fn unit(b: __m512i) -> __m512d {
    let x = _mm512_cvtepi64_pd(_mm512_srli_epi64::<11>(b));
    let x = _mm512_add_pd(x, _mm512_set1_pd(0.5));
    let x = _mm512_mul_pd(x, _mm512_set1_pd(1.0 / (1u64 << 52) as f64));
    _mm512_sub_pd(x, _mm512_set1_pd(1.0))
}

/// [`super::polar`] with [`super::det_ln`] written out, step for step.
#[inline(always)]
unsafe fn polar(u: __m512d, s: __m512d) -> __m512d {
    let bits = _mm512_castpd_si512(s);
    let e = _mm512_sub_epi64(
        _mm512_and_si512(_mm512_srli_epi64::<52>(bits), _mm512_set1_epi64(0x7ff)),
        _mm512_set1_epi64(1023),
    );
    let m = _mm512_castsi512_pd(_mm512_or_si512(
        _mm512_and_si512(bits, _mm512_set1_epi64(0x000F_FFFF_FFFF_FFFF)),
        _mm512_set1_epi64(0x3FF0_0000_0000_0000),
    ));
    let big = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(m, _mm512_set1_pd(std::f64::consts::SQRT_2));
    let m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
    // e + 1 as an integer then converted equals e converted plus 1.0 (|e| < 2¹⁰, exact).
    let ef = _mm512_cvtepi64_pd(e);
    let ef = _mm512_mask_add_pd(ef, big, ef, _mm512_set1_pd(1.0));
    let one = _mm512_set1_pd(1.0);
    let t = _mm512_div_pd(_mm512_sub_pd(m, one), _mm512_add_pd(m, one));
    let t2 = _mm512_mul_pd(t, t);
    let mut p = _mm512_set1_pd(SERIES_FIRST);
    for d in SERIES {
        p = _mm512_add_pd(_mm512_mul_pd(p, t2), _mm512_set1_pd(1.0 / d));
    }
    let tt = _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(2.0), t), p);
    let lo = _mm512_add_pd(
        _mm512_mul_pd(ef, _mm512_set1_pd(f64::from_bits(LN2_LO))),
        tt,
    );
    let hi = _mm512_mul_pd(ef, _mm512_set1_pd(f64::from_bits(LN2_HI)));
    let l = _mm512_add_pd(hi, lo);
    let q = _mm512_div_pd(_mm512_mul_pd(_mm512_set1_pd(-2.0), l), s);
    _mm512_mul_pd(u, _mm512_sqrt_pd(q))
}

/// The lanes of a group of 8 starting at `g` that lie below `n`.
#[inline(always)]
fn live(g: usize, n: usize) -> __mmask8 {
    if n - g >= 8 {
        0xff
    } else {
        (1u8 << (n - g)) - 1
    }
}

/// Attempt 0 of every counter of the chunk (first + j): accepted normals into `out[j]`, rejected
/// j into `sc.next`; returns how many were rejected.
#[inline(always)]
unsafe fn first_pass(seed: u64, first: u64, out: &mut [f32], sc: &mut Scratch) -> usize {
    let n = out.len();
    let (ku, kv) = (
        _mm512_set1_epi64((seed ^ attempt_key(0)) as i64),
        _mm512_set1_epi64((seed ^ attempt_key(1)) as i64),
    );
    // i·COUNTER_MUL by additions: (i + 8)·C = i·C + 8·C, wrapping.
    let lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    let i0 = _mm512_add_epi64(_mm512_set1_epi64(first as i64), lanes);
    let mut ic = _mm512_mullo_epi64(i0, _mm512_set1_epi64(COUNTER_MUL as i64));
    let step = _mm512_set1_epi64(8u64.wrapping_mul(COUNTER_MUL) as i64);
    let mut j = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    let (mut na, mut nr) = (0usize, 0usize);
    for g in (0..n).step_by(8) {
        let live = live(g, n);
        let (u, s, ok) = attempt(ku, kv, ic);
        let ok = ok & live;
        sc.masks[g / 8] = ok;
        (na, nr) = pack(sc, (na, nr), (ok, live), (u, s, j));
        ic = _mm512_add_epi64(ic, step);
        j = _mm256_add_epi32(j, _mm256_set1_epi32(8));
    }
    for g in (0..na).step_by(8) {
        let x = packed_normals(sc, g, na);
        _mm256_storeu_ps(sc.packed.as_mut_ptr().add(g), x);
    }
    let mut at = 0;
    for g in (0..n).step_by(8) {
        let ok = sc.masks[g / 8];
        let x = _mm256_maskz_expandloadu_ps(ok, sc.packed.as_ptr().add(at));
        _mm256_mask_storeu_ps(out.as_mut_ptr().add(g), ok, x);
        at += ok.count_ones() as usize;
    }
    nr
}

/// One group's attempts sorted: the accepted lanes' (u, s) packed at `na`, the rejected live
/// lanes' indices `j` at `nr` in `sc.next`; returns the new counts. na, nr ≤ the group's start
/// ≤ BATCH − 8, so the full-width stores stay inside the buffers' slack.
#[inline(always)]
unsafe fn pack(
    sc: &mut Scratch,
    (na, nr): (usize, usize),
    (ok, live): (__mmask8, __mmask8),
    (u, s, j): (__m512d, __m512d, __m256i),
) -> (usize, usize) {
    let bad = !ok & live;
    _mm512_storeu_pd(sc.u.as_mut_ptr().add(na), _mm512_maskz_compress_pd(ok, u));
    _mm512_storeu_pd(sc.s.as_mut_ptr().add(na), _mm512_maskz_compress_pd(ok, s));
    let rejected = _mm256_maskz_compress_epi32(bad, j);
    _mm256_storeu_si256(sc.next.as_mut_ptr().add(nr).cast(), rejected);
    (
        na + ok.count_ones() as usize,
        nr + bad.count_ones() as usize,
    )
}

/// The normals of packed attempts g..g+8 (lanes at or past `na` computed from s = 0.5).
#[inline(always)]
unsafe fn packed_normals(sc: &Scratch, g: usize, na: usize) -> __m256 {
    let u = _mm512_loadu_pd(sc.u.as_ptr().add(g));
    let s = _mm512_loadu_pd(sc.s.as_ptr().add(g));
    let s = _mm512_mask_mov_pd(_mm512_set1_pd(0.5), live(g, na), s);
    _mm512_cvtpd_ps(polar(u, s))
}

/// Attempt `a` of the counters first + sc.list[..n]: accepted normals into `out`, rejected
/// indices into `sc.next`; returns how many were rejected.
#[inline(always)]
unsafe fn later_pass(
    seed: u64,
    first: u64,
    a: u64,
    n: usize,
    out: &mut [f32],
    sc: &mut Scratch,
) -> usize {
    let (ku, kv) = (
        _mm512_set1_epi64((seed ^ attempt_key(2 * a)) as i64),
        _mm512_set1_epi64((seed ^ attempt_key(2 * a + 1)) as i64),
    );
    let (mut na, mut nr) = (0usize, 0usize);
    for g in (0..n).step_by(8) {
        let live = live(g, n);
        let j = _mm256_maskz_loadu_epi32(live, sc.list.as_ptr().add(g).cast());
        let i = _mm512_add_epi64(_mm512_set1_epi64(first as i64), _mm512_cvtepu32_epi64(j));
        let ic = _mm512_mullo_epi64(i, _mm512_set1_epi64(COUNTER_MUL as i64));
        let (u, s, ok) = attempt(ku, kv, ic);
        let ok = ok & live;
        let accepted = _mm256_maskz_compress_epi32(ok, j);
        _mm256_storeu_si256(sc.at.as_mut_ptr().add(na).cast(), accepted);
        (na, nr) = pack(sc, (na, nr), (ok, live), (u, s, j));
    }
    for g in (0..na).step_by(8) {
        let x = packed_normals(sc, g, na);
        let j = _mm256_loadu_si256(sc.at.as_ptr().add(g).cast());
        // Lanes below na hold indices into `out` (from sc.list, all < out.len()).
        _mm256_mask_i32scatter_ps::<4>(out.as_mut_ptr(), live(g, na), j, x);
    }
    nr
}
