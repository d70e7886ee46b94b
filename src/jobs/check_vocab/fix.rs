//! Where a finding's fix writes. The fix itself is a [`crate::plan::Plan`] whose request
//! ([`crate::plan::Request`]) says which tool on which input with which target.

use super::read::dir_of;
use std::path::{Path, PathBuf};

/// Where a fix command should write: beside the input, never over it; a folder for a folder
/// (the output rule: a model folder comes out as a complete folder).
pub(super) fn fixed_path(ckpt: &Path) -> PathBuf {
    if ckpt.is_dir() {
        return PathBuf::from(format!("{}-fixed", ckpt.display()));
    }
    let stem = ckpt
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = ckpt
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    dir_of(ckpt).join(format!("{stem}-fixed{ext}"))
}
