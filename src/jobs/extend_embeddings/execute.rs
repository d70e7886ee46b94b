//! Carrying out extend-embeddings' plan: the destination checked, the new rows computed while
//! the writer copies, the output folder completed and renamed into place.

use super::options::{Options, Target};
use super::{Planned, Report};
use crate::error::{Error, Result};
use crate::formats::{Format, Tensors};
use crate::output;
use crate::output::folder::AtomicFolder;
use crate::output::later::{FailUnset, Later};
use crate::rows::resize::grown_map;
use crate::rows::resize::RowNorms;
use crate::rows::write::{file_name, write, WriteOptions};
use std::path::{Path, PathBuf};

/// Carry a plan out: the destination checked, the new rows computed while the writer copies the
/// old ones, the folder completed and renamed into place. Writes nothing for a dry run or when
/// there is nothing to do.
pub fn execute(ckpt: &Tensors, plan: Planned<'_>, out: &Path, opts: &Options) -> Result<Report> {
    let Planned {
        mut report,
        resizes,
        init,
        device,
        config_edit,
        folder_in,
        inputs,
    } = plan;
    // Already at the target: nothing is written (a copy would be the input again).
    let dry = opts.dry_run || report.nothing_to_do;
    let protected: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let tails: Vec<Later> = resizes.iter().map(|r| Later::new(r.tail_len)).collect();
    let compute = || -> Result<Vec<Option<RowNorms>>> {
        let _unset = FailUnset(&tails);
        resizes
            .iter()
            .zip(&tails)
            .map(|(r, tail)| {
                let (bytes, norms) = r.compute(&init, &device)?;
                tail.set(bytes);
                Ok(norms)
            })
            .collect()
    };
    if dry {
        let norms = compute()?;
        set_norms(&mut report, norms);
        // The plan's config.json edit, as the run reports it (the file by its path in the output).
        if let Some(c) = config_edit.filter(|c| opts.dry_run && !c.changes.is_empty()) {
            report.edited.push(crate::output::json_text::EditedFile {
                file: out.join("config.json"),
                changes: c.changes,
            });
        }
        return Ok(report);
    }
    // The destination is checked before anything is computed.
    let folder = destination(ckpt, folder_in.is_some(), out, &protected, opts)?;
    // Weights go into the temp folder under the input's own file names.
    let weights_dest = match &folder {
        Some(f) if ckpt.index.is_none() => f.join(&file_name(&ckpt.path)),
        Some(f) => f.path().to_path_buf(),
        None => out.to_path_buf(),
    };
    let new_bytes = grown_map(&resizes, &tails, &report.ties);
    let how = WriteOptions {
        file_sha256: opts.file_sha256,
        link: opts.link,
        open: opts.open.clone(),
    };
    // The writer starts copying at once: the disk is busy while the new rows are computed
    // (on threads that yield the CPU to it), and whoever reaches them waits.
    let (norms, written) = std::thread::scope(|s| {
        let computing = s.spawn(|| output::priority::in_background(compute));
        let written = write(
            ckpt,
            &weights_dest,
            new_bytes,
            report.new_rows,
            &how,
            &protected,
            None,
        );
        let norms = computing.join().unwrap_or_else(|_| {
            Err(Error::device(
                crate::error::DeviceStage::Compute,
                "a thread panicked",
            ))
        });
        (norms, written)
    });
    // The computation's own error says more than the writer's wait for it.
    let norms = norms?;
    report.manifest = match &folder {
        Some(f) => written.map_err(|e| f.about(e))?,
        None => written?,
    };
    set_norms(&mut report, norms);
    match (folder, &folder_in) {
        (Some(folder), Some(dir)) => {
            let done = FolderDone {
                folder,
                dir,
                config_edit: config_edit.as_ref(),
                protected: &protected,
            };
            finish_folder(ckpt, done, &mut report, out, opts)?;
        }
        _ => report.output = Some(out.to_path_buf()),
    }
    Ok(report)
}

fn set_norms(report: &mut Report, norms: Vec<Option<RowNorms>>) {
    for (c, n) in report.changed.iter_mut().zip(norms) {
        c.old_mean_row_norm = n.as_ref().map(|n| n.old);
        c.new_mean_row_norm = n.as_ref().map(|n| n.new);
    }
}

/// The output's place, checked before anything is computed: a temp folder beside `out` for a
/// folder output; for a file, that `out` may be written.
fn destination(
    ckpt: &Tensors,
    folder: bool,
    out: &Path,
    protected: &[&Path],
    opts: &Options,
) -> Result<Option<AtomicFolder>> {
    if folder {
        output::folder::folder_destination_name(out)?;
        return Ok(Some(AtomicFolder::create(out, protected, opts.overwrite)?));
    }
    let ext: &[&str] = match ckpt.format {
        Format::Safetensors => &["safetensors"],
        _ => &["pt", "pth", "bin", "ckpt"],
    };
    output::folder::file_destination(out, protected, ckpt.format.name(), ext, opts.overwrite)?;
    Ok(None)
}

/// What completing the output folder needs.
struct FolderDone<'a> {
    folder: AtomicFolder,
    dir: &'a Path,
    config_edit: Option<&'a output::json_text::JsonEdit>,
    protected: &'a [&'a Path],
}

/// The rest of the folder: config.json updated, the merged tokenizer in place of the old one,
/// every other file carried over; then the whole folder is renamed into place.
fn finish_folder(
    ckpt: &Tensors,
    done: FolderDone<'_>,
    report: &mut Report,
    out: &Path,
    opts: &Options,
) -> Result<()> {
    let mut written: Vec<String> = report.manifest.iter().map(|m| file_name(&m.path)).collect();
    if ckpt.index.is_some() {
        written.push(file_name(&ckpt.path));
    }
    let merged = match &opts.target {
        Target::Tokenizer(m) => Some(crate::tokenizer::base::folder_file(m)?),
        Target::Rows(_) => None,
    };
    let folder = done.folder;
    let finished = crate::formats::model_folder::finish(
        &folder,
        done.dir,
        &mut written,
        done.config_edit,
        merged.as_ref(),
        done.protected,
        opts.link,
    )?;
    report.config = finished.config.map(|n| out.join(n));
    report.tokenizer = finished.tokenizer.map(|n| out.join(n));
    report.carried = finished.carried;
    report.left_out = finished.left_out;
    report.edited = finished.edited;
    let tmp = folder.path().to_path_buf();
    folder.commit()?;
    for m in &mut report.manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    report.output = Some(out.to_path_buf());
    Ok(())
}
