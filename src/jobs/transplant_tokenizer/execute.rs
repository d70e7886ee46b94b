//! Carrying out transplant-tokenizer's plan: the destination checked, the vocabulary matrices
//! gathered by the row map (their made rows computed while the writer copies every other
//! tensor), the output folder completed (config files, NEW's tokenizer) and renamed into place.

use super::options::Options;
use super::plan::Planned;
use super::report::Report;
use super::tokenizer_files::TokenizerOut;
use crate::error::{Error, Result};
use crate::formats::{Format, Tensors};
use crate::output;
use crate::output::folder::AtomicFolder;
use crate::output::json_text::JsonEdit;
use crate::output::later::{FailUnset, Later};
use crate::rows::resize::{grown_map, RowNorms};
use crate::rows::write::{file_name, write, WriteOptions};
use crate::tokenizer::base::load_tokenizer;
use std::path::{Path, PathBuf};

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
    if opts.dry_run {
        set_norms(&mut report, compute()?);
        report.edited = json
            .iter()
            .filter(|(_, e)| !e.changes.is_empty())
            .map(|(n, e)| output::json_text::EditedFile {
                file: out.join(n),
                changes: e.changes.clone(),
            })
            .collect();
        return Ok(report);
    }
    let folder = destination(ckpt, folder_in.is_some(), out, &protected, opts)?;
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
    let (norms, written) = std::thread::scope(|s| {
        let computing = s.spawn(|| output::priority::in_background(compute));
        let written = write(
            ckpt,
            &weights_dest,
            new_bytes,
            report.new_rows,
            &how,
            &protected,
        );
        let norms = computing.join().unwrap_or_else(|_| {
            Err(Error::device(
                crate::error::DeviceStage::Compute,
                "a thread panicked",
            ))
        });
        (norms, written)
    });
    let norms = norms?;
    report.manifest = match &folder {
        Some(f) => written.map_err(|e| f.about(e))?,
        None => written?,
    };
    set_norms(&mut report, norms);
    if let (Some(f), Some(layout)) = (&folder, &optimizer) {
        let dest = f.join(crate::formats::trainer::OPTIMIZER);
        let m = crate::formats::torch::write::write_torch(
            layout,
            &dest,
            &protected,
            &opts.open.globals,
        )
        .map_err(|e| f.about(e))?;
        report.manifest.push(m);
    }
    if let (Some(folder), Some(dir), Some(tk)) = (folder, &folder_in, tokenizer) {
        let done = Done {
            folder,
            dir,
            tk: &tk,
            json: &json,
            protected: &protected,
        };
        finish_folder(ckpt, done, &mut report, out, opts)?;
    }
    report.output = Some(out.to_path_buf());
    Ok(report)
}

/// What completing the output folder needs.
struct Done<'a> {
    folder: AtomicFolder,
    dir: &'a Path,
    tk: &'a TokenizerOut,
    json: &'a [(String, JsonEdit)],
    protected: &'a [&'a Path],
}

/// The rest of the folder (config files, the new tokenizer, every other file carried), then the
/// rename into place.
fn finish_folder(
    ckpt: &Tensors,
    d: Done<'_>,
    report: &mut Report,
    out: &Path,
    opts: &Options,
) -> Result<()> {
    let mut written: Vec<String> = report.manifest.iter().map(|m| file_name(&m.path)).collect();
    if ckpt.index.is_some() {
        written.push(file_name(&ckpt.path));
    }
    let done = crate::formats::model_folder::finish_with(
        &d.folder,
        d.dir,
        &mut written,
        d.json,
        &d.tk.copied,
        |p| load_tokenizer(p).map(|_| ()),
        &d.tk.stale,
        d.protected,
        opts.link,
    )?;
    report.carried = done.carried;
    report.left_out = done.left_out;
    report.edited = done.edited;
    let tmp = d.folder.path().to_path_buf();
    d.folder.commit()?;
    for m in &mut report.manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    Ok(())
}

fn set_norms(report: &mut Report, norms: Vec<Option<RowNorms>>) {
    for (c, n) in report.changed.iter_mut().zip(norms) {
        c.old_mean_row_norm = n.as_ref().map(|n| n.old);
        c.new_mean_row_norm = n.as_ref().map(|n| n.new);
    }
}

/// The output's place, checked before anything is computed.
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
