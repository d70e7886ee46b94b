//! Where the initialisation maths runs: `--device cpu|cuda|auto`. The CPU path (init.rs) is the
//! reference; the CUDA path (cuda/, feature `cuda`) runs Hewitt's Σ-free product (its normals
//! bit-identical for a seed) and omp's pursuit, and differs only by summation order. Column
//! statistics and subword-mean stay on the CPU (bound by host memory: measured slower on the GPU). Every check that the GPU path can run is made before any CUDA library call
//! (cudarc panics when a library is missing): a missing driver is exit 2 for `cuda`, and one
//! info line and the CPU for `auto`.

use super::init::omp::{self, Combination, Rows};
use super::init::{self, Init, Matrix, Stats};
use crate::error::{DeviceStage, Error, Result};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Request {
    Cpu,
    Cuda,
    #[default]
    Auto,
}

/// The device chosen, and the line that says why when it is not what was asked.
pub struct Device {
    #[cfg(feature = "cuda")]
    gpu: Option<std::sync::Arc<super::cuda::Gpu>>,
    pub name: String,
    pub note: Option<String>,
}

/// Matrices at least this large use the GPU under `auto` (below it, starting CUDA and compiling
/// the kernels costs more than the CPU path).
pub const AUTO_MIN_BYTES: u64 = 256 << 20;

/// Tests only: a smaller threshold for `auto`, so that the test suites' small fixtures run the
/// GPU path on a machine that has one (scripts/gpu-check.sh sets it to 0).
#[cfg(feature = "cuda")]
const AUTO_MIN_FROM_ENV: &str = "CKPT_SURGERY_TEST_AUTO_MIN_BYTES";

#[cfg(feature = "cuda")]
fn auto_min_bytes() -> u64 {
    std::env::var(AUTO_MIN_FROM_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(AUTO_MIN_BYTES)
}

impl Device {
    pub fn cpu(note: Option<String>) -> Device {
        Device {
            #[cfg(feature = "cuda")]
            gpu: None,
            name: "cpu".into(),
            note,
        }
    }

    /// Pick the device for a job whose largest matrix has `bytes` bytes and whose init runs on
    /// the GPU (`gpu_work`: Hewitt's product, omp; every other init is bound by host memory and
    /// stays on the CPU under `auto`).
    pub fn select_for(request: Request, bytes: u64, gpu_work: bool) -> Result<Device> {
        if request == Request::Auto && !gpu_work {
            return Ok(Device::cpu(Some(
                "only hewitt and omp run on the GPU (this init is bound by host memory): using the CPU"
                    .into(),
            )));
        }
        Device::select(request, bytes)
    }

    /// Pick the device for a job whose largest matrix has `bytes` bytes.
    pub fn select(request: Request, bytes: u64) -> Result<Device> {
        if request == Request::Cpu {
            return Ok(Device::cpu(None));
        }
        #[cfg(feature = "cuda")]
        {
            if request == Request::Auto {
                if let Some(why) = super::cuda::missing() {
                    return Ok(Device::cpu(Some(format!("{why}: using the CPU"))));
                }
                if bytes < auto_min_bytes() {
                    return Ok(Device::cpu(Some(format!(
                        "the matrix is under {} MiB: the CPU is quicker than starting the GPU",
                        auto_min_bytes() >> 20
                    ))));
                }
            }
            match super::cuda::Gpu::open() {
                Ok(g) => Ok(Device {
                    name: g.describe(),
                    gpu: Some(std::sync::Arc::new(g)),
                    note: None,
                }),
                Err(why) if request == Request::Cuda => {
                    Err(Error::device(DeviceStage::Open, why.to_string()))
                }
                Err(why) => Ok(Device::cpu(Some(format!("{why}: using the CPU")))),
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = bytes;
            match request {
                Request::Cuda => Err(Error::device(
                    DeviceStage::NotBuilt,
                    "this build has no CUDA path (build with --features cuda)",
                )),
                _ => Ok(Device::cpu(Some(
                    "this build has no CUDA path (build with --features cuda for one)".into(),
                ))),
            }
        }
    }

    /// Column means and mean row norm: on the CPU whatever the device. One read of the matrix,
    /// bound by memory on the host: on an H100 machine (benches/cuda.rs, docs/benchmarks.md) the
    /// GPU took 0.52 s for 2 GiB of bf16 (the matrix must first cross PCIe) and the CPU 0.06 s.
    pub fn stats(&self, m: &Matrix) -> Result<Stats> {
        Ok(init::stats(m))
    }

    /// Orthogonal matching pursuit of each target over the dictionary's rows (`--init omp`).
    pub fn omp(&self, dict: Rows, targets: Rows, k: usize) -> Result<Vec<Combination>> {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            return g
                .omp(dict, targets, k)
                .map_err(|e| Error::device(DeviceStage::Run, e.to_string()));
        }
        Ok(omp::pursue(dict, targets, k))
    }

    /// `k` new rows (f64, row-major).
    pub fn new_rows(&self, m: &Matrix, stats: &Stats, how: &Init, k: usize) -> Result<Vec<f64>> {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            let r = match how {
                Init::Hewitt { epsilon, seed } if !(k > m.cols && m.rows > m.cols) => {
                    Some(g.hewitt_sigma_free(m, &stats.mean, k, *epsilon, *seed))
                }
                // Subword-mean stays on the CPU: a gather of a few rows per token, bound by
                // memory; the GPU must first receive the whole table and send back f64 rows
                // (H100 machine, 100000 tokens from 2 GiB of bf16: GPU 4.75 s, CPU 1.09 s).
                _ => None,
            };
            if let Some(r) = r {
                return r.map_err(|e| Error::device(DeviceStage::Run, e.to_string()));
            }
        }
        Ok(init::new_rows(m, stats, how, k))
    }
}
