//! Feature `cuda`: every kernel compiles to PTX through NVRTC for sm_80 and sm_90, by the code
//! path the binary uses (`embeddings::cuda::compile`). NVRTC is a host library: no GPU is
//! needed, only libnvrtc (`pip install nvidia-cuda-nvrtc-cu12`; scripts/cuda-check.sh does it).
//! Without it the test says "skipped: libnvrtc not found". With CKPT_SURGERY_PTX_DIR set, the
//! PTX is written there (for ptxas in scripts/cuda-check.sh).
#![cfg(feature = "cuda")]

use ckpt_surgery::rows::cuda;

#[test]
fn every_kernel_compiles_for_sm80_and_sm90_with_nvrtc() {
    if !cuda::loadable("nvrtc") {
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        let ptx = cuda::compile(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let src = ptx.to_src();
        for name in cuda::KERNEL_NAMES {
            assert!(
                src.contains(&format!(".entry {name}(")),
                "{arch}: no entry for {name}"
            );
        }
        assert!(
            src.contains(&format!(".target sm_{}", &arch[8..])),
            "{arch}"
        );
        // --fmad=false: no fused multiply-add anywhere (the CPU path rounds each operation).
        assert!(
            !src.contains("fma.rn"),
            "{arch}: a fused multiply-add was emitted"
        );
        if let Some(dir) = std::env::var_os("CKPT_SURGERY_PTX_DIR") {
            std::fs::write(
                std::path::Path::new(&dir).join(format!("kernels_{arch}.ptx")),
                &src,
            )
            .unwrap();
        }
        eprintln!(
            "{arch}: {} kernels, {} bytes of PTX",
            cuda::KERNEL_NAMES.len(),
            src.len()
        );
    }
}

#[test]
fn without_a_driver_the_gpu_is_refused_by_a_message_not_a_panic() {
    if cuda::loadable("cuda") {
        eprintln!("skipped: a CUDA driver is present here");
        return;
    }
    let why = cuda::missing().expect("something is missing");
    assert!(why.contains("libcuda"), "{why}");
    assert!(cuda::Gpu::open().is_err());
}
