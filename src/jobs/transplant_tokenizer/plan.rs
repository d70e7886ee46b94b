//! transplant-tokenizer's planner: every decision, read-only, in one [`Planned`].

use super::config::{self, ConfigFile, Remap, CONFIG_FILES};
use super::matching::{match_tokens, Matching, Sides};
use super::options::Options;
use super::report::{Changed, Report};
use super::tokenizer_files::{self, TokenizerOut};
use super::{init, roles};
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::output::json_text::JsonEdit;
use crate::rows::device::Device;
use crate::rows::init::Init;
use crate::rows::resize::Resize;
use crate::rows::select::vocabulary;
use crate::ties::{self, Tie};
use crate::tokenizer::base::{load_tokenizer, Base};
use crate::vocab::Role;
use std::path::{Path, PathBuf};

/// What transplant-tokenizer will do, decided before anything is written.
pub struct Planned<'c> {
    pub report: Report,
    pub(super) resizes: Vec<Resize<'c>>,
    pub(super) init: Init,
    pub(super) device: Device,
    /// The JSON files of the output folder edited: (name, edit).
    pub(super) json: Vec<(String, JsonEdit)>,
    /// The new tokenizer's files for the output folder.
    pub(super) tokenizer: Option<TokenizerOut>,
    /// A training checkpoint's optimizer state with its moments gathered by the row map.
    pub(super) optimizer: Option<crate::rows::apply::Optimizer<'c>>,
    /// The input folder, when the output is a folder.
    pub(super) folder_in: Option<PathBuf>,
    /// Every file read: none of them may be the output.
    pub(super) inputs: Vec<PathBuf>,
}

/// The model's own tokenizer: `--base-tokenizer`, else the one in its folder.
fn base_tokenizer(input: &Path, folder: Option<&Path>, opts: &Options) -> Result<PathBuf> {
    if let Some(b) = &opts.base_tokenizer {
        return Ok(b.clone());
    }
    folder
        .and_then(|d| tokenizer_files::tokenizer_file(d).ok())
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            Error::arg(
                "--base-tokenizer",
                format!(
                    "{}: no tokenizer beside the model: name the model's own with --base-tokenizer",
                    input.display()
                ),
            )
        })
}

/// Trained rows dropped need `--allow-shrink`: refused naming the tensor, both sizes, the count
/// and the first tokens.
fn refuse_drop(
    ckpt: &Tensors,
    tensor: &str,
    old_rows: u64,
    m: &Matching,
    opts: &Options,
) -> Result<()> {
    if m.dropped_tokens == 0 || opts.allow_shrink {
        return Ok(());
    }
    let first: Vec<String> = m
        .dropped_first
        .iter()
        .map(|t| format!("'{}'", t.token))
        .collect();
    Err(Error::Dropped {
        path: ckpt.path.clone(),
        tensor: tensor.to_string(),
        rows: old_rows,
        target: m.new_rows,
        dropped: m.dropped_tokens,
        first: first.join(", "),
    })
}

/// Each changed tensor's resize by the row map, and its line in the report.
fn changes<'c>(
    ckpt: &'c Tensors,
    selected: &[(String, Role)],
    ties: &[Tie],
    m: &Matching,
    old_rows: u64,
) -> Result<(Vec<Resize<'c>>, Vec<Changed>)> {
    let map = m.row_map(old_rows, &ckpt.path)?;
    let followers = ties::followers(ties);
    let (mut resizes, mut changed) = (Vec::new(), Vec::new());
    for (name, role) in selected {
        let Some(t) = ckpt.tensor(name) else { continue };
        if followers.contains_key(name) {
            continue;
        }
        resizes.push(Resize::mapped(t.rows_view(), *role, &map)?);
        changed.push(Changed {
            name: name.clone(),
            role: *role,
            dtype: t.dtype,
            old_shape: t.shape.to_vec(),
            new_shape: crate::vocab::with_rows(name, t.shape, m.new_rows),
            old_mean_row_norm: None,
            new_mean_row_norm: None,
            tied: ties
                .iter()
                .filter(|x| x.first() == name)
                .flat_map(|x| x.names[1..].iter().cloned())
                .collect(),
        });
    }
    Ok((resizes, changed))
}

/// The config files beside the model: (file, its edit).
fn config_edits(
    dir: &Path,
    opts: &Options,
    new_rows: u64,
    remap: &Remap<'_>,
    inputs: &mut Vec<PathBuf>,
) -> Result<Vec<(String, JsonEdit)>> {
    let mut out = Vec::new();
    for name in CONFIG_FILES {
        let path = match (&opts.config, name) {
            (Some(c), "config.json") => c.clone(),
            _ => dir.join(name),
        };
        if !path.is_file() {
            continue;
        }
        inputs.push(path.clone());
        let cfg = ConfigFile::read(name, &path)?;
        out.push((name.to_string(), config::edit(&cfg, new_rows, remap)?));
    }
    Ok(out)
}

/// The tokenizers: the base's and NEW's, loaded, with the roles each names.
struct Tokenizers {
    base_path: PathBuf,
    base: Base,
    base_roles: super::matching::Roles,
    new_path: PathBuf,
    new: Base,
    new_roles: super::matching::Roles,
}

fn tokenizers(
    input: &Path,
    dir: Option<&Path>,
    opts: &Options,
    config: Option<&serde_json::Value>,
) -> Result<Tokenizers> {
    let base_path = base_tokenizer(input, dir, opts)?;
    let new_path = tokenizer_files::tokenizer_file(&opts.tokenizer)?;
    let (base, new) = (load_tokenizer(&base_path)?, load_tokenizer(&new_path)?);
    let base_dir = base_path
        .parent()
        .filter(|_| opts.base_tokenizer.is_none())
        .or(dir);
    let mut base_roles = roles::from_tokenizer_files(base_dir, &base)?;
    roles::add_config_roles(&mut base_roles, config);
    let new_dir = opts.tokenizer.is_dir().then_some(opts.tokenizer.as_path());
    let new_roles = roles::from_tokenizer_files(new_dir, &new)?;
    Ok(Tokenizers {
        base_path,
        base,
        base_roles,
        new_path,
        new,
        new_roles,
    })
}

/// config.json: `--config`, or the one beside the input.
fn read_config(input: &Path, opts: &Options) -> Result<Option<ConfigFile>> {
    let path = opts
        .config
        .clone()
        .or_else(|| crate::formats::config_beside(input));
    path.as_deref()
        .map(|p| ConfigFile::read("config.json", p))
        .transpose()
}

/// What lies beside the weights: the input folder, config.json, the tokenizers.
struct Outside<'a> {
    folder: Option<&'a Path>,
    config: Option<&'a ConfigFile>,
    t: &'a Tokenizers,
}

/// A folder output's JSON edits (name, edit) and its tokenizer's files.
type SideOutputs = (Vec<(String, JsonEdit)>, Option<TokenizerOut>);

/// The files beside the weights: a folder output's JSON edits and tokenizer files; a file
/// output's config.json checked all the same (its special ids must have a place) and a warning.
fn side_outputs(
    o: &Outside<'_>,
    opts: &Options,
    new_rows: u64,
    inputs: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) -> Result<SideOutputs> {
    let t = o.t;
    let remap = Remap::new(&t.base, &t.new, &t.new_roles, &t.new_path);
    match o.folder {
        Some(dir) => {
            let mut json = config_edits(dir, opts, new_rows, &remap, inputs)?;
            let tk = tokenizer_files::plan(&opts.tokenizer, &t.new, dir)?;
            json.extend(tk.edited.iter().cloned());
            Ok((json, Some(tk)))
        }
        None => {
            if let Some(c) = o.config {
                config::edit(c, new_rows, &remap)?;
            }
            warnings.push("a file output is that one file: config.json, generation_config.json and the tokenizer are not written; give the model folder for a complete output folder".into());
            Ok((Vec::new(), None))
        }
    }
}

/// The vocabulary tensors a plan changes, their ties and rows.
struct Selected<'a> {
    ckpt: &'a Tensors,
    selected: &'a [(String, Role)],
    ties: &'a [Tie],
    old_rows: u64,
}

/// How the made rows are made (the init for them; a donor's report).
fn made_rows(
    s: &Selected<'_>,
    t: &Tokenizers,
    opts: &Options,
    m: &Matching,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, Option<crate::rows::donor::DonorReport>)> {
    let followers = ties::followers(s.ties);
    let own = |n: &String| !followers.contains_key(n);
    let matrices: Vec<(String, Role)> =
        s.selected.iter().filter(|(n, _)| own(n)).cloned().collect();
    let src = init::Sources {
        base: crate::rows::donor::BaseRows {
            ckpt: s.ckpt,
            matrices: &matrices,
        },
        base_tokenizer: &t.base_path,
        new_tokenizer: &t.new_path,
        loaded: (&t.base, &t.new),
        old_rows: s.old_rows,
        untied_head: matrices.iter().any(|(_, r)| *r == Role::Head),
    };
    init::resolve(opts, m, &src, inputs, fallbacks)
}

/// Decide everything: reads the checkpoint, the tokenizers and the config files, writes nothing.
pub fn plan<'c>(ckpt: &'c Tensors, input: &Path, opts: &Options) -> Result<Planned<'c>> {
    let _planning = crate::output::progress::Phase::start("planning the transplant");
    let mut inputs: Vec<PathBuf> = ckpt.input_paths().iter().map(|p| p.to_path_buf()).collect();
    let folder_in = ckpt.input_folder(input);
    let config = read_config(input, opts)?;
    let t = tokenizers(
        input,
        folder_in.as_deref(),
        opts,
        config.as_ref().map(|c| &c.value),
    )?;
    inputs.extend([
        t.base_path.clone(),
        t.new_path.clone(),
        opts.tokenizer.clone(),
    ]);
    let cfg = config.as_ref().map(|c| &c.value);
    let (selected, old_rows, ties) = vocabulary(ckpt, &opts.tensors, cfg, t.base.size())?;
    let sides = Sides {
        base: &t.base,
        base_roles: &t.base_roles,
        new: &t.new,
        new_roles: &t.new_roles,
        new_path: &t.new_path,
        donor: opts.donor.is_some(),
    };
    let m = match_tokens(&sides, old_rows, opts.pad_to_multiple_of)?;
    if let Some((first, _)) = selected.first() {
        refuse_drop(ckpt, first, old_rows, &m, opts)?;
    }
    let mut fallbacks = Vec::new();
    let sel = Selected {
        ckpt,
        selected: &selected,
        ties: &ties,
        old_rows,
    };
    let (init, donor) = made_rows(&sel, &t, opts, &m, &mut inputs, &mut fallbacks)?;
    let (resizes, changed) = changes(ckpt, &selected, &ties, &m, old_rows)?;
    let row_map = m.row_map(old_rows, &ckpt.path)?;
    let largest = resizes.iter().map(|r| r.tail_len).max().unwrap_or(0);
    let gpu_work = matches!(
        opts.method,
        crate::rows::Method::Hewitt | crate::rows::Method::Omp
    );
    let device = Device::select_for(opts.device, largest, gpu_work)?;
    let mut warnings = Vec::new();
    let outside = Outside {
        folder: folder_in.as_deref(),
        config: config.as_ref(),
        t: &t,
    };
    let (json, tokenizer) = side_outputs(&outside, opts, m.new_rows, &mut inputs, &mut warnings)?;
    let untouched = ckpt.tensors().count() - selected.len();
    let report = Report {
        input: ckpt.path.clone(),
        format: ckpt.format,
        layout: ("", false),
        output: None,
        base_tokenizer: t.base_path.clone(),
        tokenizer: opts.tokenizer.clone(),
        old_rows,
        new_rows: m.new_rows,
        tokens: m,
        init: opts.method.name(),
        device: device.name.clone(),
        device_note: device.note.clone(),
        changed,
        ties,
        untouched_tensors: untouched,
        fallbacks,
        donor,
        optimizer: Vec::new(),
        edited: Vec::new(),
        tokenizer_sources: tokenizer
            .as_ref()
            .map(|t| t.copied.clone())
            .unwrap_or_default(),
        left_planned: Vec::new(),
        row_map: Some(row_map),
        carried: Vec::new(),
        left_out: Vec::new(),
        warnings,
        notes: Vec::new(),
        dry_run: opts.dry_run,
        manifest: Vec::new(),
    };
    Ok(Planned {
        report,
        resizes,
        init,
        device,
        json,
        tokenizer,
        optimizer: None,
        folder_in,
        inputs,
    })
}
