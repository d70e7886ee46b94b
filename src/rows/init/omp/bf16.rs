//! Correlations in bf16, for omp's plain pursuit: c̃ = R·Dᵀ with R and D rounded to bf16 and
//! the products summed in f32, on AMX tiles (`tdpbf16ps`, about five times the f32 GEMM's rate
//! on an AMX Xeon) or with AVX-512 BF16 (`vdpbf16ps`, twice the f32 FMA rate per instruction:
//! AMD Zen 4 and later); [`Kernel`], the kernels in the module `x86` below. Approximate values
//! never pick an atom: [`scan`] keeps, per target, every atom whose |c̃| is within twice the
//! rounding bound of the largest |c̃| ([`bound`]), and the caller recomputes those exactly.
//!
//! The bound: bf16 keeps 8 significant bits (unit roundoff u = 2⁻⁸), so each product d̂·r̂ is
//! within (2u + u²)·|d·r| of d·r (exact in f32: 8 × 8 significant bits), and the f32 sums of K
//! terms, in whatever order the kernel adds them, add at most γ_K ≈ K·2⁻²⁴ of Σ|d̂·r̂|;
//! Σ|d·r| ≤ ‖d‖·‖r‖. [`BETA`] covers both. Both kernels flush subnormal inputs and
//! products to zero: at most K·2⁻¹²⁶·(1 + max|r| + max|d|) more, added as an absolute term.
//!
//! Where neither kernel runs (another CPU, another OS, or [`NO_BF16_ENV`] set), [`kernel`] is
//! None and omp runs its f32 GEMM; [`NO_AMX_ENV`] leaves out the tiles only.

use super::pursuit::Rows;
use rayon::prelude::*;

/// Relative bound of |c̃ − c| in units of ‖d‖·‖r‖ (see the module's text): 2⁻⁷ + 2⁻¹¹ ≥
/// 2u + u² + γ_K·(1 + 2u + u²), γ_K = K·2⁻²⁴ / (1 − K·2⁻²⁴), for K up to 4096 columns
/// ([`Packed::new`] refuses wider rows).
pub const BETA: f64 = 1.0 / 128.0 + 1.0 / 2048.0;
/// The widest rows [`BETA`] covers.
const MAX_COLS: usize = 4096;
/// Atoms per tile group (a tile holds 16 atoms; the kernel works on two).
const ATOMS: usize = 32;
/// Targets per kernel call (two tiles of 16 rows).
const TARGETS: usize = 32;
/// Atom groups per work item (512 atoms: ~0.8 MB of packed rows at width 768 stay in L2).
const GROUPS_PER_PART: usize = 16;
/// Targets swept per atom group while its tiles are in L1.
const TARGET_CHUNK: usize = 256;

/// Set to any value: never use AMX tiles (AVX-512 BF16 is still used where present).
pub const NO_AMX_ENV: &str = "CKPT_SURGERY_NO_AMX";
/// Set to any value: never compute correlations in bf16 (omp runs its f32 GEMM); for A/B
/// measurements and tests of the f32 path.
pub const NO_BF16_ENV: &str = "CKPT_SURGERY_NO_BF16";

/// The instructions that compute c̃.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles, `tdpbf16ps`.
    Amx,
    /// AVX-512 BF16, `vdpbf16ps`.
    Avx512Bf16,
}

impl Kernel {
    pub(super) const ALL: [Kernel; 2] = [Kernel::Amx, Kernel::Avx512Bf16];

    /// Whether this CPU (and OS) runs it, whatever the environment says.
    pub fn runs_here(self) -> bool {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        return x86::has(self);
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        return false;
    }
}

/// The fastest kernel this process may use, checked once (None: the f32 GEMM).
pub fn kernel() -> Option<Kernel> {
    static KERNEL: std::sync::OnceLock<Option<Kernel>> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        let off = |var: &str| std::env::var_os(var).is_some();
        if off(NO_BF16_ENV) {
            return None;
        }
        Kernel::ALL
            .into_iter()
            .filter(|&k| !(k == Kernel::Amx && off(NO_AMX_ENV)))
            .find(|&k| k.runs_here())
    })
}

/// Whether [`kernel`] found one.
pub fn usable() -> bool {
    kernel().is_some()
}

/// f32 → bf16, round to nearest even (inputs are finite: [`Packed::new`] checks).
#[inline]
pub fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The dictionary as bf16 tiles in the layout `tdpbf16ps` reads for its B operand: for each
/// group of 16 atoms and each chunk of 32 columns, a 1 KiB tile whose row q holds, atom by atom,
/// the pair (D[a][32·chunk + 2q], D[a][32·chunk + 2q + 1]). Rows and columns padded with zeros
/// to multiples of 32.
pub struct Packed {
    /// The kernel [`scan`] runs.
    pub kernel: Kernel,
    data: Vec<u16>,
    pub s: usize,
    pub d: usize,
    d_pad: usize,
    /// ‖D\[a\]‖ per atom, and the largest.
    pub norms: Vec<f64>,
    pub norm_max: f64,
    /// max |D\[a\]\[q\]| over every entry (the bound's absolute term).
    pub abs_max: f64,
}

impl Packed {
    /// None when no kernel is [`usable`], or an entry is not finite or too large for bf16 (the
    /// f32 path takes over).
    pub fn new(dict: Rows) -> Option<Packed> {
        Packed::for_kernel(dict, kernel()?)
    }

    /// [`Packed::new`] for a given kernel (None when it does not run here).
    pub fn for_kernel(dict: Rows, kernel: Kernel) -> Option<Packed> {
        if !kernel.runs_here() {
            return None;
        }
        let (s, d) = (dict.rows, dict.cols);
        let abs_max = dict.data.iter().fold(0f32, |m, v| m.max(v.abs()));
        if !abs_max.is_finite() || abs_max > 1e37 || d > MAX_COLS {
            return None;
        }
        let (s_pad, d_pad) = (s.next_multiple_of(ATOMS).max(ATOMS), d.next_multiple_of(32));
        let nk = d_pad / 32;
        let mut data = vec![0u16; s_pad * d_pad];
        data.par_chunks_mut(16 * d_pad)
            .enumerate()
            .for_each(|(g, tiles)| {
                for a in 0..16 {
                    let Some(row) = (g * 16 + a < s).then(|| dict.row(g * 16 + a)) else {
                        continue;
                    };
                    for (col, &v) in row.iter().enumerate() {
                        let (kc, within) = (col / 32, col % 32);
                        let (q, e) = (within / 2, within % 2);
                        tiles[kc * 512 + q * 32 + a * 2 + e] = bf16(v);
                    }
                }
            });
        debug_assert_eq!(data.len(), (s_pad / 16) * nk * 512);
        let norms: Vec<f64> = (0..s)
            .into_par_iter()
            .map(|a| super::pursuit::dot64(dict.row(a), dict.row(a)).sqrt())
            .collect();
        let norm_max = norms.iter().fold(0f64, |m, &v| m.max(v));
        Some(Packed {
            kernel,
            data,
            s,
            d,
            d_pad,
            norms,
            norm_max,
            abs_max: f64::from(abs_max),
        })
    }

    fn groups(&self) -> usize {
        self.data.len() / (self.d_pad * ATOMS)
    }
}

/// The bound of |c̃ − c| for a target with ‖r‖ = `r_norm`, max |r| = `r_abs`, and an atom of
/// norm `d_norm`.
pub fn bound(p: &Packed, r_norm: f64, r_abs: f64, d_norm: f64) -> f64 {
    BETA * r_norm * d_norm + (p.d_pad as f64) * 2f64.powi(-126) * (1.0 + r_abs + p.abs_max)
}

/// Per row of `r` (width `d`): (‖r‖, max |r|), and the uniform bound [`scan`] takes (with the
/// largest atom norm), rounded up to f32 so that the scan's threshold is never tighter.
pub fn slacks(p: &Packed, r: &[f32], d: usize) -> (Vec<(f64, f64)>, Vec<f32>) {
    let stats: Vec<(f64, f64)> = r
        .par_chunks(d.max(1))
        .map(|r| {
            (
                super::pursuit::dot64(r, r).sqrt(),
                r.iter().fold(0f64, |m, v| m.max(f64::from(v.abs()))),
            )
        })
        .collect();
    let slack = stats
        .iter()
        .map(|&(rn, ra)| (bound(p, rn, ra, p.norm_max) * (1.0 + 1e-6)) as f32)
        .collect();
    (stats, slack)
}

/// The targets' rows (f32, n × d) as the kernel's A operand: bf16, rows padded to a multiple of
/// 32 and columns to the packed width, with zeros.
pub fn targets_bf16(p: &Packed, r: &[f32], n: usize) -> Vec<u16> {
    let rows = n.next_multiple_of(TARGETS).max(TARGETS);
    let mut out = vec![0u16; rows * p.d_pad];
    out.par_chunks_mut(p.d_pad)
        .zip(r.par_chunks(p.d.max(1)))
        .for_each(|(o, r)| {
            for (o, &v) in o.iter_mut().zip(r) {
                *o = bf16(v);
            }
        });
    out
}

/// Every (target, |c̃|, atom) within 2·`slack[target]` of the target's largest |c̃| (which is
/// among them), in no particular order. `slack[t]` is the uniform bound for
/// target t (with the largest atom norm). The parts of the atoms run in parallel and share each
/// target's top so far (|c̃| ≥ 0, so an f32's bits order as its value: an atomic max on them).
/// None when `p.kernel` does not run here.
pub fn scan(p: &Packed, a: &[u16], n: usize, slack: &[f32]) -> Option<Vec<(u32, f32, u32)>> {
    use std::sync::atomic::{AtomicU32, Ordering};
    if !p.kernel.runs_here() || a.len() < n.next_multiple_of(TARGETS) * p.d_pad || slack.len() < n {
        return None;
    }
    let groups = p.groups();
    let parts: Vec<std::ops::Range<usize>> = (0..groups)
        .step_by(GROUPS_PER_PART)
        .map(|g| g..(g + GROUPS_PER_PART).min(groups))
        .collect();
    let tops: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let nears: Vec<Vec<(u32, f32, u32)>> = parts
        .into_par_iter()
        .map(|gs| {
            let mut near = Vec::new();
            x86::scan_part(p, a, n, slack, gs, &tops, &mut near);
            near
        })
        .collect();
    let top: Vec<f32> = tops
        .iter()
        .map(|t| f32::from_bits(t.load(Ordering::Relaxed)))
        .collect();
    let mut near: Vec<(u32, f32, u32)> = nears.into_iter().flatten().collect();
    near.retain(|&(t, v, _)| v >= top[t as usize] - 2.0 * slack[t as usize]);
    Some(near)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86 {
    //! The x86-64 kernels of [`super::scan`]: each computes c̃ for 32 targets × 32 atoms from the
    //! bf16 rows (the targets as [`super::targets_bf16`] lays them out, the atoms as
    //! [`super::Packed`] does), and [`take_block`] keeps what may be the largest.
    //! - [`Kernel::Amx`]: AMX tiles (`tdpbf16ps`, Intel Sapphire Rapids and later).
    //! - [`Kernel::Avx512Bf16`]: `vdpbf16ps` on 512-bit vectors (AMD Zen 4 and later, Intel
    //!   Cooper Lake, and any AMX CPU where the tiles are not granted). Both multiply bf16 pairs
    //!   exactly into f32 and add in f32, flushing subnormals: the same bound ([`super::bound`])
    //!   covers both.

    use crate::rows::init::omp::bf16::{Kernel, Packed, ATOMS, TARGETS, TARGET_CHUNK};
    use std::arch::asm;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Whether this CPU (and, for AMX, Linux's permission for this process) runs `k`.
    pub(super) fn has(k: Kernel) -> bool {
        static AMX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        match k {
            Kernel::Amx => *AMX.get_or_init(amx_granted),
            Kernel::Avx512Bf16 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
        }
    }

    /// CPUID says AMX-TILE and AMX-BF16, and Linux grants this process the tile data state.
    fn amx_granted() -> bool {
        use std::arch::x86_64::__cpuid_count;
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 is read only when leaf 0 lists it.
        let (max, l7) = (__cpuid_count(0, 0).eax, __cpuid_count(7, 0));
        if max < 7 || l7.edx & (1 << 22) == 0 || l7.edx & (1 << 24) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain system call with two integers; it fails (-1) where not supported.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    /// Palette 1, tiles 0–7 each 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);

    fn config() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t] = 64; // colsb[t] (u16, little-endian)
            c[48 + t] = 16; // rows[t]
        }
        TileConfig(c)
    }

    /// buf (32 targets × 32 atoms, f32, row-major) = A rows a0.. (two tiles of 16 rows, stride
    /// `lda` bytes) · the packed groups at b0 and b1 (16 atoms each), over `nk` chunks of 32.
    ///
    /// # Safety
    /// AMX usable and configured on this thread; a0 valid for 32 rows of lda bytes, b0/b1 for nk
    /// tiles of 1 KiB each.
    #[inline]
    unsafe fn amx_kernel(
        a0: *const u16,
        lda: usize,
        b0: *const u16,
        b1: *const u16,
        nk: usize,
        buf: &mut [f32; 1024],
    ) {
        let a1 = a0.add(16 * lda / 2);
        let out = buf.as_mut_ptr();
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a0} + {lda}*1]",
            "tileloadd tmm5, [{a1} + {lda}*1]",
            "tileloadd tmm6, [{b0} + {s64}*1]",
            "tileloadd tmm7, [{b1} + {s64}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a0}, 64",
            "add {a1}, 64",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {n}",
            "jnz 2b",
            "tilestored [{o} + {s128}*1], tmm0",
            "tilestored [{o1} + {s128}*1], tmm1",
            "tilestored [{o2} + {s128}*1], tmm2",
            "tilestored [{o3} + {s128}*1], tmm3",
            a0 = inout(reg) a0 => _,
            a1 = inout(reg) a1 => _,
            b0 = inout(reg) b0 => _,
            b1 = inout(reg) b1 => _,
            n = inout(reg) nk => _,
            lda = in(reg) lda,
            s64 = in(reg) 64usize,
            s128 = in(reg) 128usize,
            o = in(reg) out,
            o1 = in(reg) out.add(16),
            o2 = in(reg) out.add(512),
            o3 = in(reg) out.add(528),
            options(nostack),
        );
    }

    /// Targets per pass of [`dp_kernel`]: 8 targets × 2 vectors of 16 atoms = 16 accumulators, the
    /// two atom vectors and a broadcast in registers.
    const DP_TARGETS: usize = 8;

    /// [`amx_kernel`]'s result with `vdpbf16ps`: the packed tiles hold, for each 16 atoms, their
    /// column pairs one after another (pair q of every atom in 64 bytes), so each pair is one
    /// vector per 16 atoms, multiplied by the target's pair broadcast. `a0`: 32 rows of `lda`
    /// pairs (u32); b0/b1: `pairs` vectors of 16 pairs each.
    ///
    /// # Safety
    /// AVX-512F and AVX-512 BF16 present; the pointers valid as for [`amx_kernel`].
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn dp_kernel(
        a0: *const u32,
        lda: usize,
        b0: *const u32,
        b1: *const u32,
        pairs: usize,
        buf: &mut [f32; 1024],
    ) {
        use std::arch::x86_64::*;
        #[inline(always)]
        unsafe fn bh(x: __m512i) -> __m512bh {
            // SAFETY: both are 64 bytes of plain bits.
            std::mem::transmute(x)
        }
        for sub in (0..TARGETS).step_by(DP_TARGETS) {
            let a = a0.add(sub * lda);
            let mut acc = [[_mm512_setzero_ps(); 2]; DP_TARGETS];
            for q in 0..pairs {
                let v0 = bh(_mm512_loadu_si512(b0.add(q * 16).cast()));
                let v1 = bh(_mm512_loadu_si512(b1.add(q * 16).cast()));
                for (t, acc) in acc.iter_mut().enumerate() {
                    let x = bh(_mm512_set1_epi32(a.add(t * lda + q).read_unaligned() as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], x, v0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], x, v1);
                }
            }
            for (t, acc) in acc.iter().enumerate() {
                let row = buf.as_mut_ptr().add((sub + t) * ATOMS);
                _mm512_storeu_ps(row, acc[0]);
                _mm512_storeu_ps(row.add(16), acc[1]);
            }
        }
    }

    /// One 32 × 32 block of c̃ (rows: targets t0.., columns: atoms a0..) into `near`: per row,
    /// the values at or above the target's threshold (16 at a time; most rows have none), then
    /// the shared top raised and the values near it kept.
    ///
    /// # Safety
    /// AVX-512F present (every CPU with either kernel has it).
    #[target_feature(enable = "avx512f")]
    unsafe fn take_block(b: &Block, t0: usize, a0: usize, tops: &[AtomicU32], near: &mut Near) {
        use std::arch::x86_64::*;
        for row in 0..TARGETS.min(b.n.saturating_sub(t0)) {
            let t = t0 + row;
            let top = f32::from_bits(tops[t].load(Ordering::Relaxed));
            let tv = _mm512_set1_ps(top - 2.0 * b.slack[t]);
            let v0 = _mm512_abs_ps(_mm512_loadu_ps(b.buf.as_ptr().add(row * ATOMS)));
            let v1 = _mm512_abs_ps(_mm512_loadu_ps(b.buf.as_ptr().add(row * ATOMS + 16)));
            let hits =
                _mm512_cmp_ps_mask::<_CMP_GE_OQ>(v0, tv) | _mm512_cmp_ps_mask::<_CMP_GE_OQ>(v1, tv);
            if hits == 0 {
                continue;
            }
            let m = _mm512_reduce_max_ps(_mm512_max_ps(v0, v1));
            let top = f32::from_bits(tops[t].fetch_max(m.to_bits(), Ordering::Relaxed)).max(m);
            let thr = top - 2.0 * b.slack[t];
            for (q, v) in b.buf[row * ATOMS..(row + 1) * ATOMS].iter().enumerate() {
                let (v, atom) = (v.abs(), a0 + q);
                if v >= thr && v > 0.0 && atom < b.s {
                    near.push((t as u32, v, atom as u32));
                }
            }
        }
    }

    /// A kernel call's output and what reading it needs.
    struct Block<'a> {
        buf: [f32; 1024],
        n: usize,
        s: usize,
        slack: &'a [f32],
    }
    type Near = Vec<(u32, f32, u32)>;

    /// The atom groups `gs` against every target, into `near`, with `p.kernel`.
    pub(super) fn scan_part(
        p: &Packed,
        a: &[u16],
        n: usize,
        slack: &[f32],
        gs: std::ops::Range<usize>,
        tops: &[AtomicU32],
        near: &mut Near,
    ) {
        let nk = p.d_pad / 32;
        let tile_elems = nk * 512;
        let lda = p.d_pad * 2;
        let mut b = Block {
            buf: [0f32; 1024],
            n,
            s: p.s,
            slack,
        };
        let amx = p.kernel == Kernel::Amx;
        let rows = a.len() / p.d_pad.max(1);
        // SAFETY: the caller checked has(p.kernel) (either kernel implies AVX-512F); the config is
        // 64 bytes, aligned. Every pointer below stays inside `a` (rows × d_pad) and `p.data`
        // (groups × 2 tiles × nk × 512 values): t0 + 32 ≤ rows, 2g + 1 < 2·groups; the pairs
        // (u32) are the same bytes as the u16 values, read unaligned.
        unsafe {
            if amx {
                asm!("ldtilecfg [{}]", in(reg) config().0.as_ptr(), options(nostack, readonly));
            }
            for c0 in (0..rows).step_by(TARGET_CHUNK) {
                let c1 = (c0 + TARGET_CHUNK).min(rows);
                for g in gs.clone() {
                    let b0 = p.data.as_ptr().add(2 * g * tile_elems);
                    let b1 = b0.add(tile_elems);
                    for t0 in (c0..c1).step_by(TARGETS) {
                        let a0 = a.as_ptr().add(t0 * p.d_pad);
                        if amx {
                            amx_kernel(a0, lda, b0, b1, nk, &mut b.buf);
                        } else {
                            let (a0, b0, b1) = (a0.cast(), b0.cast(), b1.cast());
                            dp_kernel(a0, p.d_pad / 2, b0, b1, p.d_pad / 2, &mut b.buf);
                        }
                        take_block(&b, t0, g * ATOMS, tops, near);
                    }
                }
            }
            if amx {
                asm!("tilerelease", options(nostack, nomem));
            }
        }
        if near.len() > 1 << 20 {
            near.retain(|&(t, v, _)| {
                v >= f32::from_bits(tops[t as usize].load(Ordering::Relaxed))
                    - 2.0 * slack[t as usize]
            });
        }
    }
}

/// Elsewhere neither kernel runs ([`Kernel::runs_here`]), so no [`Packed`] is made.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod x86 {
    pub(super) fn scan_part(
        _: &crate::rows::init::omp::bf16::Packed,
        _: &[u16],
        _: usize,
        _: &[f32],
        _: std::ops::Range<usize>,
        _: &[std::sync::atomic::AtomicU32],
        _: &mut Vec<(u32, f32, u32)>,
    ) {
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::pursuit::dot64;
    use super::*;
    use crate::rng::Rng;

    /// n standard normals as f32 (seeded; exact_pick's tests use them too).
    pub(in crate::rows::init::omp) fn normals(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed, 3);
        (0..n).map(|_| r.normal() as f32).collect()
    }

    /// Round to nearest, ties to even, on bf16's 8 significant bits.
    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(-2.0), 0xc000);
        // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: to the even one, 1.
        assert_eq!(bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶: up.
        assert_eq!(bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
    }

    /// Odd sizes (atoms, width and targets past multiples of 32): each target's top within its
    /// bound of the largest exact |c|, every kept value within the bound of its exact |c|, and
    /// the atom of the largest exact |c| always kept.
    #[test]
    fn scan_keeps_the_exact_argmax_and_its_values_are_within_the_bound() {
        each_kernel(scan_keeps_the_exact_argmax);
    }

    /// `test` with every kernel this CPU runs (the others named as skipped).
    pub(in crate::rows::init::omp) fn each_kernel(test: impl Fn(Kernel)) {
        for kernel in Kernel::ALL {
            if kernel.runs_here() {
                test(kernel);
            } else {
                eprintln!("{kernel:?} skipped: this CPU does not run it");
            }
        }
    }

    fn scan_keeps_the_exact_argmax(kernel: Kernel) {
        let (s, d, n) = (1000, 100, 70);
        let dict = normals(s * d, 1);
        let r = normals(n * d, 2);
        let rows = Rows {
            data: &dict,
            rows: s,
            cols: d,
        };
        let p = Packed::for_kernel(rows, kernel).unwrap();
        let (_, slack) = slacks(&p, &r, d);
        let found = scan(&p, &targets_bf16(&p, &r, n), n, &slack).unwrap();
        for t in 0..n {
            let rt = &r[t * d..(t + 1) * d];
            let exact: Vec<f64> = (0..s).map(|a| dot64(rows.row(a), rt).abs()).collect();
            let (best, arg) =
                exact.iter().enumerate().fold(
                    (0f64, 0),
                    |(m, i), (j, &v)| if v > m { (v, j) } else { (m, i) },
                );
            let b = f64::from(slack[t]);
            let kept: Vec<&(u32, f32, u32)> = found.iter().filter(|x| x.0 as usize == t).collect();
            let top = kept.iter().fold(0f32, |m, x| m.max(x.1));
            assert!(
                (f64::from(top) - best).abs() <= b,
                "{kernel:?} target {t}: top"
            );
            assert!(
                kept.iter().any(|x| x.2 as usize == arg),
                "{kernel:?} target {t}: argmax {arg} kept"
            );
            for &&(_, v, a) in &kept {
                assert!(
                    (f64::from(v) - exact[a as usize]).abs() <= b,
                    "{kernel:?} target {t} atom {a}"
                );
            }
            // Few kept: the bound is tight enough to be useful.
            assert!(
                kept.len() < s / 10,
                "{kernel:?} target {t}: {} kept",
                kept.len()
            );
        }
    }
}
