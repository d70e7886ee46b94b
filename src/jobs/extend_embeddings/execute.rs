//! Carrying out extend-embeddings' plan: the destination checked, the new rows computed while
//! the writer copies, the output folder completed and renamed into place.

use super::options::{Options, Target};
use super::{Planned, Report};
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::output;
use crate::output::later::{FailUnset, Later};
use crate::rows::resize::grown_map;
use crate::rows::resize::RowNorms;
use crate::rows::write::{write, Destination, FolderRest, WriteOptions};
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
    let folder = folder_in.is_some();
    let dest = Destination::check(ckpt, folder, out, &protected, opts.overwrite)?;
    // Weights go into the temp folder under the input's own file names.
    let weights_dest = dest.weights(ckpt, out);
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
    report.manifest = written.map_err(|e| dest.about(e))?;
    set_norms(&mut report, norms);
    if let Some(dir) = &folder_in {
        let merged = match &opts.target {
            Target::Tokenizer(m) => Some(crate::tokenizer::base::folder_file(m)?),
            Target::Rows(_) => None,
        };
        let rest = FolderRest {
            dir,
            config: config_edit.as_ref(),
            merged: merged.as_ref(),
            protected: &protected,
            link: opts.link,
        };
        if let Some(finished) = dest.finish(ckpt, &rest, &mut report.manifest, out)? {
            report.config = finished.config.map(|n| out.join(n));
            report.tokenizer = finished.tokenizer.map(|n| out.join(n));
            report.carried = finished.carried;
            report.left_out = finished.left_out;
            report.edited = finished.edited;
        }
    }
    report.output = Some(out.to_path_buf());
    Ok(report)
}

fn set_norms(report: &mut Report, norms: Vec<Option<RowNorms>>) {
    for (c, n) in report.changed.iter_mut().zip(norms) {
        c.old_mean_row_norm = n.as_ref().map(|n| n.old);
        c.new_mean_row_norm = n.as_ref().map(|n| n.new);
    }
}
