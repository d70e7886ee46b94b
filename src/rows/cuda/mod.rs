//! The CUDA path (feature `cuda`): kernels.cu compiled at run time by NVRTC for the device's
//! architecture, launched through cudarc (loaded dynamically: the build and the tests need no
//! CUDA). Matrices are streamed in row blocks through pinned host memory on a copy stream while
//! the compute stream works on the previous block; cudarc orders the two with events on each
//! buffer. Results equal the CPU path's up to summation order (kernels.cu, device.rs).

use super::init::omp::{dot64, Combination, Rows};
use super::init::{Matrix, Stats};
use crate::dtype::DType;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use std::sync::Arc;

/// The kernels' source, compiled by NVRTC at run time.
pub const KERNELS: &str = include_str!("kernels.cu");

/// The kernel names, in the order [`Gpu`] loads them.
pub const KERNEL_NAMES: [&str; 11] = [
    "ck_col_sum",
    "ck_row_norm",
    "ck_segment_mean",
    "ck_normals",
    "ck_centre",
    "ck_xtz",
    "ck_omp_corr",
    "ck_omp_pick",
    "ck_omp_refit",
    "ck_omp_residual",
    "ck_omp_pick_part",
];

/// Can a CUDA library be loaded (tried by the names cudarc tries)? Checked before any cudarc
/// call, which panics when it cannot load one.
pub fn loadable(lib: &str) -> bool {
    cudarc::get_lib_name_candidates(lib).iter().any(|name| {
        let Ok(c) = std::ffi::CString::new(name.as_str()) else {
            return false;
        };
        // SAFETY: dlopen with a valid C string; the handle is closed at once.
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if h.is_null() {
                false
            } else {
                libc::dlclose(h);
                true
            }
        }
    })
}

/// Compile every kernel to PTX for `arch` (`compute_80`, `compute_90`, …): the code path the
/// binary uses. No fused multiply-add, so results round as the CPU path's do.
pub fn compile(arch: &'static str) -> Result<cudarc::nvrtc::Ptx, String> {
    if !loadable("nvrtc") {
        return Err("libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12, or a CUDA toolkit, and LD_LIBRARY_PATH)".into());
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        fmad: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        name: Some("kernels.cu".into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNELS, opts).map_err(|e| format!("NVRTC: {e}"))
}

fn arch_name(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, _) => "compute_90",
        (10, _) => "compute_100",
        (12, _) => "compute_120",
        _ => "compute_80",
    }
}

fn dtype_code(d: DType) -> Option<i32> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F64 => 3,
        _ => return None,
    })
}

type R<T> = Result<T, String>;

fn cu<T>(r: Result<T, cudarc::driver::DriverError>) -> R<T> {
    r.map_err(|e| format!("CUDA driver: {e}"))
}

/// A device with the kernels loaded.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    copy: Arc<CudaStream>,
    compute: Arc<CudaStream>,
    f: Vec<CudaFunction>,
    /// cuBLAS on the compute stream, for Hewitt's product; None (the ck_xtz kernel) when
    /// libcublas is not there.
    blas: Option<cudarc::cublas::CudaBlas>,
    name: String,
}

/// Rows per streamed block: about 64 MiB of the matrix.
fn block_rows(m: &Matrix) -> usize {
    let row = m.cols * (m.dtype.bits() / 8) as usize;
    ((64usize << 20) / row.max(1)).clamp(1, m.rows.max(1))
}

/// Threads per target in omp's pick (ck_omp_pick_part).
const PICK_PARTS: usize = 256;

fn cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.div_ceil(128)).max(1) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// What is missing for the GPU path, if anything (no CUDA call is made to find out).
pub fn missing() -> Option<String> {
    if !loadable("cuda") {
        return Some("no CUDA driver (libcuda.so.1 not found)".into());
    }
    if !loadable("nvrtc") {
        return Some(
            "no NVRTC (libnvrtc.so.12 not found: pip install nvidia-cuda-nvrtc-cu12)".into(),
        );
    }
    None
}

impl Gpu {
    /// Device 0, its kernels compiled for its architecture. Errors (never panics) when the
    /// driver, NVRTC or a device is missing.
    pub fn open() -> R<Gpu> {
        Gpu::open_with(true)
    }

    /// As [`Gpu::open`], without cuBLAS: Hewitt's product and omp's correlations then run on
    /// the ck_xtz / ck_omp_corr kernels (what a machine without libcublas gets; the GPU tests
    /// check both).
    pub fn open_kernels_only() -> R<Gpu> {
        Gpu::open_with(false)
    }

    fn open_with(want_blas: bool) -> R<Gpu> {
        if let Some(why) = missing() {
            return Err(why);
        }
        let ctx = CudaContext::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
        let (major, minor) = cu(ctx.compute_capability())?;
        let ptx = compile(arch_name(major, minor))?;
        let module = cu(ctx.load_module(ptx))?;
        let f = KERNEL_NAMES
            .iter()
            .map(|n| cu(module.load_function(n)))
            .collect::<R<Vec<_>>>()?;
        let copy = cu(ctx.new_stream())?;
        let compute = cu(ctx.new_stream())?;
        let blas = if want_blas && loadable("cublas") {
            cudarc::cublas::CudaBlas::new(compute.clone()).ok()
        } else {
            None
        };
        Ok(Gpu {
            name: format!(
                "cuda (sm_{major}{minor}{})",
                if blas.is_some() { ", cuBLAS" } else { "" }
            ),
            ctx,
            copy,
            compute,
            f,
            blas,
        })
    }

    pub fn describe(&self) -> String {
        self.name.clone()
    }

    /// Host → device copy rate from pinned memory, bytes per second (best of three 256 MiB
    /// copies): the floor of every path that streams a host matrix (benches/cuda.rs).
    pub fn h2d_rate(&self) -> R<f64> {
        let n = 256usize << 20;
        // SAFETY: the bytes copied are never read back; their values do not matter.
        let host = cu(unsafe { self.ctx.alloc_pinned::<u8>(n) })?;
        let mut dev = cu(self.copy.alloc_zeros::<u8>(n))?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            cu(self.copy.memcpy_htod(&host, &mut dev))?;
            cu(self.copy.synchronize())?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(n as f64 / best)
    }

    /// Stream `m` in row blocks: each block is copied (through a pinned buffer, on the copy
    /// stream) while the previous one is worked on (`work`, on the compute stream).
    fn for_blocks(
        &self,
        m: &Matrix,
        mut work: impl FnMut(&CudaSlice<u8>, usize, usize) -> R<()>,
    ) -> R<()> {
        let rows = block_rows(m);
        let row = m.cols * (m.dtype.bits() / 8) as usize;
        let mut pinned: Vec<PinnedHostSlice<u8>> = (0..2)
            // SAFETY: every byte used is written below before it is copied.
            .map(|_| cu(unsafe { self.ctx.alloc_pinned::<u8>(rows * row) }))
            .collect::<R<_>>()?;
        let mut dev: Vec<CudaSlice<u8>> = (0..2)
            .map(|_| cu(self.copy.alloc_zeros::<u8>(rows * row)))
            .collect::<R<_>>()?;
        for (i, r0) in (0..m.rows).step_by(rows).enumerate() {
            let r1 = (r0 + rows).min(m.rows);
            let b = i % 2;
            let host = cu(pinned[b].as_mut_slice())?;
            let n = (r1 - r0) * row;
            host[..n].copy_from_slice(&m.bytes[r0 * row..r1 * row]);
            cu(self.copy.memcpy_htod(&pinned[b], &mut dev[b]))?;
            work(&dev[b], r0, r1)?;
        }
        cu(self.compute.synchronize())
    }

    /// Column means (f64 sums in row order) and the mean row norm.
    pub fn stats(&self, m: &Matrix) -> R<Stats> {
        let dt = dtype_code(m.dtype).ok_or("dtype not supported on the GPU")?;
        let mut sum = cu(self.compute.alloc_zeros::<f64>(m.cols))?;
        let mut norms = cu(self.compute.alloc_zeros::<f64>(block_rows(m)))?;
        let mut norm_total = 0f64;
        let cols = m.cols as u64;
        self.for_blocks(m, |x, r0, r1| {
            let rows = (r1 - r0) as u64;
            let mut l = self.compute.launch_builder(&self.f[0]);
            l.arg(x).arg(&dt).arg(&rows).arg(&cols).arg(&mut sum);
            // SAFETY: argument types and order are ck_col_sum's.
            cu(unsafe { l.launch(cfg(m.cols)) })?;
            let mut l = self.compute.launch_builder(&self.f[1]);
            l.arg(x).arg(&dt).arg(&rows).arg(&cols).arg(&mut norms);
            // SAFETY: as above, ck_row_norm.
            cu(unsafe { l.launch(cfg(r1 - r0)) })?;
            let n = cu(self.compute.clone_dtoh(&norms))?;
            norm_total += n[..r1 - r0].iter().sum::<f64>();
            Ok(())
        })?;
        let sum = cu(self.compute.clone_dtoh(&sum))?;
        let n = m.rows.max(1) as f64;
        Ok(Stats {
            mean: sum.into_iter().map(|s| s / n).collect(),
            mean_row_norm: norm_total / n,
        })
    }

    /// Hewitt's Σ-free sampler: μ + sqrt(ε/N)·X_cᵀZ, Z's normals counter-based (the CPU path's).
    pub fn hewitt_sigma_free(
        &self,
        m: &Matrix,
        mu: &[f64],
        k: usize,
        epsilon: f64,
        seed: u64,
    ) -> R<Vec<f64>> {
        let dt = dtype_code(m.dtype).ok_or("dtype not supported on the GPU")?;
        let (n, d) = (m.rows, m.cols);
        if n == 0 || k == 0 {
            return Ok(mu.repeat(k));
        }
        let mu32: Vec<f32> = mu.iter().map(|&v| v as f32).collect();
        let mu_dev = cu(self.compute.clone_htod(&mu32))?;
        let rows = block_rows(m);
        let mut xc = cu(self.compute.alloc_zeros::<f32>(rows * d))?;
        let mut z = cu(self.compute.alloc_zeros::<f32>(rows * k))?;
        let mut acc = cu(self.compute.alloc_zeros::<f32>(d * k))?;
        let (d64, k64) = (d as u64, k as u64);
        self.for_blocks(m, |x, r0, r1| {
            let nr = (r1 - r0) as u64;
            let mut l = self.compute.launch_builder(&self.f[4]);
            l.arg(x)
                .arg(&dt)
                .arg(&mu_dev)
                .arg(&nr)
                .arg(&d64)
                .arg(&mut xc);
            // SAFETY: ck_centre's arguments.
            cu(unsafe { l.launch(cfg((r1 - r0) * d)) })?;
            let start = (r0 * k) as u64;
            let count = nr * k64;
            let mut l = self.compute.launch_builder(&self.f[3]);
            l.arg(&seed).arg(&start).arg(&count).arg(&mut z);
            // SAFETY: ck_normals' arguments.
            cu(unsafe { l.launch(cfg((r1 - r0) * k)) })?;
            match &self.blas {
                // acc (d × k, row-major) += Xcᵀ·Z; column-major, that is accᵀ (k × d) += Zᵀ·Xc
                // with Z stored as Zᵀ (k × rows, ld k) and Xc as Xcᵀ (d × rows, ld d).
                Some(blas) => {
                    use cudarc::cublas::{sys::cublasOperation_t as Op, Gemm, GemmConfig};
                    let g = GemmConfig {
                        transa: Op::CUBLAS_OP_N,
                        transb: Op::CUBLAS_OP_T,
                        m: k as i32,
                        n: d as i32,
                        k: (r1 - r0) as i32,
                        alpha: 1.0f32,
                        lda: k as i32,
                        ldb: d as i32,
                        beta: 1.0f32,
                        ldc: k as i32,
                    };
                    // SAFETY: the buffers hold k·rows, d·rows and k·d floats.
                    unsafe { blas.gemm(g, &z, &xc, &mut acc) }
                        .map_err(|e| format!("cuBLAS: {e:?}"))?;
                }
                None => {
                    let mut l = self.compute.launch_builder(&self.f[5]);
                    l.arg(&xc)
                        .arg(&z)
                        .arg(&nr)
                        .arg(&d64)
                        .arg(&k64)
                        .arg(&mut acc);
                    // SAFETY: ck_xtz's arguments.
                    cu(unsafe { l.launch(cfg(d * k)) })?;
                }
            }
            Ok(())
        })?;
        let acc = cu(self.compute.clone_dtoh(&acc))?;
        let scale = (epsilon / n as f64).sqrt();
        let mut out = vec![0f64; k * d];
        for (j, dst) in out.chunks_mut(d).enumerate() {
            for (c, o) in dst.iter_mut().enumerate() {
                *o = mu[c] + scale * f64::from(acc[c * k + j]);
            }
        }
        Ok(out)
    }

    /// Subword-mean: each listed new row the mean of its pieces' rows; the rest the column mean.
    pub fn subword_mean(
        &self,
        m: &Matrix,
        mean: &[f64],
        lists: &[Option<Vec<usize>>],
    ) -> R<Vec<f64>> {
        let dt = dtype_code(m.dtype).ok_or("dtype not supported on the GPU")?;
        let d = m.cols;
        let listed: Vec<(usize, &Vec<usize>)> = lists
            .iter()
            .enumerate()
            .filter_map(|(j, l)| l.as_ref().filter(|l| !l.is_empty()).map(|l| (j, l)))
            .collect();
        let mut out: Vec<f64> = mean.repeat(lists.len());
        if listed.is_empty() {
            return Ok(out);
        }
        let ids: Vec<i64> = listed
            .iter()
            .flat_map(|(_, l)| l.iter().map(|&i| i as i64))
            .collect();
        let mut offsets = vec![0i64];
        for (_, l) in &listed {
            offsets.push(offsets[offsets.len() - 1] + l.len() as i64);
        }
        // The rows are gathered from the whole matrix: copied once (subword-mean reads rows
        // anywhere in the table).
        let x = cu(self.compute.clone_htod(m.bytes))?;
        let ids = cu(self.compute.clone_htod(&ids))?;
        let offs = cu(self.compute.clone_htod(&offsets))?;
        let segs = listed.len() as u64;
        let mut res = cu(self.compute.alloc_zeros::<f64>(listed.len() * d))?;
        let cols = d as u64;
        let mut l = self.compute.launch_builder(&self.f[2]);
        l.arg(&x)
            .arg(&dt)
            .arg(&cols)
            .arg(&ids)
            .arg(&offs)
            .arg(&segs)
            .arg(&mut res);
        // SAFETY: ck_segment_mean's arguments.
        cu(unsafe { l.launch(cfg(listed.len() * d)) })?;
        let res = cu(self.compute.clone_dtoh(&res))?;
        for ((j, _), row) in listed.iter().zip(res.chunks(d)) {
            out[j * d..(j + 1) * d].copy_from_slice(row);
        }
        Ok(out)
    }

    /// Orthogonal matching pursuit of each target over the dictionary's rows (init::omp's
    /// interface): per block of targets, k steps of correlate (cuBLAS, or ck_omp_corr), pick,
    /// refit (f64, the CPU path's operations) and residual, all on the device.
    pub fn omp(&self, dict: Rows, targets: Rows, k: usize) -> R<Vec<Combination>> {
        let (s, d) = (dict.rows, dict.cols);
        let k = k.min(s);
        let st = &self.compute;
        let dict_dev = cu(st.clone_htod(dict.data))?;
        // Correlations of a block stay near 1 GiB.
        let b = ((1usize << 30) / (4 * s.max(1))).clamp(1, 4096);
        let mut out = Vec::with_capacity(targets.rows);
        for r0 in (0..targets.rows).step_by(b) {
            let r1 = (r0 + b).min(targets.rows);
            let ys = &targets.data[r0 * d..r1 * d];
            out.extend(self.omp_block(&dict_dev, s, d, ys, r1 - r0, k)?);
        }
        Ok(out)
    }

    fn omp_block(
        &self,
        dict: &CudaSlice<f32>,
        s: usize,
        d: usize,
        ys: &[f32],
        b: usize,
        k: usize,
    ) -> R<Vec<Combination>> {
        let st = &self.compute;
        let yy: Vec<f64> = ys.chunks(d.max(1)).map(|y| dot64(y, y)).collect();
        let done0: Vec<i32> = yy.iter().map(|&v| i32::from(v == 0.0 || k == 0)).collect();
        let y = cu(st.clone_htod(ys))?;
        let mut r = cu(st.clone_htod(ys))?;
        let yy = cu(st.clone_htod(&yy))?;
        let mut done = cu(st.clone_htod(&done0))?;
        let mut c = cu(st.alloc_zeros::<f32>(b * s))?;
        let mut atoms = cu(st.clone_htod(&vec![-1i64; b * k]))?;
        let mut count = cu(st.alloc_zeros::<u64>(b))?;
        let mut next = cu(st.alloc_zeros::<i64>(b))?;
        let mut l = cu(st.alloc_zeros::<f64>(b * k * k))?;
        let mut z = cu(st.alloc_zeros::<f64>(b * k))?;
        let mut x = cu(st.alloc_zeros::<f64>(b * k))?;
        // Threads per target for the pick (each scans every parts-th correlation).
        let parts = s.clamp(1, PICK_PARTS);
        let mut pv = cu(st.alloc_zeros::<f32>(b * parts))?;
        let mut pi = cu(st.alloc_zeros::<i64>(b * parts))?;
        let (b64, s64, d64, k64) = (b as u64, s as u64, d as u64, k as u64);
        let parts64 = parts as u64;
        for _ in 0..k {
            self.omp_corr(dict, &r, b, s, d, &mut c)?;
            let mut lb = st.launch_builder(&self.f[10]);
            lb.arg(&c).arg(&b64).arg(&s64).arg(&k64).arg(&parts64);
            lb.arg(&atoms)
                .arg(&count)
                .arg(&done)
                .arg(&mut pv)
                .arg(&mut pi);
            // SAFETY: ck_omp_pick_part's arguments.
            cu(unsafe { lb.launch(cfg(b * parts)) })?;
            let mut lb = st.launch_builder(&self.f[7]);
            lb.arg(&pv).arg(&pi).arg(&b64).arg(&parts64).arg(&mut next);
            // SAFETY: ck_omp_pick's arguments.
            cu(unsafe { lb.launch(cfg(b)) })?;
            let mut lb = st.launch_builder(&self.f[8]);
            lb.arg(dict)
                .arg(&y)
                .arg(&b64)
                .arg(&d64)
                .arg(&k64)
                .arg(&next);
            lb.arg(&mut atoms).arg(&mut count).arg(&mut l).arg(&mut z);
            lb.arg(&mut x).arg(&yy).arg(&mut done);
            // SAFETY: ck_omp_refit's arguments.
            cu(unsafe { lb.launch(cfg(b)) })?;
            let mut lb = st.launch_builder(&self.f[9]);
            lb.arg(dict).arg(&y).arg(&b64).arg(&d64).arg(&k64);
            lb.arg(&atoms).arg(&count).arg(&x).arg(&mut r);
            // SAFETY: ck_omp_residual's arguments.
            cu(unsafe { lb.launch(cfg(b * d)) })?;
            if cu(st.clone_dtoh(&done))?.iter().all(|&v| v != 0) {
                break;
            }
        }
        let (atoms, x) = (cu(st.clone_dtoh(&atoms))?, cu(st.clone_dtoh(&x))?);
        Ok((0..b)
            .map(|j| {
                let a: Vec<usize> = atoms[j * k..(j + 1) * k]
                    .iter()
                    .take_while(|&&a| a >= 0)
                    .map(|&a| a as usize)
                    .collect();
                let coefs = x[j * k..j * k + a.len()].to_vec();
                Combination { atoms: a, coefs }
            })
            .collect())
    }

    /// c (b × S, row-major) = r (b × d) · dictᵀ: cuBLAS when there is one, else ck_omp_corr.
    fn omp_corr(
        &self,
        dict: &CudaSlice<f32>,
        r: &CudaSlice<f32>,
        b: usize,
        s: usize,
        d: usize,
        c: &mut CudaSlice<f32>,
    ) -> R<()> {
        match &self.blas {
            // Column-major: cᵀ (S × b) = dict (stored as dictᵀ, d × S, ld d)ᵀ · rᵀ (d × b, ld d).
            Some(blas) => {
                use cudarc::cublas::{sys::cublasOperation_t as Op, Gemm, GemmConfig};
                let g = GemmConfig {
                    transa: Op::CUBLAS_OP_T,
                    transb: Op::CUBLAS_OP_N,
                    m: s as i32,
                    n: b as i32,
                    k: d as i32,
                    alpha: 1.0f32,
                    lda: d as i32,
                    ldb: d as i32,
                    beta: 0.0f32,
                    ldc: s as i32,
                };
                // SAFETY: the buffers hold S·d, b·d and b·S floats.
                unsafe { blas.gemm(g, dict, r, c) }.map_err(|e| format!("cuBLAS: {e:?}"))
            }
            None => {
                let (b64, s64, d64) = (b as u64, s as u64, d as u64);
                let mut lb = self.compute.launch_builder(&self.f[6]);
                lb.arg(dict).arg(r).arg(&b64).arg(&s64).arg(&d64).arg(c);
                // SAFETY: ck_omp_corr's arguments.
                cu(unsafe { lb.launch(cfg(b * s)) }).map(|_| ())
            }
        }
    }
}
