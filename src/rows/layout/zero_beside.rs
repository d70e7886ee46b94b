//! Writing a Hugging Face Trainer checkpoint of a DeepSpeed run (`checkpoint-N/`:
//! the ZeRO save root with config.json, the tokenizer, the Trainer's files and, unless ZeRO-3 was
//! told not to gather them, the consolidated weights beside `global_step*/`). The ZeRO state is
//! resized exactly as for a save root alone ([`super::zero`]); the weights beside get the same
//! new rows (the module's, or ZeRO-3's master copy, in the weights' dtype), config.json the new
//! vocabulary size, `--tokenizer` is put in place, and everything lands in one folder, so no file
//! of it is left sized for the old vocabulary.

use crate::error::{Error, Result};
use crate::formats::model_folder as folder;
use crate::formats::zero::write::{write_into, Resize as ZeroResize, RootFiles};
use crate::formats::zero::Zero;
use crate::formats::{Checkpoint, Tensors};
use crate::model::config::resize_config_in;
use crate::output::folder::AtomicFolder;
use crate::output::later::Later;
use crate::rows::resize::{grown_map, Resize};
use crate::rows::write::{file_name, write, WriteOptions};
use crate::vocab::{role_by_name, Role};
use std::path::Path;

/// The Trainer's side of the folder.
pub struct Beside<'a> {
    /// The save root (holding config.json).
    pub dir: &'a Path,
    /// The consolidated weights; None when ZeRO-3 saved none.
    pub weights: Option<&'a Tensors>,
    /// `--tokenizer`: put in place of the folder's.
    pub tokenizer: Option<&'a Path>,
}

/// What [`write_folder`] wrote beside the ZeRO state.
pub struct Written {
    /// Subfolders left out (other tags).
    pub tags_left: Vec<String>,
    /// The folder's files left out, and why.
    pub files_left: Vec<(String, String)>,
    /// The folder's files carried unchanged.
    pub carried: Vec<String>,
    /// The weights file grown beside `global_step*/`.
    pub weights: Option<String>,
}

/// The Trainer's side of a ZeRO save root `ckpt`: the weights beside `global_step*/`, or (ZeRO-3
/// that saved none) a config.json; None for a save root alone or any other checkpoint.
pub fn beside<'a>(ckpt: &'a Checkpoint, tokenizer: Option<&'a Path>) -> Option<Beside<'a>> {
    let Checkpoint::Zero { zero, model } = ckpt else {
        return None;
    };
    let dir = match model {
        Some(_) => zero.path(),
        None => ckpt.zero_trainer_folder()?,
    };
    Some(Beside {
        dir,
        weights: model.as_deref(),
        tokenizer,
    })
}

/// Write `resizes` (the ZeRO state's, planned by [`super::zero::plan`], computed by [`super::zero::write_resized`]) and the
/// folder's other files into `out`, verified, then renamed into place.
pub(crate) fn write_folder(
    z: &Zero,
    resizes: &[ZeroResize],
    side: &Beside<'_>,
    (out, overwrite, rows): (&Path, bool, u64),
) -> Result<Written> {
    let mut protected: Vec<&Path> = z.input_paths();
    protected.push(side.dir);
    protected.extend(side.weights.iter().flat_map(|w| w.input_paths()));
    protected.extend(side.tokenizer);
    crate::output::folder::folder_destination_name(out)?;
    let f = AtomicFolder::create(out, &protected, overwrite)?;
    let mut written = match side.weights {
        Some(w) => write_weights(z, resizes, (w, side.dir), rows, (&f, &protected))?,
        None => Vec::new(),
    };
    let (left, top) = write_into(z, resizes, &f, RootFiles::DeepSpeed).map_err(|e| f.about(e))?;
    written.extend(top);
    let config = resize_config_in(side.dir, rows)?;
    let merged = match side.tokenizer {
        Some(t) => Some(crate::tokenizer::base::folder_file(t)?),
        None => None,
    };
    let done = folder::finish(
        &f,
        side.dir,
        &mut written,
        config.as_ref(),
        merged.as_ref(),
        &protected,
        false,
    )?;
    f.commit()?;
    Ok(Written {
        tags_left: left,
        files_left: done.left_out.into_iter().map(|l| (l.name, l.why)).collect(),
        carried: done.carried.into_iter().map(|c| c.name).collect(),
        weights: side.weights.map(|w| file_name(&w.path)),
    })
}

/// The weights beside at `rows` rows: each resized parameter's tensor gets the ZeRO model's new
/// rows in its own dtype (a tie follower the same), every other tensor copied; the names written.
fn write_weights(
    z: &Zero,
    resizes: &[ZeroResize],
    (w, dir): (&Tensors, &Path),
    rows: u64,
    (f, protected): (&AtomicFolder, &[&Path]),
) -> Result<Vec<String>> {
    let mut grown = Vec::new();
    let mut tails = Vec::new();
    for r in resizes {
        let t = w.tensor(&r.name).ok_or_else(|| {
            Error::tensor(&w.path, &r.name, format!("is a vocabulary parameter of the ZeRO checkpoint {} but not in the weights beside it: they are not this run's consolidated weights", z.path().display()))
        })?;
        let zero_old = z.param(&r.name).and_then(|p| p.shape.first().copied());
        if Some(t.shape[0]) != zero_old {
            return Err(Error::tensor(
                &w.path,
                &r.name,
                format!("has {} rows but the ZeRO checkpoint's parameter {} ({}): the weights beside are not this run's", t.shape[0], zero_old.unwrap_or(0), z.path().display()),
            ));
        }
        let role = role_by_name(&r.name).unwrap_or(Role::Embedding);
        tails.push(Later::ready(new_rows(z, r, t.dtype, t.shape[0])?));
        grown.push(Resize::new(t, role, t.shape[0], rows)?);
    }
    let config = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let ties = weight_ties(w, config.as_ref(), resizes)?;
    let dest = match w.index {
        None => f.join(&file_name(&w.path)),
        Some(_) => f.path().to_path_buf(),
    };
    let opts = WriteOptions {
        file_sha256: false,
        link: false,
        open: Default::default(),
    };
    let manifest = write(
        w,
        &dest,
        grown_map(&grown, &tails, &ties),
        rows,
        &opts,
        protected,
        None,
    )
    .map_err(|e| f.about(e))?;
    let mut names: Vec<String> = manifest.iter().map(|m| file_name(&m.path)).collect();
    if w.index.is_some() {
        names.push(file_name(&w.path));
    }
    Ok(names)
}

/// The ties of the weights beside (a tied head saved apart with the same bytes follows its
/// embedding); every vocabulary tensor they hold must be a resized parameter or follow one, so
/// none is left at the old size.
fn weight_ties(
    w: &Tensors,
    config: Option<&serde_json::Value>,
    resizes: &[ZeroResize],
) -> Result<Vec<crate::ties::Tie>> {
    let detected = crate::vocab::detect(w.tensors().map(|t| (t.name, t.shape)));
    let ties = crate::ties::find(w, detected.vocabulary.as_ref(), config);
    let followers = crate::ties::followers(&ties);
    let resized = |n: &str| resizes.iter().any(|r| r.name == n);
    for v in detected.vocabulary.iter().flat_map(|v| &v.tensors) {
        let follows = followers.get(&v.name).is_some_and(|l| resized(l));
        if !resized(&v.name)
            && !follows
            && resizes.iter().any(|r| {
                w.tensor(&r.name)
                    .is_some_and(|t| t.shape.first() == v.shape.first())
            })
        {
            return Err(Error::tensor(
                &w.path,
                &v.name,
                "is a vocabulary matrix of the weights beside global_step*/ but no parameter of the ZeRO checkpoint, and tied to none: it would keep the old rows; give the save root without these weights",
            ));
        }
    }
    Ok(ties)
}

/// The ZeRO model's new rows of `r` past `old_rows` (the module's at stages 1/2, the master
/// copy's at stage 3) in `dtype`; none when the table shrinks.
fn new_rows(
    z: &Zero,
    r: &ZeroResize,
    dtype: crate::dtype::DType,
    old_rows: u64,
) -> Result<Vec<u8>> {
    let rows = r.shape[0];
    if rows <= old_rows {
        return Ok(Vec::new());
    }
    let cols: u64 = r.shape.iter().skip(1).product();
    let bad = |e: String| Error::tensor(&z.dir, &r.name, e);
    let (bytes, from) = match (&r.module, z.module_tensor(&r.name)) {
        (Some(m), Some(t)) => (m.as_slice(), t.dtype),
        _ => (r.master.as_slice(), crate::dtype::DType::F32),
    };
    let esize = (from.bits() / 8) as usize;
    let start = (old_rows * cols) as usize * esize;
    let tail = bytes
        .get(start..)
        .ok_or_else(|| bad("new rows missing".into()))?;
    crate::dtype::recode(tail, from, dtype).map_err(|e| bad(format!("{e:?}")))
}
