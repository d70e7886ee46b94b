//! Carrying out trim-vocab's plan through `rows::apply`; a file output's map file beside it.

use super::options::Options;
use super::plan::{padding_init, Planned};
use super::report::Report;
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::output;
use crate::rows::apply::{apply, Edits, How, Optimizer};
use std::path::{Path, PathBuf};

/// Where a file output's map file goes: `OUT.token_map.json`.
pub(super) fn map_beside(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".token_map.json");
    out.with_file_name(name)
}

/// Carry a plan out (a dry run computes nothing it does not need and writes nothing).
pub fn execute<'c>(
    ckpt: &'c Tensors,
    plan: Planned<'c>,
    optimizer: Option<Optimizer<'c>>,
    out: &Path,
    opts: &Options,
) -> Result<Report> {
    let Planned {
        mut report,
        resizes,
        folder,
        map_bytes,
        inputs,
    } = plan;
    let file_output = folder.is_none();
    let map_path = if file_output {
        map_beside(out)
    } else {
        out.join(super::files::MAP_FILE)
    };
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    if file_output && !opts.dry_run {
        output::folder::file_destination(&map_path, &protected, "JSON", &["json"], opts.overwrite)?;
    }
    let (init, device) = padding_init();
    let edits = Edits {
        resizes,
        init,
        device,
        ties: report.ties.clone(),
        new_rows: report.new_rows,
        optimizer,
        folder,
        inputs: inputs.clone(),
    };
    let how = How {
        file_sha256: opts.file_sha256,
        link: opts.link,
        overwrite: opts.overwrite,
        dry_run: opts.dry_run,
        open: opts.open.clone(),
    };
    let done = apply(ckpt, edits, out, &how)?;
    report.edited = done.edited;
    report.map_file = Some(map_path.clone());
    if opts.dry_run {
        return Ok(report);
    }
    if file_output {
        output::write_bytes(&map_path, &protected, &map_bytes, |tmp| {
            let back = std::fs::read(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
            serde_json::from_slice::<serde_json::Value>(&back)
                .map(|_| ())
                .map_err(|e| Error::format(tmp, e.to_string()))
        })?;
    }
    report.manifest = done.manifest;
    report.carried = done.carried;
    report.left_out = done.left_out;
    report.output = Some(out.to_path_buf());
    Ok(report)
}
