//! Writing a Hugging Face Trainer checkpoint folder (`checkpoint-N/`) whose vocabulary was
//! planned by sanitize-checkpoint: the model's weights with the new rows (as extend-embeddings
//! writes them), optimizer.pt as the plan laid it out (its NaN/Inf counted as it is copied),
//! then config.json, the tokenizer and the folder's other files, everything beside the output,
//! verified, then renamed into place.

use crate::error::Result;
use crate::formats::model_folder as folder;
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::write::write_torch_scanning;
pub use crate::formats::torch::writer::TorchLayout;
use crate::formats::trainer::OPTIMIZER;
use crate::formats::Tensors;
use crate::output::folder::{AtomicFolder, Carried, Left};
use crate::output::json_text::{EditedFile, JsonEdit};
use crate::output::later::Later;
use crate::output::manifest::FileManifest;
use crate::rows::device::Device;
use crate::rows::init::Init;
use crate::rows::resize::{grown_map, Resize};
use crate::rows::write::{file_name, write, WriteOptions};
use crate::ties::Tie;
use std::path::Path;

/// What the plan decided for the folder, as the writer needs it.
pub struct FolderWrite<'c, 'p> {
    /// The input folder.
    pub dir: &'c Path,
    pub model: &'c Tensors,
    /// The vocabulary matrices to grow or cut (their ties follow), and their new rows' init.
    pub resizes: &'p [Resize<'c>],
    pub init: &'p Init,
    pub ties: &'p [Tie],
    pub target: u64,
    /// How the weights are written.
    pub write: &'p WriteOptions,
    /// optimizer.pt as it will be written; none when it is dropped.
    pub optimizer: Option<&'p TorchLayout<'c>>,
    pub globals: &'p GlobalPolicy,
    /// config.json's edit, when there is one.
    pub config: Option<&'p JsonEdit>,
    /// `--tokenizer`: put in place of the folder's.
    pub tokenizer: Option<&'p Path>,
    /// The names of the folder's files left out on purpose (not carried).
    pub left_names: Vec<String>,
    /// Every file read: none of them may be the output.
    pub protected: &'p [&'p Path],
    pub overwrite: bool,
}

/// What [`write_folder`] wrote.
pub struct FolderWritten {
    /// The files written, by their paths in the output.
    pub manifest: Vec<FileManifest>,
    /// optimizer.pt's tensors with NaN or Inf: (name, NaN count, Inf count).
    pub nonfinite: Vec<(String, u64, u64)>,
    pub carried: Vec<Carried>,
    pub left_out: Vec<Left>,
    pub edited: Vec<EditedFile>,
}

/// Write the planned folder into `out`.
pub fn write_folder(w: &FolderWrite<'_, '_>, out: &Path) -> Result<FolderWritten> {
    crate::output::folder::folder_destination_name(out)?;
    let out_folder = AtomicFolder::create(out, w.protected, w.overwrite)?;
    let (mut manifest, mut written) = write_model(w, &out_folder)?;
    let mut nonfinite = Vec::new();
    if let Some(optimizer) = w.optimizer {
        let dest = out_folder.join(OPTIMIZER);
        let x = write_torch_scanning(optimizer, &dest, w.protected, w.globals)
            .map_err(|e| out_folder.about(e))?;
        manifest.push(x.manifest);
        nonfinite = x.nonfinite;
        written.push(OPTIMIZER.into());
    }
    written.extend(w.left_names.iter().cloned());
    let merged = match w.tokenizer {
        Some(tk) => Some(crate::tokenizer::base::folder_file(tk)?),
        None => None,
    };
    let done = folder::finish(
        &out_folder,
        w.dir,
        &mut written,
        w.config,
        merged.as_ref(),
        w.protected,
        false,
    )?;
    let tmp = out_folder.path().to_path_buf();
    out_folder.commit()?;
    for m in &mut manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    Ok(FolderWritten {
        manifest,
        nonfinite,
        carried: done.carried,
        left_out: done.left_out,
        edited: done.edited,
    })
}

/// The model's new rows computed and its weights written into the output folder: their
/// manifests and the names of the files written.
fn write_model(
    w: &FolderWrite<'_, '_>,
    out_folder: &AtomicFolder,
) -> Result<(Vec<FileManifest>, Vec<String>)> {
    let model = w.model;
    let tails: Vec<Later> = w
        .resizes
        .iter()
        .map(|r| {
            r.compute(w.init, &Device::cpu(None))
                .map(|(b, _)| Later::ready(b))
        })
        .collect::<Result<_>>()?;
    let new_bytes = grown_map(w.resizes, &tails, w.ties);
    let weights_dest = match model.index {
        None => out_folder.join(&file_name(&model.path)),
        Some(_) => out_folder.path().to_path_buf(),
    };
    let manifest = write(
        model,
        &weights_dest,
        new_bytes,
        w.target,
        w.write,
        w.protected,
        None,
    )
    .map_err(|e| out_folder.about(e))?;
    let mut written: Vec<String> = manifest.iter().map(|m| file_name(&m.path)).collect();
    if model.index.is_some() {
        written.push(file_name(&model.path));
    }
    Ok((manifest, written))
}
