//! A small seeded generator (xoshiro256++ seeded by SplitMix64) with normal samples, so every
//! random initialisation is reproducible from `--seed` without another dependency. Streams are
//! keyed (seed, stream) so parallel work draws the same numbers whatever the thread count.

#[cfg(target_arch = "x86_64")]
mod avx512;
mod consts;
use consts::{attempt_key, COUNTER_MUL, LN2_HI, LN2_LO, MIX_1, MIX_2, SERIES, SERIES_FIRST};

pub struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// Independent stream `stream` of generator `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut x = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let s = [
            splitmix(&mut x),
            splitmix(&mut x),
            splitmix(&mut x),
            splitmix(&mut x),
        ];
        Rng { s, spare: None }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = (self.s[0].wrapping_add(self.s[3]))
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in (-1, 1).
    fn symmetric(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 52) as f64 - 1.0
    }

    /// Standard normal (Marsaglia's polar method, both values used): one logarithm and one
    /// square root per pair, no trigonometry, about twice as fast as Box–Muller; hewitt draws
    /// N·k of them.
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        loop {
            let (u, v) = (self.symmetric(), self.symmetric());
            let s = u * u + v * v;
            if s < 1.0 && s > 0.0 {
                let f = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * f);
                return u * f;
            }
        }
    }
}

/// The bits of counter `i`, attempt `a`, of generator `seed`: a SplitMix64 finaliser over the
/// three. Counter-based, so any element can be drawn on its own (a GPU thread per element) and
/// the same (seed, i) gives the same bits on every device. kernels.cu has the same function.
#[inline(always)]
pub fn counter_bits(seed: u64, i: u64, a: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(COUNTER_MUL) ^ attempt_key(a);
    z = (z ^ (z >> 30)).wrapping_mul(MIX_1);
    z = (z ^ (z >> 27)).wrapping_mul(MIX_2);
    z ^ (z >> 31)
}

/// ln(x) for 0 < x < ∞ from additions, multiplications and divisions only, in a fixed order
/// (no fused multiply-add, no libm): the same bits on the CPU, in the host-compiled kernels and
/// on a GPU (NVRTC with --fmad=false). Accurate to a few ulp, which is all a normal sample needs.
#[inline(always)]
pub fn det_ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln(m) = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.1716: the odd series to s^23.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = SERIES_FIRST;
    for d in SERIES {
        p *= s2;
        p += 1.0 / d;
    }
    let ln2_hi = f64::from_bits(LN2_HI);
    let ln2_lo = f64::from_bits(LN2_LO);
    let ef = e as f64;
    let t = 2.0 * s;
    let t = t * p;
    let lo = ef * ln2_lo;
    let lo = lo + t;
    let hi = ef * ln2_hi;
    hi + lo
}

/// Standard normal number `i` of generator `seed` (Marsaglia's polar method over counter-based
/// uniform pairs, one normal per counter): what Hewitt's samplers draw, on any device.
pub fn normal_at(seed: u64, i: u64) -> f64 {
    let mut a = 0u64;
    loop {
        let (u, v) = uniform_pair(seed, i, a);
        let s = u * u + v * v;
        if s < 1.0 && s > 0.0 {
            return polar(u, s);
        }
        a += 1;
    }
}

/// Attempt `a`'s two uniform numbers in (-1, 1) for counter `i`.
#[inline(always)]
fn uniform_pair(seed: u64, i: u64, a: u64) -> (f64, f64) {
    (
        unit(counter_bits(seed, i, 2 * a)),
        unit(counter_bits(seed, i, 2 * a + 1)),
    )
}

/// 64 random bits as a uniform number in (-1, 1).
#[inline(always)]
fn unit(b: u64) -> f64 {
    ((b >> 11) as f64 + 0.5) / (1u64 << 52) as f64 - 1.0
}

/// The polar method's normal from `u` and s = u² + v², 0 < s < 1.
#[inline(always)]
fn polar(u: f64, s: f64) -> f64 {
    let l = det_ln(s);
    let q = -2.0 * l;
    let q = q / s;
    u * q.sqrt()
}

/// Normals `first`, `first + 1`, … of generator `seed` into `out`, as f32: exactly
/// `normal_at(seed, first + j) as f32`. Hewitt draws N·k of them (a quarter of its time at
/// k = 1000), so AVX-512 CPUs take a staged path (`avx512`); others `LANES` attempts at a time.
pub fn normals_f32(seed: u64, first: u64, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::usable() {
        // SAFETY: the CPU has AVX-512 F, DQ and VL (`usable` checked them).
        return unsafe { avx512::normals_f32(seed, first, out) };
    }
    normals_any(seed, first, out);
}

/// Attempts made together where AVX-512 is missing: 16 lanes let the compiler overlap one
/// vector's divisions with another's series.
const LANES: usize = 16;

/// [`normals_f32`] on any CPU (compiled again inside `normals_avx512`).
#[inline(always)]
fn normals_any(seed: u64, first: u64, out: &mut [f32]) {
    // Each counter's first attempt, LANES at a time; the rejected ones (and a remainder short of
    // LANES) go on, LANES at a time, to their next attempt, until every counter has its normal.
    let mut pending: Vec<(usize, u64)> = Vec::new();
    let whole = out.len() / LANES * LANES;
    for (c, chunk) in out[..whole].chunks_exact_mut(LANES).enumerate() {
        let i = first + (LANES * c) as u64;
        let (x, ok) = attempts(seed, std::array::from_fn(|l| i + l as u64), [0; LANES]);
        for (l, o) in chunk.iter_mut().enumerate() {
            if ok[l] {
                *o = x[l] as f32;
            } else {
                pending.push((LANES * c + l, 1));
            }
        }
    }
    pending.extend((whole..out.len()).map(|j| (j, 0)));
    while !pending.is_empty() {
        let mut next = Vec::new();
        for group in pending.chunks(LANES) {
            let lane = |l: usize| group.get(l).copied().unwrap_or(group[0]);
            let counters = std::array::from_fn(|l| first + lane(l).0 as u64);
            let (x, ok) = attempts(seed, counters, std::array::from_fn(|l| lane(l).1));
            for (l, &(j, a)) in group.iter().enumerate() {
                if ok[l] {
                    out[j] = x[l] as f32;
                } else {
                    next.push((j, a + 1));
                }
            }
        }
        pending = next;
    }
}

/// Attempt `a[l]` of counter `i[l]`, lane by lane: each one's normal and whether the attempt was
/// accepted (the same operations as [`normal_at`], with no branch, so that they vectorise).
#[inline(always)]
fn attempts(seed: u64, i: [u64; LANES], a: [u64; LANES]) -> ([f64; LANES], [bool; LANES]) {
    let mut x = [0f64; LANES];
    let mut ok = [false; LANES];
    for l in 0..LANES {
        let (u, v) = uniform_pair(seed, i[l], a[l]);
        let s = u * u + v * v;
        ok[l] = s < 1.0 && s > 0.0;
        x[l] = polar(u, if ok[l] { s } else { 0.5 });
    }
    (x, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det_ln_is_accurate_and_counter_normals_are_normal() {
        let mut r = Rng::new(3, 0);
        for _ in 0..100_000 {
            let x = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64 + 1e-300;
            let (a, b) = (det_ln(x), x.ln());
            assert!(
                (a - b).abs() <= 4.0 * f64::EPSILON * b.abs().max(1.0),
                "{x}: {a} vs {b}"
            );
        }
        for x in [1.0, 0.5, 2.0, 1e-300, 0.999_999_999, 1.000_000_001] {
            assert!((det_ln(x) - x.ln()).abs() <= 4.0 * f64::EPSILON * x.ln().abs().max(1.0));
        }
        let n = 200_000;
        let v: Vec<f64> = (0..n).map(|i| normal_at(42, i)).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        let m4 = v.iter().map(|x| x.powi(4)).sum::<f64>() / n as f64;
        let tail = v.iter().filter(|x| x.abs() > 1.959_964).count() as f64 / n as f64;
        assert!(mean.abs() < 0.012, "{mean}");
        assert!((var - 1.0).abs() < 0.016, "{var}");
        assert!((m4 - 3.0).abs() < 0.11, "{m4}");
        assert!((tail - 0.05).abs() < 0.0025, "{tail}");
        // Neighbouring counters and seeds are unrelated; the same ones repeat.
        assert_eq!(normal_at(7, 5).to_bits(), normal_at(7, 5).to_bits());
        assert_ne!(normal_at(7, 5), normal_at(7, 6));
        assert_ne!(normal_at(7, 5), normal_at(8, 5));
    }

    #[test]
    fn batched_normals_are_normal_at_bit_for_bit() {
        // Odd starts and lengths (a remainder after the full groups), several seeds: about one
        // first attempt in five is rejected, so nearly every group meets rejections too.
        // The AVX-512 path's batches are 1024 counters: several, a short last one, one alone.
        let cases = [
            (0, 0, 4099),
            (42, 13, 1001),
            (u64::MAX, 1 << 40, 777),
            (9, 1023, 2 * 1024 + 17),
            (3, 5, 5),
        ];
        #[cfg(target_arch = "x86_64")]
        eprintln!("AVX-512 path: {}", avx512::usable());
        for (seed, first, len) in cases {
            let want: Vec<u32> = (0..len)
                .map(|j| (normal_at(seed, first + j as u64) as f32).to_bits())
                .collect();
            let mut fast = vec![0f32; len];
            normals_f32(seed, first, &mut fast);
            let mut plain = vec![0f32; len];
            normals_any(seed, first, &mut plain);
            for got in [&fast, &plain] {
                let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
                assert_eq!(got, want, "seed {seed}, first {first}");
            }
        }
        // Some first attempts fail here, and some second ones: the retries are exercised.
        let failed = |a: u64| {
            (0..4096u64)
                .filter(|&i| {
                    let (u, v) = uniform_pair(0, i, a);
                    let s = u * u + v * v;
                    !(s < 1.0 && s > 0.0)
                })
                .count()
        };
        assert!((600..1200).contains(&failed(0)), "{}", failed(0));
        assert!((600..1200).contains(&failed(1)), "{}", failed(1));
    }

    #[test]
    fn normals_have_mean_0_and_variance_1_and_streams_are_reproducible() {
        let mut r = Rng::new(42, 0);
        let n = 200_000;
        let v: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        // Standard errors: 1/sqrt(n) ≈ 0.0022 for the mean, sqrt(2/n) ≈ 0.0032 for the variance.
        assert!(mean.abs() < 0.012, "{mean}");
        assert!((var - 1.0).abs() < 0.016, "{var}");
        // Normal, not just unit variance: E[x^4] = 3 (standard error sqrt(96/n) ≈ 0.022), and
        // P(|x| > 1.96) = 0.05 (standard error ≈ 0.0005).
        let m4 = v.iter().map(|x| x.powi(4)).sum::<f64>() / n as f64;
        assert!((m4 - 3.0).abs() < 0.11, "{m4}");
        let tail = v.iter().filter(|x| x.abs() > 1.959_964).count() as f64 / n as f64;
        assert!((tail - 0.05).abs() < 0.0025, "{tail}");
        let mut a = Rng::new(42, 7);
        let mut b = Rng::new(42, 7);
        let mut c = Rng::new(42, 8);
        let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_eq!(x, y);
        assert_ne!(x, z);
    }
}
