//! Writing a vocabulary change planned as row maps, whatever the job (transplant-tokenizer,
//! trim-vocab): the vocabulary tensors gathered by their `Resize` (made rows computed while the
//! writer copies every other tensor), a training checkpoint's optimizer file edited beside them,
//! and for a folder output the JSON edits, the files written whole (a new tokenizer), the input's
//! files left out and every other file carried; then the folder is renamed into place. A dry run
//! computes the made rows (their norms) and writes nothing.

use super::device::Device;
use super::init::Init;
use super::resize::{grown_map, Resize, RowNorms};
use super::write::{file_name, write, WriteOptions};
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind};
use crate::formats::model_folder::finish_with;
use crate::formats::torch::optimizer::gather::Moved;
use crate::formats::torch::writer::TorchLayout;
use crate::formats::trainer::OPTIMIZER;
use crate::formats::zero::write::{Resize as ZeroResize, RootFiles};
use crate::formats::zero::Zero;
use crate::formats::Training;
use crate::formats::{Format, OpenOptions, Tensors};
use crate::output;
use crate::output::folder::NewFile;
use crate::output::folder::{AtomicFolder, Carried, Left};
use crate::output::json_text::{EditedFile, JsonEdit};
use crate::output::later::{FailUnset, Later};
use crate::output::manifest::FileManifest;
use crate::ties::Tie;
use std::path::{Path, PathBuf};

/// What a folder output gets besides the weights.
pub(crate) struct FolderEdits {
    /// The input folder (the files not named here are carried from it).
    pub dir: PathBuf,
    /// JSON files of the folder edited: (name, edit).
    pub json: Vec<(String, JsonEdit)>,
    /// Files written whole (a new tokenizer's): (name, contents).
    pub files: Vec<(String, NewFile)>,
    /// Input files left out, and why.
    pub stale: Vec<(String, String)>,
}

/// A training checkpoint's optimizer state, edited by the same row map as the weights.
pub enum Optimizer<'c> {
    /// A Trainer folder's optimizer file, written beside the weights under its name.
    Beside(TorchLayout<'c>, &'static str),
    /// A torch training file's own tree (its moments gathered, or its optimizers removed): the
    /// weights' gathers are made on it, so the file is written once.
    Inside(TorchLayout<'c>),
    /// A DeepSpeed ZeRO checkpoint whose module states file the weights' gathers were planned on:
    /// the ZeRO writer lays out the module, every rank's master copy and moments, gathered by
    /// the same maps (`zero::write::Resize::gathered`), as a new save root.
    Zero(&'c Zero),
    /// A DeepSpeed ZeRO save root with the consolidated weights a Hugging Face Trainer run saved
    /// beside `global_step*/`: the gathers were planned on those weights (a folder output); the
    /// ZeRO writer writes the tag folder into the same output folder, its module, master copies
    /// and moments gathered by the same maps (`zero::write::Resize::gathered_beside`).
    ZeroBeside(&'c Zero),
    /// A torch Distributed Checkpoint folder whose vocabulary matrices the gathers were planned
    /// on: the DCP writer writes them and their moments (gathered by the same map, new ids zero)
    /// as new chunks, every other item carried.
    Dcp(&'c Dcp),
}

/// Everything the writer needs, decided by the job's planner.
pub(crate) struct Edits<'c> {
    pub resizes: Vec<Resize<'c>>,
    pub init: Init,
    pub device: Device,
    pub ties: Vec<Tie>,
    pub new_rows: u64,
    /// A training checkpoint's optimizer state with its edits.
    pub optimizer: Option<Optimizer<'c>>,
    /// None: a file output.
    pub folder: Option<FolderEdits>,
    /// Every file read: none of them may be the output.
    pub inputs: Vec<PathBuf>,
}

/// How to write: the tools' flags of the same names.
#[derive(Debug, Clone, Default)]
pub(crate) struct How {
    pub file_sha256: bool,
    pub link: bool,
    pub overwrite: bool,
    pub dry_run: bool,
    pub open: OpenOptions,
}

/// What was written (or, for a dry run, would be).
#[derive(Default)]
pub(crate) struct Applied {
    /// Per resize, the old and made rows' mean norms.
    pub norms: Vec<Option<RowNorms>>,
    pub manifest: Vec<FileManifest>,
    pub carried: Vec<Carried>,
    pub left_out: Vec<Left>,
    pub edited: Vec<EditedFile>,
}

/// Carry the edits out into `out`.
pub(crate) fn apply(ckpt: &Tensors, e: Edits<'_>, out: &Path, how: &How) -> Result<Applied> {
    let protected: Vec<&Path> = e.inputs.iter().map(PathBuf::as_path).collect();
    let (mut base, mut beside, mut elsewhere, mut zero_beside) = (None, None, None, None);
    match e.optimizer {
        Some(Optimizer::Inside(l)) => base = Some(l),
        Some(Optimizer::Beside(l, name)) => beside = Some((l, name)),
        Some(Optimizer::ZeroBeside(z)) => zero_beside = Some(z),
        Some(o) => elsewhere = Some(o),
        None => {}
    }
    let tails: Vec<Later> = e.resizes.iter().map(|r| Later::new(r.tail_len)).collect();
    let compute = || -> Result<Vec<Option<RowNorms>>> {
        let _unset = FailUnset(&tails);
        e.resizes
            .iter()
            .zip(&tails)
            .map(|(r, tail)| {
                let (bytes, norms) = r.compute(&e.init, &e.device)?;
                tail.set(bytes);
                Ok(norms)
            })
            .collect()
    };
    if how.dry_run {
        return Ok(dry_run(compute()?, e.folder.as_ref(), out));
    }
    if let Some(o) = elsewhere {
        let applied = Applied {
            norms: compute()?,
            ..Applied::default()
        };
        let edits = (&e.resizes[..], &e.ties[..], e.folder.as_ref());
        return write_elsewhere(ckpt, o, edits, &tails, (out, &protected, how), applied);
    }
    let folder = destination(ckpt, e.folder.is_some(), out, &protected, how)?;
    let dest = match &folder {
        Some(f) if ckpt.index.is_none() => f.join(&file_name(&ckpt.path)),
        Some(f) => f.path().to_path_buf(),
        None => out.to_path_buf(),
    };
    let new_bytes = grown_map(&e.resizes, &tails, &e.ties);
    let w = WriteOptions {
        file_sha256: how.file_sha256,
        link: how.link,
        open: how.open.clone(),
    };
    let (norms, written) = std::thread::scope(|s| {
        let computing = s.spawn(|| output::priority::in_background(compute));
        let written = write(ckpt, &dest, new_bytes, e.new_rows, &w, &protected, base);
        let norms = computing.join().unwrap_or_else(|_| {
            Err(Error::device(
                crate::error::DeviceStage::Compute,
                "a thread panicked",
            ))
        });
        (norms, written)
    });
    let norms = norms?;
    let mut applied = Applied {
        norms,
        manifest: match &folder {
            Some(f) => written.map_err(|x| f.about(x))?,
            None => written?,
        },
        ..Applied::default()
    };
    if let (Some(f), Some((layout, name))) = (&folder, &beside) {
        let m = crate::formats::torch::write::write_torch(
            layout,
            &f.join(name),
            &protected,
            &how.open.globals,
        )
        .map_err(|x| f.about(x))?;
        applied.manifest.push(m);
    }
    let (mut top, mut zero_left) = (Vec::new(), Vec::new());
    if let (Some(f), Some(z)) = (&folder, zero_beside) {
        let gathered = zero_resizes(z, &e.resizes, &tails, &e.ties, true)?;
        let written =
            crate::formats::zero::write::write_into(z, &gathered, f, RootFiles::DeepSpeed)
                .map_err(|x| f.about(x))?;
        (zero_left, top) = written;
    }
    if let (Some(folder), Some(fe)) = (folder, &e.folder) {
        finish(ckpt, folder, fe, (&mut applied, &top), out, &protected, how)?;
    }
    applied
        .left_out
        .extend(zero_left.into_iter().map(other_tag));
    Ok(applied)
}

/// The layouts whose own writer lays out the output (a ZeRO save root, a DCP folder): the
/// made rows are computed (`applied.norms`) before it runs.
fn write_elsewhere(
    ckpt: &Tensors,
    o: Optimizer<'_>,
    (resizes, ties, folder): (&[Resize<'_>], &[Tie], Option<&FolderEdits>),
    tails: &[Later],
    (out, protected, how): (&Path, &[&Path], &How),
    mut applied: Applied,
) -> Result<Applied> {
    match o {
        Optimizer::Zero(z) => match folder {
            None => applied.left_out = write_zero(z, resizes, tails, out, how)?,
            Some(fe) => {
                let at = (out, protected, how);
                zero_folder(ckpt, z, (resizes, tails), fe, at, &mut applied)?;
            }
        },
        Optimizer::Dcp(d) => {
            let written = write_dcp_gathered(d, resizes, tails, ties, out, how)?;
            applied.carried = written.carried;
        }
        Optimizer::Inside(_) | Optimizer::Beside(..) | Optimizer::ZeroBeside(_) => {}
    }
    Ok(applied)
}

/// What a dry run reports: the made rows' norms and the JSON edits a folder output would get.
fn dry_run(norms: Vec<Option<RowNorms>>, folder: Option<&FolderEdits>, out: &Path) -> Applied {
    let edited = folder.iter().flat_map(|f| &f.json);
    Applied {
        norms,
        edited: edited
            .filter(|(_, j)| !j.changes.is_empty())
            .map(|(n, j)| EditedFile {
                file: out.join(n),
                changes: j.changes.clone(),
            })
            .collect(),
        ..Applied::default()
    }
}

/// A Hugging Face Trainer checkpoint of a DeepSpeed run that saved no weights beside
/// `global_step*/` (ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`): the plan was
/// made on the ZeRO state (`ckpt`, its module or master copies) with the folder's config and
/// tokenizer; the ZeRO writer writes the tag folder into the output folder, then the folder's
/// JSON edits, tokenizer and map file, every other file carried, and the rename.
fn zero_folder(
    ckpt: &Tensors,
    z: &Zero,
    (resizes, tails): (&[Resize<'_>], &[Later]),
    fe: &FolderEdits,
    (out, protected, how): (&Path, &[&Path], &How),
    applied: &mut Applied,
) -> Result<()> {
    output::folder::folder_destination_name(out)?;
    let folder = AtomicFolder::create(out, protected, how.overwrite)?;
    let gathered = zero_resizes(z, resizes, tails, &[], false)?;
    let (left, top) =
        crate::formats::zero::write::write_into(z, &gathered, &folder, RootFiles::DeepSpeed)
            .map_err(|x| folder.about(x))?;
    finish(ckpt, folder, fe, (applied, &top), out, protected, how)?;
    applied.left_out.extend(left.into_iter().map(other_tag));
    Ok(())
}

/// The report's line for a subfolder of a ZeRO checkpoint the job does not edit.
fn other_tag(name: String) -> Left {
    Left {
        name,
        why: "a folder this job does not edit (another tag)".into(),
    }
}

/// Each planned tensor's ZeRO parameter (by its name or a name tied to it, `module.` prefix
/// dropped) with its module, master copy and moments gathered by the tensor's map: from the
/// module states file the plan was made on ([`ZeroResize::gathered`]), or `beside` from the
/// consolidated weights beside the save root ([`ZeroResize::gathered_beside`]).
fn zero_resizes(
    z: &Zero,
    resizes: &[Resize<'_>],
    tails: &[Later],
    ties: &[Tie],
    beside: bool,
) -> Result<Vec<ZeroResize>> {
    let mut gathered = Vec::new();
    for (r, tail) in resizes.iter().zip(tails) {
        let tied = ties.iter().filter(|t| t.first() == r.name());
        let names = std::iter::once(r.name())
            .chain(tied.flat_map(|t| t.names[1..].iter().map(String::as_str)));
        let params: Vec<_> = names
            .filter_map(|n| z.param(n.strip_prefix("module.").unwrap_or(n)))
            .collect();
        if params.is_empty() {
            return Err(Error::tensor(
                &z.dir,
                r.name(),
                "is in the model but holds no optimizer state: a frozen vocabulary matrix is not gathered yet",
            ));
        }
        let mut whole = r.whole(tail.wait()?)?;
        for (i, p) in params.iter().enumerate() {
            gathered.push(match beside {
                true => ZeroResize::gathered_beside(z, p, r.map(), (&whole, r.dtype()))?,
                // The new tensor moves into the last parameter's gather: no copy of a whole
                // vocabulary matrix unless several parameters share it.
                false if i + 1 == params.len() => {
                    ZeroResize::gathered(z, p, r.map(), (std::mem::take(&mut whole), r.dtype()))?
                }
                false => ZeroResize::gathered(z, p, r.map(), (whole.clone(), r.dtype()))?,
            });
        }
    }
    Ok(gathered)
}

/// A ZeRO checkpoint with each planned tensor (its module's `module.NAME`) and the parameter's
/// master copy and moments gathered by its map, written as a new save root by the ZeRO writer
/// (re-read and compared before the rename); the subfolders it leaves out (other tags).
fn write_zero(
    z: &Zero,
    resizes: &[Resize<'_>],
    tails: &[Later],
    out: &Path,
    how: &How,
) -> Result<Vec<Left>> {
    let gathered = zero_resizes(z, resizes, tails, &[], false)?;
    let (_, left) = crate::formats::zero::write::write(z, &gathered, out, how.overwrite)?;
    Ok(left.into_iter().map(other_tag).collect())
}

/// A DCP folder with each planned vocabulary matrix (and each name tied to it) and every moment
/// of it gathered by its map (new ids' moments zero) as new chunks, written by the DCP writer
/// (re-read and compared before the rename).
fn write_dcp_gathered(
    d: &Dcp,
    resizes: &[Resize<'_>],
    tails: &[Later],
    ties: &[Tie],
    out: &Path,
    how: &How,
) -> Result<crate::formats::dcp::write::Written> {
    use crate::formats::dcp::keys::{moments_of, shape};
    use crate::formats::dcp::write::{write_dcp, TensorEdit};
    let mut edits = Vec::new();
    for (r, tail) in resizes.iter().zip(tails) {
        let (map, whole) = (r.map(), r.whole(tail.wait()?)?);
        let tied = ties.iter().filter(|t| t.first() == r.name());
        let names = std::iter::once(r.name())
            .chain(tied.flat_map(|t| t.names[1..].iter().map(String::as_str)));
        for name in names {
            let item = d
                .item(name)
                .ok_or_else(|| Error::format(&d.dir, format!("no tensor '{name}'")))?;
            edits.push(TensorEdit::gathered(
                d,
                item,
                map.new_rows(),
                whole.clone(),
            )?);
            for m in moments_of(d, item) {
                // Its bytes are read into the new chunks: corrupt data must not be carried.
                d.verify_item_crcs(m)?;
                let cols: u64 = shape(m).unwrap_or(&[]).iter().skip(1).product();
                let ItemKind::Tensor { dtype, .. } = &m.kind else {
                    continue;
                };
                let row = dtype.bytes_for(cols).unwrap_or(0) as usize;
                let bytes = map
                    .gather_zeros(&d.tensor_bytes(m)?, row)
                    .map_err(|e| Error::tensor(&d.dir, &m.fqn, e))?;
                edits.push(TensorEdit::gathered(d, m, map.new_rows(), bytes)?);
            }
        }
    }
    write_dcp(d, &edits, out, how.overwrite)
}

/// The rest of the folder, then the rename into place; manifests named by their final paths.
fn finish(
    ckpt: &Tensors,
    folder: AtomicFolder,
    fe: &FolderEdits,
    (applied, top): (&mut Applied, &[String]),
    out: &Path,
    protected: &[&Path],
    how: &How,
) -> Result<()> {
    let mut written: Vec<String> = applied
        .manifest
        .iter()
        .map(|m| file_name(&m.path))
        .collect();
    if ckpt.index.is_some() {
        written.push(file_name(&ckpt.path));
    }
    written.extend(top.iter().cloned());
    let check = |p: &Path| crate::tokenizer::base::load_tokenizer(p).map(|_| ());
    let done = finish_with(
        &folder,
        &fe.dir,
        &mut written,
        &fe.json,
        &fe.files,
        check,
        &fe.stale,
        protected,
        how.link,
    )?;
    applied.carried = done.carried;
    applied.left_out = done.left_out;
    applied.edited = done.edited;
    let tmp = folder.path().to_path_buf();
    folder.commit()?;
    for m in &mut applied.manifest {
        if let Ok(rel) = m.path.strip_prefix(&tmp) {
            m.path = out.join(rel);
        }
    }
    Ok(())
}

/// The output's place, checked before anything is computed.
fn destination(
    ckpt: &Tensors,
    folder: bool,
    out: &Path,
    protected: &[&Path],
    how: &How,
) -> Result<Option<AtomicFolder>> {
    if folder {
        output::folder::folder_destination_name(out)?;
        return Ok(Some(AtomicFolder::create(out, protected, how.overwrite)?));
    }
    let ext: &[&str] = match ckpt.format {
        Format::Safetensors => &["safetensors"],
        _ => &["pt", "pth", "bin", "ckpt"],
    };
    output::folder::file_destination(out, protected, ckpt.format.name(), ext, how.overwrite)?;
    Ok(None)
}

/// A Trainer folder's optimizer.pt with each vocabulary parameter's moments gathered by `map`
/// (`vocab`: the tensors the map changes, tie followers left out; `pinned`: `--optimizer-param`):
/// the parameters as the optimizer holds them (a tie once), then
/// `formats::torch::optimizer::gather`.
pub(crate) fn gather_trainer_optimizer<'t>(
    t: &'t crate::formats::trainer::Trainer,
    ties: &[Tie],
    vocab: &[String],
    map: &crate::rowmap::RowMap,
    pinned: &[(String, u64)],
) -> Result<(Optimizer<'t>, Vec<Moved>)> {
    use crate::formats::torch::optimizer::gather::{gather_trainer, Params};
    let followers = crate::ties::followers(ties);
    let list: Vec<(String, Vec<u64>)> = t
        .model
        .tensors()
        .filter(|x| !followers.contains_key(x.name))
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let optim = t.optim()?;
    let tensor = |name: &str| optim.tensor(name);
    let file = (
        t.optimizer()?,
        &tensor as &dyn Fn(&str) -> _,
        t.optim_path.as_path(),
    );
    let params = Params { list: &list, vocab };
    let (layout, moved) = gather_trainer(file, &params, map, pinned)?;
    Ok((Optimizer::Beside(layout, OPTIMIZER), moved))
}

/// A training checkpoint's optimizer state ([`Training`]) moving with the weights' row map
/// (`vocab`: the tensors the map changes, tie followers left out): a torch file's moments
/// gathered in its own tree ([`gather_file_optimizer`]); a ZeRO checkpoint's master copies and
/// moments, one pair of entries per parameter, gathered by its writer. `drop`: a fresh
/// optimizer, where the layout has one to leave out (a ZeRO checkpoint does not: its master
/// copies are the weights it trains).
pub(crate) fn training_optimizer<'c>(
    tr: &'c Training<'c>,
    ties: &[Tie],
    vocab: &[String],
    map: &crate::rowmap::RowMap,
    (pinned, drop): (&[(String, u64)], bool),
) -> Result<(Optimizer<'c>, Vec<Moved>)> {
    let z = match tr {
        Training::File(t) => return gather_file_optimizer(t, ties, vocab, map, (pinned, drop)),
        Training::Dcp(_, d) => return dcp_moments(d, ties, vocab, map, drop),
        Training::Zero(_, z) => *z,
    };
    if drop {
        return Err(Error::arg(
            "--optimizer",
            format!("{}: --optimizer drop: a DeepSpeed ZeRO checkpoint's optimizer state holds the fp32 master weights it trains; consolidate it (python zero_to_fp32.py) and edit the weights instead", z.path().display()),
        ));
    }
    let names: Vec<&str> = vocab.iter().map(|n| tr.weight_name(n)).collect();
    Ok((Optimizer::Zero(z), zero_moved(z, &names, map)))
}

/// A ZeRO save root with the consolidated weights a Hugging Face Trainer run saved beside it
/// (the plan made on those): its master copies and moments move with the weights' row map
/// ([`Optimizer::ZeroBeside`]). `drop` is refused as for every ZeRO checkpoint.
pub(crate) fn zero_beside_optimizer<'c>(
    z: &'c Zero,
    vocab: &[String],
    map: &crate::rowmap::RowMap,
    drop: bool,
) -> Result<(Optimizer<'c>, Vec<Moved>)> {
    if drop {
        return Err(Error::arg(
            "--optimizer",
            format!("{}: --optimizer drop: a DeepSpeed ZeRO checkpoint's optimizer state holds the fp32 master weights it trains; give the weights beside it alone (a copy of the folder without global_step*/ and latest) to start afresh", z.path().display()),
        ));
    }
    let names: Vec<&str> = vocab.iter().map(String::as_str).collect();
    Ok((Optimizer::ZeroBeside(z), zero_moved(z, &names, map)))
}

/// The Plan rows of a ZeRO checkpoint's parameters `names` gathered by `map`: each one's master
/// copy and its moments.
fn zero_moved(z: &Zero, names: &[&str], map: &crate::rowmap::RowMap) -> Vec<Moved> {
    let mut moved = Vec::new();
    for name in names {
        let Some(p) = z.param(name) else {
            continue;
        };
        let mut new_shape = p.shape.clone();
        new_shape[0] = map.new_rows();
        for master_copy in [true, false] {
            moved.push(Moved {
                tensor: p.name.clone(),
                of: p.name.clone(),
                old_shape: p.shape.clone(),
                new_shape: new_shape.clone(),
                fill: 0.0,
                master_copy,
            });
        }
    }
    moved
}

/// A DCP folder's moments of each vocabulary matrix (and of each name tied to it), gathered by
/// the DCP writer ([`Optimizer::Dcp`]). `--optimizer drop` is refused: the DCP writer keeps every
/// item.
fn dcp_moments<'c>(
    d: &'c Dcp,
    ties: &[Tie],
    vocab: &[String],
    map: &crate::rowmap::RowMap,
    drop: bool,
) -> Result<(Optimizer<'c>, Vec<Moved>)> {
    use crate::formats::dcp::keys::{moments_of, shape};
    if drop {
        return Err(Error::arg(
            "--optimizer",
            format!("{}: --optimizer drop is not supported on a torch Distributed Checkpoint folder yet (its writer keeps every item); drop the optimizer when loading it, or leave the flag out to move the moments", d.dir.display()),
        ));
    }
    let mut moved = Vec::new();
    for name in vocab {
        let tied = ties.iter().filter(|t| t.first() == name.as_str());
        let names = std::iter::once(name).chain(tied.flat_map(|t| t.names[1..].iter()));
        for w in names.filter_map(|n| d.item(n)) {
            for m in moments_of(d, w) {
                let old_shape = shape(m).unwrap_or(&[]).to_vec();
                let mut new_shape = old_shape.clone();
                new_shape[0] = map.new_rows();
                moved.push(Moved {
                    tensor: m.fqn.clone(),
                    of: w.fqn.clone(),
                    old_shape,
                    new_shape,
                    fill: 0.0,
                    master_copy: false,
                });
            }
        }
    }
    Ok((Optimizer::Dcp(d), moved))
}

/// The report's line when `--optimizer drop` removes a training file's optimizer state.
pub(crate) const DROPPED_IN_FILE: &str =
    "the optimizer state was removed (--optimizer drop): training resumes with a fresh optimizer";

/// A torch training checkpoint file (the model and its optimizer state in one pickle) with each
/// vocabulary parameter's moments gathered by `map` in the file's own tree, or with `drop` its
/// optimizers removed (a fresh optimizer); the weights' gathers are then made on that tree.
/// `vocab`: the tensors the map changes (tie followers left out). Inside a torch file only names
/// sharing a storage are one parameter to the optimizer; a head tied by equal bytes has moments
/// of its own, gathered too.
pub(crate) fn gather_file_optimizer<'c>(
    ckpt: &'c Tensors,
    ties: &[Tie],
    vocab: &[String],
    map: &crate::rowmap::RowMap,
    (pinned, drop): (&[(String, u64)], bool),
) -> Result<(Optimizer<'c>, Vec<Moved>)> {
    use crate::formats::torch::optimizer::gather::{gather_file, Params};
    use crate::formats::torch::optimizer::state::MODEL_KEYS;
    let [t] = ckpt.torch.as_slice() else {
        return Err(Error::unsupported(
            &ckpt.path,
            "optimizer state in a sharded torch set is not moved: give the training checkpoint file",
        ));
    };
    let p = &t.pickle;
    let key = MODEL_KEYS
        .into_iter()
        .find(|k| p.get(p.root, k).is_some())
        .ok_or_else(|| {
            Error::format(
                &ckpt.path,
                "optimizer state beside no model weights under 'model', 'state_dict', 'module' or 'model_state_dict': not a training checkpoint this tool reads",
            )
        })?;
    let prefix = format!("{key}.");
    let shared: Vec<Tie> = ties
        .iter()
        .filter(|x| x.how == crate::ties::How::SameStorage)
        .cloned()
        .collect();
    let followers = crate::ties::followers(&shared);
    let list: Vec<(String, Vec<u64>)> = ckpt
        .tensors()
        .filter(|x| x.name.starts_with(&prefix) && !followers.contains_key(x.name))
        .map(|x| (x.name.to_string(), x.shape.to_vec()))
        .collect();
    let mut vocab = vocab.to_vec();
    for x in ties
        .iter()
        .filter(|x| x.how != crate::ties::How::SameStorage)
    {
        vocab.extend(
            x.names[1..]
                .iter()
                .filter(|n| n.starts_with(&prefix))
                .cloned(),
        );
    }
    let tensor = |name: &str| ckpt.tensor(name);
    let file = (t, &tensor as &dyn Fn(&str) -> _, ckpt.path.as_path());
    let params = Params {
        list: &list,
        vocab: &vocab,
    };
    let mut layout = TorchLayout::try_identity(t)?;
    let moved = gather_file(file, key, &params, (map, pinned, drop), &mut layout)?;
    Ok((Optimizer::Inside(layout), moved))
}
