//! Writing a torch training checkpoint file whose vocabulary was planned by sanitize-checkpoint:
//! the file as the plan laid it out (grown weights and moments inside it), its NaN/Inf counted as
//! it is copied.

use crate::error::Result;
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::write::write_torch_scanning;
pub use crate::formats::torch::write::TorchWritten;
use crate::formats::torch::writer::TorchLayout;
use std::path::Path;

/// Write `torch` to the file `out` (a torch file's name, as the input is; replaced only with
/// `overwrite`), none of `protected` being it.
pub fn write_file(
    torch: &TorchLayout<'_>,
    out: &Path,
    protected: &[&Path],
    globals: &GlobalPolicy,
    overwrite: bool,
) -> Result<TorchWritten> {
    crate::output::folder::file_destination(
        out,
        protected,
        "a torch file, as the input is",
        &["pt", "pth", "ckpt", "bin", "tar"],
        overwrite,
    )?;
    write_torch_scanning(torch, out, protected, globals)
}
