//! Carrying out transplant-tokenizer's plan through `rows::apply`: the vocabulary matrices
//! gathered by the row map, a Trainer folder's optimizer.pt beside them, the output folder
//! completed (config files, NEW's tokenizer) and renamed into place.

use super::options::Options;
use super::plan::Planned;
use super::report::Report;
use crate::error::Result;
use crate::formats::Tensors;
use crate::output::folder::NewFile;
use crate::rows::apply::{apply, Edits, FolderEdits, How};
use std::path::Path;

/// Carry a plan out (a dry run computes the made rows' norms and writes nothing).
pub fn execute(ckpt: &Tensors, plan: Planned<'_>, out: &Path, opts: &Options) -> Result<Report> {
    let Planned {
        mut report,
        resizes,
        init,
        device,
        json,
        tokenizer,
        optimizer,
        folder_in,
        inputs,
    } = plan;
    let folder = folder_in.map(|dir| {
        let (files, stale) = tokenizer
            .map(|tk| {
                let files = tk.copied.into_iter().map(|(n, p)| (n, NewFile::Path(p)));
                (files.collect(), tk.stale)
            })
            .unwrap_or_default();
        FolderEdits {
            dir,
            json,
            files,
            stale,
        }
    });
    let edits = Edits {
        resizes,
        init,
        device,
        ties: report.ties.clone(),
        new_rows: report.new_rows,
        optimizer,
        folder,
        inputs,
    };
    let how = How {
        file_sha256: opts.file_sha256,
        link: opts.link,
        overwrite: opts.overwrite,
        dry_run: opts.dry_run,
        open: opts.open.clone(),
    };
    let done = apply(ckpt, edits, out, &how)?;
    for (c, n) in report.changed.iter_mut().zip(&done.norms) {
        c.old_mean_row_norm = n.as_ref().map(|n| n.old);
        c.new_mean_row_norm = n.as_ref().map(|n| n.new);
    }
    report.edited = done.edited;
    if !opts.dry_run {
        report.manifest = done.manifest;
        report.carried = done.carried;
        report.left_out = done.left_out;
        report.output = Some(out.to_path_buf());
    }
    Ok(report)
}
