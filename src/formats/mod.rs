//! Bytes ⇄ tensors. [`open`] is the one place that looks at a path and decides what it is — a
//! file, a sharded set, a model folder, a Trainer folder, a DCP folder, a ZeRO checkpoint — from
//! the content (magic bytes, JSON, the files a folder holds), never from the file extension; the
//! detectors it calls are visible to this module only.

pub mod dcp;
pub mod gguf;
pub mod json;
pub mod megatron;
pub mod model_folder;
pub mod safetensors;
pub mod sharded;
mod sniff;
mod store;
mod tensor;
pub mod torch;
pub mod trainer;
pub mod vocabulary;
pub mod zero;

use crate::error::{Error, Result};
use safetensors::SafetensorsFile;
use sniff::{sniff, Sniffed};
use std::path::{Path, PathBuf};
pub use store::{Format, Tensors};
pub use tensor::TensorRef;
pub use torch::pickle::GlobalPolicy;
use torch::TorchFile;
use trainer::Trainer;

/// How to open: which pickle globals beyond the default allowlist the user trusts.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub globals: GlobalPolicy,
}

/// An open checkpoint, whatever its layout: what [`open`] found at a path. Jobs `match` it (one
/// match at each job's entry) instead of looking at the path themselves.
#[derive(Debug)]
pub enum Checkpoint {
    /// A safetensors or torch file, or a sharded set's index (with its shards).
    File(Tensors),
    /// A model folder: the checkpoint inside it that [`resolve_folder`] picked.
    ModelFolder { dir: PathBuf, tensors: Tensors },
    /// A Hugging Face Trainer `checkpoint-N/` folder: a model folder with optimizer.pt.
    Trainer(Box<Trainer>),
    /// A torch Distributed Checkpoint folder: its tensors are chunked across files, so it has
    /// no [`Tensors`].
    Dcp(Box<dcp::Dcp>),
    /// A DeepSpeed ZeRO save root or tag folder: parameters flattened across ranks; `model`, the
    /// consolidated weights a Hugging Face Trainer saves beside `global_step*/`, when there.
    Zero {
        zero: Box<zero::ZeroAt>,
        model: Option<Box<Tensors>>,
    },
    /// A GGUF file (llama.cpp): ggml-typed (often block-quantized) tensors and a header of
    /// key/values that holds the tokenizer, so it has no [`Tensors`].
    Gguf(Box<gguf::GgufAt>),
    /// A Megatron-Core `torch_dist` checkpoint (a save root or an iteration folder): a DCP folder
    /// underneath whose vocabulary is split by rows across tensor-parallel ranks. Read by
    /// inspect-checkpoint and check-vocab; every other tool refuses it by name.
    Megatron(Box<megatron::Megatron>),
    /// A Megatron-LM legacy save (`mp_rank_XX[_YYY]/model_optim_rng.pt` per rank, a save root
    /// or an iteration folder): read by inspect-checkpoint and check-vocab, resized by
    /// sanitize-checkpoint; every other tool refuses it by name.
    MegatronLegacy(Box<megatron::legacy::Legacy>),
}

/// What a row-map job's human report calls its input: the format of the weights it planned on
/// (`format`), or for a ZeRO checkpoint (planned on its module states file, a torch file) and a
/// DCP folder (planned on its vocabulary matrices, assembled) the checkpoint's `layout`.
pub fn planned_name(format: Format, layout: &'static str) -> &'static str {
    if layout == zero::LAYOUT || layout == Format::TorchDcp.name() {
        layout
    } else {
        format.name()
    }
}

/// A training checkpoint as the row-map jobs see it ([`Checkpoint::training`]).
pub enum Training<'c> {
    /// A torch file holding the model (under `model`, `state_dict`, …) and its optimizer state.
    File(&'c Tensors),
    /// A DeepSpeed ZeRO checkpoint (stages 1/2): its module states file read as a tensor store
    /// (the weights named `module.NAME`), and the checkpoint whose ranks hold master copies and
    /// moments.
    Zero(Box<Tensors>, &'c zero::Zero),
    /// A torch Distributed Checkpoint folder: its vocabulary matrices assembled into a tensor
    /// store (`dcp::weights`, DCP names), and the folder whose moments follow them.
    Dcp(Box<Tensors>, &'c dcp::Dcp),
}

impl Training<'_> {
    /// The weights the row map is planned on.
    pub fn weights(&self) -> &Tensors {
        match self {
            Training::File(t) => t,
            Training::Zero(t, _) | Training::Dcp(t, _) => t,
        }
    }

    /// A weight's name as the checkpoint's own reader names it: a ZeRO parameter's name
    /// (`embed.weight`) for the module's `module.embed.weight`; a torch file's as it is.
    pub fn weight_name<'n>(&self, name: &'n str) -> &'n str {
        match self {
            Training::File(_) | Training::Dcp(..) => name,
            Training::Zero(..) => name.strip_prefix("module.").unwrap_or(name),
        }
    }
}

impl Checkpoint {
    /// The row-surgery interface's first answer, for every layout: the vocabulary matrices
    /// (`named`, or detected) and the optimizer state that belongs to them, as
    /// [`vocabulary::Entry`] values. A DCP folder lists each weight's per-row moments; a ZeRO
    /// checkpoint each parameter's module weight, master copy and moments. A torch training file
    /// or a Trainer folder lists the weights: which optimizer index holds which weight's moments
    /// is settled by sanitize-checkpoint's matching (`torch::optimizer::matching`), which takes
    /// the user's `--optimizer-param` pins; sanitize then takes each matched parameter's state
    /// as entries from `torch::optimizer::state::state_entries`. A Megatron save (either layout)
    /// lists its vocabulary matrices at their global shapes (`Megatron::entries`); the legacy
    /// layout also their Adam moments and fp32 master copies (`Legacy::entries`).
    pub fn entries(&self, named: &[String]) -> Result<Vec<vocabulary::Entry>> {
        let weights = |t: &Tensors| -> Result<Vec<vocabulary::Entry>> {
            vocabulary::select(t, named)?
                .into_iter()
                .map(|(name, role)| {
                    let shape = t
                        .tensor(&name)
                        .map(|x| x.shape.to_vec())
                        .unwrap_or_default();
                    Ok(vocabulary::Entry::weight(&name, role.into(), &shape))
                })
                .collect()
        };
        match self {
            Checkpoint::File(t) | Checkpoint::ModelFolder { tensors: t, .. } => weights(t),
            Checkpoint::Trainer(t) => weights(&t.model),
            Checkpoint::Dcp(d) => Ok(dcp::keys::entries(d)?.into_iter().map(|(_, e)| e).collect()),
            Checkpoint::Zero { zero, .. } => zero::keys::entries(zero.get()?, named),
            Checkpoint::Gguf(g) => Ok(gguf::keys::entries(g.get()?)),
            Checkpoint::Megatron(m) => Ok(m.entries()),
            Checkpoint::MegatronLegacy(l) => l.entries(),
        }
    }

    /// The path it was opened from (the folder, for a folder layout).
    pub fn path(&self) -> &Path {
        match self {
            Checkpoint::File(t) => &t.path,
            Checkpoint::ModelFolder { dir, .. } => dir,
            Checkpoint::Trainer(t) => &t.dir,
            Checkpoint::Dcp(d) => &d.dir,
            Checkpoint::Zero { zero, .. } => zero.path(),
            Checkpoint::Gguf(g) => g.path(),
            Checkpoint::Megatron(m) => &m.path,
            Checkpoint::MegatronLegacy(l) => &l.path,
        }
    }

    /// The layout, in the user's words.
    pub fn layout(&self) -> &'static str {
        match self {
            Checkpoint::File(t) => t.format.name(),
            Checkpoint::ModelFolder { .. } => "model folder",
            Checkpoint::Trainer(_) => "Hugging Face Trainer checkpoint folder",
            Checkpoint::Dcp(_) => Format::TorchDcp.name(),
            Checkpoint::Zero { .. } => zero::LAYOUT,
            Checkpoint::Gguf(_) => gguf::LAYOUT,
            Checkpoint::Megatron(_) => megatron::LAYOUT,
            Checkpoint::MegatronLegacy(_) => megatron::legacy::LAYOUT,
        }
    }

    /// The model's tensors when nothing else in the checkpoint follows the vocabulary: a weights
    /// file or a model folder. None for a training checkpoint (a Trainer folder, DCP, ZeRO, a torch
    /// file holding optimizer state): its optimizer state would need moving too.
    pub fn weights_only(&self) -> Option<&Tensors> {
        match self {
            Checkpoint::File(t) | Checkpoint::ModelFolder { tensors: t, .. } => {
                (!t.has_optimizer()).then_some(t)
            }
            _ => None,
        }
    }

    /// A training checkpoint the row-map jobs edit through its model's weights (planned as any
    /// tensor store) with the optimizer state beside them in the same layout: a torch file holding
    /// the model and its optimizer, a DeepSpeed ZeRO checkpoint (stages 1/2: its module states
    /// file, `module.NAME`; stage 3, which keeps no whole module: its fp32 master copies in the
    /// dtype the model trains in, [`zero::weights::master_store`]), a DCP folder (its vocabulary
    /// matrices assembled). None for every other layout (a Trainer folder is its own case);
    /// refused: a ZeRO checkpoint with the consolidated weights saved beside it (the row-map jobs
    /// plan on those weights before asking: `rows::apply::Optimizer::ZeroBeside`; here they would
    /// not follow), or with several module states files at stage 1/2 (model parallel).
    pub fn training(&self) -> Result<Option<Training<'_>>> {
        match self {
            Checkpoint::File(t)
                if t.index.is_none()
                    && t.torch.len() == 1
                    && torch::optimizer::state::has_optimizer(&t.torch[0].pickle) =>
            {
                Ok(Some(Training::File(t)))
            }
            Checkpoint::Zero { zero, model } => {
                let z = zero.get()?;
                if model.is_some() {
                    return Err(Error::unsupported(
                        zero.path(),
                        "a ZeRO checkpoint with the model's weights saved beside it: the row-map jobs rewrite the ZeRO save root only, and the weights beside it would not follow; give the save root alone (global_step*/ and latest) or the weights",
                    ));
                }
                if z.stage > 2 {
                    let module = zero::weights::master_store(z)?;
                    return Ok(Some(Training::Zero(Box::new(module), z)));
                }
                if z.model.len() != 1 {
                    return Err(Error::unsupported(
                        zero.path(),
                        format!("a ZeRO-{} checkpoint with {} module states files (model parallel): consolidate it (python zero_to_fp32.py) and edit the weights", z.stage, z.model.len()),
                    ));
                }
                let opts = OpenOptions {
                    globals: z.policy.clone(),
                };
                let module = open_tensors(&z.model[0].map.path, &opts)?;
                Ok(Some(Training::Zero(Box::new(module), z)))
            }
            Checkpoint::Dcp(d) => Ok(Some(Training::Dcp(
                Box::new(dcp::weights::vocabulary_store(d)?),
                d,
            ))),
            Checkpoint::Megatron(m) => Err(megatron::refusal(&m.path, m.found, None)),
            Checkpoint::MegatronLegacy(l) => {
                Err(megatron::refusal(&l.path, megatron::Found::Legacy, None))
            }
            _ => Ok(None),
        }
    }

    /// The folder of a Hugging Face Trainer checkpoint of a DeepSpeed run that saved no weights
    /// beside `global_step*/` (ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`): a
    /// ZeRO save root holding config.json. The row-map jobs plan on the ZeRO state with this
    /// folder's config and tokenizer and write one folder.
    pub fn zero_trainer_folder(&self) -> Option<&Path> {
        match self {
            Checkpoint::Zero { zero, model: None } => zero
                .located
                .root
                .as_deref()
                .filter(|r| r.join("config.json").is_file()),
            _ => None,
        }
    }

    /// The model's tensors: the file, the checkpoint in a model folder, a Trainer folder's model,
    /// the weights beside a ZeRO save root; None for a DCP folder or a ZeRO checkpoint alone
    /// (their tensors are spread over files).
    pub fn tensors(&self) -> Option<&Tensors> {
        match self {
            Checkpoint::File(t) | Checkpoint::ModelFolder { tensors: t, .. } => Some(t),
            Checkpoint::Trainer(t) => Some(&t.model),
            Checkpoint::Zero { model, .. } => model.as_deref(),
            Checkpoint::Dcp(_)
            | Checkpoint::Gguf(_)
            | Checkpoint::Megatron(_)
            | Checkpoint::MegatronLegacy(_) => None,
        }
    }

    /// [`Checkpoint::tensors`], or the refusal of a `tool` that reads no DCP folder or ZeRO
    /// checkpoint, naming the tool that does (`instead`).
    pub fn tensors_for(&self, tool: &str, instead: &str) -> Result<&Tensors> {
        self.tensors().ok_or_else(|| self.refusal(tool, instead))
    }

    /// [`Checkpoint::tensors_for`], owned.
    pub fn into_tensors_for(self, tool: &str, instead: &str) -> Result<Tensors> {
        let refusal = self.refusal(tool, instead);
        match self {
            Checkpoint::File(t) | Checkpoint::ModelFolder { tensors: t, .. } => Ok(t),
            Checkpoint::Trainer(t) => Ok(t.model),
            Checkpoint::Zero { model: Some(m), .. } => Ok(*m),
            Checkpoint::Dcp(_)
            | Checkpoint::Zero { model: None, .. }
            | Checkpoint::Gguf(_)
            | Checkpoint::Megatron(_)
            | Checkpoint::MegatronLegacy(_) => Err(refusal),
        }
    }

    /// `tool` does not handle this layout; `instead` does. A GGUF file is read by
    /// inspect-checkpoint and check-vocab only (so far): the refusal says so.
    pub fn refusal(&self, tool: &str, instead: &str) -> Error {
        if let Checkpoint::Megatron(m) = self {
            return megatron::refusal(&m.path, m.found, Some(tool));
        }
        if let Checkpoint::MegatronLegacy(l) = self {
            return megatron::refusal(&l.path, megatron::Found::Legacy, Some(tool));
        }
        if let Checkpoint::Gguf(_) = self {
            return Error::unsupported(
                self.path(),
                format!("a GGUF file: {tool} does not handle GGUF yet (inspect-checkpoint and check-vocab read it)"),
            );
        }
        let what = match self {
            Checkpoint::Dcp(_) => "a torch Distributed Checkpoint folder",
            Checkpoint::Zero { .. } => "a DeepSpeed ZeRO checkpoint",
            _ => self.layout(),
        };
        Error::format(
            self.path(),
            format!("{what}: {tool} does not write these; use {instead}"),
        )
    }

    /// Every file this checkpoint reads (index included): outputs must never be one of these.
    pub fn input_paths(&self) -> Vec<&Path> {
        match self {
            Checkpoint::File(t) | Checkpoint::ModelFolder { tensors: t, .. } => t.input_paths(),
            Checkpoint::Trainer(t) => {
                let mut v = t.model.input_paths();
                v.push(&t.optim_path);
                v
            }
            Checkpoint::Dcp(d) => {
                let mut v: Vec<&Path> = vec![&d.dir];
                v.extend(d.paths());
                v
            }
            Checkpoint::Zero { zero, model } => {
                let mut v = zero.input_paths();
                v.extend(model.iter().flat_map(|m| m.input_paths()));
                v
            }
            Checkpoint::Gguf(g) => vec![g.path()],
            Checkpoint::Megatron(m) => m.input_paths(),
            Checkpoint::MegatronLegacy(l) => l.input_paths(),
        }
    }
}

/// The `config.json` of a model: in the folder given, or beside the file (or index) given.
pub fn config_beside(path: &Path) -> Option<PathBuf> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Some(dir.join("config.json")).filter(|p| p.is_file())
}

/// The names looked for, in order, when a folder is given.
pub const FOLDER_CANDIDATES: [&str; 4] = [
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
];

/// Open whatever is at `path` — a checkpoint file, a sharded index, a model folder, a Trainer
/// folder, a DCP folder or a ZeRO checkpoint — deciding from the content, never the name. The
/// one place that looks at a path and decides what it is.
pub fn open(path: &Path, opts: &OpenOptions) -> Result<Checkpoint> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if !meta.is_dir() {
        if sniff(path)? == Sniffed::Gguf {
            return Ok(Checkpoint::Gguf(Box::new(gguf::GgufAt::new(path))));
        }
        return open_file(path, meta.len(), opts).map(Checkpoint::File);
    }
    if megatron::legacy::locate(path).is_some() {
        let l = megatron::legacy::Legacy::open(path, &opts.globals)?;
        return Ok(Checkpoint::MegatronLegacy(Box::new(l)));
    }
    if let Some(found) = megatron::recognise(path) {
        let m = megatron::Megatron::open(path, found, &opts.globals)?;
        return Ok(Checkpoint::Megatron(Box::new(m)));
    }
    if dcp::is_dcp(path) {
        return Ok(Checkpoint::Dcp(Box::new(dcp::Dcp::open(path)?)));
    }
    if let Some(at) = zero::locate(path) {
        let zero = Box::new(zero::ZeroAt::new(at, opts.globals.clone()));
        // A Hugging Face Trainer run with DeepSpeed saves the consolidated weights beside
        // global_step*/: the tools that grow weights read those.
        let model = match resolve_folder(path) {
            Ok(file) => Some(Box::new(open_tensors(&file, opts)?)),
            Err(_) => None,
        };
        return Ok(Checkpoint::Zero { zero, model });
    }
    let model = open_tensors(&resolve_folder(path)?, opts)?;
    if trainer::is_trainer(path) {
        return Ok(Checkpoint::Trainer(Box::new(Trainer {
            dir: path.to_path_buf(),
            model,
            optim_path: path.join(trainer::OPTIMIZER),
            globals: opts.globals.clone(),
            optim: std::sync::OnceLock::new(),
        })));
    }
    Ok(Checkpoint::ModelFolder {
        dir: path.to_path_buf(),
        tensors: model,
    })
}

impl Trainer {
    /// optimizer.pt, opened (and validated) on first use, with the options the folder was opened
    /// with.
    pub fn optim(&self) -> Result<&Tensors> {
        if let Some(t) = self.optim.get() {
            return Ok(t);
        }
        let opts = OpenOptions {
            globals: self.globals.clone(),
        };
        let opened = open_tensors(&self.optim_path, &opts)?;
        Ok(self.optim.get_or_init(|| opened))
    }

    /// optimizer.pt's torch file.
    pub fn optimizer(&self) -> Result<&torch::TorchFile> {
        self.optim()?
            .torch
            .first()
            .ok_or_else(|| Error::format(&self.optim_path, "not a torch file"))
    }
}

/// Open the tensor store at `path` (a file, sharded index, model or Trainer folder): [`open`]
/// and [`Checkpoint::into_tensors_for`], for readers of tensors only (a saved batch, tests).
pub fn open_tensors(path: &Path, opts: &OpenOptions) -> Result<Tensors> {
    open(path, opts)?.into_tensors_for("a reader of tensors", "sanitize-checkpoint")
}

/// A data file (token ids), as [`open_data`] read it.
#[derive(Debug)]
pub enum Data {
    /// A saved batch: a torch or safetensors file, opened.
    Tensors(Tensors),
    /// Anything else (a `.npy`, raw ids): its bytes, for the caller to parse.
    Bytes(Vec<u8>),
}

/// Open a data file, deciding by its content (as [`open`] does for checkpoints) whether it is a
/// saved batch of tensors or bytes to parse.
pub fn open_data(path: &Path, opts: &OpenOptions) -> Result<Data> {
    match sniff(path)? {
        Sniffed::Safetensors | Sniffed::TorchZip | Sniffed::TorchLegacy => {
            open_tensors(path, opts).map(Data::Tensors)
        }
        Sniffed::Json | Sniffed::Unknown => std::fs::read(path)
            .map(Data::Bytes)
            .map_err(|e| Error::io(path, "read", e)),
        Sniffed::Gguf => Err(Error::format(
            path,
            "a GGUF model file, not token ids (a saved batch, .npy or raw ids)",
        )),
    }
}

/// What a shard of a sharded set is.
fn shard_kind(path: &Path) -> Result<sharded::ShardKind> {
    Ok(match sniff(path)? {
        Sniffed::Safetensors => sharded::ShardKind::Safetensors,
        Sniffed::TorchZip | Sniffed::TorchLegacy => sharded::ShardKind::Torch,
        Sniffed::Json | Sniffed::Gguf | Sniffed::Unknown => sharded::ShardKind::Neither,
    })
}

/// Open a checkpoint file or sharded index of `len` bytes.
fn open_file(path: &Path, len: u64, opts: &OpenOptions) -> Result<Tensors> {
    let store = |format, files, torch, index| Tensors {
        path: path.to_path_buf(),
        format,
        index,
        files,
        torch,
    };
    let torch = |format| -> Result<Tensors> {
        let t = TorchFile::open(path, &opts.globals)?;
        Ok(store(format, Vec::new(), vec![t], None))
    };
    match sniff(path)? {
        Sniffed::Safetensors => {
            let f = SafetensorsFile::open(path)?;
            Ok(store(Format::Safetensors, vec![f], Vec::new(), None))
        }
        Sniffed::Json => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
            let index = sharded::parse_index(path, &text)?;
            let (format, files, torch) =
                match sharded::open_shards(path, &index, &shard_kind, &opts.globals)? {
                    sharded::Shards::Safetensors(f) => (Format::ShardedSafetensors, f, Vec::new()),
                    sharded::Shards::Torch(t) => (Format::ShardedTorch, Vec::new(), t),
                };
            Ok(store(format, files, torch, Some(index)))
        }
        Sniffed::TorchZip => torch(Format::TorchZip),
        Sniffed::TorchLegacy => torch(Format::TorchLegacy),
        Sniffed::Gguf => Err(Error::unsupported(
            path,
            "a GGUF file: read it on its own (not as a shard or a tensor store)",
        )),
        Sniffed::Unknown if len == 0 => {
            Err(Error::format(path, "file is empty (0 bytes): not a checkpoint"))
        }
        Sniffed::Unknown => Err(Error::format(
            path,
            format!(
                "unknown content ({len} bytes): not safetensors, a sharded index, or a torch checkpoint"
            ),
        )),
    }
}

/// Pick the checkpoint file inside a model folder.
pub fn resolve_folder(dir: &Path) -> Result<PathBuf> {
    for name in FOLDER_CANDIDATES {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    // Otherwise exactly one index, or exactly one *.safetensors file.
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    let mut indexes = Vec::new();
    let mut singles = Vec::new();
    for entry in entries {
        let p = entry.map_err(|e| Error::io(dir, "list", e))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".safetensors.index.json") {
            indexes.push(p);
        } else if name.ends_with(".safetensors") {
            singles.push(p);
        }
    }
    for mut group in [indexes, singles] {
        match group.len() {
            0 => continue,
            1 => return Ok(group.swap_remove(0)),
            _ => {
                let mut names: Vec<String> = group
                    .iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .collect();
                names.sort();
                return Err(Error::format(
                    dir,
                    format!(
                        "folder holds several candidate checkpoints ({}): name the file to open",
                        names.join(", ")
                    ),
                ));
            }
        }
    }
    if let Some(iter) = megatron_iteration_inside(dir) {
        return Err(Error::format(
            dir,
            format!("holds the Megatron iteration folder {iter}/ but no {}: open the iteration folder itself, or restore the file that names it", megatron::LATEST),
        ));
    }
    Err(Error::format(
        dir,
        format!(
            "folder has no checkpoint (looked for {} and *.safetensors)",
            FOLDER_CANDIDATES.join(", ")
        ),
    ))
}

/// The newest `iter_N` subfolder of `dir` (as Megatron-LM names iteration folders), if any.
fn megatron_iteration_inside(dir: &Path) -> Option<String> {
    let names = std::fs::read_dir(dir).ok()?;
    names
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter_map(|p| Some((megatron::iteration_of_name(&p)?, p)))
        .max_by_key(|(n, _)| *n)
        .and_then(|(_, p)| Some(p.file_name()?.to_str()?.to_string()))
}
